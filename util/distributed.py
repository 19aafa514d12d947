"""Everything that touches `torch.distributed` lives here: start-up and collectives.

`init_distributed` reads the torchrun environment (RANK, LOCAL_RANK, WORLD_SIZE), picks the
device and backend (NCCL + cuda:LOCAL_RANK when CUDA is used, gloo + CPU otherwise) and returns
a `DistContext` that the caller passes on. The collectives below ask torch.distributed itself
whether a process group exists, so they are no-ops in a single process and the training loop has
no rank branches beyond "only the main process writes".
"""
from __future__ import annotations

import datetime
import os
import random
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record as record_errors  # noqa: F401 (re-exported)
from torch import nn

from util.errors import UserError


@dataclass(frozen=True)
class DistContext:
    """Derived facts about this process: where it runs and who it is among its peers."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")
    backend: str | None = None

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def launched_by_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def pick_device(requested: str, local_rank: int = 0) -> torch.device:
    """`--device auto|cpu|cuda` to a concrete device (cuda:LOCAL_RANK under torchrun)."""
    if requested == "cpu":
        return torch.device("cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda was given but PyTorch sees no CUDA GPU on this machine; "
                        "use --device cpu (or --device auto) to train on the CPU.")
    if requested == "cuda" or (requested == "auto" and torch.cuda.is_available()):
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def init_distributed(device: str = "auto", timeout_s: float = 1800.0) -> DistContext:
    """Start this process: under torchrun join the process group, otherwise run alone.

    The device is set before the process group is created, and given to it, so that NCCL
    barriers know their device instead of guessing.
    """
    if not launched_by_torchrun() or int(os.environ["WORLD_SIZE"]) == 1:
        alone = DistContext(device=pick_device(device))
        if alone.device.type == "cuda":
            torch.cuda.set_device(alone.device)
        return alone

    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    world = int(os.environ["WORLD_SIZE"])
    chosen = pick_device(device, local_rank)
    backend = "nccl" if chosen.type == "cuda" else "gloo"
    timeout = datetime.timedelta(seconds=timeout_s)
    # torchrun may hand restarted workers the same key-value store as the workers they replace;
    # without a fresh key prefix per restart, the new processes read the dead ones' addresses
    # and fail to connect. (Seen with gloo and --max-restarts on torch 2.14.)
    store, _, _ = next(dist.rendezvous("env://", rank, world, timeout=timeout))
    store = dist.PrefixStore(f"img2img/restart_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)
    if chosen.type == "cuda":
        torch.cuda.set_device(chosen)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout,
                                device_id=chosen)
    else:
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    return DistContext(rank=rank, local_rank=local_rank, world_size=world, device=chosen, backend=backend)


def is_distributed() -> bool:
    """True inside a process group of two or more processes."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def is_main_process() -> bool:
    """True in a single process and on rank 0 (also in DataLoader workers forked from them)."""
    return not is_distributed() or dist.get_rank() == 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def _collective_device() -> torch.device:
    # NCCL reduces CUDA tensors only; gloo takes CPU tensors.
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def barrier() -> None:
    if is_distributed():
        dist.barrier()


def reduce_mean(tensor: torch.Tensor) -> torch.Tensor:
    """The mean of `tensor` over all ranks (the tensor itself in a single process)."""
    if not is_distributed():
        return tensor
    reduced = tensor.detach().clone()
    dist.all_reduce(reduced, op=dist.ReduceOp.SUM)
    return reduced / dist.get_world_size()


def any_rank(flag: bool) -> bool:
    """True on every rank if `flag` is true on any rank (so that all ranks take the same branch)."""
    if not is_distributed():
        return flag
    value = torch.tensor([1.0 if flag else 0.0], device=_collective_device())
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item() > 0)


def all_reduce_sum_(tensor: torch.Tensor) -> torch.Tensor:
    """Sum `tensor` over all ranks in place (autograd-free); identity in a single process."""
    if is_distributed():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def check_in_sync(name: str, module: nn.Module) -> None:
    """Raise if `module`'s weights differ between ranks (DDP must keep replicas identical)."""
    if not is_distributed():
        return
    with torch.no_grad():
        params = [p.detach().double().flatten() for p in unwrap(module).parameters()]
        flat = torch.cat(params) if params else torch.zeros(1, dtype=torch.float64)
        fingerprint = torch.stack([flat.sum(), flat.abs().sum(), (flat * torch.arange(
            flat.numel(), dtype=torch.float64, device=flat.device).remainder(7)).sum()])
    fingerprints = torch.stack(gather_objects(fingerprint.cpu()))
    diverged = [rank for rank, row in enumerate(fingerprints) if not torch.isfinite(row).all()]
    if diverged:
        raise RuntimeError(f"network {name} has NaN or infinite weights on rank(s) {diverged}: training diverged "
                           f"(see the losses in the log). Try a lower --lr, or leave out --amp/--compile to find "
                           f"the setting that causes it.")
    if not torch.allclose(fingerprints, fingerprints[0].expand_as(fingerprints), rtol=1e-9, atol=1e-9):
        raise RuntimeError(f"network {name} has different weights on different ranks "
                           f"(fingerprints {fingerprints.tolist()}); the processes are not training one model")


def broadcast_object(obj: Any) -> Any:
    """Rank 0's `obj` on every rank."""
    if not is_distributed():
        return obj
    holder = [obj]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]


def gather_objects(obj: Any) -> list[Any]:
    """Every rank's `obj`, in rank order, on every rank."""
    if not is_distributed():
        return [obj]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def shared_seed(requested: int | None) -> int:
    """The run's seed: `--seed` if given, else one drawn by rank 0 and shared with all ranks."""
    seed = requested if requested is not None else random.SystemRandom().randrange(2**31)
    return int(broadcast_object(seed))


def wrap_ddp(module: nn.Module, device: torch.device) -> nn.Module:
    """Wrap `module` (on `device`) in DistributedDataParallel when running distributed and it has
    trainable parameters; otherwise return it unchanged."""
    if not is_distributed() or not any(p.requires_grad for p in module.parameters()):
        return module
    device_ids = [device.index] if device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(module, device_ids=device_ids)


def unwrap(module: nn.Module) -> nn.Module:
    """The plain module inside torch.compile and DDP wrappers, in either order (the module itself
    if not wrapped): what checkpoints are written from."""
    module = getattr(module, "_orig_mod", module)  # torch.compile's OptimizedModule
    if isinstance(module, nn.parallel.DistributedDataParallel):
        module = module.module
    return getattr(module, "_orig_mod", module)


def report_user_error(message: str) -> None:
    """Print a user error once: every rank hits most of them alike, so only rank 0 speaks,
    except when this rank alone failed (e.g. an unreadable image only it loaded)."""
    env_rank = dist.get_rank() if is_distributed() else int(os.environ.get("RANK", "0"))
    if env_rank == 0:
        print(message, file=sys.stderr, flush=True)
    else:
        # Most user errors (flags, dataset folder) hit every rank alike; torchrun stops the other
        # ranks as soon as rank 0 exits with the same message, so waiting a moment keeps it to one
        # copy. If rank 0 is fine (this rank alone read a bad file), we say who failed.
        time.sleep(3.0)
        print(f"[rank {env_rank}] {message}", file=sys.stderr, flush=True)


def shutdown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
