"""CUT and FastCUT (Park, Efros, Zhang, Zhu, ECCV 2020): unpaired translation with one generator,
one discriminator and a patchwise contrastive loss (PatchNCE) instead of cycle consistency.

Flags, defaults and per-mode defaults are CUT's (taesungp/contrastive-unpaired-translation), so a
CUT command line runs here unchanged; the generator and discriminator have CUT's antialiased
layers and key layout (models/losses/patchnce.py), so checkpoints load both ways.

What differs from CUT's code, on purpose: each image gets its own random patch positions (CUT
shares one draw across the batch), drawn with the flip coin from a stream seeded by --seed and
saved with the training state, so the positions do not depend on how the batch is split across
processes, and a resumed run draws what the uninterrupted one would. With
--nce_includes_all_negatives_from_minibatch the negatives are every patch of the *global* batch.
See docs/cut.md.
"""
from __future__ import annotations

import argparse
import math
from typing import Any, Mapping

import torch

from models import networks
from models.base_model import BaseModel
from models.losses import gan, patchnce
from models.losses.gan import GANLoss
from models.losses.multiscale import MultiscaleGANLoss
from models.network_views import NetworkViews
from models.training.step import TrainingStep
from util import distributed
from util.errors import UserError
from util.flag_types import (
    Bounded,
    network_width,
    non_negative_float,
    non_negative_int,
    norm_name,
    positive_float,
    str2bool,
)

MODES = ("CUT", "FastCUT")
# CUT's per-mode defaults (its CUTModel.modify_commandline_options); explicit flags win.
MODE_DEFAULTS = {"CUT": {"nce_idt": True, "lambda_NCE": 1.0},
                 "FastCUT": {"nce_idt": False, "lambda_NCE": 10.0, "flip_equivariance": True}}
MODE_TRAIN_DEFAULTS = {"CUT": {"n_epochs": 200, "n_epochs_decay": 200},  # CUT's own training defaults
                       "FastCUT": {"n_epochs": 150, "n_epochs_decay": 50}}


def cut_mode(text: str) -> str:
    """argparse `type` of --CUT_mode: CUT or FastCUT, in any case, as CUT accepts cut and fastcut."""
    for mode in MODES:
        if text.lower() == mode.lower():
            return mode
    raise argparse.ArgumentTypeError(f"choose CUT or FastCUT (any case), got {text!r}")


def layer_list(text: str) -> str:
    """argparse `type` of --nce_layers: comma-separated generator layer numbers, e.g. 0,4,8,12,16
    (kept as text, as CUT keeps it; `parse_layers` reads it)."""
    try:
        layers = tuple(int(part) for part in text.split(","))
    except ValueError:
        layers = ()
    if not layers or min(layers) < 0 or len(set(layers)) != len(layers):
        raise argparse.ArgumentTypeError(f"expected distinct layer numbers >= 0 separated by commas, e.g. "
                                         f"0,4,8,12,16, got {text!r}")
    return ",".join(map(str, layers))


def parse_layers(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(","))


def mode_defaults_action(is_train: bool, as_cut_mode: Mapping[str, str] | None = None) -> type[argparse.Action]:
    """The action of --CUT_mode: besides storing the mode, it makes that mode's defaults the parser's,
    so the final parse (options/base_options.py parses again after the model adds its flags) gives
    every flag the user did not pass the mode's value, as CUT's own parser does. With `as_cut_mode`
    (a mode flag of another name, e.g. UNSB's --mode: its value -> the CUT mode it means) it sets
    --CUT_mode's default too."""
    class SetModeDefaults(argparse.Action):
        def __call__(self, parser, namespace, value, option_string=None):
            setattr(namespace, self.dest, value)
            mode = value if as_cut_mode is None else as_cut_mode[value]
            also = {} if as_cut_mode is None else {"CUT_mode": mode}
            parser.set_defaults(**also, **MODE_DEFAULTS[mode], **(MODE_TRAIN_DEFAULTS[mode] if is_train else {}))
    return SetModeDefaults


