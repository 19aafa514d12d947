"""Command-line options shared by training and testing.

Every flag of the reference implementation is accepted with the same name, type, default and
meaning, so its users' scripts run unchanged. Models and datasets add their own flags through
`modify_commandline_options`, each flag declaring what a change of it does when a run is
continued (`on_resume`, util/resume_flags.py). After `parse()` the options are
read-only: derived values (device, rank, seed) live in the objects that compute them, not in
`opt`; `opt._defaults` and `opt._flag_classes` keep each flag's default and resume class.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any, Callable

import torch

import data
import models
from data.base_dataset import add_data_range_flag, parse_data_range
from data.volume_patches import batch_refusal
from models import networks
from util.errors import UserError
from util.evaluation.inception import add_inception_weights_flag
from util.flag_types import (
    Bounded,
    OneParagraphParser,
    batch_size,
    channel_count,
    direction_name,
    image_side,
    network_width,
    non_negative_int,
    norm_name,
    positive_float,
    positive_int,
    seed_value,
    str2bool,
)
from util.frozen_options import FrozenOptions  # noqa: F401 (options.base_options.FrozenOptions)
from util.resume_flags import SILENT, ignored
from util.safe_files import atomic_write_json, atomic_write_text

logger = logging.getLogger(__name__)

# What happens to a flag when a run is continued is declared with it (`on_resume`, util/resume_flags.py).
SEED_KEPT = ignored("a continued run keeps the seed it started with, which its data order and augmentations follow")
WEIGHTS_LOADED = ignored("the weights are loaded, not initialised")


class BaseOptions:
    """Flags used by both train.py and test.py; subclasses add theirs in `initialize`."""

    isTrain: bool = False

    def initialize(self, parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        self._add_basic_flags(parser)
        self._add_model_flags(parser)
        self._add_dataset_flags(parser)
        self._add_additional_flags(parser)
        self._add_wandb_flags(parser)
        self._add_distributed_flags(parser)
        return parser

    def _add_basic_flags(self, parser: argparse.ArgumentParser) -> None:
        """Basic parameters."""
        parser.add_argument("--dataroot", required=True, on_resume="noted",
                            help="path to images (should have subfolders trainA, trainB, valA, valB, etc)")
        parser.add_argument("--name", type=str, default="experiment_name", on_resume="silent",
                            help="name of the experiment. It decides where to store samples and models")
        parser.add_argument("--checkpoints_dir", type=str, default="./checkpoints", on_resume="silent",
                            help="models are saved here")
        parser.add_argument("--gpu_ids", type=str, default=None, on_resume="silent",
                            help="deprecated: use --device (and torchrun for several GPUs); -1 means CPU")
        parser.add_argument("--device", type=str, default="auto", choices=["auto", "cpu", "cuda"], on_resume="silent",
                            help="where to run: auto picks CUDA when available; under torchrun each process takes "
                                 "cuda:LOCAL_RANK")
        parser.add_argument("--seed", type=seed_value, default=None, on_resume=SEED_KEPT,
                            help="seed every random generator so that the same command gives the same weights")
        parser.add_argument("--amp", type=str, default="none", choices=["none", "bf16", "fp16"], on_resume="noted",
                            help="mixed precision: bf16 autocast (CPU or GPU), or fp16 autocast with a gradient "
                                 "scaler (CUDA only)")
        parser.add_argument("--channels_last", action="store_true", on_resume="noted",
                            help="store images and weights in channels-last memory format: faster convolutions, but "
                                 "on a GPU the instance norms and reflection pads of CycleGAN-style networks convert "
                                 "layouts around themselves (CycleGAN 0.81x on an H100: use --amp bf16 alone there; "
                                 "docs/benchmarks.md)")
        parser.add_argument("--compile", action="store_true", on_resume="silent",
                            help="compile the networks with torch.compile (slow first steps, faster afterwards); on "
                                 "a GPU the training step's networks also replay as CUDA graphs (a few launches "
                                 "instead of thousands), except for processes that talk over gloo")
        parser.add_argument("--deterministic", action="store_true", on_resume="noted",
                            help="bit-reproducible runs on a GPU too: deterministic kernels only "
                                 "(torch.use_deterministic_algorithms, cuDNN deterministic, no cuDNN autotuning, "
                                 "CUBLAS_WORKSPACE_CONFIG) and reflection padding built from slices; slower on a GPU "
                                 "(the CPU is deterministic already). Without it cuDNN times its algorithms for each "
                                 "image size and keeps the fastest, as the reference does, where --preprocess gives "
                                 "every image one size")
        parser.add_argument("--dtype", type=str, default="float32", choices=["float32", "float64"], on_resume="noted",
                            help="precision of weights and images; float64 is slow and meant for numerical checks "
                                 "(e.g. that DDP equals one process)")

    def _add_model_flags(self, parser: argparse.ArgumentParser) -> None:
        """Model parameters."""
        parser.add_argument("--model", type=models.model_name, default="cycle_gan", on_resume="architecture",
                            help=f"chooses which model to use: {', '.join(models.builtin_model_names())}, or the "
                                 f"module path of your own (mypackage.my_model)")
        parser.add_argument("--input_nc", type=channel_count, default=3, on_resume="architecture",
                            help="# of input image channels: 3 for RGB and 1 for grayscale, or any band count "
                                 "(docs/datasets.md)")
        parser.add_argument("--output_nc", type=channel_count, default=3, on_resume="architecture",
                            help="# of output image channels: 3 for RGB and 1 for grayscale, or any band count "
                                 "(docs/datasets.md)")
        parser.add_argument("--ngf", type=network_width, default=64, on_resume="architecture",
                            help="# of gen filters in the last conv layer")
        parser.add_argument("--ndf", type=network_width, default=64, on_resume="architecture",
                            help="# of discrim filters in the first conv layer")
        parser.add_argument("--netD", type=networks.family_name_type(networks.DISCRIMINATOR),
                            default=networks.DEFAULT_DISCRIMINATOR, on_resume="architecture",
                            help=networks.family_help(networks.DISCRIMINATOR))
        parser.add_argument("--netG", type=networks.family_name_type(networks.GENERATOR),
                            default=networks.DEFAULT_GENERATOR, on_resume="architecture",
                            help=networks.family_help(networks.GENERATOR))
        parser.add_argument("--n_layers_D",type=Bounded(int, low=0, high=16, name="n_layers_D"),default=3,
                            on_resume="architecture",
                            help="only used if netD==n_layers or multiscale")
        parser.add_argument("--norm",type=norm_name,default="instance",choices=networks.NORMS,on_resume="architecture",
                            help="instance normalization or batch normalization; syncbatch synchronises batch "
                                 "statistics across DDP processes (the reference README's sync_batch means "
                                 "syncbatch, its sync_instance plain instance norm)")
        parser.add_argument("--init_type", type=str, default="normal", choices=networks.INIT_TYPES,
                            on_resume=WEIGHTS_LOADED, help="network initialization")
        parser.add_argument("--init_gain", type=positive_float, default=0.02, on_resume=WEIGHTS_LOADED,
                            help="scaling factor for normal, xavier and orthogonal.")
        parser.add_argument("--no_dropout", type=str2bool, nargs="?", const=True, default=False,
                            on_resume="architecture",
                            help="no dropout for the generator; --no_dropout False (UNSB's form) turns it on where a "
                                 "model's default is off")
        parser.add_argument("--upsample",type=str,default="transpose",choices=networks.UPSAMPLINGS,
                            on_resume="architecture",
                            help="how the resnet and unet generators double the size: transpose: transposed "
                                 "convolutions (the reference's; their checkpoints); resize: nearest-neighbour "
                                 "upsampling then a 3x3 convolution, which avoids checkerboard artifacts "
                                 "(docs/training_tips.md)")

    def _add_dataset_flags(self, parser: argparse.ArgumentParser) -> None:
        """Dataset parameters."""
        parser.add_argument("--dataset_mode", type=data.dataset_mode_name, default="unaligned", on_resume="noted",
                            help=f"chooses how datasets are loaded: {', '.join(data.builtin_dataset_names())}, or "
                                 f"the dotted module path of your own dataset (docs/datasets.md)")
        parser.add_argument("--direction", type=direction_name, default="AtoB", choices=["AtoB", "BtoA"],
                            on_resume="architecture", help="AtoB or BtoA (UNSB's A2B and B2A mean the same)")
        parser.add_argument("--serial_batches", action="store_true", on_resume="noted",
                            help="if true, takes images in order to make batches, otherwise takes them randomly")
        parser.add_argument("--num_threads", default=4, type=non_negative_int, on_resume="silent",
                            help="# threads for loading data")
        parser.add_argument("--batch_size", type=batch_size, default=1, on_resume="noted",
                            help="input batch size (per process under torchrun)")
        parser.add_argument("--load_size", type=image_side, default=286, on_resume="noted",
                            help="scale images to this size")
        parser.add_argument("--crop_size", type=image_side, default=256, on_resume="noted",
                            help="then crop to this size")
        parser.add_argument("--max_dataset_size", type=positive_int, default=float("inf"), on_resume="noted",
                            help="Maximum number of samples allowed per dataset.")
        parser.add_argument("--preprocess",type=str,default="resize_and_crop",
                            choices=["resize_and_crop", "crop", "scale_width", "scale_width_and_crop", "none"],
                            on_resume="noted",
                            help="scaling and cropping of images at load time")
        parser.add_argument("--no_flip", action="store_true", on_resume="noted",
                            help="if specified, do not flip the images for data augmentation")
        parser.add_argument("--skip_bad_images", action="store_true", on_resume="silent",
                            help="replace an unreadable image met during a run by the next one, with a warning, "
                                 "instead of stopping")
        parser = add_data_range_flag(parser)
        parser.add_argument("--display_channels", type=str, default="", on_resume="silent",
                            help="comma-separated channels (from 0) shown in the 8-bit previews of images with more "
                                 "channels, e.g. 3,2,1 for bands 4,3,2 as RGB; default: 1 -> gray, 3 -> RGB, "
                                 "otherwise the first 3 (2 channels: the first)")
        parser.add_argument("--display_winsize", type=image_side, default=256, on_resume="silent",
                            help="display window size for both visdom and HTML")

    def _add_additional_flags(self, parser: argparse.ArgumentParser) -> None:
        """Additional parameters."""
        parser.add_argument("--epoch", type=str, default="latest", on_resume="silent",
                            help="which epoch to load? set to latest to use latest cached model")
        parser.add_argument("--load_iter", type=non_negative_int, default=0, on_resume="silent",
                            help="which iteration to load? if load_iter > 0, the code will load models by "
                                 "iter_[load_iter]; otherwise, the code will load models by [epoch]")
        parser.add_argument("--verbose", action="store_true", on_resume="silent",
                            help="if specified, print more debugging information")
        parser.add_argument("--suffix", default="", type=str, on_resume="silent",
                            help="customized suffix: opt.name = opt.name + suffix: e.g., "
                                 "{model}_{netG}_size{load_size}")
        parser = add_inception_weights_flag(parser)  # validation, test.py --eval_metrics

    def _add_wandb_flags(self, parser: argparse.ArgumentParser) -> None:
        """Wandb parameters."""
        parser.add_argument("--use_wandb", action="store_true", on_resume="silent",
                            help="if specified, then init wandb logging")
        parser.add_argument("--wandb_project_name", type=str, default="CycleGAN-and-pix2pix", on_resume="silent",
                            help="specify wandb project name")

    def _add_distributed_flags(self, parser: argparse.ArgumentParser) -> None:
        """Distributed parameters."""
        parser.add_argument("--ddp_backend",type=str,default="auto",choices=["auto", "nccl", "gloo"],on_resume="silent",
                            help="communication between processes: auto is NCCL on GPUs, gloo on the CPU; gloo with "
                                 "--device cuda lets several processes share one GPU (for testing)")
        parser.add_argument("--ddp_timeout",type=Bounded(float, low=0, low_open=True, high=1e6, name="ddp_timeout"),
                            default=600.0,on_resume="silent",
                            help="seconds a process waits for its peers before the whole run is stopped with an error")

    # Flags whose value decides which other flags exist (their families', the dataset mode's), read by the
    # pre-parse; `given` tells which of them the command line names.
    SELECTORS = ("netG", "netD", "dataset_mode")

    def build_parser(self, argv: list[str] | None) -> argparse.ArgumentParser:
        """The full parser: base flags, the chosen model's, then those of what the command line selects
        (`add_selected_flags`). `parse` reads the command line with it once more, the final time: the
        flags it holds depend on values only a parse can tell."""
        parser = OneParagraphParser(allow_abbrev=False, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        parser = self.initialize(parser)
        # --model alone first: it decides which parser reads the rest, and the model may widen other flags'
        # choices (BicycleGAN's --upsample basic), which a parse of every flag would refuse before it had a say.
        parser = models.get_option_setter(self._given_model(parser, argv))(parser, self.isTrain)
        # The one pre-parse, with the model's flags and defaults: what selects further flags. Parsing every
        # flag known so far also lets a model's mode flag (CUT's --CUT_mode, UNSB's --mode) set the defaults
        # of its mode, which argparse gives from the next parse on, the final one.
        known, given = self._pre_parse(parser, argv)
        return self.add_selected_flags(parser, known, given)

    def _pre_parse(self, parser: argparse.ArgumentParser,
                   argv: list[str] | None) -> tuple[argparse.Namespace, set[str]]:
        """`parser.parse_known_args(argv)` with the `SELECTORS` the command line leaves out at their
        defaults, and the set of those it names. --help and missing required flags are left to the final
        parse, whose parser lists every flag."""
        argv = [arg for arg in (sys.argv[1:] if argv is None else argv) if arg not in ("-h", "--help")]
        defaults = {dest: parser.get_default(dest) for dest in self.SELECTORS}
        required = [action for action in parser._actions if action.required]
        parser.set_defaults(**dict.fromkeys(defaults))  # None: not on the command line
        for action in required:
            action.required = False
        try:
            known, _ = parser.parse_known_args(argv)
        finally:
            parser.set_defaults(**defaults)
            for action in required:
                action.required = True
        given = {dest for dest in defaults if getattr(known, dest) is not None}
        for dest in set(defaults) - given:
            setattr(known, dest, defaults[dest])
        return known, given

    def add_selected_flags(self, parser: argparse.ArgumentParser, known: argparse.Namespace,
                           given: set[str]) -> argparse.ArgumentParser:
        """Add the flags of what the pre-parse `known` selected: the --netG and --netD families' and the
        --dataset_mode's; volumes (a 3-D dataset mode) take the 3-D network standing in for each 2-D
        default the command line does not override (`given`). Subclasses add their own selections."""
        parser = networks.family_of(known.netG, networks.GENERATOR).add_flags(parser)
        if known.netD != known.netG:  # one module may hold a generator and a discriminator family
            parser = networks.family_of(known.netD, networks.DISCRIMINATOR).add_flags(parser)
        parser = data.get_option_setter(known.dataset_mode)(parser, self.isTrain)
        if data.spatial_dims(known) == 3:
            self._default_to_volume_networks(parser, given)
        return parser

    @staticmethod
    def _unsb_command_line(argv: list[str]) -> list[str]:
        """UNSB's command lines name no --model (its default is sb, ours the reference's cycle_gan) but
        pass its --mode: such a line trains --model sb, said in a note."""
        names = {arg.split("=", 1)[0] for arg in argv if arg.startswith("--")}
        if "--mode" in names and "--model" not in names:
            logger.info("--mode without --model is UNSB's command line: using --model sb (the default model "
                        "here is cycle_gan; pass --model sb to silence this)")
            return ["--model", "sb", *argv]
        return argv

    @staticmethod
    def _given_model(parser: argparse.ArgumentParser, argv: list[str] | None) -> str:
        """--model's value in `argv` (its default when not given), parsed without looking at the other flags."""
        action = next(action for action in parser._actions if action.dest == "model")
        probe = OneParagraphParser(add_help=False, allow_abbrev=False)
        probe.add_argument(*action.option_strings, dest="model", type=action.type, default=action.default,
                           on_resume=action.on_resume)  # the flag itself, alone
        return probe.parse_known_args(argv)[0].model

    @staticmethod
    def _default_to_volume_networks(parser: argparse.ArgumentParser, given: set[str]) -> None:
        """Volumes: a network the user did not name (not in `given`) is the 3-D one standing in for the
        model's 2-D default (pix2pix's unet_256 -> unet_64_3d, resnet_9blocks -> resnet_9blocks_3d, basic
        -> basic_3d); one the user named is theirs, and `models.network_refusal` refuses a 2-D one."""
        for flag, role in (("netG", networks.GENERATOR), ("netD", networks.DISCRIMINATOR)):
            counterpart = networks.volume_counterpart(parser.get_default(flag), role)
            if counterpart is not None and flag not in given:
                parser.set_defaults(**{flag: counterpart})
                networks.family_of(counterpart, role).add_flags(parser)

    def parse(self, argv: list[str] | None = None) -> FrozenOptions:
        """Parse `argv` (default: sys.argv[1:]) into read-only options (printing is the caller's: format_options).

        Besides each flag's own type and range, flags that only make sense together are checked
        here (a bad combination exits 2 with one paragraph, like a bad value)."""
        argv = self._unsb_command_line(sys.argv[1:] if argv is None else list(argv))
        parser = self.build_parser(argv)
        # The second pass, and the final one: the pre-parse could only read the flags that existed before the
        # model, its networks' families and the dataset mode were chosen from it; this one reads every flag
        # (refusing unknown ones), with the defaults the model and a mode flag set.
        opt = parser.parse_args(argv, namespace=FrozenOptions())
        opt.isTrain = self.isTrain
        if opt.suffix:
            opt.name = opt.name + "_" + self._expand_suffix(parser, opt)
        self._check_run_name(parser, opt.name)
        if opt.dtype == "float64" and opt.amp != "none":
            half = opt.amp.replace('bf', 'bfloat').replace('fp', 'float')
            parser.error(f"argument --amp: --amp {opt.amp} computes in {half} "
                         f"what --dtype float64 asks to keep in float64 (for exact checks); pass one of them: --amp "
                         f"{opt.amp} for speed, or --dtype float64 for precision")
        if opt.gpu_ids is not None:
            opt.device = self._device_from_gpu_ids(parser, opt.gpu_ids, opt.device)
        refused = models.find_model_using_name(opt.model).check_flags(opt) or self._loss_weight_refusal(parser, opt)
        if refused:  # what the model cannot work with, before anything runs (and before its networks are judged)
            flag, why = refused
            parser.error(f"argument --{flag}: {why}")
        self.check_networks(parser, opt)
        try:  # each MIN below its MAX, 2 or 4 numbers: known now, not when the first image is read
            parse_data_range(opt.data_range)
        except UserError as err:
            parser.error(f"argument --data_range: {err}")
        if data.spatial_dims(opt) == 3:
            self._check_volume_flags(parser, opt)
        self.check_combinations(parser, opt)
        self._warn_flags_without_effect(parser, opt)
        defaults = {key: parser.get_default(key) for key in vars(opt)}
        object.__setattr__(opt, "_defaults", defaults)
        # what a change of each flag does on --continue_train, as declared (isTrain: which script runs)
        object.__setattr__(opt, "_flag_classes", {**parser.resume_classes(), "isTrain": SILENT})
        return opt.freeze()

    def _loss_weight_refusal(self, parser: argparse.ArgumentParser, opt: FrozenOptions) -> tuple[str, str] | None:
        """(the first weight, why) when training would weigh every loss the generator learns from by 0 (the
        model's `loss_weights`): the run would go to its end in silence and save an untrained generator."""
        weights = models.find_model_using_name(opt.model).loss_weights
        if not self.isTrain or not weights or not all(hasattr(opt, name) for name in weights):
            return None
        if any(getattr(opt, name) > 0 for name in weights):
            return None
        given = [f"--{name} 0" for name in weights]
        named = given[0] if len(given) == 1 else f"{', '.join(given[:-1])} and {given[-1]}"
        first = weights[0]
        return first, (f"{named}: every loss the generator of --model {opt.model} learns from would weigh 0, so it "
                       f"would learn nothing (training would run to its end and save an untrained generator); give "
                       f"{'it' if len(given) == 1 else 'one of them'} a weight above 0, e.g. --{first} "
                       f"{parser.get_default(first):g} (its default)")

    def _check_volume_flags(self, parser: argparse.ArgumentParser, opt: FrozenOptions) -> None:
        """Volumes are cut into --patch_size patches, never resized or cropped as pictures are: refuse
        batches too large for memory, warn once about the picture flags that do nothing. (TrainOptions
        also refuses 2-D augmentation.)"""
        for flag, count in (("batch_size", opt.batch_size), ("window_batch", opt.window_batch)):
            # patches at once: known now, before any is allocated (scripts/export.py: no --patch_size yet)
            refused = batch_refusal(f"--{flag}", count, opt.patch_size) if opt.patch_size else None
            if refused:
                parser.error(f"argument --{flag}: {refused}")
        unused = [flag for flag in ("load_size", "crop_size", "preprocess")
                  if getattr(opt, flag) != parser.get_default(flag)]
        if unused:
            one = len(unused) == 1
            logger.warning(f"{', '.join('--' + flag for flag in unused)} {'is' if one else 'are'} for resizing and "
                           f"cropping pictures; volumes are cut into --patch_size patches instead, so "
                           f"{'it does' if one else 'they do'} nothing with --dataset_mode {opt.dataset_mode} "
                           f"(docs/volumes.md).")

    def check_networks(self, parser: argparse.ArgumentParser, opt: FrozenOptions) -> None:
        """Refuse (parser.error) a network of other dimensions than the data's, or one the --model cannot
        call as it calls that flag's (`models.network_refusal`): before its first step would fail."""
        refused = models.network_refusal(opt)
        if refused:
            flag, why = refused
            parser.error(f"argument --{flag}: {why}")

    def check_combinations(self, parser: argparse.ArgumentParser, opt: FrozenOptions) -> None:
        """Refuse (parser.error) flags whose values are fine alone but not together; subclasses add theirs."""

    # flag -> (the flag it works with, whether that is on, what the flag does): a flag given while the other
    # is off does nothing, which the user is told once (where the intent can still be met, the run goes on).
    DEPENDENT_FLAGS: dict[str, tuple[str, Callable[[Any], bool], str]] = {}

    def _warn_flags_without_effect(self, parser: argparse.ArgumentParser, opt: FrozenOptions) -> None:
        for flag, (needed, is_on, what) in self.DEPENDENT_FLAGS.items():
            if hasattr(opt, flag) and getattr(opt, flag) != parser.get_default(flag) and not is_on(opt):
                logger.warning(f"--{flag} {what}, but {needed} is off, so it does nothing in this run; add "
                               f"{needed} or drop --{flag}.")

    @staticmethod
    def _check_run_name(parser: argparse.ArgumentParser, name: str) -> None:
        """--name is one folder in --checkpoints_dir (and --results_dir): '', '.', '..' and names with a
        path separator would put the run's files elsewhere, e.g. into --checkpoints_dir itself."""
        separators = [sep for sep in ("/", os.sep, os.altsep, "\0") if sep and sep in name]
        if name.strip() in ("", ".", "..") or separators:
            words = [part for part in name.replace("\0", "/").replace(os.sep, "/").split("/") if part.strip(". ")]
            suggestion = "_".join(words) or "experiment_name"
            parser.error(f"argument --name: {name!r} is not one folder name (the run's checkpoints, options and logs "
                         f"go to --checkpoints_dir/<name>/ and its results to --results_dir/<name>/, so an empty name, "
                         f"'.', '..' or a path would write them elsewhere, where another run overwrites them); pass a "
                         f"name without '/', e.g. --name {suggestion}")

    @staticmethod
    def _expand_suffix(parser: argparse.ArgumentParser, opt: FrozenOptions) -> str:
        try:
            return opt.suffix.format(**vars(opt))
        except (KeyError, IndexError, ValueError, AttributeError) as err:
            parser.error(f"argument --suffix: {opt.suffix!r} cannot be filled in ({type(err).__name__}: {err}); "
                         f"put flag names in braces, e.g. --suffix {{model}}_{{netG}}_size{{load_size}}")

    @staticmethod
    def _device_from_gpu_ids(parser: argparse.ArgumentParser, gpu_ids: str, device: str) -> str:
        try:
            ids = [int(i) for i in gpu_ids.split(",") if i.strip() != ""]
        except ValueError:
            parser.error(f"argument --gpu_ids: expected GPU numbers separated by commas (e.g. 0 or 0,1; -1 for "
                         f"the CPU), got {gpu_ids!r}; better, pass --device cuda or --device cpu")
        chosen = "cpu" if not ids or ids[0] < 0 else "cuda"
        if device != "auto":
            chosen = device
        elif chosen == "cuda" and not torch.cuda.is_available():
            parser.error(f"argument --gpu_ids: --gpu_ids {gpu_ids} asks for a GPU, but PyTorch sees no CUDA GPU on "
                         f"this machine; drop --gpu_ids (or pass --gpu_ids -1) to run on the CPU")
        extra = " (for several GPUs launch with torchrun --nproc_per_node=N)" if len(ids) > 1 else ""
        logger.warning(f"--gpu_ids is replaced by --device; --gpu_ids {gpu_ids} now means --device {chosen}{extra}.")
        return chosen


def format_options(opt: FrozenOptions) -> str:
    """The options as the reference prints them, values that differ from the default marked."""
    defaults = getattr(opt, "_defaults", {})
    lines = ["----------------- Options ---------------"]
    for key, value in opt.as_dict().items():
        default = defaults.get(key)
        comment = f"\t[default: {default}]" if key in defaults and value != default else ""
        lines.append(f"{key:>25}: {str(value):<30}{comment}")
    lines.append("----------------- End -------------------")
    return "\n".join(lines)


def save_options(opt: FrozenOptions) -> None:
    """Write `<phase>_opt.txt` (as the reference) and `<phase>_opt.json` into the run folder."""
    run_dir = os.path.join(opt.checkpoints_dir, opt.name)
    os.makedirs(run_dir, exist_ok=True)
    atomic_write_text(os.path.join(run_dir, f"{opt.phase}_opt.txt"), format_options(opt) + "\n")
    atomic_write_json(os.path.join(run_dir, f"{opt.phase}_opt.json"), opt.as_dict(), indent=1, default=str)


