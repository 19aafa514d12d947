"""train.py and test.py keep the memory a step frees for the next step (glibc's malloc), unless the user
chose the allocator's settings."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from conftest import ROOT

# A step's pattern in small: activations of 1-16 MiB, then gradients in the reverse order, all freed; six
# times, counting the page faults of each.
STEPS = """
import json, resource, torch
from util.host_memory import keep_freed_memory
kept = keep_freed_memory()
faults = []
for _ in range(6):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    activations = [torch.empty(n << 18).fill_(1.0) for n in (16, 8, 4, 2, 1, 1, 2, 4, 8, 16)]
    gradients = [torch.empty_like(a).fill_(2.0) for a in reversed(activations)]
    del activations, gradients
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"kept": kept, "faults": faults}))
"""
PAGES_PER_STEP = 2 * 62 * (1 << 20) // 4096  # 124 MiB in 4 KiB pages


def steps(extra_env: dict[str, str]) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "LD_PRELOAD"}
    env.update(extra_env, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    result = subprocess.run([sys.executable, "-c", STEPS], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")
def test_freed_blocks_are_reused_without_faulting_them_in_again():
    default = steps({})
    assert default["kept"] is True
    # Once the first steps have taken the memory, later ones mostly reuse it: on average under an eighth of
    # their pages faulted in (seen: 0-2,048 of 31,744; glibc's own thresholds fault in ~25,000 every time
    # with Linux 6.18 and glibc 2.36). Where a block lands depends on what else the process allocated.
    later = default["faults"][2:]
    assert sum(later) / len(later) < PAGES_PER_STEP / 8, default


@pytest.mark.skipif(platform.system() != "Linux", reason="glibc's malloc only")
def test_the_users_own_allocator_setting_wins():
    assert steps({"MALLOC_MMAP_THRESHOLD_": "131072"})["kept"] is False
    assert steps({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"})["kept"] is False
