"""pix2pix (Isola et al.): a conditional GAN for paired images, G(A) judged together with A, plus L1."""
from __future__ import annotations

import torch

from models import networks
from models.base_model import BaseModel
from util import distributed


class Pix2PixModel(BaseModel):
    """Default: U-Net 256 generator, 70x70 PatchGAN on concat(A, B), batch norm, vanilla GAN loss."""

    @staticmethod
    def modify_commandline_options(parser, is_train: bool = True):
        parser.set_defaults(norm="batch", netG="unet_256", dataset_mode="aligned")
        if is_train:
            parser.set_defaults(pool_size=0, gan_mode="vanilla")
            parser.add_argument("--lambda_L1", type=float, default=100.0, help="weight for L1 loss")
        return parser

    def __init__(self, opt, ctx, seed: int = 0):
        super().__init__(opt, ctx)
        self.loss_names = ["G_GAN", "G_L1", "D_real", "D_fake"]
        self.visual_names = ["real_A", "fake_B", "real_B"]
        self.model_names = ["G", "D"] if self.isTrain else ["G"]
        self.netG = networks.define_G(opt.input_nc, opt.output_nc, opt.ngf, opt.netG, opt.norm,
                                      not opt.no_dropout, opt.init_type, opt.init_gain).to(self.device)
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

    def backward_D(self) -> None:
        with self.autocast():
            fake_AB = torch.cat((self.real_A, self.fake_B), 1)
            pred_fake = self.netD(fake_AB.detach())
            self.loss_D_fake = self.criterionGAN(pred_fake, False)
            real_AB = torch.cat((self.real_A, self.real_B), 1)
            pred_real = self.netD(real_AB)
            self.loss_D_real = self.criterionGAN(pred_real, True)
            self.loss_D = (self.loss_D_fake + self.loss_D_real) * 0.5
        if self.opt.gan_mode == "wgangp":
            penalty, _ = networks.cal_gradient_penalty(distributed.unwrap(self.netD), real_AB, fake_AB.detach())
            self.loss_D = self.loss_D + penalty
        self.backward(self.loss_D)

    def backward_G(self) -> None:
        with self.autocast():
            fake_AB = torch.cat((self.real_A, self.fake_B), 1)
            # D judges G's output through the unwrapped module: D's weights get no gradient in this
            # step, and a DDP-wrapped D would wait forever for gradients that never come.
            pred_fake = distributed.unwrap(self.netD)(fake_AB)
            self.loss_G_GAN = self.criterionGAN(pred_fake, True)
            self.loss_G_L1 = self.criterionL1(self.fake_B, self.real_B) * self.opt.lambda_L1
            self.loss_G = self.loss_G_GAN + self.loss_G_L1
        self.backward(self.loss_G)

    def optimize_parameters(self) -> None:
        with self.autocast():
            self.forward()
        self.set_requires_grad(self.netD, True)
        self.optimizer_D.zero_grad(set_to_none=True)
        self.backward_D()
        self.step(self.optimizer_D)
        self.set_requires_grad(self.netD, False)
        self.optimizer_G.zero_grad(set_to_none=True)
        self.backward_G()
        self.step(self.optimizer_G)
        self.end_iteration()
