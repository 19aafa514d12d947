"""BicycleGAN (Zhu et al., NeurIPS 2017; junyanz/BicycleGAN): many answers per input for paired data.

A generator G(A, z) takes a latent code z beside the image, and an encoder E(B) -> (mu, logvar)
maps a target image to the Gaussian its code is drawn from. Each batch is split in two halves (the
reason --batch_size must be even), trained by two objectives at once:
  - cVAE-GAN on the first ("encoded") half: z drawn from E(B), G(A, z) must reconstruct B (L1,
    --lambda_L1) and fool D (--lambda_GAN), with a KL term pulling E's Gaussians to N(0, I)
    (--lambda_kl);
  - cLR-GAN: a random z ~ N(0, I) with the same A, G(A, z) must fool D2 (judged against the second
    half's real B, --lambda_GAN2), and E must give z back from it (L1 on mu, --lambda_z; that loss
    trains G only, E's weights held).
G and E take one step, then D and D2 (on the outputs made before G's step), as in BicycleGAN's code.

Under DDP the codes are drawn per global pair from a stream seeded by the run's seed (the same on
every rank), the halves are the global batch's halves (the sampler deals samples round-robin, so
each rank's first half is its share of the global first half), and the two losses BicycleGAN sums
over images (KL, and the GAN loss of a one-scale D) are scaled by the number of processes: two
processes train what one does with the global batch. A batch smaller than --batch_size (an
epoch's last) is not trained on, as in BicycleGAN's code.

With --accum_steps K each micro-batch is split into its halves, the codes of the whole step are
drawn at its first micro-batch (micro-batch k takes the k-th block), and the summed losses are
scaled by K too: K micro-batches train what one batch of K x --batch_size does whose encoded half
holds the micro-batches' encoded halves, in order (tests/test_bicyclegan.py checks it in float64).
A step whose last micro-batch is incomplete is not taken.

At test time `forward` makes "fake_B" from the code E encodes from B (the "encoded" output; with
--no_encode from the prior's mean, z = 0), or from the codes `set_latent` gave (test.py
--n_samples, the Translator).
"""
from __future__ import annotations

import itertools

import torch
from torch import nn

from data import spatial_dims
from models import networks
from models.base_model import BaseModel
from models.losses.gan import GANLoss
from models.network_views import NetworkViews
from models.networks import encoder, patchgan_bicycle, unet
from models.networks.unet_latent import BASIC_UPSAMPLING, NONLINEARITIES, UPSAMPLINGS, WHERE_ADD
from models.training.step import TrainingStep
from util import distributed
from util.errors import UserError
from util.flag_types import Bounded, network_width, non_negative_float


