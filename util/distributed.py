"""Everything that touches `torch.distributed` lives here: start-up and collectives.

`init_distributed` asks `launch_environment` who this process is (torchrun's RANK, LOCAL_RANK,
WORLD_SIZE; or, for `srun` with one task per GPU, SLURM_PROCID, SLURM_LOCALID and the step's task
count), picks the device and backend (NCCL + cuda:LOCAL_RANK when CUDA is used, gloo + CPU
otherwise; `--ddp_backend gloo` for processes sharing one GPU) and returns a `DistContext` that the
caller passes on. The collectives below ask torch.distributed itself whether a process group
exists, so they are no-ops in a single process and the training loop has no rank branches beyond
"only the main process writes".
"""
from __future__ import annotations

import datetime
import gc
import os
import random
import re
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record as record_errors  # noqa: F401 (re-exported)

from util.errors import UserError

# The rendezvous port of an srun-launched job unless MASTER_PORT is set: derived from the job id,
# so that every task computes the same one without talking to the others, and below Linux's
# ephemeral range (32768 and up), so that no outgoing connection on the host already holds it.
SLURM_PORT_BASE, SLURM_PORT_SPAN = 10000, 20000
_RANGE = r"\d+(?:-\d+)?"
_HOST = rf"(?:[^,\[\]]|\[{_RANGE}(?:,{_RANGE})*\])+"  # e.g. gpu[01-04,09]-ib


@dataclass(frozen=True)
class LaunchEnvironment:
    """Who this process is among its peers, as its launcher told it."""

    launcher: str                   # "torchrun", or "srun" (one task per GPU, no torchrun)
    rank: int
    local_rank: int
    world_size: int
    master_addr: str | None = None  # srun only: torchrun's workers find its store through env://
    master_port: int | None = None

    @property
    def rendezvous_url(self) -> str:
        return "env://" if self.launcher == "torchrun" else f"tcp://{self.master_addr}:{self.master_port}"


def launch_environment(environ: Mapping[str, str] = os.environ) -> LaunchEnvironment | None:
    """This process's place in a multi-process launch, or None when it runs on its own.

    torchrun: RANK, LOCAL_RANK and WORLD_SIZE; they win when present (e.g. srun starting one
    torchrun per node). srun with one task per process: SLURM_PROCID, SLURM_LOCALID and
    SLURM_STEP_NUM_TASKS, which srun sets in every task of a job step; the rendezvous is at
    MASTER_ADDR or else the first host of SLURM_STEP_NODELIST (SLURM_JOB_NODELIST), port
    MASTER_PORT or else SLURM_PORT_BASE + SLURM_JOB_ID % SLURM_PORT_SPAN. A batch script's own
    shell has SLURM_NTASKS and SLURM_PROCID=0 but no step variables, so `python train.py` run
    there stays a single process, as does a one-task step. Malformed values raise a UserError, and so
    do RANK and WORLD_SIZE that no launcher set (a rank outside the world; two or more processes
    without MASTER_ADDR and MASTER_PORT): leftovers of another job or a notebook.
    """
    def number(name: str, default: str | None = None) -> int:
        value = environ.get(name, default)
        if value is None or not value.strip().isdigit():
            raise UserError(f"environment variable {name}={value!r} is not a non-negative integer; it should "
                            f"be set by the launcher (torchrun or srun): unset it, or launch the job again.")
        return int(value)

    if "RANK" in environ and "WORLD_SIZE" in environ:
        launch = LaunchEnvironment("torchrun", number("RANK"), number("LOCAL_RANK", "0"), number("WORLD_SIZE"))
        _check_torchrun_variables(launch, environ)
        return launch
    if "SLURM_STEP_NUM_TASKS" not in environ or number("SLURM_STEP_NUM_TASKS") <= 1:
        return None
    if environ.get("MASTER_ADDR"):
        master_addr = environ["MASTER_ADDR"]
    else:
        nodelist = environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST", "")
        if not re.fullmatch(rf"{_HOST}(?:,{_HOST})*", nodelist):
            raise UserError(f"cannot read the first host of the SLURM node list {nodelist!r} "
                            f"(SLURM_STEP_NODELIST / SLURM_JOB_NODELIST) to meet the other tasks there; set "
                            f"MASTER_ADDR to the host name of the node that runs task 0.")
        first = re.match(_HOST, nodelist).group(0)               # "gpu[07-09,12]-ib"
        master_addr = re.sub(r"\[(\d+)[^\]]*\]", r"\1", first)  # "gpu07-ib", as scontrol lists it first
    master_port = (number("MASTER_PORT") if environ.get("MASTER_PORT")
                   else SLURM_PORT_BASE + number("SLURM_JOB_ID", "0") % SLURM_PORT_SPAN)
    return LaunchEnvironment("srun", number("SLURM_PROCID"), number("SLURM_LOCALID", "0"),
                             number("SLURM_STEP_NUM_TASKS"), master_addr, master_port)


