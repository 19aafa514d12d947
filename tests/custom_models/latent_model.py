"""A model with many answers per input, existing only in the test suite
(`--model custom_models.latent_model --netG custom_networks.latent_net`): three trained networks,
a generator G(A, z) taking a latent code, an encoder E(B) -> z and a discriminator D.

Training, per image: the code E encodes from the real B reconstructs B through G (L1); a random code
drawn per global sample gives an output D judges (GAN loss), from which E must recover the code
(latent regression, L1). The random codes come from a seeded stream the same on every rank, drawn
for the whole global batch, so that two processes train what one does with both halves. At test
time `forward` uses the code E encodes from B ("encoded"), or the codes given by `set_latent`.
"""
from __future__ import annotations

import itertools

import torch
from torch import nn

from models import networks
from models.base_model import BaseModel
from util import distributed


class Encoder(nn.Module):
    """B -> a code of --nz numbers (convolutions, global average pooling, a linear layer)."""

    def __init__(self, input_nc: int, nz: int, width: int) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(input_nc, width, 4, stride=2, padding=1), nn.LeakyReLU(0.2, True),
                                      nn.Conv2d(width, 2 * width, 4, stride=2, padding=1), nn.LeakyReLU(0.2, True),
                                      nn.AdaptiveAvgPool2d(1))
        self.code = nn.Linear(2 * width, nz)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.code(self.features(x).flatten(1))


class LatentModel(BaseModel):
    visual_sides = {"real_A": "A", "fake_B": "B", "real_B": "B"}
    translators = ("G",)
    input_visual = "real_A"
    network_roles = {"G": "generator", "E": "encoder", "D": "discriminator"}
    # the visual each code makes (test.py --n_samples writes one per code)
    sample_visuals = ("fake_B",)

    @classmethod
    def scored_pairs(cls, paired: bool) -> dict[str, tuple[str, str | None]]:
        return {"": ("fake_B", "real_B")} if paired else {"": ("fake_B", None)}

    @staticmethod
    def modify_commandline_options(parser, is_train: bool = True):
        parser.set_defaults(dataset_mode="aligned", netG="custom_networks.latent_net", norm="instance")
        return parser

    def __init__(self, opt, ctx, seed: int = 0):
        super().__init__(opt, ctx)
        self.loss_names = ["G_L1", "G_GAN", "z_L1", "D"] if self.isTrain else []
        self.visual_names = ["real_A", "fake_B", "real_B"]
        self.model_names = ["G", "E", "D"] if self.isTrain else ["G", "E"]
        self.nz = networks.family_of(opt.netG).latent_size(opt)
        self.netG = networks.build_generator(opt, opt.input_nc, opt.output_nc).to(self.device)
        self.netE = Encoder(opt.output_nc, self.nz, opt.ngf)
        networks.init_weights(self.netE, opt.init_type, opt.init_gain)
        self.netE = self.netE.to(self.device)
        self.codes: torch.Tensor | None = None  # set_latent's, for the next forward
        if self.isTrain:
            self.netD = networks.build_discriminator(opt, opt.output_nc).to(self.device)
            self.criterionGAN = networks.GANLoss(opt.gan_mode).to(self.device)
            self.optimizer_G = self.make_adam(itertools.chain(self.netG.parameters(), self.netE.parameters()))
            self.optimizer_D = self.make_adam(self.netD.parameters())
            self.optimizers = [self.optimizer_G, self.optimizer_D]
            self.code_rng = torch.Generator().manual_seed(seed * 104729 + 3)

    def latent_size(self) -> int:
        return self.nz

    def set_latent(self, codes: torch.Tensor | None) -> None:
        """The codes (one row per image of the batch) the next `forward` uses; None: E's encoding of B."""
        self.codes = None if codes is None else codes.to(self.device, self.dtype)

    def set_input(self, input: dict) -> None:
        self.real_A, self.real_B, self.image_paths = self.paired_input(input)

    def forward(self, nets) -> None:
        codes = self.codes if self.codes is not None else nets.E(self.real_B)
        self.fake_B = nets.G(self.real_A, codes)

    def random_codes(self, count: int) -> torch.Tensor:
        """This rank's rows of codes drawn for the whole global batch, image by image."""
        drawn = torch.randn(count * distributed.world_size(), self.nz, generator=self.code_rng, dtype=torch.float64)
        return drawn[distributed.global_batch_positions(count)].to(self.device, self.dtype)

    def optimize_parameters(self, step) -> None:
        random = self.random_codes(self.real_A.shape[0])
        nets = step.nets
        with self.autocast():
            self.fake_B = nets.G(self.real_A, nets.E(self.real_B))
            fake_random = nets.G(self.real_A, random)
            self.loss_D = (self.criterionGAN(nets.D(self.real_B), True)
                           + self.criterionGAN(nets.D(fake_random.detach()), False)) * 0.5
        step.update_weights(self.optimizer_D, self.loss_D)
        with step.frozen("D") as netD:  # G and E's step: D judges only
            with self.autocast():
                self.loss_G_L1 = nn.functional.l1_loss(self.fake_B, self.real_B)
                self.loss_G_GAN = self.criterionGAN(netD(fake_random), True, for_discriminator=False)
                self.loss_z_L1 = nn.functional.l1_loss(nets.E(fake_random), random)
            step.update_weights(self.optimizer_G, self.loss_G_L1 + self.loss_G_GAN + self.loss_z_L1)

    def shared_training_state(self) -> dict:
        return {**super().shared_training_state(), "code_rng": self.code_rng.get_state()}

    def load_shared_training_state(self, state: dict) -> None:
        super().load_shared_training_state(state)
        self.code_rng.set_state(state["code_rng"])
