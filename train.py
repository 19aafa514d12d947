"""Train an image-to-image translation model (CycleGAN, pix2pix, colorization, your own).

    python train.py --dataroot ./datasets/maps --name maps_cyclegan --model cycle_gan
    python train.py --dataroot ./datasets/facades --name facades_pix2pix --model pix2pix --direction BtoA
    python train.py ... --continue_train          # continue exactly where the run stopped
    torchrun --nproc_per_node=2 train.py ...      # DistributedDataParallel, CPU (gloo) or GPU (NCCL)

Options (see options/) -> distributed start -> dataset -> model -> epoch loop -> shutdown.
Checkpoints, logs and the HTML page go to --checkpoints_dir/--name.
"""
from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass

from torch.utils.data import default_collate

from data import DatasetLoader, create_dataset
from data.held_out import create_held_out_dataset
from models import builds_network, create_model, find_model_using_name, networks
from models.base_model import BaseModel
from models.training import schedules
from models.training.accumulation import check_accumulation, micro_batch_groups, steps_per_epoch
from models.training.checkpointer import Checkpointer, StartPoint
from models.training.engine import TrainingEngine
from models.training.run_control import RunLock, StopRequest
from models.training.schedules import Warmup
from models.training.validator import Validator, make_validator
from options.base_options import format_options, save_options
from options.train_options import TrainOptions
from util import distributed
from util.console import print0, setup_logging
from util.display.visualizer import NullVisualizer, Visualizer, make_visualizer
from util.errors import UserError, exit_with_status, exits_on_user_error
from util.host_memory import keep_freed_memory
from util.position import Position
from util.seeding import choose_kernels, seed_everything


def crossed(total: int, step: int, freq: int) -> bool:
    """Did the counter pass a multiple of `freq` in its last increment of `step`?"""
    return freq > 0 and total // freq > (total - step) // freq


def check_distributed_options(opt: argparse.Namespace, ctx: distributed.DistContext) -> None:
    """Refuse settings that cannot work across processes (on every rank, before any collective)."""
    if ctx.is_distributed and opt.norm == "batch":
        raise UserError("--norm batch computes batch statistics per process, so under torchrun every process "
                        "would normalise its own images differently; use --norm syncbatch (batch norm "
                        "synchronised across processes) or --norm instance.")


@dataclass
class Run:
    """What the epoch loop works with, built once by `set_up`."""

    opt: argparse.Namespace
    ctx: distributed.DistContext
    dataset: DatasetLoader        # the training images, a sampler per rank
    model: BaseModel              # the networks (plain modules), losses, optimizers
    engine: TrainingEngine        # how its steps run: DDP, --compile, accumulation, scaling, EMA; what is saved
    validator: Validator | None   # held-out metrics (--val_freq); None without
    visualizer: Visualizer | NullVisualizer  # the null one, doing nothing, on non-main ranks
    checkpointer: Checkpointer    # every save, resume and best file
    stop: StopRequest             # SIGTERM / Ctrl-C: save, then stop
    warmup: Warmup                # --warmup_epochs: the rates' multiplier by the images trained on

    @property
    def global_batch(self) -> int:  # images per optimizer step
        return global_batch_size(self.opt, self.ctx)

    @property
    def last_epoch(self) -> int:
        return self.opt.n_epochs + self.opt.n_epochs_decay


def global_batch_size(opt: argparse.Namespace, ctx: distributed.DistContext) -> int:
    """Images per optimizer step: --batch_size per micro-batch x --accum_steps x processes."""
    return schedules.global_batch(opt, ctx.world_size)


def batch_description(opt: argparse.Namespace, ctx: distributed.DistContext) -> str:
    """How the global batch is made up, for the log."""
    if opt.accum_steps == 1:
        return (f"global batch = {global_batch_size(opt, ctx)} ({opt.batch_size} per process x {ctx.world_size} "
                f"processes)")
    return (f"global batch = {global_batch_size(opt, ctx)} ({opt.batch_size} per micro-batch x {opt.accum_steps} "
            f"accumulation steps x {ctx.world_size} processes; one optimizer step per {opt.accum_steps} micro-batches)")


