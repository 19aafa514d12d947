"""UNSB (Kim, Kwon, Kim, Ye, "Unpaired Image-to-Image Translation via Neural Schrödinger Bridge", ICLR
2024): unpaired translation in several refinement steps along a Schrödinger bridge, on CUT.

One generator G(x_t, t, z) with a random code z (models/networks/resnet_cond.py; like UNSB's, it ignores
t) makes every step of the bridge (models/losses/bridge.py). Each training step picks one step t of the
--num_timesteps, walks the inputs there without gradient, and trains G on the state reached: fool a time-conditioned
discriminator D (models/networks/patchgan_cond.py), keep each patch's content (CUT's PatchNCE between
x_0 and G's output, with --nce_idt on B too), and the Schrödinger-bridge loss: an energy network E
scores (x_t, G(x_t)) against the pairs of an independent second input A2 (a contrastive estimate of
the entropy term), plus tau times the squared distance between x_t and its translation. Inference
walks all steps; each step's guess is a translation, the last the final one.

Flags, defaults and key layouts are UNSB's (cyclomon/UNSB), so its command lines run here and its
checkpoints load both ways. What differs from its code, on purpose (docs/sb.md):
  - noise and codes are drawn per image of the global batch from a stream seeded by --seed and saved
    with the training state (its code draws from the global generator), so that N processes train what
    one does and a resumed run what the uninterrupted one would; the step t is one per global batch, as
    in its code; its second input A2 comes from the same dataset (each sample's random other A image)
    rather than a second data loader;
  - the SB loss's log-sum-exp runs over the whole global batch under DDP (its code has no DDP).
"""
from __future__ import annotations

import argparse

import torch

import data
from models import networks
from models.cut_model import CUTModel, mode_defaults_action
from models.losses import bridge
from models.network_views import NetworkViews
from models.networks import patchgan_cond, resnet_cond
from models.training.step import TrainingStep
from util import distributed
from util.errors import UserError
from util.flag_types import Bounded, finite_float, non_negative_float

# UNSB's --mode values and the CUT mode whose defaults each takes (its SBModel sets the same ones)
MODES = {"sb": "CUT", "fastcut": "FastCUT"}
NUM_TIMESTEPS = Bounded(int, low=1, high=bridge.MAX_STEPS, name="num_timesteps")


def unsb_mode(text: str) -> str:
    """argparse `type` of --mode: sb or fastcut, in any case, as UNSB accepts them."""
    if text.lower() in MODES:
        return text.lower()
    raise argparse.ArgumentTypeError(f"choose sb or fastcut (any case), got {text!r}")


class GlobalBatchNoise:
    """A bridge.NoiseSource drawing for every image of the global batch from `rng` (the same stream on
    every rank) and keeping this rank's rows: an image's noise does not depend on the split."""

    def __init__(self, rng: torch.Generator, rows: list[int], global_count: int):
        self.rng, self.rows, self.global_count = rng, rows, global_count

    def noise(self, like: torch.Tensor, step: int) -> torch.Tensor:
        drawn = torch.randn((self.global_count, *like.shape[1:]), generator=self.rng, dtype=torch.float64)
        return drawn[self.rows].to(like.device, like.dtype)

    def codes(self, count: int, width: int, step: int) -> torch.Tensor:
        return torch.randn(self.global_count, width, generator=self.rng, dtype=torch.float64)[self.rows]


