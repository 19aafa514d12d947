"""The adversarial losses: GANLoss for every --gan_mode, and WGAN-GP's gradient penalty."""
from __future__ import annotations

import torch
from torch import nn

from util import distributed
from util.errors import UserError

GAN_MODES = ("vanilla", "lsgan", "wgangp", "hinge")


class GANLoss(nn.Module):
    """The adversarial loss for `gan_mode` (lsgan: MSE, vanilla: BCE with logits, wgangp: mean,
    hinge: max(0, 1 -/+ D) for the discriminator and -D for the generator)."""

    def __init__(self, gan_mode: str, target_real_label: float = 1.0, target_fake_label: float = 0.0):
        super().__init__()
        self.register_buffer("real_label", torch.tensor(target_real_label))
        self.register_buffer("fake_label", torch.tensor(target_fake_label))
        self.gan_mode = gan_mode
        if gan_mode == "lsgan":
            self.loss = nn.MSELoss()
        elif gan_mode == "vanilla":
            self.loss = nn.BCEWithLogitsLoss()
        elif gan_mode in ("wgangp", "hinge"):
            self.loss = None
        else:
            raise UserError(f"--gan_mode {gan_mode} is unknown; choose one of {', '.join(GAN_MODES)}.")

    def get_target_tensor(self, prediction: torch.Tensor, target_is_real: bool) -> torch.Tensor:
        target = self.real_label if target_is_real else self.fake_label
        return target.to(prediction.dtype).expand_as(prediction)

    def forward(self, prediction: torch.Tensor, target_is_real: bool, for_discriminator: bool = True) -> torch.Tensor:
        """The loss of `prediction` (D's output) for the label `target_is_real`. Only the hinge loss
        tells the two players apart: the generator's step passes `for_discriminator=False`."""
        if self.gan_mode == "hinge":
            if not for_discriminator:  # the generator raises D's score without a margin (Lim & Ye 2017)
                return -prediction.mean()
            return torch.relu(1 - prediction).mean() if target_is_real else torch.relu(1 + prediction).mean()
        if self.gan_mode == "wgangp":
            return -prediction.mean() if target_is_real else prediction.mean()
        return self.loss(prediction, self.get_target_tensor(prediction, target_is_real))


def cal_gradient_penalty(netD: nn.Module, real_data: torch.Tensor, fake_data: torch.Tensor,
                         device: torch.device | str | None = None, type: str = "mixed", constant: float = 1.0,
                         lambda_gp: float = 10.0):
    """WGAN-GP gradient penalty; returns (penalty, gradients) as the reference does, with its arguments.
    `device` is there for the reference's callers only: the penalty is computed where `real_data` is."""
    if lambda_gp <= 0.0:
        return 0.0, None
    if type == "real":
        interpolates = real_data
    elif type == "fake":
        interpolates = fake_data
    elif type == "mixed":
        alpha = _interpolation_weights(real_data.shape[0], real_data.device)
        alpha = alpha.expand(real_data.shape[0], real_data.nelement() // real_data.shape[0])
        alpha = alpha.contiguous().view(*real_data.shape)
        interpolates = alpha * real_data + (1 - alpha) * fake_data
    else:
        raise ValueError(f"gradient penalty type {type} is not one of real, fake, mixed")
    interpolates = interpolates.detach().requires_grad_(True)
    disc_interpolates = netD(interpolates)
    gradients = torch.autograd.grad(outputs=disc_interpolates, inputs=interpolates,
                                    grad_outputs=torch.ones_like(disc_interpolates),
                                    create_graph=True, retain_graph=True, only_inputs=True)[0]
    gradients = gradients.reshape(real_data.size(0), -1)  # channels-last gradients (--channels_last) cannot be viewed
    penalty = (((gradients + 1e-16).norm(2, dim=1) - constant) ** 2).mean() * lambda_gp
    return penalty, gradients


def _interpolation_weights(count: int, device: torch.device) -> torch.Tensor:
    """`count` x 1 uniform weights for this process's samples, the ones one process with the whole
    global batch would draw for them: under DDP rank 0's draws, shared, each rank taking its own."""
    world = distributed.world_size()
    weights = distributed.broadcast_tensor(torch.rand(count * world, 1, device=device))
    return weights[distributed.global_batch_positions(count)]