def _check_torchrun_variables(launch: LaunchEnvironment, environ: Mapping[str, str]) -> None:
    """Raise a UserError when RANK and WORLD_SIZE cannot have come from a launcher: a rank outside the
    world, or several processes without the rendezvous address that torchrun (and every other env://
    launcher) sets with them -- typically variables left over in a notebook or job script."""
    found = ", ".join(f"{name}={environ[name]}" for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR",
                                                              "MASTER_PORT") if name in environ)
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0].endswith(".py") else "train.py"
    to_run_alone = (f"To run a single process, unset them (`unset RANK LOCAL_RANK WORLD_SIZE`, or "
                    f"os.environ.pop(...) in a notebook); to run several, start them with "
                    f"`torchrun --nproc_per_node N {script} ...`, which sets all of them")
    if launch.world_size == 0 or launch.rank >= launch.world_size:
        raise UserError(f"the environment says this is process RANK {launch.rank} of WORLD_SIZE "
                        f"{launch.world_size} ({found}), which cannot be: ranks run from 0 to WORLD_SIZE - 1. "
                        f"{to_run_alone}.")
    missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not environ.get(name)]
    if launch.world_size > 1 and missing:
        raise UserError(f"the environment says this is process {launch.rank} of {launch.world_size} ({found}), but "
                        f"{' and '.join(missing)}, which torchrun sets along with them, "
                        f"{'is' if len(missing) == 1 else 'are'} missing, so these variables are probably left over "
                        f"from another job or a notebook, not set by a launcher. {to_run_alone}.")


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




def pick_device(requested: str, local_rank: int = 0) -> torch.device:
    """`--device auto|cpu|cuda` to a concrete device: cuda:LOCAL_RANK when processes share a node's
    GPUs, cuda:0 when each process sees a single GPU (srun --gpus-per-task=1, or one GPU shared)."""
    if requested == "cpu":
        return torch.device("cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda was given but PyTorch sees no CUDA GPU on this machine; "
                        "use --device cpu (or --device auto) to train on the CPU.")
    if requested == "cuda" or (requested == "auto" and torch.cuda.is_available()):
        visible = torch.cuda.device_count()
        if visible > 1 and local_rank >= visible:
            raise UserError(f"process {local_rank} on this node would use cuda:{local_rank}, but only {visible} GPUs "
                            f"are visible: start at most {visible} processes per node (--nproc_per_node, "
                            f"--ntasks-per-node), or give each process one GPU (CUDA_VISIBLE_DEVICES).")
        return torch.device("cuda", local_rank if visible > 1 else 0)
    return torch.device("cpu")


def pick_backend(requested: str, device: torch.device) -> str:
    """`--ddp_backend auto|nccl|gloo` to a backend: auto is NCCL on CUDA and gloo on the CPU. NCCL
    needs a GPU of its own per process; gloo also runs with CUDA tensors, so several processes
    can share one GPU (slower; meant for testing the multi-process path on one GPU)."""
    if requested == "auto":
        return "nccl" if device.type == "cuda" else "gloo"
    if requested == "nccl" and device.type != "cuda":
        raise UserError(f"--ddp_backend nccl needs CUDA GPUs, but this run uses the {device.type}; use "
                        f"--ddp_backend gloo (or auto), or --device cuda on a GPU machine.")
    return requested


_started: DistContext | None = None  # what init_distributed found, until shutdown


def current_context() -> DistContext:
    """Who this process is: the DistContext `init_distributed` returned or, before it (while flags are
    parsed, or in a tool that never starts), what the launcher's environment says. The one answer to
    "which rank am I" for code that is not handed the context."""
    if _started is not None:
        return _started
    try:
        launch = launch_environment()
    except UserError:  # malformed launcher variables are reported by init_distributed
        launch = None
    if launch is None:
        return DistContext()
    return DistContext(rank=launch.rank, local_rank=launch.local_rank, world_size=launch.world_size)