def add_their_tooling_flags(parser: argparse.ArgumentParser, is_train: bool) -> argparse.ArgumentParser:
    """Flags of CUT's and UNSB's parsers that do nothing with the networks and datasets built here (nor there),
    accepted so that their command lines run; `check_flags` refuses --pretrained_name, saying what to do."""
    def unused(flag: str, kind: Any, default: Any, there: str, **more: Any) -> None:
        parser.add_argument(flag, type=kind, default=default, on_resume="silent", **more,
                            help=f"accepted for CUT's and UNSB's command lines: {there}; nothing here reads it")
    unused("--easy_label", str, "experiment_name", "a label their experiment launchers print")
    unused("--embedding_type", str, "positional", "the time embedding of their StyleGAN2 generators, which are not "
           "here (their resnet ignores it, as ours does)", choices=["fourier", "positional"])
    unused("--random_scale_max", non_negative_float, 3.0, "the random zoom of their single-image dataset "
           "(SinCUT), which is not here")
    unused("--stylegan2_G_num_downsampling", Bounded(int, low=0, high=16, name="stylegan2_G_num_downsampling"),
           1, "the downsampling layers of their StyleGAN2 generators, which are not here")
    if is_train:
        unused("--evaluation_freq", non_negative_int, 5000, "an evaluation interval their train.py never reads "
               "(validation here: --val_freq, in epochs)")
        parser.add_argument("--pretrained_name", type=str, default=None, on_resume="silent",
                            help="CUT's and UNSB's: continue from another run's weights; refused here")
    return parser


