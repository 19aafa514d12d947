"""The contract every model follows, and what they share: setup, saving, loading, schedules.

A model subclass
  - names its networks in `model_names` (attribute `net<name>`), its losses in `loss_names`
    (attribute `loss_<name>`) and its images in `visual_names`;
  - implements `set_input(batch)`, `forward()` and, when training, `optimize_parameters()`;
  - may add flags in `modify_commandline_options(parser, is_train)`.
`setup()` loads weights, then wraps every trainable network in DistributedDataParallel when the
run is distributed. Checkpoints are written from the unwrapped module, one plain state_dict per
network (`<epoch>_net_<name>.pth`, the reference's format), so they load anywhere.
"""
from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from collections import OrderedDict

import torch
from torch import nn

from models import networks
from util import distributed
from util.checkpoint import atomic_torch_save, load_state_dict_file
from util.distributed import DistContext
from util.errors import UserError

# Options that decide a network's shape; saved beside the weights so that loading with other
# flags can say exactly which flags to pass.
ARCHITECTURE_OPTIONS = ("model", "netG", "netD", "n_layers_D", "ngf", "ndf", "norm", "no_dropout",
                        "input_nc", "output_nc", "direction")


class BaseModel(ABC):
    """Base class of all models (see the module docstring for the contract)."""

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
        # Scales fp16 losses so that small gradients do not underflow; a no-op otherwise.
        self.grad_scaler = torch.amp.GradScaler(self.device.type, enabled=opt.amp == "fp16")
        self.save_dir = os.path.join(opt.checkpoints_dir, opt.name)
        self.loss_names: list[str] = []
        self.model_names: list[str] = []
        self.visual_names: list[str] = []
        self.optimizers: list[torch.optim.Optimizer] = []
        self.schedulers: list = []
        self.image_paths: list[str] = []
        self.metric = 0.0  # used by the plateau learning-rate policy

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

    # ------------------------------------------------------------------ mixed precision
    def autocast(self):
        """The context in which forward passes and losses run (bf16/fp16 autocast with --amp)."""
        return torch.autocast(self.device.type, dtype=self.amp_dtype or torch.bfloat16,
                              enabled=self.amp_dtype is not None)

    def backward(self, loss: torch.Tensor) -> None:
        self.grad_scaler.scale(loss).backward()

    def step(self, *optimizers: torch.optim.Optimizer) -> None:
        """Apply the gradients; call once per optimizer and iteration, then `end_iteration()`."""
        for optimizer in optimizers:
            self.grad_scaler.step(optimizer)

    def end_iteration(self) -> None:
        self.grad_scaler.update()

    # ------------------------------------------------------------------ setup
    def named_networks(self) -> dict[str, nn.Module]:
        return {name: getattr(self, "net" + name) for name in self.model_names}

    def setup(self, opt, resume_state: dict | None = None, rank_state: dict | None = None) -> None:
        """Create schedulers; load weights (testing, --continue_train) or a whole training state
        (exact resume: `resume_state` from util.training_state, `rank_state` this rank's part);
        then wrap the networks for DDP."""
        for net in self.named_networks().values():
            # in place: the optimizers keep the same parameter objects
            net.to(dtype=self.dtype, memory_format=self.memory_format)
            if opt.channels_last:
                networks.make_instance_norm_channels_last_safe(net)
            if opt.deterministic:
                networks.pad_reflections_with_slices(net)
        if self.isTrain:
            self.schedulers = [networks.get_scheduler(optimizer, opt) for optimizer in self.optimizers]
        if resume_state is not None:
            self.load_shared_training_state(resume_state["model"])
            if rank_state is not None:
                self.load_rank_training_state(rank_state["model"])
        elif not self.isTrain or opt.continue_train:
            load_suffix = f"iter_{opt.load_iter}" if opt.load_iter > 0 else opt.epoch
            self.load_networks(load_suffix)
        self.print_networks(opt.verbose)
        if self.isTrain:
            for name, net in self.named_networks().items():
                setattr(self, "net" + name, distributed.wrap_ddp(net, sync_batchnorm=opt.norm == "syncbatch"))
        if opt.compile:
            for name, net in self.named_networks().items():
                setattr(self, "net" + name, networks.compile_network(net, name))

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
    def update_learning_rate(self) -> tuple[float, float]:
        """Step every scheduler once (at the end of an epoch); returns (old lr, new lr)."""
        old_lr = self.optimizers[0].param_groups[0]["lr"]
        for scheduler in self.schedulers:
            if self.opt.lr_policy == "plateau":
                scheduler.step(self.metric)
            else:
                scheduler.step()
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
        return OrderedDict(zip(self.loss_names, stacked))

    # ------------------------------------------------------------------ training state (exact resume)
    def shared_training_state(self) -> dict:
        """What all ranks share: weights, optimizer and scheduler states (plain tensors/containers)."""
        return {
            "networks": {name: {k: v.detach().cpu() for k, v in distributed.unwrap(net).state_dict().items()}
                         for name, net in self.named_networks().items()},
            "optimizers": [optimizer.state_dict() for optimizer in self.optimizers],
            "schedulers": [scheduler.state_dict() for scheduler in self.schedulers],
            "grad_scaler": self.grad_scaler.state_dict(),
        }

    def load_shared_training_state(self, state: dict) -> None:
        for name, net in self.named_networks().items():
            distributed.unwrap(net).load_state_dict(state["networks"][name])
        for optimizer, saved in zip(self.optimizers, state["optimizers"], strict=True):
            optimizer.load_state_dict(saved)
        for scheduler, saved in zip(self.schedulers, state["schedulers"], strict=True):
            scheduler.load_state_dict(saved)
        if state.get("grad_scaler"):
            self.grad_scaler.load_state_dict(state["grad_scaler"])

    def rank_training_state(self) -> dict:
        """State that differs between ranks (e.g. image pools); none by default."""
        return {}

    def load_rank_training_state(self, state: dict) -> None:
        """Restore what `rank_training_state` returned."""

    # ------------------------------------------------------------------ checkpoints
    def save_networks(self, epoch) -> None:
        """Write `<epoch>_net_<name>.pth` for every network (main process; all ranks must call)."""
        for name, net in self.named_networks().items():
            distributed.check_in_sync(name, net)
        if not distributed.is_main_process():
            return
        os.makedirs(self.save_dir, exist_ok=True)
        for name, net in self.named_networks().items():
            state = {k: v.detach().cpu() for k, v in distributed.unwrap(net).state_dict().items()}
            atomic_torch_save(state, os.path.join(self.save_dir, f"{epoch}_net_{name}.pth"))
        architecture = {key: getattr(self.opt, key) for key in ARCHITECTURE_OPTIONS if hasattr(self.opt, key)}
        with open(os.path.join(self.save_dir, "architecture.json"), "wt") as f:
            json.dump(architecture, f, indent=1)

    def load_networks(self, epoch) -> None:
        """Load `<epoch>_net_<name>.pth` into each network, with a clear message on mismatch."""
        for name, net in self.named_networks().items():
            path = os.path.join(self.save_dir, f"{epoch}_net_{name}.pth")
            state = load_state_dict_file(path, self.device)
            net = distributed.unwrap(net)
            _drop_old_instance_norm_stats(state, net)
            try:
                net.load_state_dict(state)
            except RuntimeError as err:
                raise UserError(self._mismatch_message(path, err)) from None
            if distributed.is_main_process():
                print(f"loaded the model from {path}")

    def _mismatch_message(self, path: str, err: RuntimeError) -> str:
        flags = ""
        saved = os.path.join(self.save_dir, "architecture.json")
        if os.path.exists(saved):
            with open(saved) as f:
                arch = json.load(f)
            parts = []
            for key in ("netG", "norm", "ngf", "input_nc", "output_nc", "netD", "n_layers_D", "ndf"):
                if key in arch and arch[key] != getattr(self.opt, key, arch[key]):
                    parts.append(f"--{key} {arch[key]}")
            if arch.get("no_dropout") != getattr(self.opt, "no_dropout", None):
                parts.append("--no_dropout" if arch.get("no_dropout") else "(without --no_dropout)")
            if parts:
                flags = " It was trained with " + " ".join(parts) + "; pass the same flags."
        first = str(err).splitlines()[1].strip() if len(str(err).splitlines()) > 1 else str(err)
        return (f"checkpoint {path} does not fit the network built from your flags "
                f"(--netG {self.opt.netG} --norm {self.opt.norm} --ngf {self.opt.ngf}"
                f"{' --no_dropout' if self.opt.no_dropout else ''}).{flags} "
                f"PyTorch says: {first}")

    def print_networks(self, verbose: bool) -> None:
        if not distributed.is_main_process():
            return
        print("---------- Networks initialized -------------")
        for name, net in self.named_networks().items():
            if verbose:
                print(net)
            count = sum(p.numel() for p in net.parameters())
            print(f"[Network {name}] Total number of parameters : {count / 1e6:.3f} M")
        print("-----------------------------------------------")

    @staticmethod
    def set_requires_grad(nets, requires_grad: bool = False) -> None:
        """Switch gradients of `nets` on or off (to skip computing D's weight gradients in G's step)."""
        if not isinstance(nets, (list, tuple)):
            nets = [nets]
        for net in nets:
            if net is not None:
                for param in net.parameters():
                    param.requires_grad = requires_grad


def _drop_old_instance_norm_stats(state: dict, net: nn.Module) -> None:
    """Checkpoints from PyTorch < 0.4 store InstanceNorm running stats that today's modules lack."""
    expected = set(net.state_dict().keys())
    for key in list(state.keys()):
        if key not in expected and key.rsplit(".", 1)[-1] in ("running_mean", "running_var", "num_batches_tracked"):
            module_name = key.rsplit(".", 1)[0]
            module = dict(net.named_modules()).get(module_name)
            if isinstance(module, nn.InstanceNorm2d):
                del state[key]