def init_distributed(device: str = "auto", timeout_s: float = 1800.0, backend: str = "auto") -> DistContext:
    """Start this process: when launched as one of several, join the process group; otherwise run alone.

    The device is set before the process group is created, and given to NCCL, so that its
    barriers know their device instead of guessing.
    """
    global _started
    _started = _start(device, timeout_s, backend)
    return _started


def _start(device: str, timeout_s: float, backend: str) -> DistContext:
    launch = launch_environment()
    if launch is None or launch.world_size == 1:
        alone = DistContext(device=pick_device(device))
        if alone.device.type == "cuda":
            torch.cuda.set_device(alone.device)
        return alone

    rank, local_rank, world = launch.rank, launch.local_rank, launch.world_size
    chosen = pick_device(device, local_rank)
    backend = pick_backend(backend, chosen)
    timeout = datetime.timedelta(seconds=timeout_s)
    # torchrun may hand restarted workers the same key-value store as the workers they replace;
    # without a fresh key prefix per restart, the new processes read the dead ones' addresses
    # and fail to connect. (Seen with gloo and --max-restarts on torch 2.14.)
    store = _rendezvous(launch, timeout)
    store = dist.PrefixStore(f"img2img/restart_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)
    if chosen.type == "cuda":
        torch.cuda.set_device(chosen)
    if backend == "nccl":
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout,
                                device_id=chosen)
    else:
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    return DistContext(rank=rank, local_rank=local_rank, world_size=world, device=chosen, backend=backend)


def _rendezvous(launch: LaunchEnvironment, timeout: datetime.timedelta) -> dist.Store:
    """The key-value store all processes meet at. Not meeting them (they were never started, the address
    is unreachable, its port is taken) is a UserError naming the launch variables, as the usual cause is
    a launch that went wrong or variables left over from an earlier one, not a bug."""
    try:
        store, _, _ = next(dist.rendezvous(launch.rendezvous_url, launch.rank, launch.world_size, timeout=timeout))
        return store
    except dist.DistError as err:
        where = (f"MASTER_ADDR={os.environ.get('MASTER_ADDR')}, MASTER_PORT={os.environ.get('MASTER_PORT')}"
                 if launch.launcher == "torchrun" else launch.rendezvous_url)
        reason = " ".join(str(err).split()).rstrip(".")
        raise UserError(
            f"process {launch.rank} of {launch.world_size} (as {launch.launcher}'s variables say) could not meet the "
            f"others at {where} within --ddp_timeout {timeout.total_seconds():g} s: {reason}. "
            f"Check that all {launch.world_size} processes were started and reach that address, and that nothing "
            f"else uses the port; if this process was meant to run alone, the variables are left over from "
            f"another job: unset RANK, LOCAL_RANK, WORLD_SIZE (and the SLURM_STEP_* ones).") from None


def is_distributed() -> bool:
    """True inside a process group of two or more processes."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def is_main_process() -> bool:
    """True in a single process and on rank 0 (also in DataLoader workers forked from them)."""
    return current_context().is_main


def world_size() -> int:
    return current_context().world_size


def rank() -> int:
    return current_context().rank


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
                           f"(fingerprints {fingerprints.tolist()}); the processes are not training one model (a "
                           f"model of your own whose step calls self.net{name}(...) rather than the networks it "
                           f"is handed, step.nets.{name}(...), trains without DDP's all-reduce: docs/extending.md)")


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


def all_gather_tensor(tensor: torch.Tensor) -> list[torch.Tensor]:
    """Every rank's `tensor`, in rank order, on every rank, on `tensor`'s device (`[tensor]` in a
    single process).

    The shapes may differ between ranks (same number of dimensions): they are exchanged first,
    which waits for the device. No gradient flows back through the result.
    """
    if not is_distributed():
        return [tensor]
    home = tensor.device
    tensor = tensor.detach().to(_collective_device()).contiguous()  # gloo gathers CPU tensors only
    shape = torch.tensor(tensor.shape, dtype=torch.int64, device=tensor.device)
    shapes = [torch.empty_like(shape) for _ in range(dist.get_world_size())]
    dist.all_gather(shapes, shape)
    sizes = [tuple(s.tolist()) for s in shapes]
    largest = tuple(max(dims) for dims in zip(*sizes))
    padded = tensor
    if tensor.shape != largest:
        padded = tensor.new_zeros(largest)
        padded[tuple(slice(0, n) for n in tensor.shape)] = tensor
    gathered = [torch.empty_like(padded) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, padded)
    return [part[tuple(slice(0, n) for n in size)].to(home) for part, size in zip(gathered, sizes)]


class _GatherWithGradient(torch.autograd.Function):
    """All-gather along the first dimension whose backward hands each rank the sum over ranks of the
    gradients of its part (an all-reduce: gloo has no reduce-scatter)."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:
        ctx.home, ctx.count = tensor.device, tensor.shape[0]
        local = tensor.detach().to(_collective_device()).contiguous()
        parts = [torch.empty_like(local) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, local)
        return torch.cat(parts).to(ctx.home)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        summed = grad.detach().to(_collective_device()).contiguous().clone()
        dist.all_reduce(summed)
        start = dist.get_rank() * ctx.count
        return summed[start:start + ctx.count].to(ctx.home)


