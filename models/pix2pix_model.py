"""pix2pix (Isola et al.): a conditional GAN for paired images, G(A) judged together with A, plus L1."""
from __future__ import annotations

import torch

from models import networks
from models.base_model import BaseModel
from util.flag_types import non_negative_float
from util import distributed


class Pix2PixModel(BaseModel):
    """Default: U-Net 256 generator, 70x70 PatchGAN on concat(A, B), batch norm, vanilla GAN loss."""

    visual_sides = {"real_A": "A", "fake_B": "B", "real_B": "B"}
    translators = ("G",)  # one way only: the trained direction
    input_visual = "real_A"

    @classmethod
    def scored_pairs(cls, paired: bool) -> dict[str, tuple[str, str | None]]:
        """G(A) against B: paired by L1/PSNR/SSIM, unpaired by FID_B/KID_B."""
        return {"" if paired else "B": ("fake_B", "real_B")}

    @staticmethod
    def modify_commandline_options(parser, is_train: bool = True):
        parser.set_defaults(norm="batch", netG="unet_256", dataset_mode="aligned")
        if is_train:
            parser.set_defaults(pool_size=0, gan_mode="vanilla")
            parser.add_argument("--lambda_L1", type=non_negative_float, default=100.0, help="weight for L1 loss")
        return parser

    def __init__(self, opt, ctx):
        super().__init__(opt, ctx)
        self.loss_names = ["G_GAN", "G_L1", "D_real", "D_fake"]
        self.visual_names = ["real_A", "fake_B", "real_B"]
        self.model_names = ["G", "D"] if self.isTrain else ["G"]
        self.netG = networks.define_G(opt.input_nc, opt.output_nc, opt.ngf, opt.netG, opt.norm,
                                      not opt.no_dropout, opt.init_type, opt.init_gain,
                                      upsample=opt.upsample).to(self.device)
        if self.isTrain:
            self.netD = networks.define_D(opt.input_nc + opt.output_nc, opt.ndf, opt.netD, opt.n_layers_D,
                                          opt.norm, opt.init_type, opt.init_gain).to(self.device)
            self.criterionGAN = networks.GANLoss(opt.gan_mode).to(self.device)
            self.criterionL1 = torch.nn.L1Loss()
            self.optimizer_G = self.make_adam(self.netG.parameters())
            self.optimizer_D = self.make_adam(self.netD.parameters())
            self.optimizers = [self.optimizer_G, self.optimizer_D]

    def set_input(self, input: dict) -> None:
        self.real_A, self.real_B, self.image_paths = self.paired_input(input)

    def forward(self) -> None:
        self.fake_B = self.netG(self.real_A)

    def discriminator_loss(self) -> torch.Tensor:
        """D's loss: (A, real B) pairs are real, (A, G(A)) pairs fake (detached: D's step does not train G).
        With --diff_augment each pair goes through one transform, the same for both its halves."""
        with self.autocast():
            fake_AB = torch.cat(self.diff_augment(self.real_A, self.fake_B), 1)
            pred_fake = self.netD(fake_AB.detach())
            self.loss_D_fake = self.criterionGAN(pred_fake, False)
            real_AB = torch.cat(self.diff_augment(self.real_A, self.real_B), 1)
            pred_real = self.netD(real_AB)
            self.diff_augment.observe_real(pred_real)  # --ada_target: is D overconfident on reals?
            self.loss_D_real = self.criterionGAN(pred_real, True)
            loss_D = (self.loss_D_fake + self.loss_D_real) * 0.5
        if self.opt.gan_mode == "wgangp":
            # Double backward: through the plain module, neither compiled nor DDP-wrapped.
            penalty, _ = networks.cal_gradient_penalty(distributed.unwrap(self.netD), real_AB, fake_AB.detach())
            loss_D = loss_D + penalty
        return loss_D

    def generator_loss(self, netD) -> torch.Tensor:
        """G's loss: D should take (A, G(A)) for real, and G(A) should be close to B (L1)."""
        with self.autocast():
            fake_AB = torch.cat(self.diff_augment(self.real_A, self.fake_B), 1)
            self.loss_G_GAN = self.criterionGAN(netD(fake_AB), True, for_discriminator=False)
            self.loss_G_L1 = self.criterionL1(self.fake_B, self.real_B) * self.opt.lambda_L1
            return self.loss_G_GAN + self.loss_G_L1

    def optimize_parameters(self) -> None:
        with self.autocast():
            self.forward()
        self.loss_D = self.discriminator_loss()
        self.update_weights(self.optimizer_D, self.loss_D)
        with self.frozen(self.netD) as netD:  # G's step: D judges only
            self.loss_G = self.generator_loss(netD)
            self.update_weights(self.optimizer_G, self.loss_G)
