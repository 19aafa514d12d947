"""The contract every model follows, and what they share: setup, schedules, reporting.

A model's attributes hold the networks it built (`netG`, `netD_A`, ...): plain modules, always the
same objects. How they are called is the caller's: the training engine (models/training/engine.py)
hands `optimize_parameters` a `TrainingStep` whose `nets` are DDP-wrapped and compiled as the run
needs, inference (models/inference/application.py) hands `forward` its `NetworkViews`. Saving and loading is
models/model_state.py.

A model is one file: a BaseModel subclass in models/<name>_model.py named <Name>Model (found by
`--model <name>`, models/__init__.py), or in a module of your own (`--model mypackage.my_model`).
It
  - names its networks in `model_names` (attribute `net<name>`), its losses in `loss_names`
    (attribute `loss_<name>`) and its images in `visual_names`;
  - implements `set_input(batch)`, `forward(nets)` (calling each network as `nets.<name>(...)`)
    and, when training, `optimize_parameters(step)`, which runs `self.forward(step.nets)`, computes
    each loss under `self.autocast()` and applies it with `step.update_weights(optimizer, loss)` -
    the one place where gradients are made, scaled for fp16, accumulated, stepped and cleared - and
    judges generator outputs through `with step.frozen("D") as netD:`;
  - calls its discriminators on `self.diff_augment(x)` (a conditional pair: one call with both
    halves) in both players' steps, and reports D's verdicts on real images to
    `self.diff_augment.observe_real(pred)` (--diff_augment, --ada_target; the identity when off);
    --D_spectral reaches every network of role discriminator by itself;
  - may add flags in `modify_commandline_options(parser, is_train)` and refuse them in `check_flags(opt)`;
  - to train with --accum_steps, lists in `accumulation_phases` the methods (each taking the step)
    that make one step, split where a loss needs an optimizer step taken before it in the same step
    (models/training/accumulation.py; the training engine runs them over the micro-batches);
  - may take a `seed` in its constructor (the run's seed, the same on every rank) for its own streams;
  - may build more of itself from the first training batch in `data_dependent_initialize(batch)`
    (e.g. a projection head sized by the generator's features, and its optimizer): `setup` calls
    it before it makes the schedulers and loads weights or a training state, so what it adds is
    scheduled, resumed and synchronised like the rest;
  - declares once, on the class, what the code around it must know (nothing elsewhere lists models or
    visual names): the "facts a model declares" below, each with what it means (docs/extending.md has
    them in a table), e.g. `network_roles` (generator, encoder, discriminator or head for each network),
    `network_calls` (what it gives each flag's network, checked at parse time), `translators`.
Checkpoints are one plain state_dict per network (`<epoch>_net_<name>.pth`, the reference's format).
"""
from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections import OrderedDict
from typing import ClassVar, Mapping

import torch
from torch import nn

from data import find_dataset_using_name
from models import networks, precision
from models.batch_entries import paired_batch
from models.losses.diff_augment import DiscriminatorAugment
from models.model_state import ModelState
from models.network_views import NetworkViews
from models.training import schedules
from models.training.step import TrainingStep, set_requires_grad
from util import distributed
from util.console import print0
from util.distributed import DistContext
from util.errors import UserError

# What a network does in a model (`BaseModel.network_roles`). Generators translate; an encoder is
# trained beside them and used at inference too (e.g. it encodes a reference image into a latent
# code); both are what --ema_decay averages. Discriminators judge (--D_spectral, --diff_augment);
# a head is trained for a loss only (e.g. CUT's projection netF).
GENERATOR, ENCODER, DISCRIMINATOR, HEAD = "generator", "encoder", "discriminator", "head"
ROLES = (GENERATOR, ENCODER, DISCRIMINATOR, HEAD)
INFERENCE_ROLES = (GENERATOR, ENCODER)


