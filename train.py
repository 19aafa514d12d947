"""Train an image-to-image translation model (CycleGAN, pix2pix, colorization, your own).

    python train.py --dataroot ./datasets/maps --name maps_cyclegan --model cycle_gan
    python train.py --dataroot ./datasets/facades --name facades_pix2pix --model pix2pix --direction BtoA
    python train.py ... --continue_train          # continue exactly where the run stopped
    torchrun --nproc_per_node=2 train.py ...      # DistributedDataParallel, CPU (gloo) or GPU (NCCL)

Options (see options/) -> distributed start -> dataset -> model -> epoch loop -> shutdown.
Checkpoints, logs and the HTML page go to --checkpoints_dir/--name.
"""
from __future__ import annotations

import glob
import os
import sys
import time

from torch.utils.data import default_collate

from data import create_dataset
from data.held_out import create_held_out_dataset
from models import create_model
from models import networks
from models.networks import check_discriminator_input_size, check_input_size
from options.base_options import format_options, save_options
from options.train_options import TrainOptions
from util import distributed
from util.console import print0, warn0
from util.errors import EXIT_USER_ERROR, UserError, describe
from util.training.run_control import RunLock, StopRequest
from util.seeding import enable_determinism, seed_everything
from util.training.position import Position
from util.training.training_state import (find_resume_state, load_training_state, position_of, rank_part,
                                 remove_stale_temporary_files, restore_rng, save_training_state)
from util.training.best_checkpoint import EMA, RAW, BestTracker
from util.training.validator import make_validator
from util.visualizer import make_visualizer


def crossed(total: int, step: int, freq: int) -> bool:
    """Did the counter pass a multiple of `freq` in its last increment of `step`?"""
    return freq > 0 and total // freq > (total - step) // freq


def check_distributed_options(opt, ctx: distributed.DistContext) -> None:
    """Refuse settings that cannot work across processes (on every rank, before any collective)."""
    if ctx.is_distributed and opt.norm == "batch":
        raise UserError("--norm batch computes batch statistics per process, so under torchrun every process "
                        "would normalise its own images differently; use --norm syncbatch (batch norm "
                        "synchronised across processes) or --norm instance.")


def find_resume_point(opt, ctx: distributed.DistContext) -> dict | None:
    """The training state to continue from, or None to start fresh (or load weights only).

    `--continue_train` on its own continues from the newest complete training state. So do
    `--auto_resume`, every restart of the workers by torchrun (--max-restarts) and every requeue
    of a SLURM job, but they start afresh where nothing was saved yet. With `--epoch`,
    `--load_iter` or `--epoch_count`, `--continue_train` behaves as the reference's: weights only,
    counting from --epoch_count.
    """
    reference_style = opt.epoch != "latest" or opt.load_iter > 0 or opt.epoch_count != 1
    restarted = any(int(os.environ.get(count) or 0) > 0 for count in ("TORCHELASTIC_RESTART_COUNT",
                                                                        "SLURM_RESTART_COUNT"))
    if reference_style or not (opt.continue_train or opt.auto_resume or restarted):
        return None
    run_dir = os.path.join(opt.checkpoints_dir, opt.name)
    found = find_resume_state(run_dir) if ctx.is_main else None  # rank 0 picks; every rank loads it
    path = distributed.broadcast_object(found[0] if found else None)
    if path is None:
        if opt.continue_train and not glob.glob(os.path.join(run_dir, f"{opt.epoch}_net_*.pth")):
            raise UserError(f"--continue_train: {run_dir} holds no checkpoint to continue from (no *_train_state.pth, "
                            f"no {opt.epoch}_net_*.pth); check --name and --checkpoints_dir, or leave out "
                            f"--continue_train to start a new run.")
        if opt.continue_train:
            warn0(f"no training state (*_train_state.pth) in {run_dir}: loading the weights of --epoch "
                  f"{opt.epoch} only; optimizers and the learning-rate schedule start afresh.")
        return None
    state = found[1] if ctx.is_main else load_training_state(path)
    p = position_of(state)
    print0(f"resuming from {path}: epoch {p.epoch}, {p.images_done} images into it, {p.total_iters} in total")
    return state


