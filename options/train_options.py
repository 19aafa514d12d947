"""Training flags (display, saving, optimisation), as in the reference implementation."""
from __future__ import annotations

import argparse
import os

import data
import models
from models import networks
from models.losses.diff_augment import augment_policy
from models.training.accumulation import accumulation_refusal
from models.training.schedules import LR_SCALINGS, batch_lr_factor, global_batch
from models.training.validator import save_best_refusal
from options.base_options import BaseOptions
from util import distributed
from util.display.user_loggers import logger_classes
from util.display.visualizer import BUILT_IN_BACKENDS
from util.errors import UserError
from util.flag_types import (
    FLOAT32_MAX,
    Bounded,
    fraction_below_one,
    non_negative_float,
    non_negative_int,
    port_number,
    positive_float,
    positive_int,
)
from util.paths import unwritable_folder_reason
from util.resume_flags import ignored, refused
from util.safe_files import refuse_output_over_inputs

# A saved schedule is of one --lr_policy; --epoch_count is where a new run's schedule starts.
SCHEDULE = refused("learning-rate schedule", "To change the schedule, continue from its weights alone with "
                                             "--continue_train --epoch_count N (fresh optimizers and schedule).")
SCHEDULE_FROM_START = ignored("the schedule counts from the epoch the run started at")
# --scale_lr and --warmup_epochs shaped the rates the saved optimizers stepped at, and the warm-up's course.
RECIPE = refused("learning-rate recipe", "To change it, continue from its weights alone with --continue_train "
                                         "--epoch_count N (fresh optimizers and schedule).")