def all_gather_with_gradient(tensor: torch.Tensor) -> torch.Tensor:
    """Every rank's `tensor` (the same shape on each) concatenated along the first dimension, in rank
    order, on every rank; `tensor` itself in a single process. Gradients flow back: each rank's part
    gets the sum over ranks of the gradients of its copies, which DDP's averaging turns into the
    gradient of a loss that every rank computes alike from the whole (a log-sum-exp over the global
    batch trains as one process's would)."""
    if not is_distributed():
        return tensor
    return _GatherWithGradient.apply(tensor)


def broadcast_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """Rank 0's values of `tensor` (same shape on every rank), in place; `tensor` in a single process."""
    if is_distributed():
        moved = tensor.to(_collective_device())
        dist.broadcast(moved, src=0)
        if moved is not tensor:
            tensor.copy_(moved)
    return tensor


def global_batch_positions(local_count: int) -> list[int]:
    """Where this rank's `local_count` samples sit in the global batch of one step.

    The training sampler deals the global order out round-robin, so sample j of rank r is
    sample j * world_size + r of the batch one process with the whole global batch would load.
    """
    if not is_distributed():
        return list(range(local_count))
    return [j * dist.get_world_size() + dist.get_rank() for j in range(local_count)]


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
    env_rank = current_context().rank  # the error may come before the process group exists
    if env_rank == 0:
        print(message, file=sys.stderr, flush=True)  # user-facing: the error the program exits with
    else:
        # Most user errors (flags, dataset folder) hit every rank alike; the launcher (torchrun,
        # srun --kill-on-bad-exit) stops the other ranks as soon as rank 0 exits with the same
        # message, so waiting a moment keeps it to one copy. If rank 0 is fine (this rank alone read
        # a bad file), we say who failed.
        time.sleep(3.0)
        print(f"[rank {env_rank}] {message}", file=sys.stderr, flush=True)  # user-facing (as above)


def shutdown() -> None:
    """End this process's part in the process group, before the interpreter starts to shut down."""
    global _started
    _started = None
    # What still holds a DDP wrapper (and through it the process group) may sit in a reference cycle (an
    # exception's traceback and its frames, a closure, a module's hooks), which only the cycle collector
    # frees. A process group released during the interpreter's shutdown can abort the process (gloo's
    # threads release tensors that need the GIL: pytorch/pytorch#179291), as torchrun workers did now and
    # then under load after runs that had succeeded: collect such cycles now, while the group is alive.
    # Without a group there is nothing to release, and a full collection of a large heap is not free
    # (~0.3 s in a process that has trained before: every in-process run of the tests).
    if dist.is_available() and dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()
        gc.collect()


@contextmanager
def no_gradient_sync(modules: list[nn.Module]) -> Iterator[None]:
    """Within the block, the DDP-wrapped ones among `modules` keep the gradients of their backward
    passes local (DDP's `no_sync`): for the micro-batches of an accumulated step but its last, whose
    backward then all-reduces the sum once. Plain modules are left alone."""
    with ExitStack() as stack:
        for module in modules:
            module = getattr(module, "_orig_mod", module)  # --compile wraps the DDP module
            if isinstance(module, nn.parallel.DistributedDataParallel):
                stack.enter_context(module.no_sync())
        yield
