"""The training step written plainly: the benchmark's yardstick for "plain fp32 eager is not slower
than a straightforward implementation of the same networks".

The same networks (models.networks) and losses, torch.optim.Adam, the reference implementation's
order of forward passes, losses and updates, and nothing else: no model class (only its static
set_requires_grad), no autocast or gradient-scaler calls, no image pool (the benchmark's steps are
fewer than the pool's 50 images, during which the reference's pool returns the images it is
given), no loss bookkeeping.
dev/bench_worker.py times it beside the project's `model.optimize_parameters()`.
"""
from __future__ import annotations

import itertools

import torch
from torch import nn

from models import networks
from models.base_model import BaseModel


def _adam(params, opt) -> torch.optim.Adam:
    return torch.optim.Adam(params, lr=opt.lr, betas=(opt.beta1, opt.beta2))


class StraightforwardCycleGAN:
    def __init__(self, opt, device: torch.device):
        def generator() -> nn.Module:
            return networks.define_G(opt.input_nc, opt.output_nc, opt.ngf, opt.netG, opt.norm, not opt.no_dropout,
                                     opt.init_type, opt.init_gain).to(device)

        def discriminator(channels: int) -> nn.Module:
            return networks.define_D(channels, opt.ndf, opt.netD, opt.n_layers_D, opt.norm, opt.init_type,
                                     opt.init_gain).to(device)

        self.opt, self.device = opt, device
        self.G_A, self.G_B = generator(), generator()
        self.D_A, self.D_B = discriminator(opt.output_nc), discriminator(opt.input_nc)
        self.gan_loss = networks.GANLoss(opt.gan_mode).to(device)
        self.l1 = nn.L1Loss()
        self.optimizer_G = _adam(itertools.chain(self.G_A.parameters(), self.G_B.parameters()), opt)
        self.optimizer_D = _adam(itertools.chain(self.D_A.parameters(), self.D_B.parameters()), opt)
        self.losses: dict[str, torch.Tensor] = {}

    def set_input(self, batch: dict) -> None:
        self.real_A, self.real_B = batch["A"].to(self.device), batch["B"].to(self.device)

    def optimize_parameters(self) -> None:
        opt, real_A, real_B = self.opt, self.real_A, self.real_B
        fake_B = self.G_A(real_A)
        rec_A = self.G_B(fake_B)
        fake_A = self.G_B(real_B)
        rec_B = self.G_A(fake_A)

        BaseModel.set_requires_grad([self.D_A, self.D_B], False)
        self.optimizer_G.zero_grad()
        identity = opt.lambda_identity
        loss_idt_A = self.l1(self.G_A(real_B), real_B) * opt.lambda_B * identity
        loss_idt_B = self.l1(self.G_B(real_A), real_A) * opt.lambda_A * identity
        loss_G_A = self.gan_loss(self.D_A(fake_B), True)
        loss_G_B = self.gan_loss(self.D_B(fake_A), True)
        loss_cycle_A = self.l1(rec_A, real_A) * opt.lambda_A
        loss_cycle_B = self.l1(rec_B, real_B) * opt.lambda_B
        loss_G = loss_G_A + loss_G_B + loss_cycle_A + loss_cycle_B + loss_idt_A + loss_idt_B
        loss_G.backward()
        self.optimizer_G.step()

        BaseModel.set_requires_grad([self.D_A, self.D_B], True)
        self.optimizer_D.zero_grad()
        loss_D_A = (self.gan_loss(self.D_A(real_B), True) + self.gan_loss(self.D_A(fake_B.detach()), False)) * 0.5
        loss_D_A.backward()
        loss_D_B = (self.gan_loss(self.D_B(real_A), True) + self.gan_loss(self.D_B(fake_A.detach()), False)) * 0.5
        loss_D_B.backward()
        self.optimizer_D.step()
        self.losses = {"G": loss_G, "D_A": loss_D_A, "D_B": loss_D_B}

    def get_current_losses(self) -> dict[str, float]:
        return {name: float(value) for name, value in self.losses.items()}


class StraightforwardPix2Pix:
    def __init__(self, opt, device: torch.device):
        self.opt, self.device = opt, device
        self.G = networks.define_G(opt.input_nc, opt.output_nc, opt.ngf, opt.netG, opt.norm, not opt.no_dropout,
                                   opt.init_type, opt.init_gain).to(device)
        self.D = networks.define_D(opt.input_nc + opt.output_nc, opt.ndf, opt.netD, opt.n_layers_D, opt.norm,
                                   opt.init_type, opt.init_gain).to(device)
        self.gan_loss = networks.GANLoss(opt.gan_mode).to(device)
        self.l1 = nn.L1Loss()
        self.optimizer_G = _adam(self.G.parameters(), opt)
        self.optimizer_D = _adam(self.D.parameters(), opt)
        self.losses: dict[str, torch.Tensor] = {}

    def set_input(self, batch: dict) -> None:
        a_to_b = self.opt.direction == "AtoB"
        self.real_A = batch["A" if a_to_b else "B"].to(self.device)
        self.real_B = batch["B" if a_to_b else "A"].to(self.device)

    def optimize_parameters(self) -> None:
        real_A, real_B = self.real_A, self.real_B
        fake_B = self.G(real_A)

        BaseModel.set_requires_grad(self.D, True)
        self.optimizer_D.zero_grad()
        fake_AB = torch.cat((real_A, fake_B), 1)
        loss_D_fake = self.gan_loss(self.D(fake_AB.detach()), False)
        loss_D_real = self.gan_loss(self.D(torch.cat((real_A, real_B), 1)), True)
        loss_D = (loss_D_fake + loss_D_real) * 0.5
        loss_D.backward()
        self.optimizer_D.step()

        BaseModel.set_requires_grad(self.D, False)
        self.optimizer_G.zero_grad()
        loss_G = self.gan_loss(self.D(fake_AB), True) + self.l1(fake_B, real_B) * self.opt.lambda_L1
        loss_G.backward()
        self.optimizer_G.step()
        self.losses = {"G": loss_G, "D": loss_D}

    def get_current_losses(self) -> dict[str, float]:
        return {name: float(value) for name, value in self.losses.items()}


def build_straightforward(opt, device: torch.device):
    """The plain training step for opt.model (cycle_gan or pix2pix)."""
    return {"cycle_gan": StraightforwardCycleGAN, "pix2pix": StraightforwardPix2Pix}[opt.model](opt, device)