class SBModel(CUTModel):
    """G: A -> B in steps (time-conditioned), D judges B at a step, E scores pairs (SB loss), F: PatchNCE."""

    visual_sides = {"real_A": "A", "real_A_noisy": "A", "fake_B": "B", "real_B": "B", "idt_B": "B"}
    network_roles = {"G": "generator", "F": "head", "D": "discriminator", "E": "discriminator"}
    # every network is told the step's time index; G also takes a fresh random code at each step
    network_calls = {"netG": networks.NetworkCall(networks.GENERATOR, (networks.TIME_INDEX, networks.STEP_CODE),
                                                  features=True),
                     "netD": networks.NetworkCall(networks.DISCRIMINATOR, (networks.TIME_INDEX,)),
                     "netE": networks.NetworkCall(networks.DISCRIMINATOR, (networks.TIME_INDEX,))}
    skips_incomplete_batches = True  # the SB loss's log-sum-exp needs every rank's share of the batch
    random_streams = ("patch_rng", "bridge_rng")  # saved for an exact resume (CUTModel's shared_training_state)
    evaluates_in_eval_mode = True  # test.py runs G in eval mode with or without --eval, as UNSB's test does
    result_folders = {"real_A": "real"}  # UNSB's test.py: images/real/ beside images/fake_<step>/
    loss_weights = ("lambda_GAN", "lambda_NCE", "lambda_SB")

    @classmethod
    def visual_domains(cls, opt) -> dict[str, str]:
        """Each step's output (fake_1 .. fake_<--num_timesteps>) is of domain B, as fake_B."""
        domains = super().visual_domains(opt)
        return {**domains, **{f"fake_{k}": domains["fake_B"] for k in range(1, opt.num_timesteps + 1)}}

    @staticmethod
    def modify_commandline_options(parser, is_train: bool = True):
        parser = CUTModel.modify_commandline_options(parser, is_train)
        parser.add_argument("--mode", type=unsb_mode, default="sb", action=mode_defaults_action(is_train, MODES),
                            on_resume="noted", help="sb (CUT's defaults: --nce_idt, --lambda_NCE 1) or fastcut "
                            "(FastCUT's), as UNSB's --mode; --CUT_mode says the same in CUT's words")
        parser.add_argument("--num_timesteps", type=NUM_TIMESTEPS, default=5, on_resume="noted",
                            help="steps of the bridge, in training and at inference (NFE): 1 to 5 in UNSB's paper")
        parser.add_argument("--tau", type=non_negative_float, default=0.01, on_resume="noted",
                            help="entropy of the bridge: the noise between steps and the SB loss's weight inside")
        parser.add_argument("--lambda_SB", type=non_negative_float, default=0.1, on_resume="noted",
                            help="weight of the Schrödinger-bridge loss (UNSB's examples pass 1.0)")
        parser.add_argument("--netE", type=networks.family_name_type(networks.DISCRIMINATOR),
                            default=patchgan_cond.DEFAULT, on_resume="architecture",
                            help="the energy network of the SB loss (a time-conditioned discriminator)")
        width = Bounded(int, low=1, high=65536, name="width")
        for unused, kind, default in (("--std", finite_float, 0.25), ("--lmda", finite_float, 0.1),
                                      ("--embedding_dim", width, 512), ("--style_dim", width, 512)):
            parser.add_argument(unused, type=kind, default=default, on_resume="noted",
                                help="accepted for UNSB's command lines; its code reads it nowhere that changes "
                                     "training")
        parser.add_argument("--n_mlp", type=Bounded(int, low=0, high=64, name="n_mlp"),
                            default=resnet_cond.MAPPING_LAYERS, on_resume="architecture",
                            help=f"layers of the code's mapping network after its first: UNSB's "
                                 f"{resnet_cond.MAPPING_LAYERS} only")
        parser.set_defaults(netG=resnet_cond.DEFAULT, netD=patchgan_cond.DEFAULT, second_input=is_train)
        return parser

    @classmethod
    def check_flags(cls, opt) -> tuple[str, str] | None:
        refused = super().check_flags(opt)
        if refused:
            return refused
        if data.spatial_dims(opt) == 3:
            return ("dataset_mode", f"--model sb translates pictures: UNSB's time-conditioned networks are 2-D and "
                                    f"no 3-D ones exist here, so --dataset_mode {opt.dataset_mode} (volumes) cannot "
                                    f"train it; use --model cut, cycle_gan or pix2pix for volumes (docs/volumes.md)")
        if opt.n_mlp != resnet_cond.MAPPING_LAYERS:
            return ("n_mlp", f"the generator's mapping network has {resnet_cond.MAPPING_LAYERS} layers after its "
                             f"first, as UNSB's default; pass --n_mlp {resnet_cond.MAPPING_LAYERS} or leave it out")
        if opt.input_nc != opt.output_nc and opt.num_timesteps > 1:  # training and test.py walk the bridge
            return ("output_nc", f"the bridge mixes each step's output (--output_nc {opt.output_nc} channels) into "
                                 f"the state it walks from the input (--input_nc {opt.input_nc}), so --model sb with "
                                 f"--num_timesteps {opt.num_timesteps} needs --input_nc == --output_nc; pass "
                                 f"--output_nc {opt.input_nc} (images of 1 and 3 channels load converted to the count "
                                 f"asked for)")
        if opt.isTrain and not data.find_dataset_using_name(opt.dataset_mode).gives_second_input:
            return ("dataset_mode", second_input_refusal(opt))
        return None  # networks that take no time index: refused by `network_calls` (the options ask it)

    def __init__(self, opt, ctx, seed: int = 0):
        super().__init__(opt, ctx, seed)
        self.steps, self.tau = opt.num_timesteps, opt.tau
        self.code_width = networks.family_of(opt.netG).step_code_size(opt)
        self.loss_names = [*self.loss_names, "SB", "E"]
        self.visual_names = ["real_A", "real_A_noisy", "fake_B", "real_B"] + \
            (["idt_B"] if opt.nce_idt and self.isTrain else [])
        self.sampling_seed = opt.seed or 0  # inference's noise (test.py, validation): the Translator's for a seed
        if not self.isTrain:
            self.visual_names = ["real_A", *[f"fake_{k}" for k in range(1, self.steps + 1)], "fake_B", "real_B"]
            return
        self.model_names = ["G", "F", "D", "E"]
        # E scores two (input, output) pairs side by side: 4 images' channels
        self.netE = networks.build_discriminator(networks.with_flags(opt, netD=opt.netE, norm=opt.normD or opt.norm),
                                                 2 * (opt.input_nc + opt.output_nc)).to(self.device)
        self.optimizer_E = self.make_adam(self.netE.parameters())
        self.optimizers = [self.optimizer_G, self.optimizer_D, self.optimizer_E]
        # the step, the noise and the codes: one stream for the run, the same on every rank, saved for resuming
        self.bridge_rng = torch.Generator().manual_seed(seed * 7919 + 23)

    def set_input(self, input: dict) -> None:
        super().set_input(input)
        second = input.get("A2" if self.opt.direction == "AtoB" else "B2")  # training batches only
        self.real_A2 = None if second is None else self.to_device(second)

    # ------------------------------------------------------------------ inference
    def forward(self, nets: NetworkViews) -> None:
        """Walk all --num_timesteps: fake_1 .. fake_T each step's translation, fake_B the last. Each
        image walks its own noise, drawn from --seed and its file name (bridge.image_seed), as the
        Translator's: its outputs do not depend on the batch, the order or the other images, and equal
        the Translator's for that file and seed."""
        seeds = [bridge.image_seed(self.sampling_seed, path) for path in self.image_paths]
        outputs = bridge.walk_each(nets.G, self.real_A, self.steps, self.tau, self.code_width, seeds)
        for k, output in enumerate(outputs, start=1):
            setattr(self, f"fake_{k}", output)
        self.fake_B = outputs[-1]

    # ------------------------------------------------------------------ training
    def draw(self) -> tuple[int, GlobalBatchNoise]:
        """This step's t (one for the global batch) and the noise source of its walks."""
        local = self.real_A.shape[0]
        t = int(torch.randint(self.steps, (1,), generator=self.bridge_rng))
        return t, GlobalBatchNoise(self.bridge_rng, distributed.global_batch_positions(local),
                                   local * distributed.world_size())

    def optimize_parameters(self, step: TrainingStep) -> None:
        if self.real_A2 is None:  # (train.py has checked the first batch: here for a model driven from Python)
            raise UserError(f"{second_input_refusal(self.opt)}.")
        nets = step.nets
        flipped = bool(torch.rand((), generator=self.patch_rng) < 0.5) if self.opt.flip_equivariance else False
        t, source = self.draw()
        self.time_index = torch.full((self.real_A.shape[0],), t, dtype=torch.long, device=self.device)
        with torch.no_grad(), self.autocast():  # the states at step t, walked without gradient
            walked = [self.real_A, self.real_A2] + ([self.real_B] if self.opt.nce_idt else [])
            states = [bridge.walk(nets.G, x, self.steps, self.tau, self.code_width, source, t)[1] for x in walked]
        self.real_A_noisy, self.real_A_noisy2 = states[0], states[1]
        local = self.real_A.shape[0]
        codes, codes_idt, codes2 = (source.codes(local, self.code_width, t).to(self.device, self.dtype)
                                    for _ in range(3))
        with self.autocast():
            realt = torch.cat((self.real_A_noisy, states[2])) if self.opt.nce_idt else self.real_A_noisy
            both = torch.cat((codes, codes_idt)) if self.opt.nce_idt else codes
            times = torch.cat((self.time_index, self.time_index)) if self.opt.nce_idt else self.time_index
            fake = nets.G(torch.flip(realt, [3]) if flipped else realt, times, both)
            self.fake_B = fake[:self.real_A.shape[0]]
            self.idt_B = fake[self.real_A.shape[0]:] if self.opt.nce_idt else None
            self.fake_B2 = nets.G(self.real_A_noisy2, self.time_index, codes2)
        self.source = source  # PatchNCE's codes, one per call as UNSB draws them
        self.loss_D = self.discriminator_loss(step)
        step.update_weights(self.optimizer_D, self.loss_D)
        self.loss_E = self.energy_loss(step)
        step.update_weights(self.optimizer_E, self.loss_E)
        with step.frozen("D", "E") as (netD, netE):
            self.loss_G = self.generator_loss(nets, netD, netE, flipped)
            step.update_weights(self.optimizer_G, self.loss_G)

    def discriminator_loss(self, step: TrainingStep) -> torch.Tensor:
        """D at step t: real B is real, G's output fake (detached)."""
        with self.autocast():
            self.loss_D_fake = self.criterionGAN(step.nets.D(self.fake_B.detach(), self.time_index), False)
            self.loss_D_real = self.criterionGAN(step.nets.D(self.real_B, self.time_index), True)
            return (self.loss_D_fake + self.loss_D_real) * 0.5

    def pair_energies(self, netE, fake: torch.Tensor, fake2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(E of each (x_t, G(x_t)) pair with itself: its mean over the global batch's energies, and the
        log-sum-exp of E of each pair against the second input's pair over every energy of the global batch)."""
        pair = torch.cat([self.real_A_noisy, fake], dim=1)
        pair2 = torch.cat([self.real_A_noisy2, fake2], dim=1)
        own = netE(pair, self.time_index, pair).mean()
        against = distributed.all_gather_with_gradient(netE(pair, self.time_index, pair2).reshape(-1))
        return own, torch.logsumexp(against, dim=0)

    def energy_loss(self, step: TrainingStep) -> torch.Tensor:
        """E's loss (UNSB's compute_E_loss): -E(own pairs) + logsumexp + logsumexp^2, on detached outputs."""
        with self.autocast():
            own, spread = self.pair_energies(step.nets.E, self.fake_B.detach(), self.fake_B2.detach())
            return -own + spread + spread ** 2

    def generator_loss(self, nets: NetworkViews, netD, netE, flipped: bool) -> torch.Tensor:
        """G's loss: fool D, the SB loss (weighted by how many steps remain), PatchNCE (UNSB's compute_G_loss)."""
        opt = self.opt
        with self.autocast():
            self.loss_G_GAN = (self.criterionGAN(netD(self.fake_B, self.time_index), True, for_discriminator=False)
                               * opt.lambda_GAN) if opt.lambda_GAN > 0 else 0.0
            self.loss_SB = 0.0
            if opt.lambda_SB > 0:
                own, spread = self.pair_energies(netE, self.fake_B, self.fake_B2)
                remaining = (self.steps - int(self.time_index[0])) / self.steps
                self.loss_SB = -remaining * self.tau * (own - spread) \
                    + self.tau * torch.mean((self.real_A_noisy - self.fake_B) ** 2)
            self.loss_NCE = self.nce_loss(nets, self.real_A, self.fake_B, flipped) if opt.lambda_NCE > 0 else 0.0
            if opt.nce_idt and opt.lambda_NCE > 0:
                self.loss_NCE_Y = self.nce_loss(nets, self.real_B, self.idt_B, flipped)
                loss_NCE_both = (self.loss_NCE + self.loss_NCE_Y) * 0.5
            else:
                self.loss_NCE_Y, loss_NCE_both = 0.0, self.loss_NCE
            # UNSB's PatchNCE already carries --lambda_NCE (CUT's does); its G loss weighs it again
            return self.loss_G_GAN + opt.lambda_SB * self.loss_SB + opt.lambda_NCE * loss_NCE_both

    def nce_loss(self, nets: NetworkViews, source: torch.Tensor, output: torch.Tensor, flipped: bool) -> torch.Tensor:
        """CUT's PatchNCE, G's features taken at step 0 with one fresh code per image for both the
        output and its source (UNSB's calculate_NCE_loss)."""
        self.nce_code = self.source.codes(source.shape[0], self.code_width, 0).to(self.device, self.dtype)
        return super().nce_loss(nets, source, output, flipped)

    def generator_features(self, nets: NetworkViews, x: torch.Tensor) -> list[torch.Tensor]:
        """G's features at --nce_layers at step 0 with the current PatchNCE code."""
        zero = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
        return nets.G(x, zero, self.nce_code[:x.shape[0]], self.nce_layers, encode_only=True)

    def data_dependent_initialize(self, first_batch: dict) -> None:
        """netF's MLPs sized by G's features (CUT's), read with a zero code. A dataset of one's own that
        declares `gives_second_input` but whose first batch has none is refused here, before anything is
        written."""
        if self.real_A2 is None:  # `setup` has passed the first batch to set_input
            raise UserError(f"{second_input_refusal(self.opt)} (its first batch holds {', '.join(first_batch)}).")
        self.nce_code = torch.zeros(1, self.code_width, device=self.device, dtype=self.dtype)
        super().data_dependent_initialize(first_batch)


def second_input_refusal(opt) -> str:
    """Why --dataset_mode cannot train --model sb: its items carry no second input image."""
    side = "A2" if opt.direction == "AtoB" else "B2"
    return (f"--model sb trains on a second, independent input image per sample ({side}), which --dataset_mode "
            f"{opt.dataset_mode} does not load; use --dataset_mode unaligned (it loads one with --second_input, "
            f"which --model sb sets)")
