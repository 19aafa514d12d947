"""The machine a run measures on, the device it picks, and the datasets of the loop section."""
from __future__ import annotations

import importlib.util
import os
import platform
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port free on this host now (for torchrun's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def load_average() -> list[float] | None:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def _lscpu() -> tuple[str | None, str]:
    """(model name, flags) from lscpu, (None, "") where it is missing."""
    model, flags = None, ""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return model, flags
    for line in out.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Model name":
            model = value.strip()
        if key.strip() == "Flags":
            flags = value
    return model, flags


def _compiler_version() -> str | None:
    """First line of `gcc --version` (or cc): the compiler torch.compile would use on the CPU."""
    compiler = shutil.which("gcc") or shutil.which("cc")
    if not compiler:
        return None
    try:
        done = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=10)
        return done.stdout.splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def machine_info(device: str) -> dict[str, Any]:
    import torch
    cpu_model, flags = _lscpu()
    info = {
        "cpu_model": cpu_model or platform.processor() or platform.machine(),
        "cores_usable": usable_cores(),
        "cpu_bf16_instructions": {name: name in flags.split() for name in ("avx512_bf16", "amx_bf16")},
        "torch": torch.__version__, "python": platform.python_version(), "platform": platform.platform(),
        "compiler": _compiler_version(), "device": device,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def pick_device(requested: str) -> str:
    """"cpu" or "cuda", chosen as train.py chooses (util.distributed.pick_device)."""
    from util.distributed import pick_device as pick_training_device
    from util.errors import UserError
    try:
        return pick_training_device(requested).type
    except UserError as err:
        sys.exit(f"benchmark: {err}")


def dataset_layout(path: Path) -> str | None:
    """'cycle_gan' for trainA+trainB folders, 'pix2pix' for an aligned train folder."""
    if (path / "trainA").is_dir() and (path / "trainB").is_dir():
        return "cycle_gan"
    if (path / "train").is_dir():
        return "pix2pix"
    return None


def demo_dataset(model: str, size: int, images: int, parent: Path) -> Path:
    """A demo dataset (scripts/make_demo_dataset.py) with `images` training images at `size`."""
    spec = importlib.util.spec_from_file_location("make_demo_dataset", ROOT / "scripts" / "make_demo_dataset.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    folder = parent / f"{model}_{size}"
    if model == "cycle_gan":
        return module.make_cyclegan_demo(folder, size, 0, images, 2)
    return module.make_pix2pix_demo(folder, size, 0, images, 2, 2)
