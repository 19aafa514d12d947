"""pix2pix (Isola et al.): a conditional GAN for paired images, G(A) judged together with A, plus L1.
With --lambda_GAN 0 no discriminator is built: G learns by L1 alone (the paper's L1-only baseline), what
restoration scored by MAE and PSNR wants (docs/volumes.md, "A restoration recipe")."""
from __future__ import annotations

import contextlib

import torch

from models import networks
from models.base_model import BaseModel
from models.losses import gan
from models.losses.gan import GANLoss
from models.losses.multiscale import MultiscaleGANLoss, feature_matching_loss
from models.network_views import NetworkViews
from models.networks import buffers_kept, unet
from models.training.step import TrainingStep
from util.flag_types import non_negative_float


class Pix2PixModel(BaseModel):
    """Default: U-Net 256 generator, 70x70 PatchGAN on concat(A, B), batch norm, vanilla GAN loss."""

    visual_sides = {"real_A": "A", "fake_B": "B", "real_B": "B"}
    network_roles = {"G": "generator", "D": "discriminator"}
    network_calls = {"netG": networks.NetworkCall(networks.GENERATOR),  # G(A)
                     "netD": networks.NetworkCall(networks.DISCRIMINATOR)}  # D(A, B) as one image of both
    translators = ("G",)  # one way only: the trained direction
    input_visual = "real_A"
    loss_weights = ("lambda_L1", "lambda_GAN")  # --lambda_feat needs --lambda_GAN above 0 (check_flags)
    built_with_weight = {"netD": "lambda_GAN"}  # no discriminator with --lambda_GAN 0 (`judged`)
    # --accum_steps (models/training/accumulation.py): G's loss judges with the D stepped before it, so D's
    # gradients are gathered over every micro-batch and D steps before G's pass begins.
    accumulation_phases = ("accumulate_D", "accumulate_G")

    @classmethod
    def scored_pairs(cls, paired: bool) -> dict[str, tuple[str, str | None]]:
        """G(A) against B: paired by L1/PSNR/SSIM, unpaired by FID_B/KID_B."""
        return {"" if paired else "B": ("fake_B", "real_B")}

    @staticmethod
    def modify_commandline_options(parser, is_train: bool = True):
        parser.set_defaults(norm="batch", netG=unet.PIX2PIX_DEFAULT, dataset_mode="aligned")
        if is_train:
            parser.set_defaults(pool_size=0, gan_mode="vanilla")
            parser.add_argument("--lambda_L1", type=non_negative_float, default=100.0, on_resume="noted",
                                help="weight for L1 loss")
            parser.add_argument("--lambda_GAN", type=non_negative_float, default=1.0, on_resume="architecture",
                                help="weight of D's judgement in G's loss; 0: no D, G learns by L1 alone")
            parser.add_argument("--lambda_feat", type=non_negative_float, default=0.0, on_resume="noted",
                                help="weight of pix2pixHD's discriminator feature-matching loss (L1 between D's "
                                     "intermediate features on the real and the generated pair, per scale; pix2pixHD "
                                     "uses 10 with --netD multiscale); 0: off")
        return parser

    @classmethod
    def check_flags(cls, opt) -> tuple[str, str] | None:
        """Flags that act on the discriminator, given with --lambda_GAN 0 (which builds none)."""
        if not opt.isTrain or opt.lambda_GAN > 0:
            return None
        for flag, value, acts_on in (("lambda_feat", opt.lambda_feat > 0, "matches the discriminator's features"),
                                     ("diff_augment", bool(opt.diff_augment), "augments the discriminator's inputs")):
            if value:
                # --ada_target tunes --diff_augment: dropping one without the other would be refused next
                also = " and --ada_target" if flag == "diff_augment" and opt.ada_target > 0 else ""
                return flag, (f"--{flag} {getattr(opt, flag)} {acts_on}, and --lambda_GAN 0 builds no "
                              f"discriminator: drop --{flag}{also}, or give D a weight, e.g. --lambda_GAN 1 (the "
                              f"default).")
        return None

    def __init__(self, opt, ctx):
        super().__init__(opt, ctx)
        self.judged = self.isTrain and opt.lambda_GAN > 0  # a discriminator is built and trained
        self.loss_names = ["G_GAN", "G_L1", "D_real", "D_fake"] if self.judged else ["G_L1"]
        if self.judged and opt.lambda_feat > 0:
            self.loss_names.append("G_feat")
        self.visual_names = ["real_A", "fake_B", "real_B"]
        self.model_names = ["G", "D"] if self.judged else ["G"]
        self.netG = networks.build_generator(opt, opt.input_nc, opt.output_nc).to(self.device)
        if self.isTrain:
            self.criterionL1 = torch.nn.L1Loss()
            self.optimizer_G = self.make_adam(self.netG.parameters())
            self.optimizers = [self.optimizer_G]
        if self.judged:
            self.netD = networks.build_discriminator(opt, opt.input_nc + opt.output_nc).to(self.device)
            # --netD multiscale predicts one grid per scale: the loss is their mean (models/losses/multiscale.py)
            self.criterionGAN = MultiscaleGANLoss(GANLoss(opt.gan_mode)).to(self.device)
            self.optimizer_D = self.make_adam(self.netD.parameters())
            self.optimizers.append(self.optimizer_D)

    def set_input(self, input: dict) -> None:
        self.real_A, self.real_B, self.image_paths = self.paired_input(input)

    def forward(self, nets: NetworkViews) -> None:
        self.fake_B = nets.G(self.real_A)

    def discriminator_loss(self, step: TrainingStep) -> torch.Tensor:
        """D's loss: (A, real B) pairs are real, (A, G(A)) pairs fake (detached: D's step does not train G).
        With --diff_augment each pair goes through one transform, the same for both its halves."""
        with self.autocast():
            fake_AB = torch.cat(self.diff_augment(self.real_A, self.fake_B), 1)
            pred_fake = step.nets.D(fake_AB.detach())
            self.loss_D_fake = self.criterionGAN(pred_fake, False)
            real_AB = torch.cat(self.diff_augment(self.real_A, self.real_B), 1)
            pred_real = step.nets.D(real_AB)
            self.diff_augment.observe_real(pred_real)  # --ada_target: is D overconfident on reals?
            self.loss_D_real = self.criterionGAN(pred_real, True)
            loss_D = (self.loss_D_fake + self.loss_D_real) * 0.5
        if self.opt.gan_mode == "wgangp":
            # Double backward: through D neither compiled nor DDP-wrapped (its synchronised twin under syncbatch).
            penalty, _ = gan.cal_gradient_penalty(step.module("D"), real_AB, fake_AB.detach())
            loss_D = loss_D + penalty
        return loss_D

    def generator_loss(self, netD) -> torch.Tensor:
        """G's loss: D should take (A, G(A)) for real, and G(A) should be close to B (L1); without D
        (--lambda_GAN 0) the L1 term alone."""
        with self.autocast():
            self.loss_G_L1 = self.criterionL1(self.fake_B, self.real_B) * self.opt.lambda_L1
            if not self.judged:
                return self.loss_G_L1
            # one transform for the pair and for the real pair feature matching compares it with
            real_A, fake_B, real_B = self.diff_augment(self.real_A, self.fake_B, self.real_B)
            fake_AB = torch.cat((real_A, fake_B), 1)
            if self.opt.lambda_feat > 0:  # D's prediction and its features from one pass over the fake pair
                pred_fake, loss_feat = feature_matching_loss(netD, fake_AB, torch.cat((real_A, real_B), 1))
                self.loss_G_feat = loss_feat * self.opt.lambda_feat
            else:
                pred_fake, self.loss_G_feat = netD(fake_AB), 0.0
            self.loss_G_GAN = self.criterionGAN(pred_fake, True, for_discriminator=False) * self.opt.lambda_GAN
            loss_G = self.loss_G_GAN + self.loss_G_L1
            return loss_G + self.loss_G_feat if self.opt.lambda_feat > 0 else loss_G

    def optimize_parameters(self, step: TrainingStep) -> None:
        with self.autocast():
            self.forward(step.nets)
        if self.judged:
            self.loss_D = self.discriminator_loss(step)
            step.update_weights(self.optimizer_D, self.loss_D)
        self.generator_step(step)

    def generator_step(self, step: TrainingStep) -> None:
        """G's step, judged by D (frozen: it judges only), or by L1 alone without one (--lambda_GAN 0)."""
        with step.frozen("D") if self.judged else contextlib.nullcontext() as netD:
            self.loss_G = self.generator_loss(netD)
            step.update_weights(self.optimizer_G, self.loss_G)

    def accumulate_D(self, step: TrainingStep) -> None:
        """--accum_steps, first phase, on one micro-batch: D's gradient. D judges G's output
        detached, so G runs without a graph here, and its batch-norm statistics are left to the
        second phase's pass over the same micro-batch (with the same dropout draws), as without
        accumulation G's one pass updates them once."""
        if not self.judged:
            return  # no D: the second phase is G's whole step
        with torch.no_grad(), buffers_kept(self.netG), self.autocast():
            self.forward(step.nets)
        self.loss_D = self.discriminator_loss(step)
        step.update_weights(self.optimizer_D, self.loss_D)

    def accumulate_G(self, step: TrainingStep) -> None:
        """Second phase, after D's step: G's gradient on one micro-batch, judged by the stepped D."""
        with self.autocast():
            self.forward(step.nets)
        self.generator_step(step)