class TrainOptions(BaseOptions):
    isTrain = True

    def initialize(self, parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        parser = super().initialize(parser)
        self._add_visdom_html_visualization_flags(parser)
        self._add_further_displays_flags(parser)
        self._add_network_saving_loading_flags(parser)
        self._add_validation_during_training_flags(parser)
        self._add_training_flags(parser)
        self._add_high_resolution_flags(parser)
        self._add_small_data_steadier_flags(parser)
        return parser

    def _add_visdom_html_visualization_flags(self, parser: argparse.ArgumentParser) -> None:
        """Visdom and HTML visualization parameters."""
        parser.add_argument("--display_freq", type=non_negative_int, default=400, on_resume="silent",
                            help="frequency (in images) of showing training results on screen; 0: never")
        parser.add_argument("--display_ncols", type=non_negative_int, default=4, on_resume="silent",
                            help="if positive, display all images in a single visdom web panel with certain number "
                                 "of images per row; 0: one window per image.")
        parser.add_argument("--display_id", type=Bounded(int, name="display_id"), default=1, on_resume="silent",
                            help="window id of the web display; 0 or less disables visdom")
        parser.add_argument("--display_server", type=str, default="http://localhost", on_resume="silent",
                            help="visdom server of the web display")
        parser.add_argument("--display_env", type=str, default="main", on_resume="silent",
                            help='visdom display environment name (default is "main")')
        parser.add_argument("--display_port", type=port_number, default=8097, on_resume="silent",
                            help="visdom port of the web display")
        parser.add_argument("--update_html_freq", type=non_negative_int, default=1000, on_resume="silent",
                            help="frequency (in images) of saving training results to html; 0: never")
        parser.add_argument("--print_freq", type=non_negative_int, default=100, on_resume="silent",
                            help="frequency (in images) of showing training results on console; 0: never")
        parser.add_argument("--no_html", action="store_true", on_resume="silent",
                            help="do not save intermediate training results to [opt.checkpoints_dir]/[opt.name]/web/")

    def _add_further_displays_flags(self, parser: argparse.ArgumentParser) -> None:
        """Further displays (not in the reference): see docs/visualization.md."""
        parser.add_argument("--use_tensorboard", action="store_true", on_resume="silent",
                            help="log losses, learning rate, images/s and image grids for TensorBoard to "
                                 "[opt.checkpoints_dir]/[opt.name]/tensorboard/ (needs the tensorboard package)")
        parser.add_argument("--no_progress", action="store_true", on_resume="silent",
                            help="no progress bar (or, when stdout is not a terminal, no periodic progress lines)")
        parser.add_argument("--logger", action="append", default=[], metavar="MODULE", on_resume="silent",
                            help="also send the run's losses, images, validations and messages to the LoggerBackend "
                                 "class defined in this module (a dotted module name or a .py file; repeatable): "
                                 "your own logger beside the built-in ones, see docs/visualization.md")
        parser.add_argument("--progress_interval", type=non_negative_float, default=60.0, on_resume="silent",
                            help="seconds between plain progress lines when stdout is not a terminal (a CI log, "
                                 "nohup); 0: after every step")

    def _add_network_saving_loading_flags(self, parser: argparse.ArgumentParser) -> None:
        """Network saving and loading parameters."""
        parser.add_argument("--save_latest_freq", type=non_negative_int, default=5000, on_resume="silent",
                            help="frequency (in images) of saving the latest results; 0: only at the end of epochs")
        parser.add_argument("--save_epoch_freq", type=positive_int, default=5, on_resume="silent",
                            help="frequency of saving checkpoints at the end of epochs")
        parser.add_argument("--save_by_iter", action="store_true", on_resume="silent",
                            help="whether saves model by iteration")
        parser.add_argument("--continue_train", action="store_true", on_resume="silent",
                            help="continue training: load the latest model")
        parser.add_argument("--auto_resume", action="store_true", on_resume="silent",
                            help="continue from the newest training state in the run folder if there is one (as "
                                 "--continue_train), else start a new run: for jobs a scheduler restarts with the "
                                 "same command, e.g. Kubernetes pods (torchrun restarts and SLURM requeues do this "
                                 "by themselves)")
        parser.add_argument("--epoch_count", type=positive_int, default=1, on_resume=SCHEDULE_FROM_START,
                            help="the starting epoch count, we save the model by <epoch_count>, "
                                 "<epoch_count>+<save_latest_freq>, ...")
        parser.add_argument("--phase", type=str, default="train", on_resume="noted", help="train, val, test, etc")

    def _add_validation_during_training_flags(self, parser: argparse.ArgumentParser) -> None:
        """Validation during training (models/training/validator.py, docs/evaluation.md)."""
        parser.add_argument("--val_freq", type=non_negative_int, default=0, on_resume="silent",
                            help="validate every N epochs and at the last one: metrics of the held-out split into "
                                 "val_log.txt and metrics.jsonl; 0: no validation")
        parser.add_argument("--val_phase", type=str, default=None, on_resume="silent",
                            help="the held-out split to validate on (a folder like --phase); default: val, else test")
        parser.add_argument("--val_max_images", type=positive_int, default=100, on_resume="silent",
                            help="validate on at most this many held-out images (the first ones in sorted order)")
        parser.add_argument("--val_mode", type=str, default="eval", choices=["eval", "train"], on_resume="silent",
                            help="eval: generators in eval mode (batch norm's running statistics, no dropout), as "
                                 "test.py --eval; train: as test.py without --eval (batch statistics, dropout)")
        parser.add_argument("--save_best", type=str, default="", on_resume="noted",
                            help="keep best_net_*.pth (test.py --epoch best) and best.json for the epoch with the "
                                 "best value of this validation metric, e.g. L1, PSNR, SSIM, FID_B (with --ema_decay "
                                 "also best_ema_net_*.pth)")

    def _add_training_flags(self, parser: argparse.ArgumentParser) -> None:
        """Training parameters."""
        parser.add_argument("--n_epochs", type=non_negative_int, default=100, on_resume="reapplied",
                            help="number of epochs with the initial learning rate")
        parser.add_argument("--niter", dest="n_epochs", type=non_negative_int, default=100, on_resume="reapplied",
                            help="--n_epochs under its older name (the older reference's and BicycleGAN's)")
        parser.add_argument("--n_epochs_decay", type=non_negative_int, default=100, on_resume="reapplied",
                            help="number of epochs to linearly decay learning rate to zero")
        parser.add_argument("--niter_decay",dest="n_epochs_decay",type=non_negative_int,default=100,
                            on_resume="reapplied",
                            help="--n_epochs_decay under its older name")
        parser.add_argument("--beta1", type=fraction_below_one, default=0.5, on_resume="reapplied",
                            help="momentum term of adam")
        parser.add_argument("--beta2", type=fraction_below_one, default=0.999, on_resume="reapplied",
                            help="second-moment term of adam (UNSB's and CUT's --beta2)")
        parser.add_argument("--lr", type=positive_float, default=0.0002, on_resume="reapplied",
                            help="initial learning rate for adam")
        parser.add_argument("--compile_probe", type=non_negative_int, default=3, metavar="N",
                            on_resume="silent", help="with --compile, time N training steps eager and N compiled at "
                                                     "the start of the run and go on with the faster (compiling is "
                                                     "slower on some CPUs); 0: compile without measuring")
        parser.add_argument("--fused_adam", action="store_true", on_resume="reapplied",
                            help="use PyTorch's fused Adam kernel: a faster update (most for pix2pix), rounding "
                                 "slightly differently from the reference's Adam")
        parser.add_argument("--gan_mode", type=str, default="lsgan", choices=networks.GAN_MODES, on_resume="noted",
                            help="the type of GAN objective. vanilla GAN loss is the cross-entropy objective used in "
                                 "the original GAN paper; hinge: the hinge loss of SAGAN/BigGAN, often steadier with "
                                 "--D_spectral (docs/training_tips.md)")
        parser.add_argument("--pool_size",type=Bounded(int, low=0, high=1000, name="pool_size"),default=50,
                            on_resume="noted",
                            help="the size of image buffer that stores previously generated images")
        parser.add_argument("--lr_policy", type=str, default="linear", choices=networks.LR_POLICIES, on_resume=SCHEDULE,
                            help="learning rate policy. [linear | step | plateau | cosine]")
        parser.add_argument("--ema_decay", type=fraction_below_one, default=0.0, on_resume="noted",
                            help="keep an exponential moving average of the generators' weights with this decay per "
                                 "step (e.g. 0.999), saved as <epoch>_ema_net_G*.pth (test.py --epoch latest_ema); "
                                 "0: off")
        parser.add_argument("--lr_decay_iters", type=positive_int, default=50, on_resume="reapplied",
                            help="multiply by a gamma every lr_decay_iters iterations")
        parser.add_argument("--scale_lr", type=str, default="none", choices=LR_SCALINGS, on_resume=RECIPE,
                            help="scale every learning rate with the global batch (--batch_size x --accum_steps x "
                                 "processes), --lr being the rate for one image per step: linear (x batch), sqrt "
                                 "(x its square root) or none (the reference's: the same rate at every batch); "
                                 "docs/distributed.md, 'More GPUs, the same quality sooner'")
        parser.add_argument("--warmup_epochs", type=Bounded(float, low=0, high=10000, name="warmup_epochs"),
                            default=0.0, on_resume=RECIPE, metavar="EPOCHS",
                            help="raise every learning rate linearly from near zero to the schedule's over the "
                                 "first EPOCHS epochs' images (a fraction is allowed), step by step; 0: off")

    def _add_high_resolution_flags(self, parser: argparse.ArgumentParser) -> None:
        """High resolution (docs/high_resolution.md)."""
        parser.add_argument("--accum_steps",type=Bounded(int, low=1, high=1024, name="accum_steps"),default=1,
                            on_resume="noted",
                            help="gradient accumulation: one optimizer step per this many batches of --batch_size, "
                                 "so the global batch is --batch_size x accum_steps x processes whatever fits in "
                                 "memory; equals a batch that many times larger with instance norm (batch norm "
                                 "normalises each micro-batch by its own statistics)")
        parser.add_argument("--num_D",type=Bounded(int, low=1, high=8, name="num_D"),default=2,on_resume="architecture",
                            help="with --netD multiscale: the number of PatchGANs (each built from --ndf, "
                                 "--n_layers_D, --norm), the k-th judging the image downsampled by 2**k "
                                 "(pix2pixHD's; 2 or 3 for 512-1024 px)")
        parser.add_argument("--checkpoint_activations", action="store_true", on_resume="silent",
                            help="activation checkpointing: the generators' residual blocks and U-Net levels "
                                 "recompute their activations in the backward pass instead of keeping them, for less "
                                 "memory at high resolution (a step takes longer; same results)")

    def _add_small_data_steadier_flags(self, parser: argparse.ArgumentParser) -> None:
        """Small data and steadier training (models/losses/diff_augment.py, docs/training_tips.md)."""
        parser.add_argument("--diff_augment", type=augment_policy, default="", metavar="POLICY", on_resume="noted",
                            help="differentiable augmentation of every discriminator input, real and fake alike "
                                 "(DiffAugment): comma-separated color, translation, cutout, e.g. "
                                 "color,translation,cutout; a pix2pix pair gets one transform for both halves; "
                                 "empty: off. For datasets of a few hundred images or fewer")
        parser.add_argument("--ada_target", type=fraction_below_one, default=0.0, on_resume="noted",
                            help="with --diff_augment: apply each transform with a probability p adapted as in ADA, "
                                 "raised while the fraction of real images the discriminator calls real exceeds this "
                                 "target (e.g. 0.6), lowered otherwise; p is saved with the training state; 0: "
                                 "always augment (p = 1)")
        parser.add_argument("--ada_kimg", type=positive_float, default=100.0, on_resume="noted",
                            help="with --ada_target: thousands of images over which p may move from 0 to 1 (ADA's "
                                 "speed; small datasets and short runs want a few)")
        parser.add_argument("--D_spectral", action="store_true", on_resume="architecture",
                            help="spectral normalisation of every convolution of the discriminators (PyTorch's "
                                 "parametrization); their checkpoints then hold weight.original and the power "
                                 "iteration's _u, _v")

    def add_selected_flags(self, parser: argparse.ArgumentParser, known: argparse.Namespace,
                           given: set[str]) -> argparse.ArgumentParser:
        """The base selections (families' and datasets' flags), then the loggers' own flags: the
        built-in back ends' and those of each --logger class. A --logger module that cannot be
        imported stops here (exit 2), before the run writes anything."""
        parser = super().add_selected_flags(parser, known, given)
        try:
            loggers = logger_classes(known.logger)
        except UserError as err:
            parser.error(f"argument {err}")
        for backend in (*BUILT_IN_BACKENDS, *loggers):
            parser = backend.modify_commandline_options(parser, self.isTrain)
        return parser

    def _check_volume_flags(self, parser: argparse.ArgumentParser, opt) -> None:
        """The base checks of volumes, and no --diff_augment: its transforms are 2-D."""
        if opt.diff_augment:
            parser.error(f"argument --diff_augment: --diff_augment {opt.diff_augment} transforms 2-D "
                         f"pictures; --dataset_mode {opt.dataset_mode} gives volumes, whose augmentation is "
                         f"--intensity_jitter and flips (--no_flip to turn them off): drop --diff_augment "
                         f"(docs/volumes.md)")
        super()._check_volume_flags(parser, opt)

    DEPENDENT_FLAGS = {
        "lr_decay_iters": ("--lr_policy step", lambda opt: opt.lr_policy == "step",
                           "sets the step schedule's interval"),
        "val_phase": ("--val_freq", lambda opt: opt.val_freq > 0, "picks the split validation scores"),
        "val_max_images": ("--val_freq", lambda opt: opt.val_freq > 0, "caps the images validation scores"),
        "val_mode": ("--val_freq", lambda opt: opt.val_freq > 0, "sets how validation runs the networks"),
        "wandb_project_name": ("--use_wandb", lambda opt: opt.use_wandb, "names the wandb project"),
        "display_port": ("--display_id", lambda opt: opt.display_id > 0, "is the visdom server's port"),
        "display_server": ("--display_id", lambda opt: opt.display_id > 0, "is the visdom server's address"),
        "display_env": ("--display_id", lambda opt: opt.display_id > 0, "names the visdom environment"),
        "compile_probe": ("--compile", lambda opt: opt.compile, "times the first compiled steps"),
        "ada_kimg": ("--ada_target", lambda opt: opt.ada_target > 0, "sets how fast ADA adapts its probability"),
    }

    @staticmethod
    def _augment_advice(opt) -> str:
        """How --ada_target without --diff_augment is fixed in this run: add --diff_augment where the run would
        take it, else drop --ada_target (volumes, or a model that builds no discriminator, refuse it)."""
        policy = "color,translation,cutout"
        if data.spatial_dims(opt) == 3:
            return (f", and volumes take none (its transforms are 2-D; --dataset_mode {opt.dataset_mode} gives "
                    f"volumes): drop --ada_target")
        refused = models.find_model_using_name(opt.model).check_flags(networks.with_flags(opt, diff_augment=policy))
        if refused:  # the model's own words, up to its advice (which is about --diff_augment, not asked for here)
            return f", and this run cannot take it ({refused[1].split(':')[0]}): drop --ada_target"
        return f"; add --diff_augment {policy} (for example) or drop --ada_target"

    def check_combinations(self, parser: argparse.ArgumentParser, opt) -> None:
        last_epoch = opt.n_epochs + opt.n_epochs_decay
        if last_epoch == 0:
            parser.error("argument --n_epochs: --n_epochs 0 with --n_epochs_decay 0 trains for no epoch at all; "
                         "give at least one of them a positive value")
        if opt.epoch_count > last_epoch:
            parser.error(f"argument --epoch_count: --epoch_count {opt.epoch_count} is past the last epoch "
                         f"(--n_epochs {opt.n_epochs} + --n_epochs_decay {opt.n_epochs_decay} = {last_epoch}), so "
                         f"nothing would be trained; raise --n_epochs or lower --epoch_count")
        if opt.warmup_epochs > last_epoch - opt.epoch_count + 1:
            parser.error(f"argument --warmup_epochs: --warmup_epochs {opt.warmup_epochs:g} is longer than the run "
                         f"(epochs {opt.epoch_count} to {last_epoch} of --n_epochs {opt.n_epochs} + --n_epochs_decay "
                         f"{opt.n_epochs_decay}), so the learning rate would never reach the schedule's; pass a "
                         f"shorter warm-up (e.g. --warmup_epochs 1) or train longer")
        self.check_first_step(parser, opt)
        if save_best_refusal(opt):
            parser.error(f"argument --save_best: {save_best_refusal(opt)}")
        unsplit = accumulation_refusal(models.find_model_using_name(opt.model), opt.model, opt.accum_steps)
        if unsplit:
            parser.error(f"argument --accum_steps: {unsplit}")
        if not data.find_dataset_using_name(opt.dataset_mode).has_targets:
            parser.error(f"argument --dataset_mode: {opt.dataset_mode} reads input images without targets, which "
                         f"test.py translates; training needs image pairs (--dataset_mode aligned) or two domains "
                         f"(--dataset_mode unaligned)")
        self.check_high_resolution(parser, opt)
        if opt.ada_target > 0 and not opt.diff_augment:
            parser.error(f"argument --ada_target: --ada_target {opt.ada_target:g} adapts the probability of "
                         f"--diff_augment's transforms, but --diff_augment is off{self._augment_advice(opt)}")
        run_dir = os.path.join(opt.checkpoints_dir, opt.name)
        reason = unwritable_folder_reason(run_dir)
        if reason:
            parser.error(f"argument --checkpoints_dir: cannot create the run folder {run_dir} ({reason}); "
                         f"choose another --checkpoints_dir (or --name)")
        read = [("of --dataroot", folder) for folder in data.folders_read(opt)]
        try:  # checkpoints and the page's images must not land among (or around) the training images
            refuse_output_over_inputs(run_dir, f"the run folder {run_dir} (--checkpoints_dir {opt.checkpoints_dir} "
                                      f"--name {opt.name})", read,
                                      f"Pass a --checkpoints_dir apart from the data, e.g. --checkpoints_dir "
                                      f"{os.path.normpath(opt.dataroot)}_checkpoints.")
        except UserError as err:
            parser.error(f"argument --checkpoints_dir: {err}")

    @staticmethod
    def check_first_step(parser: argparse.ArgumentParser, opt) -> None:
        """Adam's first step moves a weight by up to its rate / (1 - beta1), a number the optimisers hold in
        float32: a product past float32's range overflows in the first step (a traceback) instead of training."""
        try:
            launch = distributed.launch_environment()
        except UserError:  # launcher variables that make no launch: said where the processes start (train.py)
            launch = None
        batch = global_batch(opt, launch.world_size if launch else 1)
        factor = batch_lr_factor(opt.scale_lr, batch)
        first_step = opt.lr * factor / (1 - opt.beta1)
        if first_step > FLOAT32_MAX:
            scaled = f" x {factor:g} (--scale_lr {opt.scale_lr} at global batch {batch})" if factor != 1 else ""
            parser.error(f"argument --lr: Adam's first step moves a weight by up to --lr {opt.lr:g}{scaled} / (1 - "
                         f"--beta1 {opt.beta1:g}) = {first_step:.3g}, more than float32 holds ({FLOAT32_MAX:.3g}); "
                         f"lower --lr")

    @staticmethod
    def check_high_resolution(parser: argparse.ArgumentParser, opt) -> None:
        """Refuse discriminator flags where they would do nothing (--num_D for a family without scales)
        or where the --netD family says they cannot work."""
        discriminator = networks.family_of(opt.netD, networks.DISCRIMINATOR)
        if opt.num_D != parser.get_default("num_D") and "num_D" not in discriminator.shape_flags:
            call = models.find_model_using_name(opt.model).network_calls.get("netD")  # those --model can call
            with_scales = [name for name in networks.discriminators()
                           if "num_D" in networks.family_of(name, networks.DISCRIMINATOR).shape_flags
                           and (call is None or call.refusal(networks.family_of(name, call.role), opt) is None)]
            add = f"add --netD {with_scales[0]} or" if with_scales else f"--model {opt.model} can call none:"
            parser.error(f"argument --num_D: --num_D {opt.num_D} sets the number of scales of a discriminator with "
                         f"scales{' (--netD ' + ' or '.join(with_scales) + ')' if with_scales else ''}, but this "
                         f"command has --netD {opt.netD}; {add} leave --num_D out")
        refusal = discriminator.check_flags(opt) if models.builds_network(opt, "netD") else None  # a D it builds
        if refusal:
            flag, why = refusal
            parser.error(f"argument --{flag}: {why}")