def save_checkpoint(model, label: str, progress: Position, seed: int, images_per_step: int,
                    best: BestTracker | None) -> None:
    """Reference-compatible weights (`<label>_net_<name>.pth`) plus the full training state;
    refused (TrainingDiverged) if a loss or weight went non-finite since the last check."""
    model.check_finite(progress.epoch, progress.total_iters, images_per_step, weights=True)
    model.save_networks(label)
    save_training_state(model, label, progress, seed, best.state_dict() if best else None)


def keep_best(model, best: BestTracker | None, scores: dict[str, float], epoch: int, iteration: int,
              visualizer) -> None:
    """--save_best: `best_net_*.pth` (and, with --ema_decay, `best_ema_net_*.pth`) when this
    validation beats every earlier one; best.json says which epoch they are from."""
    if best is None:
        return
    if best.improved(RAW, scores, epoch, iteration):
        model.save_networks("best", include_ema=False)
        visualizer.print_message(f"new best {best.metric} {scores[best.metric]:.4f}: saved best_net_*.pth")
    if model.ema is not None and best.improved(EMA, scores, epoch, iteration):
        model.save_ema_networks("best")
    if model.ctx.is_main:
        best.write(model.save_dir)


def train(opt, ctx: distributed.DistContext) -> int:
    check_distributed_options(opt, ctx)
    resume = find_resume_point(opt, ctx)
    seed = resume["seed"] if resume else distributed.shared_seed(opt.seed)
    seed_everything(seed)  # the same initial weights on every rank
    size_rule = networks.size_rule(opt.netG)  # the image sizes the generator takes
    dataset = create_dataset(opt, seed, ctx, size_rule=size_rule)  # a sampler per rank
    first_sample = dataset.first_sample()
    first = first_sample["A"]
    check_input_size(opt.netG, first.shape[-2], first.shape[-1])
    check_discriminator_input_size(opt.netD, opt.n_layers_D, first.shape[-2], first.shape[-1])
    model = create_model(opt, ctx, seed)  # networks, losses, optimizers
    rank_state = rank_part(resume, ctx.rank) if resume else None
    # the model may build data-dependent parts from the first batch; then schedulers, loading, DDP wrapping
    model.setup(opt, resume, rank_state, first_batch=default_collate([first_sample]))
    held_out = create_held_out_dataset(opt, ctx, size_rule) if opt.val_freq > 0 else None
    validator = make_validator(opt, ctx, model, held_out)  # held-out metrics (--val_freq); None without
    best = BestTracker(opt.save_best) if opt.save_best else None  # the best validation so far
    if best is not None and resume and resume.get("best"):
        best.load_state_dict(resume["best"])
    print0(format_options(opt))
    if ctx.is_main:  # only once the input is known to be good: a refused run overwrites nothing
        save_options(opt)
    if rank_state is not None:
        restore_rng(rank_state["rng"])    # the random streams exactly as they were
    else:
        seed_everything(seed + ctx.rank + (position_of(resume).total_iters if resume else 0))
    visualizer = make_visualizer(opt, ctx.is_main)  # does nothing on non-main ranks
    global_batch = opt.batch_size * ctx.world_size
    visualizer.print_message(f"The number of training images = {len(dataset)}; global batch = {global_batch} "
                             f"({opt.batch_size} per process x {ctx.world_size} processes) on {ctx.device}")
    stop = StopRequest().install()  # SIGTERM / Ctrl-C: save, then stop

    progress = position_of(resume) if resume else Position(epoch=opt.epoch_count)
    last_epoch = opt.n_epochs + opt.n_epochs_decay
    while progress.epoch <= last_epoch:
        epoch = progress.epoch
        epoch_start_time = time.time()
        iter_data_time = time.time()
        visualizer.reset()
        dataset.set_epoch(epoch, progress.images_done)  # this epoch's shuffle, from where we are
        visualizer.begin_epoch(epoch, len(dataset), progress.images_done)

        for data in dataset:
            iter_start_time = time.time()
            t_data = iter_start_time - iter_data_time
            progress.total_iters += global_batch
            progress.images_done += global_batch

            model.set_input(data)          # unpack the batch onto the device
            model.optimize_parameters()    # losses, gradients, weight updates
            model.update_ema()             # --ema_decay: the generators' moving averages

            total_iters = progress.total_iters
            if crossed(total_iters, global_batch, opt.display_freq):  # show images, save them to HTML
                model.compute_visuals()
                visualizer.display_current_results(model.get_current_visuals(), epoch,
                                                   crossed(total_iters, global_batch, opt.update_html_freq))
            if crossed(total_iters, global_batch, opt.print_freq):  # losses averaged over all ranks
                model.check_finite(epoch, total_iters, global_batch)  # stop at a NaN, before it spreads
                losses = model.get_current_losses()
                t_comp = (time.time() - iter_start_time) / global_batch
                visualizer.print_current_losses(epoch, progress.images_done, losses, t_comp, t_data)
                visualizer.plot_current_losses(epoch, progress.images_done / len(dataset), losses)
                visualizer.log_training_scalars(total_iters, losses, model.current_lr(), 1.0 / max(t_comp, 1e-9))
            # Every rank must stop after the same step; asking the others costs a host sync, so
            # under DDP it is asked every 10 steps.
            if (not ctx.is_distributed or total_iters // global_batch % 10 == 0) and \
                    distributed.any_rank(stop.requested):
                save_checkpoint(model, "latest", progress, seed, global_batch, best)
                visualizer.print_message(f"stopped by a signal at epoch {epoch}, {progress.images_done} images into "
                                         f"it; saved. Continue with --continue_train.")
                visualizer.close()
                # Launchers stop the other ranks once one exits with an error status (143 is
                # one): no rank leaves before rank 0 has written everything.
                distributed.barrier()
                return stop.exit_code
            if crossed(total_iters, global_batch, opt.save_latest_freq):
                visualizer.print_message(f"saving the latest model (epoch {epoch}, total_iters {total_iters})")
                save_checkpoint(model, f"iter_{total_iters}" if opt.save_by_iter else "latest", progress, seed,
                                global_batch, best)
            visualizer.end_iteration(progress.images_done, total_iters)
            iter_data_time = time.time()

        model.check_finite(epoch, progress.total_iters, global_batch, weights=True)
        validation = validator.run(model) if validator and validator.due(epoch) else None  # each rank its share
        if validation is not None:
            visualizer.log_validation(epoch, progress.total_iters, validation.scores, validation.seconds,
                                      time.time() - epoch_start_time, validation.images, validation.visuals)
            keep_best(model, best, validation.scores, epoch, progress.total_iters, visualizer)
        plateau = validator.plateau_signal(validation) if validator else {}  # what --lr_policy plateau watches
        old_lr, new_lr = model.update_learning_rate(**plateau)  # the schedule counts whole epochs
        progress = Position(epoch=epoch + 1, images_done=0, total_iters=progress.total_iters)
        if epoch % opt.save_epoch_freq == 0 or epoch == last_epoch:
            visualizer.print_message(f"saving the model at the end of epoch {epoch}, iters {progress.total_iters}")
            save_checkpoint(model, "latest", progress, seed, global_batch, best)
            if epoch % opt.save_epoch_freq == 0:
                save_checkpoint(model, str(epoch), progress, seed, global_batch, best)
        visualizer.print_message(f"End of epoch {epoch} / {last_epoch} \t Time Taken: "
                                 f"{time.time() - epoch_start_time:.0f} sec \t learning rate {old_lr:.7f} -> {new_lr:.7f}")
    visualizer.close()
    stop.uninstall()
    distributed.barrier()
    return 0


@distributed.record_errors  # under torchrun, a crash in any rank is reported once, with its traceback
def main(argv: list[str] | None = None) -> int:
    opt = TrainOptions().parse(argv)
    if opt.deterministic:
        enable_determinism()  # before any CUDA work
    lock = None
    try:
        ctx = distributed.init_distributed(opt.device, opt.ddp_timeout, opt.ddp_backend)
        if ctx.is_main:  # one run per folder; taken before anything is written there
            lock = RunLock(os.path.join(opt.checkpoints_dir, opt.name)).acquire()
            remove_stale_temporary_files(os.path.join(opt.checkpoints_dir, opt.name))
        return train(opt, ctx)
    except UserError as err:
        distributed.report_user_error(describe(err))
        return EXIT_USER_ERROR
    finally:
        if lock is not None:
            lock.release()
        distributed.shutdown()


if __name__ == "__main__":
    sys.exit(main())
