"""CycleGAN (Zhu et al.): unpaired translation with two generators and cycle consistency.

G_A: A -> B, G_B: B -> A, D_A judges B-domain images, D_B judges A-domain images.
Losses: GAN losses, cycle losses ||G_B(G_A(A)) - A|| and ||G_A(G_B(B)) - B||, and optional
identity losses ||G_A(B) - B|| and ||G_B(A) - A|| weighted by lambda_identity.
"""
from __future__ import annotations

import itertools

import torch

from models import networks
from models.base_model import BaseModel
from models.losses import gan
from models.losses.gan import GANLoss
from models.losses.multiscale import MultiscaleGANLoss
from models.network_views import NetworkViews
from models.training.step import TrainingStep
from util.errors import UserError
from util.flag_types import non_negative_float
from util.image_pool import ImagePool


class CycleGANModel(BaseModel):
    # idt_A = G_A(B) stays in domain B, idt_B = G_B(A) in A
    visual_sides = {"real_A": "A", "fake_B": "B", "rec_A": "A", "idt_B": "A",
                    "real_B": "B", "fake_A": "A", "rec_B": "B", "idt_A": "B"}
    network_roles = {"G_A": "generator", "G_B": "generator", "D_A": "discriminator", "D_B": "discriminator"}
    # --netG builds both generators, --netD both discriminators; each called on images alone
    network_calls = {"netG": networks.NetworkCall(networks.GENERATOR),
                     "netD": networks.NetworkCall(networks.DISCRIMINATOR)}
    translators = ("G_A", "G_B")  # G_A translates as trained, G_B back
    input_visual = "real_A"
    # --accum_steps (models/training/accumulation.py): one phase. Every loss of the step uses the weights
    # from before it (D's losses take the fakes computed before G's update), so each micro-batch
    # adds to G's and D's gradients in one pass, and the image pools see the fakes in the order
    # of one large batch.
    accumulation_phases = ("optimize_parameters",)

    @classmethod
    def scored_pairs(cls, paired: bool) -> dict[str, tuple[str, str | None]]:
        """Paired data: G_A's outputs against their targets; unpaired: both directions, FID_B and FID_A."""
        if paired:
            return {"": ("fake_B", "real_B")}
        return {"B": ("fake_B", "real_B"), "A": ("fake_A", "real_A")}

    @classmethod
    def check_flags(cls, opt) -> tuple[str, str] | None:
        """The identity loss with images of two channel counts: known from the flags, refused when parsed."""
        if opt.isTrain and opt.lambda_identity > 0.0 and opt.input_nc != opt.output_nc:
            return "lambda_identity", (f"the identity loss (--lambda_identity {opt.lambda_identity:g}) compares G_A(B) "
                                       f"with B, so it needs --input_nc == --output_nc (got {opt.input_nc} and "
                                       f"{opt.output_nc}); pass --lambda_identity 0.")
        return None

    @staticmethod
    def modify_commandline_options(parser, is_train: bool = True):
        parser.set_defaults(no_dropout=True)  # default CycleGAN did not use dropout
        if is_train:
            parser.add_argument("--lambda_A", type=non_negative_float, default=10.0, on_resume="noted",
                                help="weight for cycle loss (A -> B -> A)")
            parser.add_argument("--lambda_B", type=non_negative_float, default=10.0, on_resume="noted",
                                help="weight for cycle loss (B -> A -> B)")
            parser.add_argument("--lambda_identity", type=non_negative_float, default=0.5, on_resume="noted",
                                help="use identity mapping. Setting lambda_identity other than 0 has an effect of "
                                     "scaling the weight of the identity mapping loss. For example, if the weight of "
                                     "the identity loss should be 10 times smaller than the weight of the "
                                     "reconstruction loss, please set lambda_identity = 0.1")
        return parser

    def __init__(self, opt, ctx, seed: int = 0):
        super().__init__(opt, ctx)
        self.loss_names = ["D_A", "G_A", "cycle_A", "idt_A", "D_B", "G_B", "cycle_B", "idt_B"]
        visual_names_A = ["real_A", "fake_B", "rec_A"]
        visual_names_B = ["real_B", "fake_A", "rec_B"]
        if self.isTrain and opt.lambda_identity > 0.0:
            visual_names_A.append("idt_B")
            visual_names_B.append("idt_A")
        self.visual_names = visual_names_A + visual_names_B
        self.model_names = ["G_A", "G_B", "D_A", "D_B"] if self.isTrain else ["G_A", "G_B"]

        def generator(in_nc: int, out_nc: int):
            return networks.build_generator(opt, in_nc, out_nc).to(self.device)

        def discriminator(in_nc: int):
            return networks.build_discriminator(opt, in_nc).to(self.device)

        self.netG_A = generator(opt.input_nc, opt.output_nc)
        self.netG_B = generator(opt.output_nc, opt.input_nc)
        if self.isTrain:
            self.netD_A = discriminator(opt.output_nc)
            self.netD_B = discriminator(opt.input_nc)
            refused = self.check_flags(opt)  # the options refuse it first: here for a model built from Python
            if refused:
                raise UserError(refused[1])
            self.fake_A_pool = ImagePool(opt.pool_size, seed=seed * 2 + 1)
            self.fake_B_pool = ImagePool(opt.pool_size, seed=seed * 2 + 2)
            # --netD multiscale predicts one grid per scale: the loss is their mean (models/losses/multiscale.py)
            self.criterionGAN = MultiscaleGANLoss(GANLoss(opt.gan_mode)).to(self.device)
            self.criterionCycle = torch.nn.L1Loss()
            self.criterionIdt = torch.nn.L1Loss()
            self.optimizer_G = self.make_adam(itertools.chain(self.netG_A.parameters(), self.netG_B.parameters()))
            self.optimizer_D = self.make_adam(itertools.chain(self.netD_A.parameters(), self.netD_B.parameters()))
            self.optimizers = [self.optimizer_G, self.optimizer_D]

    # The image pools are global under DDP (util/image_pool.py): identical on every rank, so they are
    # saved once with the shared state and a run resumes exactly with any number of processes.
    def shared_training_state(self) -> dict:
        state = super().shared_training_state()
        if self.isTrain:
            state["image_pools"] = {"fake_A_pool": self.fake_A_pool.state_dict(),
                                    "fake_B_pool": self.fake_B_pool.state_dict()}
        return state

    def load_shared_training_state(self, state: dict) -> None:
        super().load_shared_training_state(state)
        self._load_pools(state.get("image_pools", {}))

    def load_rank_training_state(self, state: dict) -> None:
        super().load_rank_training_state(state)
        self._load_pools(state)  # training states written before the pools became global kept them per rank

    def _load_pools(self, state: dict) -> None:
        if self.isTrain and "fake_A_pool" in state:
            self.fake_A_pool.load_state_dict(state["fake_A_pool"], self.device)
            self.fake_B_pool.load_state_dict(state["fake_B_pool"], self.device)

    def set_input(self, input: dict) -> None:
        self.real_A, self.real_B, self.image_paths = self.paired_input(input)

    def forward(self, nets: NetworkViews) -> None:
        self.fake_B = nets.G_A(self.real_A)  # G_A(A)
        self.rec_A = nets.G_B(self.fake_B)   # G_B(G_A(A))
        self.fake_A = nets.G_B(self.real_B)  # G_B(B)
        self.rec_B = nets.G_A(self.fake_A)   # G_A(G_B(B))

    def discriminator_loss(self, step: TrainingStep, name: str, real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
        """Real-vs-fake loss of discriminator `name` (fake detached: D's step does not train G), on
        images through --diff_augment (the identity without)."""
        netD = step.nets[name]
        real, fake = self.diff_augment(real), self.diff_augment(fake.detach())
        with self.autocast():
            pred_real = netD(real)
            self.diff_augment.observe_real(pred_real)  # --ada_target: is D overconfident on reals?
            loss_D_real = self.criterionGAN(pred_real, True)
            loss_D_fake = self.criterionGAN(netD(fake), False)
            loss_D = (loss_D_real + loss_D_fake) * 0.5
        if self.opt.gan_mode == "wgangp":
            # Double backward: through D neither compiled nor DDP-wrapped (its synchronised twin under syncbatch).
            penalty, _ = gan.cal_gradient_penalty(step.module(name), real, fake.detach())
            loss_D = loss_D + penalty
        return loss_D

    def generator_loss(self, nets: NetworkViews, netD_A, netD_B) -> torch.Tensor:
        """The generators' loss: fool both discriminators, reconstruct, and (optionally) keep
        images of the target domain unchanged."""
        lambda_idt = self.opt.lambda_identity
        lambda_A = self.opt.lambda_A
        lambda_B = self.opt.lambda_B
        with self.autocast():
            if lambda_idt > 0:
                self.idt_A = nets.G_A(self.real_B)
                self.loss_idt_A = self.criterionIdt(self.idt_A, self.real_B) * lambda_B * lambda_idt
                self.idt_B = nets.G_B(self.real_A)
                self.loss_idt_B = self.criterionIdt(self.idt_B, self.real_A) * lambda_A * lambda_idt
            else:
                self.loss_idt_A = 0
                self.loss_idt_B = 0
            self.loss_G_A = self.criterionGAN(netD_A(self.diff_augment(self.fake_B)), True, for_discriminator=False)
            self.loss_G_B = self.criterionGAN(netD_B(self.diff_augment(self.fake_A)), True, for_discriminator=False)
            self.loss_cycle_A = self.criterionCycle(self.rec_A, self.real_A) * lambda_A
            self.loss_cycle_B = self.criterionCycle(self.rec_B, self.real_B) * lambda_B
            return (self.loss_G_A + self.loss_G_B + self.loss_cycle_A + self.loss_cycle_B
                    + self.loss_idt_A + self.loss_idt_B)

    def optimize_parameters(self, step: TrainingStep) -> None:
        with self.autocast():
            self.forward(step.nets)
        with step.frozen("D_A", "D_B") as (netD_A, netD_B):  # G's step: D judges only
            self.loss_G = self.generator_loss(step.nets, netD_A, netD_B)
            step.update_weights(self.optimizer_G, self.loss_G)
        self.loss_D_A = self.discriminator_loss(step, "D_A", self.real_B, self.fake_B_pool.query(self.fake_B))
        self.loss_D_B = self.discriminator_loss(step, "D_B", self.real_A, self.fake_A_pool.query(self.fake_A))
        step.update_weights(self.optimizer_D, self.loss_D_A + self.loss_D_B)
