"""Train an image-to-image translation model (CycleGAN, pix2pix, colorization, your own).

    python train.py --dataroot ./datasets/maps --name maps_cyclegan --model cycle_gan
    python train.py --dataroot ./datasets/facades --name facades_pix2pix --model pix2pix --direction BtoA
    torchrun --nproc_per_node=2 train.py ...      # DistributedDataParallel, CPU (gloo) or GPU (NCCL)

Options (see options/) -> distributed start -> dataset -> model -> epoch loop -> shutdown.
Checkpoints, logs and the HTML page go to --checkpoints_dir/--name.
"""
from __future__ import annotations

import sys
import time

from torch.distributed.elastic.multiprocessing.errors import record

from data import create_dataset
from models import create_model
from models.networks import check_input_size
from options.base_options import format_options, save_options
from options.train_options import TrainOptions
from util import distributed
from util.errors import EXIT_USER_ERROR, UserError, describe
from util.seeding import seed_everything
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


def train(opt, ctx: distributed.DistContext) -> None:
    check_distributed_options(opt, ctx)
    seed = distributed.shared_seed(opt.seed)
    seed_everything(seed)  # the same initial weights on every rank
    if ctx.is_main:
        print(format_options(opt))
        save_options(opt)
    dataset = create_dataset(opt, seed, ctx.rank, ctx.world_size, ctx.device.type)  # with a DistributedSampler
    first = dataset.dataset[0]["A"]
    check_input_size(opt.netG, first.shape[-2], first.shape[-1])
    model = create_model(opt, ctx, seed)  # networks, losses, optimizers
    model.setup(opt)                      # schedulers, loading, DDP wrapping
    seed_everything(seed + ctx.rank)      # but different dropout and noise per rank
    visualizer = make_visualizer(opt, ctx.is_main)  # does nothing on non-main ranks
    global_batch = opt.batch_size * ctx.world_size
    visualizer.print_message(f"The number of training images = {len(dataset)}; global batch = {global_batch} "
                             f"({opt.batch_size} per process x {ctx.world_size} processes) on {ctx.device}")

    total_iters = 0  # training images seen by all processes together
    last_epoch = opt.n_epochs + opt.n_epochs_decay
    for epoch in range(opt.epoch_count, last_epoch + 1):
        epoch_start_time = time.time()
        iter_data_time = time.time()
        epoch_iter = 0
        visualizer.reset()
        dataset.set_epoch(epoch)  # a new shuffle and new augmentations each epoch
        visualizer.begin_epoch(epoch, len(dataset), epoch_iter)

        for data in dataset:
            iter_start_time = time.time()
            t_data = iter_start_time - iter_data_time
            total_iters += global_batch
            epoch_iter += global_batch

            model.set_input(data)          # unpack the batch onto the device
            model.optimize_parameters()    # losses, gradients, weight updates

            if crossed(total_iters, global_batch, opt.display_freq):  # show images, save them to HTML
                model.compute_visuals()
                visualizer.display_current_results(model.get_current_visuals(), epoch,
                                                   crossed(total_iters, global_batch, opt.update_html_freq))
            if crossed(total_iters, global_batch, opt.print_freq):  # losses averaged over all ranks
                losses = model.get_current_losses()
                t_comp = (time.time() - iter_start_time) / global_batch
                visualizer.print_current_losses(epoch, epoch_iter, losses, t_comp, t_data)
                visualizer.plot_current_losses(epoch, epoch_iter / len(dataset), losses)
                visualizer.log_training_scalars(total_iters, losses, model.current_lr(), 1.0 / max(t_comp, 1e-9))
            if crossed(total_iters, global_batch, opt.save_latest_freq):
                visualizer.print_message(f"saving the latest model (epoch {epoch}, total_iters {total_iters})")
                model.save_networks(f"iter_{total_iters}" if opt.save_by_iter else "latest")
            visualizer.end_iteration(epoch_iter, total_iters)
            iter_data_time = time.time()

        if epoch % opt.save_epoch_freq == 0 or epoch == last_epoch:
            visualizer.print_message(f"saving the model at the end of epoch {epoch}, iters {total_iters}")
            model.save_networks("latest")
            if epoch % opt.save_epoch_freq == 0:
                model.save_networks(epoch)
        old_lr, new_lr = model.update_learning_rate()  # the schedule counts whole epochs
        visualizer.print_message(f"End of epoch {epoch} / {last_epoch} \t Time Taken: "
                                 f"{time.time() - epoch_start_time:.0f} sec \t learning rate {old_lr:.7f} -> {new_lr:.7f}")
    visualizer.close()
    distributed.barrier()


@record  # under torchrun, a crash in any rank is reported once, with its traceback
def main(argv: list[str] | None = None) -> int:
    opt = TrainOptions().parse(argv)
    try:
        ctx = distributed.init_distributed(opt.device, opt.ddp_timeout)
        train(opt, ctx)
    except UserError as err:
        distributed.report_user_error(describe(err))
        return EXIT_USER_ERROR
    finally:
        distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
