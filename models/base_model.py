"""The contract every model follows, and what they share: setup, saving, loading, schedules.

A model is one file: a BaseModel subclass in models/<name>_model.py named <Name>Model (found by
`--model <name>`, models/__init__.py), or in a module of your own (`--model mypackage.my_model`).
It
  - names its networks in `model_names` (attribute `net<name>`), its losses in `loss_names`
    (attribute `loss_<name>`) and its images in `visual_names`;
  - implements `set_input(batch)`, `forward()` and, when training, `optimize_parameters()`,
    which computes each loss under `self.autocast()` and applies it with
    `self.update_weights(optimizer, loss)` - the one place where gradients are made, scaled for
    fp16, stepped and cleared - and judges generator outputs through `self.frozen(netD)`;
  - calls its discriminators on `self.diff_augment(x)` (a conditional pair: one call with both
    halves) in both players' steps, and reports D's verdicts on real images to
    `self.diff_augment.observe_real(pred)` (--diff_augment, --ada_target; the identity when off);
    --D_spectral reaches every network named D... by itself;
  - may add flags in `modify_commandline_options(parser, is_train)`;
  - to train with --accum_steps, lists in `accumulation_phases` the methods that make one step,
    split where a loss needs an optimizer step taken before it in the same step
    (models/accumulation.py; `train_step` runs them over the micro-batches);
  - may take a `seed` in its constructor (the run's seed, the same on every rank) for its own
    random streams;
  - may build more of itself from the first training batch in `data_dependent_initialize(batch)`
    (e.g. a projection head sized by the generator's features, and its optimizer): `setup` calls
    it before it makes the schedulers, loads weights or a training state and wraps the networks
    for DDP, so what it adds is scheduled, resumed and synchronised like the rest;
  - declares once, on the class, what the code around it must know (nothing elsewhere lists
    models or visual names):
      `visual_sides`      the domain of each visual ({"fake_B": "B", ...}, A = the input side),
                          for test.py's full-precision outputs (`visual_domains(opt)`);
      `translators`       the generator that translates in the trained direction and, if any,
                          the one back (("G_A", "G_B")), for the Translator, scripts/translate.py
                          and scripts/export.py (`translator_refusal`: why the Translator cannot);
      `scored_pairs(paired)`  which (output, target) visuals validation and test.py score;
      `input_visual`      the visual holding the input, for test.py's do-nothing baseline.
`setup()` loads weights, then wraps every trainable network in DistributedDataParallel when the
run is distributed. Checkpoints are written from the unwrapped module, one plain state_dict per
network (`<epoch>_net_<name>.pth`, the reference's format), so they load anywhere.
"""
from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections import OrderedDict
from contextlib import contextmanager
from typing import ClassVar, Iterator, Mapping

import torch
from torch import nn

from models import checkpoint_files, networks
from models.accumulation import MicroStep, accumulated_step
from models.activation_checkpointing import enable_activation_checkpointing
from models.diff_augment import DiscriminatorAugment
from models.ema import GeneratorEMA
from models.loss_watch import LossWatch
from models.sync_batchnorm import convert_sync_batchnorm
from util import distributed
from util.console import print0
from util.distributed import DistContext
from util.errors import UserError
from util.training.training_state import STATE_SUFFIX

# What a network does in a model (`BaseModel.network_roles`). Generators translate; an encoder is
# trained beside them and used at inference too (e.g. it encodes a reference image into a latent
# code); both are what --ema_decay averages. Discriminators judge (--D_spectral, --diff_augment);
# a head is trained for a loss only (e.g. CUT's projection netF).
GENERATOR, ENCODER, DISCRIMINATOR, HEAD = "generator", "encoder", "discriminator", "head"
ROLES = (GENERATOR, ENCODER, DISCRIMINATOR, HEAD)
INFERENCE_ROLES = (GENERATOR, ENCODER)