class BicycleGANModel(BaseModel):
    visual_sides = {"real_A": "A", "real_B": "B", "fake_B": "B", "real_A_encoded": "A", "real_B_encoded": "B",
                    "fake_B_encoded": "B", "fake_B_random": "B"}
    network_roles = {"G": "generator", "E": "encoder", "D": "discriminator", "D2": "discriminator"}
    network_calls = {"netG": networks.NetworkCall(networks.GENERATOR, (networks.LATENT_CODE,)),  # G(A, z)
                     "netE": networks.NetworkCall(networks.ENCODER),  # E(B): the code
                     "netD": networks.NetworkCall(networks.DISCRIMINATOR),
                     "netD2": networks.NetworkCall(networks.DISCRIMINATOR)}
    translators = ("G",)
    accumulation_phases = ("optimize_parameters",)  # G and E step before D, on outputs made before either step
    input_visual = "real_A"
    # G learns from these; --lambda_kl alone trains E only (E's codes towards N(0, I))
    loss_weights = ("lambda_L1", "lambda_GAN", "lambda_GAN2", "lambda_z")
    built_with_weight = {"netD": "lambda_GAN", "netD2": "lambda_GAN2"}  # a weight of 0 leaves D or D2 out
    sample_visuals = ("fake_B",)  # test.py --n_samples: fake_B_random0, 1, ...
    skips_incomplete_batches = True  # an encoded and a random half of --batch_size each: as in BicycleGAN's code

    @classmethod
    def scored_pairs(cls, paired: bool) -> dict[str, tuple[str, str | None]]:
        """The encoded output against B (paired), or by FID/KID against real B."""
        return {"" if paired else "B": ("fake_B", "real_B" if paired else None)}

    @staticmethod
    def modify_commandline_options(parser, is_train: bool = True):
        """BicycleGAN's flags and defaults (docs/bicyclegan.md has the table of its meanings)."""
        parser.set_defaults(dataset_mode="aligned", netG=unet.PIX2PIX_DEFAULT, netD=patchgan_bicycle.DEFAULT,
                            norm="instance", init_type="xavier", no_dropout=True, upsample=BASIC_UPSAMPLING)
        # BicycleGAN's --upsample means basic|bilinear, not the resnet/unet families' transpose|resize
        parser._option_string_actions["--upsample"].choices = UPSAMPLINGS
        parser.add_argument("--use_dropout", dest="no_dropout", action="store_false", on_resume="architecture",
                            help="dropout in the generator (BicycleGAN's flag; off by default under this model)")
        parser.add_argument("--nz", type=Bounded(int, low=0, high=1024, name="nz"), default=8, on_resume="architecture",
                            help="numbers in the latent code")
        parser.add_argument("--where_add", type=str, default="all", choices=(*WHERE_ADD, "middle"),
                            on_resume="architecture", help="where G takes the code: input (with the image only) or "
                                                           "all (at every level on the way down)")
        parser.add_argument("--netE", type=networks.family_name_type(networks.ENCODER), default=encoder.DEFAULT,
                            on_resume="architecture", help=networks.family_help(networks.ENCODER))
        parser.add_argument("--nef", type=network_width, default=64, on_resume="architecture",
                            help="# of encoder filters in the first conv layer")
        parser.add_argument("--nl", type=str, default="relu", choices=NONLINEARITIES, on_resume="architecture",
                            help="the activation of G's way up")
        parser.add_argument("--netD2",type=networks.family_name_type(networks.DISCRIMINATOR),
                            default=patchgan_bicycle.DEFAULT,on_resume="architecture",
                            help="the discriminator of the random-code outputs (cLR-GAN)")
        parser.add_argument("--conditional_D", action="store_true", on_resume="architecture",
                            help="the discriminators judge (A, B) pairs, not B alone")
        if is_train:
            parser.set_defaults(gan_mode="lsgan", pool_size=0, batch_size=2)
            parser.add_argument("--use_same_D", action="store_true", on_resume="architecture",
                                help="one discriminator judges both halves")
            parser.add_argument("--lambda_L1", type=non_negative_float, default=10.0, on_resume="noted",
                                help="weight of |B - G(A, E(B))|")
            parser.add_argument("--lambda_GAN", type=non_negative_float, default=1.0, on_resume="architecture",
                                help="weight of D's loss on G(A, E(B)); 0: no D")
            parser.add_argument("--lambda_GAN2", type=non_negative_float, default=1.0, on_resume="architecture",
                                help="weight of D2's loss on G(A, random z); 0: no D2")
            parser.add_argument("--lambda_z", type=non_negative_float, default=0.5, on_resume="noted",
                                help="weight of |E(G(A, z)) - z|")
            parser.add_argument("--lambda_kl", type=non_negative_float, default=0.01, on_resume="noted",
                                help="weight of the KL loss")
        else:
            parser.set_defaults(phase="val", n_samples=5)
            parser.add_argument("--no_encode", action="store_true", on_resume="silent",
                                help="do not encode B: the first output uses the prior's mean code (z = 0)")
        return parser

    @classmethod
    def check_flags(cls, opt) -> tuple[str, str] | None:
        """What BicycleGAN cannot train or test with, named when the options are parsed."""
        return refusal(opt)

    def __init__(self, opt, ctx, seed: int = 0):
        super().__init__(opt, ctx)
        refused = refusal(opt)  # options not parsed by the option classes (a model built from Python) too
        if refused:
            raise UserError(refused[1])
        self.nz = opt.nz
        self.encodes = opt.isTrain or not opt.no_encode
        self.netG = networks.build_generator(opt, opt.input_nc, opt.output_nc).to(self.device)
        self.model_names = ["G"]
        if self.encodes:
            self.netE = build_encoder(opt).to(self.device)
            self.model_names.append("E")
        self.codes: torch.Tensor | None = None  # set_latent's, for the next forward
        if not self.isTrain:
            self.loss_names, self.visual_names = [], ["real_A", "real_B", "fake_B"]
            return
        self.loss_names = ["G_GAN", "D", "G_GAN2", "D2", "G_L1", "z_L1", "kl"]
        self.visual_names = ["real_A_encoded", "real_B_encoded", "fake_B_random", "fake_B_encoded"]
        d_input_nc = opt.input_nc + opt.output_nc if opt.conditional_D else opt.output_nc
        self.judges_encoded = opt.lambda_GAN > 0
        self.judges_random = opt.lambda_GAN2 > 0
        self.criterionGAN = GANLoss(opt.gan_mode).to(self.device)
        self.optimizer_G = self.make_adam(itertools.chain(self.netG.parameters(), self.netE.parameters()))
        self.optimizers = [self.optimizer_G]
        if self.judges_encoded:
            self.netD = networks.build_discriminator(opt, d_input_nc).to(self.device)
            self.model_names.append("D")
            self.optimizer_D = self.make_adam(self.netD.parameters())
            self.optimizers.append(self.optimizer_D)
        if self.judges_random and not opt.use_same_D:
            second = networks.with_flags(opt, netD=opt.netD2)
            self.netD2 = networks.build_discriminator(second, d_input_nc).to(self.device)
            self.model_names.append("D2")
            self.optimizer_D2 = self.make_adam(self.netD2.parameters())
            self.optimizers.append(self.optimizer_D2)
        # the codes of each step, drawn for the whole global batch (the same stream on every rank)
        self.code_rng = torch.Generator().manual_seed(seed * 7919 + 17)
        self.step_codes: tuple[torch.Tensor, torch.Tensor] | None = None  # (eps, z) of the step under way

    # ------------------------------------------------------------------ inference
    def latent_size(self) -> int:
        return self.nz

    def set_latent(self, codes: torch.Tensor | None) -> None:
        """The codes (one row per image of the batch) the next `forward` uses; None: E's encoding of B."""
        self.codes = None if codes is None else codes.to(self.device, self.dtype)

    def set_input(self, input: dict) -> None:
        self.real_A, self.real_B, self.image_paths = self.paired_input(input)

    def forward(self, nets: NetworkViews) -> None:
        if self.codes is not None:
            codes = self.codes
        elif self.encodes:
            check_encoder_input(self.opt, self.real_B)
            codes, _ = nets.E(self.real_B)  # the mean of E's Gaussian
        else:
            codes = torch.zeros(self.real_A.shape[0], self.nz, device=self.device, dtype=self.dtype)
        self.fake_B = nets.G(self.real_A, codes)

    # ------------------------------------------------------------------ training
    def data_dependent_initialize(self, first_batch: dict) -> None:
        """Refuse an encoder or a second discriminator that cannot take the images (before anything is written)."""
        _, target, _ = self.paired_input(first_batch)
        check_encoder_input(self.opt, target)
        if "D2" in self.model_names:
            networks.family_of(self.opt.netD2, networks.DISCRIMINATOR).check_input_size(self.opt, *target.shape[2:])

    def draw_codes(self, step: TrainingStep, pairs: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(eps for the encoded half's reparameterisation, the random half's z): this rank's rows of
        the codes drawn for every pair of the global batch (of every micro-batch of the step, at its
        first: with --accum_steps, micro-batch k takes the k-th block)."""
        micro = step.micro
        index, count = (micro.index, micro.count) if micro is not None else (0, 1)
        block = pairs * distributed.world_size()
        if index == 0:
            self.step_codes = tuple(torch.randn(block * count, self.nz, generator=self.code_rng, dtype=torch.float64)
                                    for _ in range(2))
        rows = [row + index * block for row in distributed.global_batch_positions(pairs)]
        eps, random = self.step_codes
        return eps[rows].to(self.device, self.dtype), random[rows].to(self.device, self.dtype)

    def summed_loss_scale(self, step: TrainingStep) -> int:
        """The scale of a loss BicycleGAN sums over the images of a batch: the number of processes
        and micro-batches, so that each process's micro-batch sum adds up to the global step's."""
        return distributed.world_size() * (step.micro.count if step.micro is not None else 1)

    def adversarial_loss(self, step: TrainingStep, predictions, target_is_real: bool,
                         for_discriminator: bool = True) -> torch.Tensor:
        """BicycleGAN's GAN loss: the sum over D's scales of each scale's loss. With one scale its
        loss iterates the grid's images, so it sums them: scaled to the global batch's half."""
        if isinstance(predictions, (list, tuple)):
            return sum(self.criterionGAN(p, target_is_real, for_discriminator) for p in predictions)
        images = predictions.shape[0] * self.summed_loss_scale(step)
        return self.criterionGAN(predictions, target_is_real, for_discriminator) * images

    def encode_judging(self, step: TrainingStep, image: torch.Tensor) -> torch.Tensor:
        """E's mean code of `image` with E's weights held (its gradient reaches G only): E as the step
        runs it, called with detached copies of its weights."""
        encoder = step.module("E")
        held = {name: value.detach() for name, value in itertools.chain(encoder.named_parameters(),
                                                                        encoder.named_buffers())}
        return torch.func.functional_call(encoder, held, (image,))[0]

    def pairs_to_judge(self, fake: torch.Tensor, real: torch.Tensor, real_A_fake: torch.Tensor,
                       real_A_real: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.opt.conditional_D:
            return fake, real
        return torch.cat([real_A_fake, fake], 1), torch.cat([real_A_real, real], 1)

    def optimize_parameters(self, step: TrainingStep) -> None:
        count = self.real_A.shape[0]
        if count != self.opt.batch_size:  # an epoch's incomplete last batch: not trained on, as in BicycleGAN
            return  # (the last micro-batch of its step: no optimizer steps, the gradients are cleared at the next)
        half = count // 2
        self.real_A_encoded, self.real_B_encoded = self.real_A[:half], self.real_B[:half]
        real_A_random, real_B_random = self.real_A[half:], self.real_B[half:]
        eps, self.z_random = self.draw_codes(step, half)
        opt, nets = self.opt, step.nets
        with self.autocast():
            mu, logvar = nets.E(self.real_B_encoded)
            z_encoded = eps * torch.exp(0.5 * logvar) + mu
            self.fake_B_encoded = nets.G(self.real_A_encoded, z_encoded)
            self.fake_B_random = nets.G(self.real_A_encoded, self.z_random)
        fake_encoded, real_encoded = self.pairs_to_judge(self.fake_B_encoded, self.real_B_encoded,
                                                         self.real_A_encoded, self.real_A_encoded)
        fake_random, real_random = self.pairs_to_judge(self.fake_B_random, real_B_random,
                                                       self.real_A_encoded, real_A_random)
        judges = [name for name in ("D", "D2") if name in self.model_names]
        with step.frozen(*judges) if judges else _nothing() as held:  # G and E's step: D, D2 judge only
            held = dict(zip(judges, held if len(judges) > 1 else [held]))
            with self.autocast():
                self.loss_G_GAN = (self.adversarial_loss(step, held["D"](fake_encoded), True, False) * opt.lambda_GAN
                                   if self.judges_encoded else 0.0)
                self.loss_G_GAN2 = (self.adversarial_loss(step, held["D" if opt.use_same_D else "D2"](fake_random),
                                                          True, False) * opt.lambda_GAN2 if self.judges_random else 0.0)
                # KL(N(mu, sigma) || N(0, I)), summed over the images (of the global batch) and the code
                kl = torch.sum(1 + logvar - mu.pow(2) - logvar.exp()) * self.summed_loss_scale(step)
                self.loss_kl = kl * (-0.5 * opt.lambda_kl)
                self.loss_G_L1 = nn.functional.l1_loss(self.fake_B_encoded, self.real_B_encoded) * opt.lambda_L1
                self.loss_z_L1 = (nn.functional.l1_loss(self.encode_judging(step, self.fake_B_random), self.z_random)
                                  * opt.lambda_z if opt.lambda_z > 0 else 0.0)
                loss = self.loss_G_GAN + self.loss_G_GAN2 + self.loss_kl + self.loss_G_L1 + self.loss_z_L1
            step.update_weights(self.optimizer_G, loss)
        self.update_discriminators(step, fake_encoded.detach(), real_encoded, fake_random.detach(), real_random)

    def discriminator_loss(self, step: TrainingStep, netD: nn.Module, fake: torch.Tensor,
                           real: torch.Tensor) -> torch.Tensor:
        with self.autocast():
            return self.adversarial_loss(step, netD(fake), False) + self.adversarial_loss(step, netD(real), True)

    def update_discriminators(self, step: TrainingStep, fake_encoded, real_encoded, fake_random, real_random) -> None:
        """D on the encoded half (and, with --use_same_D, on the random half too), D2 on the random half."""
        self.loss_D = self.loss_D2 = 0.0
        nets = step.nets
        if self.judges_encoded:
            self.loss_D = self.discriminator_loss(step, nets.D, fake_encoded, real_encoded)
            loss = self.loss_D
            if self.opt.use_same_D and self.judges_random:
                self.loss_D2 = self.discriminator_loss(step, nets.D, fake_random, real_random)
                loss = loss + self.loss_D2
            step.update_weights(self.optimizer_D, loss)
        if self.judges_random and not self.opt.use_same_D:
            self.loss_D2 = self.discriminator_loss(step, nets.D2, fake_random, real_random)
            step.update_weights(self.optimizer_D2, self.loss_D2)

    def shared_training_state(self) -> dict:
        return {**super().shared_training_state(), "code_rng": self.code_rng.get_state()}

    def load_shared_training_state(self, state: dict) -> None:
        super().load_shared_training_state(state)
        self.code_rng.set_state(state["code_rng"])


class _nothing:
    """A stand-in for `frozen()` when no discriminator is trained (--lambda_GAN 0 --lambda_GAN2 0)."""

    def __enter__(self):
        return ()

    def __exit__(self, *exc) -> None:
        return None


def build_encoder(opt) -> nn.Module:
    """The --netE network encoding output_nc-channel images into --nz numbers, initialised."""
    net = networks.family_of(opt.netE, networks.ENCODER).build(opt, opt.output_nc, opt.nz)
    networks.init_weights(net, opt.init_type, opt.init_gain)
    return net


def check_encoder_input(opt, images: torch.Tensor) -> None:
    networks.family_of(opt.netE, networks.ENCODER).check_input_size(opt, *images.shape[2:])


def refusal(opt) -> tuple[str, str] | None:
    """(the flag, one paragraph) for the first value, or combination, BicycleGAN cannot train or test with."""
    if spatial_dims(opt) == 3:
        return "dataset_mode", (f"--dataset_mode {opt.dataset_mode} gives volumes, and BicycleGAN takes pictures: no "
                                f"3-D generator takes a latent code (docs/volumes.md, \"Not for volumes\"); for paired "
                                f"volumes use --model pix2pix.")
    if opt.nz == 0:
        return "nz", ("--nz 0: BicycleGAN's generator needs a latent code to give several answers per input; "
                      "pass --nz 8 (its default) or use --model pix2pix for one answer per input.")
    if opt.where_add == "middle":
        return "where_add", ("--where_add middle: BicycleGAN's code lists it but builds no such generator; choose "
                             "--where_add all (its default: the code joins every level) or input.")
    code = networks.family_of(opt.netG, networks.GENERATOR).latent_size(opt)  # 0: refused by `network_calls`
    if 0 < code != opt.nz:
        return "netG", (f"--netG {opt.netG} takes a latent code of {code} numbers, and BicycleGAN's generator is "
                        f"given --nz {opt.nz} (G(A, z)); pass --nz {code}, or a generator whose latent_size is --nz.")
    if not opt.isTrain:
        return None
    if opt.batch_size % 2:
        return "batch_size", (f"--batch_size {opt.batch_size}: BicycleGAN splits each batch into an encoded and a "
                              f"random half, so it must be even (per process under torchrun); pass --batch_size "
                              f"{opt.batch_size + 1}.")
    if opt.use_same_D and opt.lambda_GAN == 0 and opt.lambda_GAN2 > 0:
        return "use_same_D", ("--use_same_D with --lambda_GAN 0: the one discriminator of --use_same_D is D, the "
                              "encoded half's, and a GAN weight of 0 leaves D out, so nothing would judge the random "
                              "half; drop --use_same_D (D2 then judges the random half) or give --lambda_GAN a "
                              "weight above 0 (its default is 1).")
    if opt.lambda_GAN == 0 and opt.lambda_GAN2 == 0 and opt.diff_augment:  # (--ada_target is refused without it)
        return "diff_augment", (f"--diff_augment {opt.diff_augment} augments the discriminators' inputs, and "
                                f"--lambda_GAN 0 with --lambda_GAN2 0 builds neither D nor D2: drop --diff_augment"
                                f"{' and --ada_target' * (opt.ada_target > 0)}, or give D a weight: --lambda_GAN 1.")
    return None