class CUTModel(BaseModel):
    """G: A -> B (CUT's resnet, antialiased), D judges B, F projects G's features for PatchNCE."""

    visual_sides = {"real_A": "A", "fake_B": "B", "real_B": "B", "idt_B": "B"}
    network_roles = {"G": "generator", "F": "head", "D": "discriminator"}  # netF: PatchNCE's projection
    network_calls = {"netG": networks.NetworkCall(networks.GENERATOR, features=True),  # PatchNCE reads its layers
                     "netD": networks.NetworkCall(networks.DISCRIMINATOR)}
    translators = ("G",)  # one way only, as trained
    input_visual = "real_A"
    loss_weights: tuple[str, ...] = ("lambda_GAN", "lambda_NCE")
    random_streams: tuple[str, ...] = ("patch_rng",)  # torch.Generator attributes saved for an exact resume
    loads_at_crop_size_in_decay = True  # as CUT's (and UNSB's) unaligned dataset: no random crop once lr decays

    @classmethod
    def scored_pairs(cls, paired: bool) -> dict[str, tuple[str, str | None]]:
        """G(A) against B: paired data by L1/PSNR/SSIM, unpaired by FID_B/KID_B."""
        return {"" if paired else "B": ("fake_B", "real_B")}

    @staticmethod
    def modify_commandline_options(parser, is_train: bool = True):
        # How each flag fares on --continue_train (util/resume_flags.py): the losses are
        # "noted"; what shapes G, D and F (netF's MLPs follow --nce_layers) is "architecture".
        parser.add_argument("--CUT_mode", type=cut_mode, default="CUT", action=mode_defaults_action(is_train),
                            on_resume="noted", help="CUT or FastCUT (any case): FastCUT has no identity NCE, "
                                                    "--lambda_NCE 10, flip equivariance and 150+50 epochs")
        parser.add_argument("--lambda_GAN", type=non_negative_float, default=1.0, on_resume="noted",
                            help="weight for GAN loss: GAN(G(X))")
        parser.add_argument("--lambda_NCE", type=non_negative_float, default=1.0, on_resume="noted",
                            help="weight for NCE loss: NCE(G(X), X)")
        parser.add_argument("--nce_idt", type=str2bool, nargs="?", const=True, default=False, on_resume="noted",
                            help="use NCE loss for identity mapping: NCE(G(Y), Y)")
        parser.add_argument("--nce_layers", type=layer_list, default="0,4,8,12,16", on_resume="architecture",
                            help="compute NCE loss on which layers of the generator's `model` sequence")
        parser.add_argument("--nce_includes_all_negatives_from_minibatch", type=str2bool, nargs="?", const=True,
                            default=False, on_resume="noted", help="negatives from every image of the global batch, "
                            "not only the query's own image (CUT uses it for single-image translation)")
        parser.add_argument("--netF", type=str, default="mlp_sample", choices=patchnce.NETF_KINDS,
                            on_resume="architecture", help="how to downsample the feature map")
        parser.add_argument("--netF_nc", type=network_width, default=256, on_resume="architecture",
                            help="width of netF's projection MLP")
        parser.add_argument("--nce_T", type=positive_float, default=0.07, on_resume="noted",
                            help="temperature for NCE loss")
        parser.add_argument("--num_patches", type=Bounded(int, low=1, high=65536, name="num_patches"), default=256,
                            on_resume="noted",
                            help="number of patches per layer")
        parser.add_argument("--flip_equivariance", type=str2bool, nargs="?", const=True, default=False,
                            on_resume="noted", help="enforce flip-equivariance as additional regularization (FastCUT)")
        # CUT's separate norms: --normG is our --norm (what architecture.json records for the
        # generator, and what syncbatch reads); --normD defaults to it.
        parser.add_argument("--normG", dest="norm", type=norm_name, choices=networks.NORMS, default=argparse.SUPPRESS,
                            on_resume="architecture", help="normalization of G (= --norm)")
        parser.add_argument("--normD", type=str, default=None, choices=networks.NORMS, on_resume="architecture",
                            help="normalization of D (default: that of G)")
        parser.add_argument("--no_antialias", action="store_true", on_resume="architecture",
                            help="stride-2 convolutions instead of antialiased downsampling, in G and D")
        parser.add_argument("--no_antialias_up", action="store_true", on_resume="architecture",
                            help="transposed convolutions instead of antialiased upsampling in G")
        parser = add_their_tooling_flags(parser, is_train)
        parser.set_defaults(no_dropout=True, init_type="xavier", pool_size=0, **MODE_DEFAULTS["CUT"])
        if is_train:
            parser.set_defaults(**MODE_TRAIN_DEFAULTS["CUT"])
        return parser

    @classmethod
    def check_flags(cls, opt) -> tuple[str, str] | None:
        if getattr(opt, "pretrained_name", None) is not None:
            return ("pretrained_name", f"--pretrained_name {opt.pretrained_name}: CUT's and UNSB's code load a "
                                       f"--continue_train run's starting weights from that other run's folder; here "
                                       f"a run continues from its own folder only: copy the <epoch>_net_*.pth files "
                                       f"of {opt.pretrained_name} into {opt.checkpoints_dir}/{opt.name}/ and pass "
                                       f"--continue_train --epoch <epoch> --epoch_count N (fresh optimizers and "
                                       f"schedule), without --pretrained_name (docs/resume.md)")
        # PatchNCE's needs, known from the flags alone: refused when parsed, before anything is written
        refused = (("nce_layers", patchnce.layer_refusal(opt, parse_layers(opt.nce_layers))),
                   ("output_nc", patchnce.channel_refusal(opt)))
        return next(((flag, why) for flag, why in refused if why), None)

    def __init__(self, opt, ctx, seed: int = 0):
        super().__init__(opt, ctx)
        self.nce_layers = parse_layers(opt.nce_layers)
        self.loss_names = ["G_GAN", "D_real", "D_fake", "G", "NCE"] + \
            (["NCE_Y"] if opt.nce_idt and self.isTrain else [])
        self.visual_names = ["real_A", "fake_B", "real_B"] + (["idt_B"] if opt.nce_idt and self.isTrain else [])
        self.model_names = ["G", "F", "D"] if self.isTrain else ["G"]
        check_generator(opt, self.nce_layers)
        self.netG = networks.build_generator(opt, opt.input_nc, opt.output_nc).to(self.device)
        if not self.isTrain:
            return
        if patchnce.channel_refusal(opt):  # the options refuse it first: here for a model built from Python
            raise UserError(patchnce.channel_refusal(opt))
        discriminator_norm = opt.normD or opt.norm
        if distributed.is_distributed() and discriminator_norm in ("batch", "syncbatch") and opt.norm != "syncbatch":
            raise UserError(f"--normD {opt.normD}: under DDP batch norm must be synchronised across processes, which "
                            f"happens for every network with --normG syncbatch (or --norm syncbatch); pass that, or "
                            f"--normD instance.")
        self.netF = patchnce.PatchSampleF(opt.netF, opt.netF_nc).to(self.device)  # MLPs: first batch
        self.netD = networks.build_discriminator(networks.with_flags(opt, norm=opt.normD or opt.norm),
                                                 opt.output_nc).to(self.device)
        # --netD multiscale predicts one grid per scale: the loss is their mean (models/losses/multiscale.py)
        self.criterionGAN = MultiscaleGANLoss(GANLoss(opt.gan_mode)).to(self.device)
        self.optimizer_G = self.make_adam(self.netG.parameters())  # netF's MLPs join it (first batch)
        self.optimizer_D = self.make_adam(self.netD.parameters())
        self.optimizers = [self.optimizer_G, self.optimizer_D]
        # Patch positions and the flip coin: one stream for the run, the same on every rank (each
        # rank draws for the whole global batch and keeps its images' rows), saved for resuming.
        self.patch_rng = torch.Generator().manual_seed(seed * 7919 + 20)

    def data_dependent_initialize(self, first_batch: dict) -> None:
        """netF's MLPs take the widths of G's features at --nce_layers: read them from one image of
        the first batch. They train with G (one loss), so they join G's optimizer."""
        real_A, _, _ = self.paired_input(first_batch)
        with torch.no_grad():
            feats = self.generator_features(NetworkViews({"G": self.netG}), real_A[:1])
        self.netF.create_mlp([feat.shape[1] for feat in feats])
        networks.init_weights(self.netF, self.opt.init_type, self.opt.init_gain)
        self.netF.to(self.device, self.dtype)
        if any(True for _ in self.netF.parameters()):
            self.optimizer_G.add_param_group({"params": list(self.netF.parameters())})

    def set_input(self, input: dict) -> None:
        self.real_A, self.real_B, self.image_paths = self.paired_input(input)

    def forward(self, nets: NetworkViews) -> None:
        self.fake_B = nets.G(self.real_A)

    # ------------------------------------------------------------------ training
    def optimize_parameters(self, step: TrainingStep) -> None:
        # FastCUT's coin: flip this step's inputs (and flip G's features back for PatchNCE)
        flipped = bool(torch.rand((), generator=self.patch_rng) < 0.5) if self.opt.flip_equivariance else False
        nets = step.nets
        with self.autocast():
            real = torch.cat((self.real_A, self.real_B)) if self.opt.nce_idt else self.real_A
            fake = nets.G(torch.flip(real, [3]) if flipped else real)
            self.fake_B = fake[:self.real_A.shape[0]]
            if self.opt.nce_idt:
                self.idt_B = fake[self.real_A.shape[0]:]
        self.loss_D = self.discriminator_loss(step)
        step.update_weights(self.optimizer_D, self.loss_D)
        with step.frozen("D") as netD:  # G's step: D judges only
            self.loss_G = self.generator_loss(nets, netD, flipped)
            step.update_weights(self.optimizer_G, self.loss_G)

    def generator_features(self, nets: NetworkViews, x: torch.Tensor) -> list[torch.Tensor]:
        """G's features of x at --nce_layers, G called as `nets` runs it."""
        return nets.G(x, self.nce_layers, encode_only=True)

    def draw_patch_ids(self, feats: list[torch.Tensor]) -> list[torch.Tensor]:
        """Per NCE layer, --num_patches positions for each of this rank's images (all positions of a
        smaller map): drawn for the whole global batch, image by image, so that an image's positions
        are those one process with the whole batch would draw for it."""
        local = feats[0].shape[0]
        rows = distributed.global_batch_positions(local)
        ids = []
        for feat in feats:
            size = math.prod(feat.shape[2:])  # positions: H*W, or D*H*W for volumes
            drawn = torch.stack([torch.randperm(size, generator=self.patch_rng)[:self.opt.num_patches]
                                 for _ in range(local * distributed.world_size())])
            ids.append(drawn[rows].to(self.device))
        return ids

    def discriminator_loss(self, step: TrainingStep) -> torch.Tensor:
        """D's loss: real B is real, G(A) fake (detached: D's step does not train G), on images
        through --diff_augment (the identity without)."""
        real, fake = self.diff_augment(self.real_B), self.diff_augment(self.fake_B.detach())
        with self.autocast():
            self.loss_D_fake = self.criterionGAN(step.nets.D(fake), False)
            pred_real = step.nets.D(real)
            self.diff_augment.observe_real(pred_real)  # --ada_target: is D overconfident on reals?
            self.loss_D_real = self.criterionGAN(pred_real, True)
            loss_D = (self.loss_D_fake + self.loss_D_real) * 0.5
        if self.opt.gan_mode == "wgangp":
            # Double backward: through D neither compiled nor DDP-wrapped (its synchronised twin under syncbatch).
            penalty, _ = gan.cal_gradient_penalty(step.module("D"), real, fake)
            loss_D = loss_D + penalty
        return loss_D

    def generator_loss(self, nets: NetworkViews, netD, flipped: bool) -> torch.Tensor:
        """G's loss: fool D, and PatchNCE between A and G(A) (and, with --nce_idt, B and G(B))."""
        opt = self.opt
        with self.autocast():
            fooled = self.criterionGAN(netD(self.diff_augment(self.fake_B)), True, for_discriminator=False) \
                if opt.lambda_GAN > 0 else 0.0
            self.loss_G_GAN = fooled * opt.lambda_GAN
            self.loss_NCE = self.nce_loss(nets, self.real_A, self.fake_B, flipped) if opt.lambda_NCE > 0 else 0.0
            if opt.nce_idt and opt.lambda_NCE > 0:
                self.loss_NCE_Y = self.nce_loss(nets, self.real_B, self.idt_B, flipped)
                loss_NCE_both = (self.loss_NCE + self.loss_NCE_Y) * 0.5
            else:
                self.loss_NCE_Y, loss_NCE_both = 0.0, self.loss_NCE
            return self.loss_G_GAN + loss_NCE_both

    def nce_loss(self, nets: NetworkViews, source: torch.Tensor, output: torch.Tensor, flipped: bool) -> torch.Tensor:
        """PatchNCE between G's features of `output` (queries) and of `source` (keys) at the same
        fresh random positions, averaged over the NCE layers, as CUT's calculate_NCE_loss; a flipped
        output's features are flipped back. G and F are called as training runs them (`nets`):
        their gradients from this loss are synchronised like the others'."""
        feat_q = self.generator_features(nets, output)
        if flipped:
            feat_q = [torch.flip(feat, [3]) for feat in feat_q]
        with torch.no_grad():  # keys get no gradient in PatchNCE: no graph for them
            feat_k = self.generator_features(nets, source)
            patch_ids = self.draw_patch_ids(feat_k)
            feat_k = nets.F(feat_k, patch_ids)
        feat_q = nets.F(feat_q, patch_ids)
        images = source.shape[0]
        total = 0.0
        for query, key in zip(feat_q, feat_k):
            all_keys, offset = None, 0
            if self.opt.nce_includes_all_negatives_from_minibatch:
                gathered = distributed.all_gather_tensor(key)  # every rank's keys, in rank order
                offset = sum(part.shape[0] for part in gathered[:distributed.rank()])
                all_keys = torch.cat(gathered)
            loss = patchnce.patch_nce_loss(query, key, images, self.opt.nce_T, all_keys, offset)
            total = total + loss.mean() * self.opt.lambda_NCE
        return total / len(self.nce_layers)

    # ------------------------------------------------------------------ exact resume
    def shared_training_state(self) -> dict:
        state = super().shared_training_state()
        if self.isTrain:
            state.update({name: getattr(self, name).get_state() for name in self.random_streams})
        return state

    def load_shared_training_state(self, state: dict) -> None:
        super().load_shared_training_state(state)
        for name in self.random_streams if self.isTrain else ():
            if name in state:
                getattr(self, name).set_state(state[name])


def check_generator(opt, nce_layers: tuple[int, ...]) -> None:
    """PatchNCE reads the generator's layers (`forward(x, layers, encode_only=True)`): refuse a
    generator family that cannot give them, and layer numbers it lacks."""
    count = networks.family_of(opt.netG).feature_layers(opt)
    if count == 0:  # (the options refuse it first, by `network_calls`: here for a model built from Python)
        readable = CUTModel.network_calls["netG"].fitting_names(opt, networks.family_of(opt.netG).size_rule(opt).dims)
        raise UserError(f"--model cut reads features from the layers of its generator (--nce_layers), which "
                        f"--netG {opt.netG} does not give; use --netG {' or '.join(readable)} (CUT's is the first).")
    if patchnce.layer_refusal(opt, nce_layers):
        raise UserError(patchnce.layer_refusal(opt, nce_layers))