class BaseModel(ABC):
    """Base class of all models (see the module docstring for the contract)."""

    # ------------------------------------------------------------------ facts a model declares
    # The dataset domain ("A" or "B") whose files each visual's images belong to, taking A as the
    # model's input side (`paired_input`); visuals left out get no full-precision output.
    visual_sides: ClassVar[Mapping[str, str]] = {}
    # What each network in `model_names` does (ROLES): e.g. {"G": "generator", "D": "discriminator"}.
    # EMA, --D_spectral, tiling and export ask it; an instance may refine it from its options.
    network_roles: ClassVar[Mapping[str, str]] = {}
    # The networks that translate: the first in the direction the run trained in, the second (if
    # any) back, from output_nc to input_nc channels. An instance may refine it from its options.
    translators: ClassVar[tuple[str, ...]] = ("G",)
    # Why models/translator.py (images in, images out) cannot use them, if it cannot; completes
    # "<run folder> holds a --model <name> run, ...".
    translator_refusal: ClassVar[str] = ""
    # The visual holding the model's input, scored against the target as the do-nothing baseline.
    input_visual: ClassVar[str | None] = None
    # --accum_steps: the methods that make one training step, in order, each over every micro-batch
    # before the next begins (models/accumulation.py); none: the model cannot accumulate.
    accumulation_phases: ClassVar[tuple[str, ...]] = ()
    _micro: MicroStep | None = None  # within a micro-batch of an accumulated step (`micro_step`)
    # Many answers per input: the visuals that change with the latent code (test.py --n_samples
    # writes them once per code); a model with codes also overrides `latent_size` and `set_latent`.
    sample_visuals: ClassVar[tuple[str, ...]] = ()

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

    def __init__(self, opt, ctx: DistContext):
        self.opt = opt
        self.ctx = ctx
        self.isTrain = opt.isTrain
        self.device = ctx.device
        self.dtype = getattr(torch, opt.dtype)
        self.memory_format = torch.channels_last if opt.channels_last else torch.contiguous_format
        self.amp_dtype = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}[opt.amp]
        if opt.amp == "fp16" and self.device.type != "cuda":
            raise UserError("--amp fp16 needs a CUDA GPU (on the CPU, float16 arithmetic is slow and "
                            "unsupported by many kernels); use --amp bf16 on the CPU.")
        self.save_dir = os.path.join(opt.checkpoints_dir, opt.name)
        self.loss_names: list[str] = []
        self.model_names: list[str] = []
        self.visual_names: list[str] = []
        self.optimizers: list[torch.optim.Optimizer] = []
        self.schedulers: list = []
        self.image_paths: list[str] = []
        # One gradient scaler per optimizer (fp16 only; disabled scalers do nothing), made with the
        # optimizers' states in `setup`, and the on-device record of the losses each one stepped on.
        self.grad_scalers: list[torch.amp.GradScaler] = []
        self.loss_watch = LossWatch(self.device)
        # Networks as the generator step calls them through `frozen` (compiled, never DDP-wrapped).
        self._unsynced: dict[str, nn.Module] = {}
        # --compile: each network as run compiled (True) and eagerly (False), as (trained, unsynced),
        # so that `use_compiled` can switch; the choice, once made, is part of the training state.
        self._run_variants: dict[str, dict[bool, tuple[nn.Module, nn.Module]]] = {}
        self.compile_choice: bool | None = None
        self.ema: GeneratorEMA | None = None  # --ema_decay: moving averages of the generators
        # --diff_augment: every discriminator input goes through it (`netD(self.diff_augment(x))`);
        # the identity when off. Seeded in `setup`, saved with the training state.
        self.diff_augment = DiscriminatorAugment.from_options(opt)

    @staticmethod
    def modify_commandline_options(parser, is_train: bool):
        """Add model-specific flags or change defaults; return the parser."""
        return parser

    @abstractmethod
    def set_input(self, input: dict) -> None:
        """Unpack a batch from the data loader onto the device."""

    @abstractmethod
    def forward(self) -> None:
        """Run the generator(s); called by `optimize_parameters()` and `test()`."""

    def optimize_parameters(self) -> None:
        """One training step: losses, gradients, optimizer steps."""
        raise NotImplementedError(f"{type(self).__name__} cannot be trained")

    def data_dependent_initialize(self, first_batch: dict) -> None:
        """Build what depends on the data from the first batch (a collated batch as `set_input`
        takes), e.g. networks sized by the generator's features and their optimizers, adding them to
        `model_names` and `optimizers`. Called by `setup` before the schedulers are made, weights or
        a training state are loaded and networks are DDP-wrapped; nothing by default."""

    def latent_size(self) -> int:
        """How many numbers the latent code of this model's translation has (0: it takes the image alone)."""
        return 0

    def set_latent(self, codes: torch.Tensor | None) -> None:
        """The latent codes (batch x `latent_size`) the next `forward` translates with; None: the
        model's own choice again (e.g. a code encoded from a reference image)."""
        raise NotImplementedError(f"{type(self).__name__} takes no latent code")

    def to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        """An input tensor on the model's device, in its precision and memory format."""
        return tensor.to(self.device, self.dtype, non_blocking=True).contiguous(memory_format=self.memory_format)

    def paired_input(self, input: dict) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
        """(model input, model target, input paths) of a batch, following --direction."""
        AtoB = self.opt.direction == "AtoB"
        return (self.to_device(input["A" if AtoB else "B"]), self.to_device(input["B" if AtoB else "A"]),
                input["A_paths" if AtoB else "B_paths"])

    def make_adam(self, parameters) -> torch.optim.Adam:
        """The reference's optimizer (Adam, --lr, betas (--beta1, 0.999)). --fused_adam picks
        PyTorch's fused kernel: several times faster on large networks (a pix2pix generator's
        update: 166 -> 34 ms on 2 CPU cores), but it rounds differently (~1e-8), so it is opt-in."""
        return torch.optim.Adam(parameters, lr=self.opt.lr, betas=(self.opt.beta1, 0.999),
                                fused=True if self.opt.fused_adam else None)

    # ------------------------------------------------------------------ one training step
    def autocast(self):
        """The context in which forward passes and losses run (bf16/fp16 autocast with --amp)."""
        return torch.autocast(self.device.type, dtype=self.amp_dtype or torch.bfloat16,
                              enabled=self.amp_dtype is not None)

    def update_weights(self, optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> None:
        """Apply `loss` to the parameters of `optimizer`: clear their gradients, back-propagate,
        step, once per optimizer and iteration.

        Under --amp fp16 the loss is scaled by this optimizer's own GradScaler, which unscales the
        gradients, skips the step if they overflowed and adjusts its scale - all here, so no model
        can forget part of it. The loss is also noted on the device (no host sync) so that a
        diverging run is caught when losses are next read (`check_finite`).
        """
        index = next(i for i, known in enumerate(self.optimizers) if known is optimizer)
        if not self.grad_scalers:
            self._make_grad_scalers()
        scaler = self.grad_scalers[index]
        micro = self._micro
        if micro is not None:  # --accum_steps: a micro-batch's share; the step comes at the last one
            self._accumulate(index, optimizer, loss, micro)
            if not micro.last:
                return
            loss = self._step_losses.pop(index)
        else:
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        self.loss_watch.note(index, loss)

    def _accumulate(self, index: int, optimizer: torch.optim.Optimizer, loss: torch.Tensor, micro: MicroStep) -> None:
        """Add one micro-batch's gradient (its loss weighted by its share of the step's images) to
        those of the micro-batches before it, and its loss to the step's (noted once, at the step)."""
        if micro.first:
            optimizer.zero_grad(set_to_none=True)
            self._step_losses[index] = 0.0
        self.grad_scalers[index].scale(loss * micro.weight).backward()
        self._step_losses[index] = self._step_losses[index] + loss.detach() * micro.weight

    @contextmanager
    def micro_step(self, step: MicroStep) -> Iterator[None]:
        """Within the block, `update_weights` accumulates micro-batch `step` (models/accumulation.py)."""
        if not hasattr(self, "_step_losses"):
            self._step_losses: dict[int, torch.Tensor] = {}
        self._micro = step
        try:
            yield
        finally:
            self._micro = None

    def train_step(self, micro_batches: list[dict]) -> None:
        """One optimizer step (train.py's loop): a batch as before (`set_input`, `optimize_parameters`),
        or with --accum_steps several micro-batches, phase by phase (models/accumulation.py)."""
        if len(micro_batches) == 1:
            self.set_input(micro_batches[0])
            self.optimize_parameters()
        else:
            accumulated_step(self, micro_batches)

    def _make_grad_scalers(self) -> None:
        # Scales fp16 losses so that small gradients do not underflow; a no-op otherwise.
        self.grad_scalers = [torch.amp.GradScaler(self.device.type, enabled=self.opt.amp == "fp16")
                             for _ in self.optimizers]

    @contextmanager
    def frozen(self, *nets: nn.Module) -> Iterator:
        """Discriminators for judging generator outputs: within the block their weights get no
        gradient (gradients still flow through them to the generator), and the networks yielded
        are not DDP-wrapped (a DDP replica would wait for weight gradients that never come) but
        stay compiled under --compile. Yields one network, or a tuple for several.

            with self.frozen(self.netD) as netD:
                loss_G = self.criterionGAN(netD(fake), True) + ...
                self.update_weights(self.optimizer_G, loss_G)
        """
        names = {id(net): name for name, net in self.named_networks().items()}
        unsynced = tuple(self._unsynced.get(names.get(id(net)), distributed.unwrap(net)) for net in nets)
        self.set_requires_grad(list(nets), False)
        try:
            yield unsynced[0] if len(unsynced) == 1 else unsynced
        finally:
            self.set_requires_grad(list(nets), True)

    def check_finite(self, epoch: int, total_iters: int, images_per_step: int, weights: bool = False) -> None:
        """Raise `TrainingDiverged` on every rank if any rank stepped on a non-finite loss since
        the last check (or, with `weights`, holds non-finite weights). One host sync; call it where
        losses are read, and with `weights` before every save, so that no checkpoint is written
        from a diverged model."""
        def nonfinite_losses() -> list[str]:
            return [name for name in self.loss_names
                    if not torch.isfinite(torch.as_tensor(getattr(self, "loss_" + name, 0.0))).all()]

        nonfinite_networks = [name for name, net in self.named_networks().items()
                              if weights and not _all_finite(net)]
        self.loss_watch.check(len(self.optimizers), epoch, total_iters, images_per_step, nonfinite_losses,
                              nonfinite_networks, self._divergence_advice())

    def _divergence_advice(self) -> str:
        advice = [f"Start again with a lower --lr (it was {self.opt.lr:g})"]
        if self.opt.amp != "none":
            advice.append(f"without --amp {self.opt.amp} (half precision overflows more easily)")
        if getattr(self.opt, "gan_mode", "lsgan") != "lsgan":
            advice.append("with --gan_mode lsgan, which is steadier")
        return ", or ".join(advice) + "."

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

    def update_ema(self) -> None:
        """After a training step: move the generators' moving averages (nothing without --ema_decay)."""
        if self.ema is not None:
            self.ema.update(self.generators())

    @contextmanager
    def inference_networks(self, eval_mode: bool = True, ema: bool = False) -> Iterator[None]:
        """Within the block the model translates as test.py does, for validation: every network is
        its plain module (never DDP-wrapped: processes may validate different numbers of images;
        still compiled under --compile), in eval mode (`eval_mode`) or in training mode with its
        buffers (batch-norm running statistics) restored afterwards, and with `ema` the generators
        are their moving averages. Gradients are off; training resumes unchanged after the block."""
        if ema and self.ema is None:
            raise RuntimeError("inference_networks(ema=True) needs --ema_decay > 0")
        trained = self.named_networks()
        plain = {name: self._unsynced.get(name, net) for name, net in trained.items()}
        if ema:
            plain.update(self.ema.networks())
        modes = {name: net.training for name, net in plain.items()}
        buffers = {name: [b.clone() for b in net.buffers()] for name, net in plain.items()}
        for name, net in plain.items():
            setattr(self, "net" + name, net.train(not eval_mode))
        try:
            with torch.no_grad():
                yield
        finally:
            for name, net in plain.items():
                for kept, buffer in zip(buffers[name], net.buffers()):
                    buffer.copy_(kept)
                net.train(modes[name])
            for name, net in trained.items():
                setattr(self, "net" + name, net)

    def setup(self, opt, resume_state: dict | None = None, rank_state: dict | None = None,
              first_batch: dict | None = None) -> None:
        """Let the model see `first_batch` (`data_dependent_initialize`; train.py passes it), create
        schedulers; load weights (testing, --continue_train) or a whole training state (exact
        resume: `resume_state` from util.training.training_state, `rank_state` this rank's part);
        then wrap the networks for DDP."""
        self.check_network_roles()
        self._add_stabilisers()
        self._set_precision(self.named_networks())
        if first_batch is not None:
            known = set(self.model_names)
            self.data_dependent_initialize(first_batch)
            self.check_network_roles()  # of what it added too
            self._set_precision({name: net for name, net in self.named_networks().items() if name not in known})
        saved_options = (resume_state or {}).get("options")  # None: afresh, or a state that recorded none
        if self.isTrain:  # a continued run's linear schedule counts from the epoch the run started at
            first_epoch = saved_options.get("epoch_count") if saved_options else None
            self.schedulers = [networks.get_scheduler(optimizer, opt, first_epoch) for optimizer in self.optimizers]
        self._make_grad_scalers()
        if self.isTrain and getattr(opt, "ema_decay", 0.0) > 0:  # the parser keeps it in [0, 1)
            self.ema = GeneratorEMA(self.generators(), opt.ema_decay)
        if resume_state is not None:
            self.load_shared_training_state(resume_state["model"])
            if saved_options:  # changed --lr, --n_epochs, ...: the loaded states would keep the old ones
                for optimizer, scheduler in zip(self.optimizers, self.schedulers):
                    networks.reapply_schedule_flags(optimizer, scheduler, opt, saved_options)
            if rank_state is not None:
                self.load_rank_training_state(rank_state["model"])
        elif not self.isTrain or opt.continue_train:
            load_suffix = f"iter_{opt.load_iter}" if opt.load_iter > 0 else opt.epoch
            self.load_networks(load_suffix)
        self.print_networks(opt.verbose)
        for name, net in self.named_networks().items():
            setattr(self, "net" + name, self._prepare_for_run(name, net))

    def _add_stabilisers(self) -> None:
        """--D_spectral on every discriminator (by its declared role) and the first draw of
        --diff_augment, for every model alike. Both draw from the global generator, which is seeded
        the same on every rank here, and only when asked for: without them nothing changes."""
        if self.isTrain and getattr(self.opt, "D_spectral", False):
            for net in self.networks_with_role(DISCRIMINATOR).values():
                networks.apply_spectral_norm(net)
        if self.diff_augment.enabled:
            self.diff_augment.seed(int(torch.randint(2**62, ())))

    def _set_precision(self, nets: dict[str, nn.Module]) -> None:
        """The networks' dtype and memory format, in place (the optimizers keep the same parameter
        objects), and the kernel choices --channels_last and --deterministic need."""
        for net in nets.values():
            net.to(dtype=self.dtype, memory_format=self.memory_format)
            if self.opt.channels_last:
                networks.make_instance_norm_channels_last_safe(net)
            if self.opt.deterministic:
                networks.pad_reflections_with_slices(net)
            if getattr(self.opt, "checkpoint_activations", False):  # a training flag; the same weights and keys
                enable_activation_checkpointing(net, networks.checkpointed_blocks(self.opt))

    def _prepare_for_run(self, name: str, net: nn.Module) -> nn.Module:
        """`net` as training or testing calls it: batch norm synchronised and the network
        DDP-wrapped when training under torchrun, compiled with --compile. The compiled network
        without DDP is kept for `frozen`."""
        training_together = self.isTrain and distributed.is_distributed()
        if training_together and self.opt.norm == "syncbatch":
            net = convert_sync_batchnorm(net, self.device)  # keeps the same Parameter objects
        synced = distributed.wrap_ddp(net, self.device) if training_together else net
        if not self.opt.compile:
            self._unsynced[name] = net
            return synced
        compiled = networks.compile_network(net, name)
        compiled_synced = compiled if synced is net else networks.compile_network(synced, name)
        self._run_variants[name] = {True: (compiled_synced, compiled), False: (synced, net)}
        self._unsynced[name] = compiled
        return compiled_synced

    def use_compiled(self, compiled: bool) -> None:
        """--compile: run the networks compiled (as `setup` leaves them) or eagerly (the compile
        probe's choice where compiling proved slower, util/training/compile_probe.py)."""
        for name, variants in self._run_variants.items():
            trained, unsynced = variants[compiled]
            setattr(self, "net" + name, trained)
            self._unsynced[name] = unsynced

    def eval(self) -> None:
        for net in self.named_networks().values():
            net.eval()

    def test(self) -> None:
        """Forward without gradients, for inference."""
        with torch.no_grad():
            self.forward()
            self.compute_visuals()

    def compute_visuals(self) -> None:
        """Compute extra images for display (e.g. Lab to RGB); nothing by default."""

    def get_image_paths(self) -> list[str]:
        return self.image_paths

    # ------------------------------------------------------------------ schedules and reporting
    def update_learning_rate(self, plateau_metric: float | None = None, plateau_step: bool = True) -> tuple[float, float]:
        """Step every scheduler once (at the end of an epoch, on every rank); returns (old lr, new lr).

        The plateau policy lowers the rate when its metric stops falling: `plateau_metric` (the
        validation metric, lower is better) when given, else the epoch's mean generator loss (the
        loss of the first optimizer, averaged over the epoch's steps and all ranks); with
        `plateau_step` false (an epoch without validation) it waits.
        """
        old_lr = self.optimizers[0].param_groups[0]["lr"]
        epoch_loss = self.loss_watch.end_epoch()  # every rank, every epoch: it is a collective
        for scheduler in self.schedulers:
            if self.opt.lr_policy != "plateau":
                scheduler.step()
            elif plateau_step:
                scheduler.step(plateau_metric if plateau_metric is not None else epoch_loss)
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

    # ------------------------------------------------------------------ training state (exact resume)
    def shared_training_state(self) -> dict:
        """What all ranks share: weights, optimizer and scheduler states (plain tensors/containers)."""
        return {
            "networks": {name: {k: v.detach().cpu() for k, v in distributed.unwrap(net).state_dict().items()}
                         for name, net in self.named_networks().items()},
            "optimizers": [optimizer.state_dict() for optimizer in self.optimizers],
            "schedulers": [scheduler.state_dict() for scheduler in self.schedulers],
            "grad_scalers": [scaler.state_dict() for scaler in self.grad_scalers],
            "ema": self.ema.state_dict() if self.ema is not None else None,
            "compile_choice": self.compile_choice,
            "diff_augment": self.diff_augment.state_dict() if self.diff_augment.enabled else None,
        }

    def load_shared_training_state(self, state: dict) -> None:
        """Restore what `shared_training_state` returned; a UserError naming the flags when it
        was saved by another model or from networks of another shape."""
        where = os.path.join(self.save_dir, "*" + STATE_SUFFIX)
        saved_networks = state["networks"]
        if set(saved_networks) != set(self.model_names):
            raise UserError(f"the training state {where} holds the networks {', '.join(sorted(saved_networks))}, "
                            f"but --model {self.opt.model} has {', '.join(self.model_names)}: it was saved by "
                            f"another model; pass the --model it was trained with, or choose another --name.")
        for saved in state["schedulers"]:  # states that recorded no options are checked here
            policy = networks.policy_of_scheduler_state(saved)
            if policy is not None and policy != self.opt.lr_policy:
                raise UserError(f"--continue_train: the training state {where} holds a --lr_policy {policy} "
                                f"schedule, but this command has --lr_policy {self.opt.lr_policy}; pass --lr_policy "
                                f"{policy} to continue the run, or start a new schedule from its weights with "
                                f"--continue_train --epoch_count N (weights only).")
        for name, net in self.named_networks().items():
            try:
                distributed.unwrap(net).load_state_dict(saved_networks[name])
            except RuntimeError as err:
                raise UserError(checkpoint_files.mismatch_message(where, err, self.opt, self.save_dir)) from None
        for optimizer, saved in zip(self.optimizers, state["optimizers"], strict=True):
            optimizer.load_state_dict(saved)
        for scheduler, saved in zip(self.schedulers, state["schedulers"], strict=True):
            scheduler.load_state_dict(saved)
        for scaler, saved in zip(self.grad_scalers, state.get("grad_scalers", [])):
            if saved:  # a disabled scaler saves an empty state
                scaler.load_state_dict(saved)
        if self.ema is not None and state.get("ema"):
            self.ema.load_state_dict(state["ema"])
        elif self.ema is not None:
            print0("note: the run being continued kept no moving averages; --ema_decay starts them from "
                   "the current weights.")
        self.compile_choice = state.get("compile_choice")  # --compile: as the continued run chose
        if self.diff_augment.enabled and state.get("diff_augment"):  # a run that augmented goes on drawing
            self.diff_augment.load_state_dict(state["diff_augment"])

    def rank_training_state(self) -> dict:
        """State that differs between ranks: this rank's share of the epoch's losses; subclasses
        add theirs (e.g. image pools) to `super().rank_training_state()`."""
        state = {"loss_watch": self.loss_watch.state_dict()}
        if self.diff_augment.enabled:
            state["diff_augment"] = self.diff_augment.rank_state_dict()
        return state

    def load_rank_training_state(self, state: dict) -> None:
        """Restore what `rank_training_state` returned."""
        if "loss_watch" in state:
            self.loss_watch.load_state_dict(state["loss_watch"])
        if self.diff_augment.enabled and "diff_augment" in state:
            self.diff_augment.load_rank_state_dict(state["diff_augment"])

    # ------------------------------------------------------------------ checkpoints
    def save_networks(self, epoch, include_ema: bool = True) -> None:
        """Write `<epoch>_net_<name>.pth` for every network and, with --ema_decay (unless
        `include_ema` is false), `<epoch>_ema_net_<name>.pth` for every averaged generator
        (main process writes; all ranks must call)."""
        self._save(epoch, self.named_networks())
        if include_ema and self.ema is not None:
            self.save_ema_networks(epoch)

    def save_ema_networks(self, epoch) -> None:
        """Write `<epoch>_ema_net_<name>.pth` for every averaged generator (all ranks must call)."""
        self._save(f"{epoch}_ema", self.ema.networks())

    def _save(self, label: str, nets: dict[str, nn.Module]) -> None:
        for name, net in nets.items():
            distributed.check_in_sync(name, net)
        if self.ctx.is_main:
            plain = {name: distributed.unwrap(net) for name, net in nets.items()}
            checkpoint_files.write_networks(self.save_dir, label, plain, self.opt)

    def load_networks(self, epoch) -> None:
        """Load `<epoch>_net_<name>.pth` into each network, with a clear message on mismatch."""
        for name, net in self.named_networks().items():
            path = os.path.join(self.save_dir, f"{epoch}_net_{name}.pth")
            checkpoint_files.read_network(path, distributed.unwrap(net), self.device, self.opt, self.save_dir)
            print0(f"loaded the model from {path}")

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
        """Switch gradients of `nets` on or off (to skip computing D's weight gradients in G's step)."""
        if not isinstance(nets, (list, tuple)):
            nets = [nets]
        for net in nets:
            if net is not None:
                for param in net.parameters():
                    param.requires_grad = requires_grad


def _all_finite(net: nn.Module) -> bool:
    """No NaN or infinity in the network's floating-point weights (one host sync)."""
    checks = [torch.isfinite(p.detach()).all() for p in net.parameters() if p.is_floating_point()]
    return bool(torch.stack(checks).all()) if checks else True