class BaseModel(ModelState, ABC):
    """Base class of all models (see the module docstring for the contract)."""

    # ------------------------------------------------------------------ facts a model declares
    # The dataset domain ("A" or "B") whose files each visual's images belong to, taking A as the
    # model's input side (`paired_input`); visuals left out get no full-precision output.
    visual_sides: ClassVar[Mapping[str, str]] = {}
    # What each network in `model_names` does (ROLES): e.g. {"G": "generator", "D": "discriminator"}.
    # EMA, --D_spectral, tiling and export ask it; an instance may refine it from its options.
    network_roles: ClassVar[Mapping[str, str]] = {}
    # flag ("netG") -> how it calls that network (models.network_refusal checks the family); {}: only dimensions
    network_calls: ClassVar[Mapping[str, networks.NetworkCall]] = {}
    # The networks that translate: the first in the direction the run trained in, the second (if
    # any) back, from output_nc to input_nc channels. An instance may refine it from its options.
    translators: ClassVar[tuple[str, ...]] = ("G",)
    # Why models/inference/translator.py (images in, images out) cannot use them, if it cannot; completes
    # "<run folder> holds a --model <name> run, ...".
    translator_refusal: ClassVar[str] = ""
    # The visual holding the model's input, scored against the target as the do-nothing baseline.
    input_visual: ClassVar[str | None] = None
    # test.py --results_layout original: the folder of a visual whose original names it otherwise (default: its name)
    result_folders: ClassVar[Mapping[str, str]] = {}
    # The training flags weighing every loss the generator learns from: all 0 would train nothing, so the options
    # refuse it, suggesting the first. A model with a loss no flag weighs (CycleGAN's adversarial one): none.
    loss_weights: ClassVar[tuple[str, ...]] = ()
    built_with_weight: ClassVar[Mapping[str, str]] = {}  # network flag -> the weight whose 0 leaves it out, unchecked
    # --accum_steps: the methods that make one training step, in order, each over every micro-batch
    # before the next begins (models/training/accumulation.py); none: the model cannot accumulate.
    accumulation_phases: ClassVar[tuple[str, ...]] = ()
    # Many answers per input: the visuals that change with the latent code (test.py --n_samples
    # writes them once per code); a model with codes also overrides `latent_size` and `set_latent`.
    sample_visuals: ClassVar[tuple[str, ...]] = ()
    # A model that trains on full batches only (BicycleGAN's halves) skips an epoch's incomplete last one.
    skips_incomplete_batches: ClassVar[bool] = False
    # test.py runs the generators in eval mode only with --eval (the reference's); True: always (UNSB's test).
    evaluates_in_eval_mode: ClassVar[bool] = False
    # True: the decay epochs (after --n_epochs) load training images whole at --crop_size (CUT's, UNSB's recipe)
    loads_at_crop_size_in_decay: ClassVar[bool] = False

    @classmethod
    def check_flags(cls, opt) -> tuple[str, str] | None:
        """(the flag, why) when the parsed `opt` holds a value or combination this model cannot work with."""
        return None

    @classmethod
    def visual_domains(cls, opt) -> dict[str, str]:
        """The dataset domain ("A" or "B") of each visual, whose files' format and value range
        test.py's full-precision outputs take: `visual_sides` read with --direction (with BtoA the
        model's input side A is the dataset's domain B)."""
        swap = {"A": "B", "B": "A"} if opt.direction == "BtoA" else {"A": "A", "B": "B"}
        return {visual: swap[side] for visual, side in cls.visual_sides.items()}

    @classmethod
    def scored_pairs(cls, paired: bool) -> dict[str, tuple[str, str | None]]:
        """The outputs validation and test.py score, by metric suffix: name -> (output visual,
        target visual, or None for an output scored against real images only). With `paired` data
        the output is compared with its target (L1, PSNR, SSIM), otherwise by FID/KID with the
        target domain's real images; the suffix "" keys the metrics plainly (L1, FID), "A" as
        FID_A. test.py takes the first pair as "the outputs". Default: nothing is scored."""
        return {}

    def __init__(self, opt, ctx: DistContext | None = None):  # no ctx (the reference's models): current_context()
        ctx = ctx or distributed.current_context()
        self.opt = opt
        self.ctx = ctx
        self.isTrain = opt.isTrain
        self.device = ctx.device
        precision.check_amp(opt, self.device)
        self.dtype, self.memory_format = precision.weight_dtype(opt), precision.memory_format(opt)
        self.save_dir = os.path.join(opt.checkpoints_dir, opt.name)
        self.loss_names: list[str] = []
        self.model_names: list[str] = []
        self.visual_names: list[str] = []
        self.optimizers: list[torch.optim.Optimizer] = []
        self.schedulers: list = []
        self.image_paths: list[str] = []
        # --diff_augment: every discriminator input goes through it (`netD(self.diff_augment(x))`);
        # the identity when off. Seeded in `setup`, saved with the training state.
        self.diff_augment = DiscriminatorAugment.from_options(opt) if self.isTrain else DiscriminatorAugment()

    @staticmethod
    def modify_commandline_options(parser, is_train: bool):
        """Add model-specific flags or change defaults; return the parser."""
        return parser

    @abstractmethod
    def set_input(self, input: dict) -> None:
        """Unpack a batch from the data loader onto the device."""

    @abstractmethod
    def forward(self, nets: NetworkViews) -> None:
        """Run the generator(s), each called as `nets.<name>(...)` (the networks as the caller runs
        them); called by `optimize_parameters(step)` with `step.nets` and by `test(nets)`."""

    def optimize_parameters(self, step: TrainingStep) -> None:
        """One training step on the current input: losses, each applied with `step.update_weights`."""
        raise NotImplementedError(f"{type(self).__name__} cannot be trained")

    def _check_reads(self, batch: dict) -> None:
        """`set_input` on the first batch before training: a model (a user's, or a built-in one fed by a
        user's dataset) reading an entry the dataset's items lack is named in one paragraph, not a KeyError."""
        try:
            self.set_input(batch)
        except KeyError as err:
            if not err.args or err.args[0] in batch:  # another dict's key: the model's own error, as it is
                raise
            dataset = find_dataset_using_name(self.opt.dataset_mode).__name__
            raise UserError(f"--model {self.opt.model} ({type(self).__name__}) reads {err} from each batch, but "
                            f"--dataset_mode {self.opt.dataset_mode} ({dataset}) gives items with "
                            f"{', '.join(map(repr, batch))}; return that entry from the dataset's __getitem__ or "
                            f"read one it gives in the model's set_input (docs/extending.md).") from None

    def data_dependent_initialize(self, first_batch: dict) -> None:
        """Build what depends on the data from the first batch (a collated batch as `set_input`
        takes), e.g. networks sized by the generator's features and their optimizers, adding them to
        `model_names` and `optimizers`. Called by `setup` before the schedulers are made, weights or
        a training state are loaded and networks are DDP-wrapped; nothing by default."""

    def latent_size(self) -> int:  # numbers in the latent code of this model's translation (0: the image alone)
        return 0

    def set_latent(self, codes: torch.Tensor | None) -> None:
        """The latent codes (batch x `latent_size`) the next `forward` translates with; None: the
        model's own choice again (e.g. a code encoded from a reference image)."""
        raise NotImplementedError(f"{type(self).__name__} takes no latent code")

    def to_device(self, tensor: torch.Tensor) -> torch.Tensor:  # on the model's device, precision, memory format
        return tensor.to(self.device, self.dtype, non_blocking=True).contiguous(memory_format=self.memory_format)

    def paired_input(self, input: dict) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
        """(model input, model target, input paths) of a batch, following --direction."""
        source, target, paths = paired_batch(input, self.opt, self.opt.model)  # a bad dataset named, not a KeyError
        return self.to_device(source), self.to_device(target), paths

    def make_adam(self, parameters) -> torch.optim.Adam:
        """The reference's optimizer (Adam, --lr, betas (--beta1, --beta2)), updating every weight with one call
        of each operator (foreach: the reference's default on a GPU, bit for bit its per-weight loop's
        arithmetic, with a few operators per step instead of a few per weight). --fused_adam picks PyTorch's
        fused kernel: faster, but rounding differently (~1e-8), so opt-in. Measurements: docs/benchmarks.md."""
        fused = bool(self.opt.fused_adam)
        return torch.optim.Adam(parameters, lr=self.opt.lr, betas=(self.opt.beta1, self.opt.beta2),
                                foreach=None if fused else True, fused=True if fused else None)

    def autocast(self):
        """The context in which forward passes and losses run (bf16/fp16 autocast with --amp)."""
        return precision.autocast(self.device, self.opt.amp)

    # ------------------------------------------------------------------ setup
    def named_networks(self) -> dict[str, nn.Module]:
        return {name: getattr(self, "net" + name) for name in self.model_names}

    def networks_with_role(self, *roles: str) -> dict[str, nn.Module]:
        """The networks of `model_names` whose declared role (`network_roles`) is one of `roles`."""
        return {name: net for name, net in self.named_networks().items() if self.network_roles[name] in roles}

    def generators(self) -> dict[str, nn.Module]:
        """The networks used at inference (generators and encoders): what --ema_decay averages."""
        return self.networks_with_role(*INFERENCE_ROLES)

    def check_network_roles(self) -> None:
        """A UserError naming each network in `model_names` without a declared role, or with another word."""
        undeclared = [name for name in self.model_names if self.network_roles.get(name) not in ROLES]
        if undeclared:
            raise UserError(f"--model {self.opt.model}: {type(self).__name__} declares no role for its network(s) "
                            f"{', '.join(undeclared)}; give each name in model_names a role in network_roles, one of "
                            f"{', '.join(ROLES)} (e.g. network_roles = {{'G': 'generator', 'D': "
                            f"'discriminator'}}; docs/extending.md).")

    def setup(self, opt, resume_state: dict | None = None, rank_state: dict | None = None,
              first_batch: dict | None = None) -> None:
        """Let the model see `first_batch` (`data_dependent_initialize`; train.py passes it), create
        schedulers; load weights (testing, --continue_train) or the model's part of a whole training
        state (exact resume: `resume_state` from models.training.training_state, `rank_state` this
        rank's part; the training engine loads its own part). The networks stay the model's plain
        modules: whoever runs them wraps them (DDP, compiled, in windows) in objects of its own."""
        self.check_network_roles()
        self._add_stabilisers()
        self._set_precision(self.named_networks())
        if first_batch is not None:
            self._check_reads(first_batch)
            known = set(self.model_names)
            self.data_dependent_initialize(first_batch)
            self.check_network_roles()  # of what it added too
            self._set_precision({name: net for name, net in self.named_networks().items() if name not in known})
        if self.isTrain:  # --scale_lr's rates; a continued run's linear schedule from the epoch the run started at
            self.schedulers = schedules.make_schedulers(self.optimizers, opt, self.ctx.world_size, resume_state)
        if resume_state is not None:
            self.load_shared_training_state(resume_state["model"])
            # changed --lr, --n_epochs, global batch under --scale_lr ...: the loaded states would keep the old ones
            schedules.follow_changed_flags(self.optimizers, self.schedulers, opt, self.ctx.world_size, resume_state)
            if rank_state is not None:
                self.load_rank_training_state(rank_state["model"])
        elif not self.isTrain or opt.continue_train:
            load_suffix = f"iter_{opt.load_iter}" if opt.load_iter > 0 else opt.epoch
            self.load_networks(load_suffix)
        self.print_networks(opt.verbose)

    def _set_precision(self, nets: dict[str, nn.Module]) -> None:
        """The networks' dtype and memory format, in place (the optimizers keep the same parameter
        objects). What --channels_last, --deterministic and --checkpoint_activations need of the layers,
        the networks were built with (models/networks/layers.py)."""
        for net in nets.values():
            net.to(dtype=self.dtype, memory_format=self.memory_format)

    def _add_stabilisers(self) -> None:
        """--D_spectral on every discriminator (by its declared role) and the first draw of --diff_augment, for
        every model alike. Both draw from the global generator, seeded the same on every rank here, and only when
        asked for. The discriminators `networks.build_discriminator` builds have their spectral norm from the
        start; one a model built otherwise gets it here."""
        if self.isTrain and self.opt.D_spectral:
            for net in self.networks_with_role(DISCRIMINATOR).values():
                if not networks.has_spectral_norm(net):
                    networks.apply_spectral_norm(net)
        if self.diff_augment.enabled:
            self.diff_augment.seed(int(torch.randint(2**62, ())))

    def eval(self) -> None:
        for net in self.named_networks().values():
            net.eval()

    def test(self, nets: NetworkViews) -> None:
        """Forward without gradients, with the networks as the caller runs them (models/inference/application.py)."""
        with torch.no_grad():
            self.forward(nets)
            self.compute_visuals()

    def compute_visuals(self) -> None:
        """Compute extra images for display (e.g. Lab to RGB); nothing by default."""

    def get_image_paths(self) -> list[str]:
        return self.image_paths

    # ------------------------------------------------------------------ schedules and reporting
    def update_learning_rate(self, plateau_metric: float | None = None) -> tuple[float, float]:
        """Step every scheduler once (at the end of an epoch, on every rank); returns (old lr, new lr).
        The plateau policy lowers the rate when `plateau_metric` (lower is better: the validation
        metric, or the epoch's mean generator loss; `TrainingEngine.update_learning_rate` picks) stops
        falling, and waits while it is None (an epoch without validation)."""
        old_lr = self.optimizers[0].param_groups[0]["lr"]
        for scheduler in self.schedulers:
            if self.opt.lr_policy != "plateau":
                scheduler.step()
            elif plateau_metric is not None:
                scheduler.step(plateau_metric)
        return old_lr, self.optimizers[0].param_groups[0]["lr"]

    def current_lr(self) -> float:
        return self.optimizers[0].param_groups[0]["lr"] if self.optimizers else 0.0

    def get_current_visuals(self) -> OrderedDict:
        return OrderedDict((name, getattr(self, name)) for name in self.visual_names)

    def get_current_losses(self) -> OrderedDict:
        """Each loss as a float, averaged over all processes (one host sync, only when asked)."""
        values = [getattr(self, "loss_" + name) for name in self.loss_names]
        stacked = torch.stack([torch.as_tensor(v, dtype=torch.float32, device=self.device).detach()
                               for v in values])
        stacked = distributed.reduce_mean(stacked).cpu().tolist()
        losses = OrderedDict(zip(self.loss_names, stacked))
        if self.diff_augment.enabled and self.diff_augment.ada_target > 0:  # --ada_target's p, to watch it adapt
            losses["ada_p"] = self.diff_augment.p
        return losses

    def print_networks(self, verbose: bool) -> None:
        print0("---------- Networks initialized -------------")
        for name, net in self.named_networks().items():
            if verbose:
                print0(net)
            count = sum(p.numel() for p in net.parameters())
            print0(f"[Network {name}] Total number of parameters : {count / 1e6:.3f} M")
        print0("-----------------------------------------------")

    @staticmethod
    def set_requires_grad(nets, requires_grad: bool = False) -> None:
        """Compatibility face for the reference's models: switch gradients of `nets` on or off (models here
        judge with `step.frozen`; models/training/step.py)."""
        set_requires_grad(nets, requires_grad)