def check_epoch_has_steps(opt: argparse.Namespace, ctx: distributed.DistContext, samples: int) -> None:
    """Refuse a run whose epochs would take no optimizer step: each process's share of the `samples` in
    batches of --batch_size (x --accum_steps), where the model skips an incomplete batch (any model, any
    launcher). Names the dataset size, the batch and the processes, and a --batch_size that trains."""
    model_class = find_model_using_name(opt.model)
    skips = model_class.skips_incomplete_batches
    share = -(-min(samples, opt.max_dataset_size) // ctx.world_size)  # the sampler pads the ranks' shares alike
    if steps_per_epoch(share, opt.batch_size, opt.accum_steps, skips) > 0:
        return
    fits = next((size for size in range(min(share, opt.batch_size), 0, -1)
                 if steps_per_epoch(share, size, 1, skips) > 0
                 and model_class.check_flags(networks.with_flags(opt, batch_size=size)) is None), None)
    per_step = f"--batch_size {opt.batch_size}" + (f" x --accum_steps {opt.accum_steps}" if opt.accum_steps > 1 else "")
    fix = (f"pass --batch_size {fits}{' --accum_steps 1' if opt.accum_steps > 1 else ''}, or add training samples"
           if fits else "add training samples")
    raise UserError(f"an epoch would take no training step: the dataset holds {samples} sample(s), of which each of "
                    f"the {ctx.world_size} process(es) takes {share}, in batches of {per_step}, and --model "
                    f"{opt.model} trains on full batches only (it skips an epoch's incomplete last batch), so nothing "
                    f"would be trained; {fix}{' or use fewer processes' if ctx.world_size > 1 else ''}.")


def check_epochs_left(opt: argparse.Namespace, start: StartPoint, run_dir: str) -> None:
    """A continued run that has trained all its epochs: UserError with --continue_train (it was
    asked to train and would not), a note otherwise (--auto_resume, a restart: nothing to do)."""
    last_epoch = opt.n_epochs + opt.n_epochs_decay
    if start.state is None or start.position.epoch <= last_epoch:
        return
    done = start.position.epoch - 1  # epochs are saved as finished when the next one is where it stands
    message = (f"the run in {run_dir} has finished epoch {done}, and this command trains up to epoch {last_epoch} "
               f"(--n_epochs {opt.n_epochs} + --n_epochs_decay {opt.n_epochs_decay}), so nothing is left to train; "
               f"to train more, raise --n_epochs or --n_epochs_decay (e.g. --n_epochs_decay {done + 10 - opt.n_epochs} "
               f"for ten more epochs)")
    if opt.continue_train:
        raise UserError(f"--continue_train: {message}.")
    print0(f"note: {message}.")


def set_up(opt: argparse.Namespace, ctx: distributed.DistContext) -> tuple[Run, Position]:
    """Everything the loop needs, and where it starts (a saved training state, or epoch --epoch_count).
    Every check comes before the first write to the run folder: a refused run changes nothing there."""
    check_distributed_options(opt, ctx)
    global_batch = global_batch_size(opt, ctx)
    run_dir = os.path.join(opt.checkpoints_dir, opt.name)
    checkpointer = Checkpointer(run_dir, ctx, global_batch, opt.save_by_iter)
    start = checkpointer.find_start(opt)  # the training state to continue from (its flags checked), or afresh
    check_epochs_left(opt, start, run_dir)
    seed_everything(start.seed)  # the same initial weights on every rank
    size_rule = networks.size_rule(opt.netG, opt)  # the image sizes the generator takes
    # a sampler per rank; CUT's and UNSB's decay epochs load at --crop_size (their models say so)
    recipe = find_model_using_name(opt.model).loads_at_crop_size_in_decay and opt.n_epochs_decay > 0
    in_decay = opt.n_epochs + 1 if recipe else None
    dataset = create_dataset(opt, start.seed, ctx, size_rule=size_rule, crop_size_from=in_decay)
    check_epoch_has_steps(opt, ctx, len(dataset.dataset))  # before anything is built from it
    first_sample = dataset.first_sample()
    first = first_sample["A"]
    # what the generator and discriminator families take: a discriminator the run builds (none with pix2pix's
    # --lambda_GAN 0; the model's other networks it checks itself, at its first batch)
    networks.check_image_size(opt, *first.shape[1:], discriminator=builds_network(opt, "netD"))
    model = create_model(opt, ctx, start.seed)  # networks, losses, optimizers
    check_accumulation(model, opt.accum_steps)  # --accum_steps needs the model's phases
    # the model may build data-dependent parts from the first batch; then schedulers, loading
    model.setup(opt, start.state, start.rank_state, first_batch=default_collate([first_sample]))
    held_out = create_held_out_dataset(opt, ctx, size_rule) if opt.val_freq > 0 else None
    validator = make_validator(opt, ctx, model, held_out)  # checks --save_best against what it reports
    checkpointer.track_best(opt.save_best, start)  # --save_best: best_net_*.pth, best.json
    # --display_channels and the optional packages of the displays are checked before their first write
    visualizer = make_visualizer(opt, ctx.is_main)
    # DDP-wrapped and compiled networks beside the model's, gradient scalers, moving averages, the
    # compile probe (its one message to the visualizer), and the engine's part of a continued run
    engine = TrainingEngine(model, opt, ctx, start.state, start.rank_state, report=visualizer.message)
    # Every check is done: from here on the run writes (a refused run overwrites nothing).
    checkpointer.remove_stale_temporary_files()  # a killed run's; this run holds the run lock
    print0(format_options(opt))
    if ctx.is_main:
        save_options(opt)
    checkpointer.restore_random_streams(start)  # exactly as they were, or seeded afresh per rank
    visualizer.message(f"The number of training images = {len(dataset)}; {batch_description(opt, ctx)} on {ctx.device}")
    stop = StopRequest().install()
    warmup = Warmup(images=opt.warmup_epochs * len(dataset))
    return Run(opt, ctx, dataset, model, engine, validator, visualizer, checkpointer, stop, warmup), start.position


def train_one_epoch(run: Run, progress: Position) -> bool:
    """Train on the rest of epoch `progress.epoch` from `progress` (advanced in place, step by step),
    logging and saving as the flags say. Returns False if a stop signal ended it early (after
    saving `latest`), True when the epoch's images are done."""
    opt, model, engine, visualizer, global_batch = run.opt, run.model, run.engine, run.visualizer, run.global_batch
    epoch = progress.epoch
    run.dataset.set_epoch(epoch, progress.images_done)  # this epoch's shuffle, from where we are
    visualizer.begin_epoch(progress, len(run.dataset))
    iter_data_time = time.time()
    # --accum_steps K: K batches of --batch_size per optimizer step; saves and stops come between steps
    for micro_batches in micro_batch_groups(run.dataset, opt.accum_steps):
        iter_start_time = time.time()
        t_data = iter_start_time - iter_data_time
        progress.total_iters += global_batch
        progress.images_done += global_batch

        # onto the device; losses, gradients, weight updates (at the warm-up's share of the scheduled rates while
        # --warmup_epochs lasts), the moving averages (--ema_decay)
        lr_factor = run.warmup.factor(progress.total_iters)
        engine.train_step(micro_batches, lr_factor)

        total_iters = progress.total_iters
        stepped = engine.has_stepped  # no losses or images to show before a model's first step
        if stepped and crossed(total_iters, global_batch, opt.display_freq):  # show images, save them to HTML
            model.compute_visuals()
            visualizer.log_images(progress, model.get_current_visuals(),
                                  crossed(total_iters, global_batch, opt.update_html_freq))
        if stepped and crossed(total_iters, global_batch, opt.print_freq):  # losses averaged over all ranks
            engine.check_finite(epoch, total_iters, global_batch)  # stop at a NaN, before it spreads
            losses = model.get_current_losses()
            t_comp = (time.time() - iter_start_time) / global_batch
            visualizer.log_step(progress, losses, model.current_lr() * lr_factor, t_comp, t_data)
        if stop_requested(run, total_iters // global_batch):
            run.checkpointer.save_latest(engine, progress)
            visualizer.message(f"stopped by a signal at epoch {epoch}, {progress.images_done} images into "
                               f"it; saved. Continue with --continue_train.")
            return False
        if crossed(total_iters, global_batch, opt.save_latest_freq):
            visualizer.message(f"saving the latest model (epoch {epoch}, total_iters {total_iters})")
            run.checkpointer.save_progress(engine, progress)
        visualizer.advance(progress)  # the progress bar
        iter_data_time = time.time()
    return True


def stop_requested(run: Run, step: int) -> bool:
    """Has any rank been sent SIGTERM/SIGINT? Every rank must stop after the same step; asking the
    others costs a host sync, so under DDP it is asked every 10 steps."""
    return (not run.ctx.is_distributed or step % 10 == 0) and distributed.any_rank(run.stop.requested)


def end_of_epoch(run: Run, progress: Position, epoch_start_time: float) -> Position:
    """After epoch `progress.epoch`: validation (--val_freq), best-keeping (--save_best), the
    learning rate, the end-of-epoch saves. Returns where the next epoch starts."""
    opt, engine, visualizer, checkpointer = run.opt, run.engine, run.visualizer, run.checkpointer
    epoch, total_iters = progress.epoch, progress.total_iters
    engine.check_finite(epoch, total_iters, run.global_batch, weights=True)
    validator = run.validator
    due = validator is not None and validator.due(epoch)
    validation = validator.run(run.model, engine.inference_networks) if due else None  # each rank its share
    if validation is not None:
        visualizer.log_validation(progress, validation, time.time() - epoch_start_time)
        new_best = checkpointer.keep_best(engine, validation.scores, epoch, total_iters)
        if new_best is not None:
            visualizer.message(f"new best {opt.save_best} {new_best:.4f}: saved best_net_*.pth")
    plateau = validator.plateau_signal(validation) if validator else {}  # what --lr_policy plateau watches
    old_lr, new_lr = engine.update_learning_rate(**plateau)  # the schedule counts whole epochs
    next_epoch = Position(epoch=epoch + 1, images_done=0, total_iters=total_iters)
    if epoch % opt.save_epoch_freq == 0 or epoch == run.last_epoch:
        visualizer.message(f"saving the model at the end of epoch {epoch}, iters {total_iters}")
        checkpointer.save_latest(engine, next_epoch)
        if epoch % opt.save_epoch_freq == 0:
            checkpointer.save_epoch(engine, epoch, next_epoch)
    visualizer.message(f"End of epoch {epoch} / {run.last_epoch} \t Time Taken: "
                       f"{time.time() - epoch_start_time:.0f} sec \t learning rate {old_lr:.7f} -> {new_lr:.7f}")
    return next_epoch


def train(opt: argparse.Namespace, ctx: distributed.DistContext) -> int:
    """Train from where the run folder says until the last epoch, or until a stop signal; returns
    the exit status (0, or 128 + the signal's number)."""
    run, progress = set_up(opt, ctx)
    try:
        while progress.epoch <= run.last_epoch:
            epoch_start_time = time.time()
            if not train_one_epoch(run, progress):  # stopped by a signal; `latest` is saved
                run.visualizer.close()
                # Launchers stop the other ranks once one exits with an error status (143 is
                # one): no rank leaves before rank 0 has written everything.
                distributed.barrier()
                return run.stop.exit_code
            progress = end_of_epoch(run, progress, epoch_start_time)
        run.visualizer.close()
        distributed.barrier()
        return 0
    finally:  # also when an error ends the run (train.main called from Python goes on): logs closed,
        run.visualizer.close()  # the caller's signal handlers back
        run.stop.uninstall()


@exits_on_user_error(report=distributed.report_user_error, memory_advice=(  # one paragraph, exit status 2
    "lower --batch_size, --load_size and --crop_size, or --ngf and --ndf (volumes: --patch_size)"))
def start_and_train(opt: argparse.Namespace, locks: list[RunLock]) -> int:
    """Distributed start, the run folder's lock (held in `locks` for main to release), training."""
    ctx = distributed.init_distributed(opt.device, opt.ddp_timeout, opt.ddp_backend)
    if ctx.is_main:  # one run per folder; taken before anything is written there
        locks.append(RunLock(os.path.join(opt.checkpoints_dir, opt.name)).acquire())
    return train(opt, ctx)


@distributed.record_errors  # under torchrun, a crash in any rank is reported once, with its traceback
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    keep_freed_memory()  # a step's freed activations are reused, not faulted in again page by page
    opt = TrainOptions().parse(argv)
    choose_kernels(opt.deterministic, opt.preprocess)  # before any CUDA work
    locks: list[RunLock] = []
    try:
        return start_and_train(opt, locks)
    finally:
        for lock in locks:
            lock.release()
        distributed.shutdown()


if __name__ == "__main__":
    exit_with_status(main())
