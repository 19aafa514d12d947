"""How the process's C allocator treats the memory a training step frees.

A step on the CPU allocates and frees the same few hundred megabytes of activations and gradients every
time. glibc's malloc, by default, hands large freed blocks back to the operating system (blocks above its
mmap threshold, which grows to at most 32 MiB, and the free top of the heap beyond its trim threshold), so
the next step takes them again page by page: a pix2pix step at 256 px took ~90,000 page faults, each
zeroing a page, about a tenth of the step (docs/benchmarks.md). `keep_freed_memory` asks malloc to keep
such blocks for reuse instead. The process then holds its peak memory between steps (it reaches that peak
every step anyway); the arithmetic does not change.

The user's own choice wins: with glibc's MALLOC_* variables or a malloc tunable in GLIBC_TUNABLES set, or
another allocator preloaded (jemalloc, tcmalloc), nothing is changed. `MALLOC_MMAP_THRESHOLD_=131072` in
the environment restores glibc's default behaviour.
"""
from __future__ import annotations

import ctypes
import logging
import os
import platform

logger = logging.getLogger(__name__)

# mallopt's parameter numbers (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# Blocks up to this size come from the heap and are kept there when freed. glibc before 2.26 caps the
# threshold at 32 MiB (then the larger blocks of a large image still go back and forth).
KEEP_BLOCKS_UP_TO = 1 << 30
KEEP_BLOCKS_UP_TO_OLD_GLIBC = 32 << 20
# The free top of the heap is given back only beyond this much.
KEEP_FREE_TOP_UP_TO = 2 << 30

USER_ALLOCATOR_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                           "MALLOC_ARENA_MAX")


def user_chose_allocator() -> bool:
    """Whether the environment already says how memory is allocated (glibc's variables, its malloc
    tunables, or a preloaded allocator)."""
    if any(name in os.environ for name in USER_ALLOCATOR_SETTINGS):
        return True
    if "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        return True
    preloaded = os.environ.get("LD_PRELOAD", "")
    return any(name in preloaded for name in ("jemalloc", "tcmalloc", "mimalloc"))


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to keep freed blocks of up to 1 GiB for reuse; True where it now does.
    Nothing happens off Linux's glibc or where the user chose the allocator's settings."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc" or user_chose_allocator():
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    # mallopt returns 1 where it took the value
    kept = libc.mallopt(M_MMAP_THRESHOLD, KEEP_BLOCKS_UP_TO) == 1 or \
        libc.mallopt(M_MMAP_THRESHOLD, KEEP_BLOCKS_UP_TO_OLD_GLIBC) == 1
    if kept and libc.mallopt(M_TRIM_THRESHOLD, KEEP_FREE_TOP_UP_TO) == 1:
        return True
    logger.debug("glibc's malloc did not take the thresholds; freed memory goes back to the system")
    return False
