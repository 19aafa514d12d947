"""What the volume dataset modes (unaligned_volume, aligned_volume) share: their flags, the up-front check
of every file's header, a per-process cache of whole volumes, and the random patch of a training sample.

Training samples are random patches of --patch_size voxels: placed uniformly, or with probability
--foreground_fraction centred on a foreground voxel (one above the low end of its window by more than
`FOREGROUND_MARGIN` of the window), flipped along the first spatial axis with probability 1/2 (unless
--no_flip), the input's values jittered by --intensity_jitter. Every choice comes from the sample's own
generator (`BaseDataset.sample_rng`), in a fixed order of draws, so the same (seed, epoch, index) gives
the same patch whether its volume was cached or read lazily, in whatever worker.
"""
from __future__ import annotations

import argparse
import os
import random
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from data.base_dataset import BaseDataset, domain_specs
from data.image_folder import DomainSpec
from data.layout import RequiredFolder
from data.volume_io import (
    VOLUME_EXTENSIONS,
    Window,
    channel_mismatch,
    check_finite,
    probe_volume,
    read_region,
    read_volume,
    to_network,
    volume_window,
)
from util.errors import UserError
from util.evaluation.metrics import EVAL_MASKS
from util.flag_types import Bounded, fraction_below_one, non_negative_float

Shape3 = tuple[int, int, int]

FOREGROUND_MARGIN = 0.05  # foreground: above the window's low end by more than this fraction of the window
# Foreground patch positions kept per volume (evenly spaced among all of them, in voxel order): bounds the
# memory they take (12 bytes each) for volumes of any size, while still spreading over all the foreground.
MAX_FOREGROUND_POSITIONS = 65536


# The most voxels a patch (a window of whole-volume inference) may hold: 512^3. It is allocated per image of a
# batch (and per window of --window_batch), with the network's activations many times that.
MAX_PATCH_VOXELS = 2 ** 27


def patch_size(text: str) -> Shape3:
    """An argparse `type` for --patch_size: "64" (a cube) or "64,64,32" -> (D, H, W), each at least 1, at most
    `MAX_PATCH_VOXELS` voxels in all."""
    parts = [part.strip() for part in text.replace("x", ",").split(",")]
    if len(parts) not in (1, 3) or not all(part.isdigit() and int(part) >= 1 for part in parts):
        raise argparse.ArgumentTypeError(f"expected one whole number >= 1 (a cube) or three separated by commas "
                                         f"(D,H,W in the files' voxel order), e.g. 64 or 64,64,32; got {text!r}")
    sides = [int(part) for part in parts]
    sides = tuple(sides * 3 if len(sides) == 1 else sides)
    if np.prod(sides, dtype=object) > MAX_PATCH_VOXELS:
        raise argparse.ArgumentTypeError(f"{'x'.join(map(str, sides))} voxels is more than the {MAX_PATCH_VOXELS} "
                                         f"(512^3) a patch may hold; got {text!r}")
    return sides


fraction = Bounded(float, low=0, high=1, name="fraction")  # 0 <= x <= 1
# How whole volumes are translated unless told otherwise (test.py, validation, the Translator)
WINDOW_OVERLAP, WINDOW_BATCH = 0.5, 4
MAX_WINDOW_BATCH = 1024  # windows through the generator at once
window_batch = Bounded(int, low=1, high=MAX_WINDOW_BATCH, name="window_batch")
# Patches of each volume per epoch: the epoch's order of samples is a list of this many times the volumes
MAX_PATCHES_PER_VOLUME = 100_000
# Voxels of the patches (windows) that go through a network at once: --batch_size (--window_batch) x --patch_size
MAX_BATCH_VOXELS = 2 ** 28


def batch_refusal(flag: str, count: int, patch: Sequence[int]) -> str | None:
    """Why `count` patches of `patch` voxels at once (`flag`: --batch_size or --window_batch) are too many, or
    None: together they may hold at most `MAX_BATCH_VOXELS` voxels (1 GiB of float32 per channel)."""
    voxels = count * int(np.prod(patch, dtype=object))
    if voxels <= MAX_BATCH_VOXELS:
        return None
    fewer = max(MAX_BATCH_VOXELS // int(np.prod(patch, dtype=object)), 1)
    return (f"{flag} {count} patches of {'x'.join(map(str, patch))} voxels at once are {voxels:.3g} voxels, more than "
            f"the {MAX_BATCH_VOXELS:.3g} a batch may hold (MAX_BATCH_VOXELS, data/volume_patches.py); pass {flag} "
            f"{fewer} or less, or a smaller --patch_size")


def add_window_flags(parser: Any, from_run: bool = False) -> Any:
    """--patch_size, --window_overlap and --window_batch, into `parser` (or an argument group): the patches
    volumes are trained on, and the sliding windows whole volumes are translated in (test.py, validation,
    models/inference/windows.py). `from_run`, for a tool that loads a trained run (scripts/translate.py):
    each defaults to None, the run's own --patch_size and WINDOW_OVERLAP, WINDOW_BATCH as test.py."""
    parser.add_argument("--patch_size", type=patch_size, default=None if from_run else (64, 64, 64), metavar="D[,H,W]",
                        on_resume="noted",
                        help="patches of this many voxels: one number for a cube, or three (D,H,W in the files' "
                             "voxel order), e.g. 64,64,32; training patches, and the windows whole volumes are "
                             "translated in" + ("; default: the --patch_size the run trained on (its "
                                                "train_opt.json)" if from_run else ""))
    parser.add_argument("--window_overlap", type=fraction_below_one, default=None if from_run else WINDOW_OVERLAP,
                        metavar="F", on_resume="silent",
                        help="whole volumes are translated in windows of --patch_size overlapping by this fraction "
                             "of a window (0 <= F < 1), blended with Gaussian weights so that no seams show"
                             + (f"; default {WINDOW_OVERLAP}, as test.py" if from_run else ""))
    parser.add_argument("--window_batch", type=window_batch, default=None if from_run else WINDOW_BATCH, metavar="N",
                        on_resume="silent",
                        help="windows translated at once when a whole volume is translated (memory vs speed)"
                             + (f"; default {WINDOW_BATCH}" if from_run else ""))
    return parser


def add_volume_flags(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The flags of the volume dataset modes."""
    parser = add_window_flags(parser)
    parser.add_argument("--patches_per_volume",
                        type=Bounded(int, low=1, high=MAX_PATCHES_PER_VOLUME, name="patches_per_volume"),
                        default=1, metavar="N", on_resume="noted",
                        help="training patches drawn from each volume per epoch (an epoch has N x the volumes' count "
                             "samples: a few large volumes still make many steps)")
    parser.add_argument("--foreground_fraction", type=fraction, default=0.0, metavar="F", on_resume="noted",
                        help="this fraction of training patches is centred on a foreground voxel (one above the low "
                             "end of its volume's --data_range window by more than 5%% of the window, e.g. tissue "
                             "rather than air); the others, and all with 0, are placed uniformly")
    parser.add_argument("--intensity_jitter", type=non_negative_float, default=0.0, metavar="S", on_resume="noted",
                        help="augment the input volume's values (after the window, in -1..1) by scaling them by "
                             "1+u1 and shifting them by u2, u1 and u2 uniform in [-S, S] per patch (paired data: "
                             "the input side only); 0: off")
    parser.add_argument("--volume_cache_mb", type=non_negative_float, default=2048.0, on_resume="silent",
                        help="keep whole volumes in memory, in each data loader process, up to this many MB (the "
                             "least recently used dropped first); patches of volumes beyond it are read from the "
                             "files (fast for .nii and .npy, a .nii.gz is decompressed up to the patch)")
    # How whole volumes are scored (test.py, validation)
    parser.add_argument("--eval_mask", choices=EVAL_MASKS, default="none", on_resume="silent",
                        help="where test.py and validation score volumes: none (every voxel) or foreground (the "
                             "target's voxels above the low end of its --data_range window by more than 5%% of "
                             "it: the body, not the air around it)")
    return parser


def volume_folder(path: str, why: str) -> RequiredFolder:
    """A folder that must hold volume files."""
    return RequiredFolder(path, why, when_empty=(
        f"folder {path} contains no volumes; accepted extensions are {', '.join(VOLUME_EXTENSIONS)} in any letter "
        f"case. Add volumes or fix --dataroot/--phase."), extensions=VOLUME_EXTENSIONS)


@dataclass(frozen=True)
class VolumeFile:
    """A volume file as a domain reads it: its shape (C, D, H, W), its window (--data_range), the
    channel count and flag it is read with, and where its voxels lie (`affine`, None for .npy)."""
    path: str
    shape: tuple[int, int, int, int]
    window: Window
    spec: DomainSpec
    affine: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def spatial_shape(self) -> Shape3:
        return self.shape[1:]

    @property
    def nbytes(self) -> int:
        """Bytes of the volume in network units (float32)."""
        return int(np.prod(self.shape)) * 4


def scan_volumes(paths: Sequence[str], spec: DomainSpec) -> list[VolumeFile]:
    """The files of one domain, each checked from its header (readable and whole, of a size within
    `MAX_VOLUME_VOXELS`, `spec.channels` channels, a window) and then, for float data, read once for NaN
    or infinite values: a bad file is refused before any model is built, whatever --volume_cache_mb.
    Raises `UserError` for the first bad one."""
    files = []
    for path in paths:
        info = probe_volume(path)
        if info.shape[0] != spec.channels:
            raise channel_mismatch(info, spec.channels, spec.flag)
        window = volume_window(info, spec.data_range)
        check_finite(info)
        files.append(VolumeFile(path, info.shape, window, spec, info.affine))
    return files


def check_patch_fits(files: Sequence[VolumeFile], patch: Shape3) -> None:
    """Refuse a volume smaller than --patch_size on any axis."""
    for file in files:
        if any(n < p for n, p in zip(file.spatial_shape, patch)):
            raise UserError(
                f"volume {file.path} is {'x'.join(map(str, file.spatial_shape))} voxels, smaller than --patch_size "
                f"{','.join(map(str, patch))} on at least one axis, so no training patch fits in it; choose a smaller "
                f"--patch_size (three numbers D,H,W may differ per axis), or pad or remove the volume.")


class VolumeCache:
    """Arrays by key, at most `budget_bytes` of them together; the least recently used dropped first."""

    def __init__(self, budget_bytes: float) -> None:
        self.budget_bytes = float(budget_bytes)
        self._items: OrderedDict[Hashable, np.ndarray] = OrderedDict()
        self.nbytes = 0

    def get(self, key: Hashable) -> np.ndarray | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: Hashable, value: np.ndarray) -> None:
        """Keep `value` if it fits in the budget at all, dropping the least recently used to make room."""
        if value.nbytes > self.budget_bytes or key in self._items:
            return
        while self._items and self.nbytes + value.nbytes > self.budget_bytes:
            _, dropped = self._items.popitem(last=False)
            self.nbytes -= dropped.nbytes
        self._items[key] = value
        self.nbytes += value.nbytes

    def __getstate__(self) -> dict[str, Any]:
        # A loader process started by pickling (spawn) begins with an empty cache of its own.
        return {"budget_bytes": self.budget_bytes, "_items": OrderedDict(), "nbytes": 0}


def foreground_corners(volume: np.ndarray, patch: Shape3) -> np.ndarray:
    """Corners (K x 3, int32) of the patches of `volume` (C, D, H, W, network units) whose centre voxel
    (corner + patch // 2) is foreground in any channel; at most `MAX_FOREGROUND_POSITIONS`, evenly spread."""
    threshold = -1.0 + 2.0 * FOREGROUND_MARGIN
    centres = tuple(slice(p // 2, p // 2 + n - p + 1) for n, p in zip(volume.shape[1:], patch))
    mask = (volume[(slice(None), *centres)] > threshold).any(axis=0)
    flat = np.flatnonzero(mask)
    if flat.size > MAX_FOREGROUND_POSITIONS:
        flat = flat[np.linspace(0, flat.size - 1, MAX_FOREGROUND_POSITIONS).round().astype(np.int64)]
    return np.stack(np.unravel_index(flat, mask.shape), axis=1).astype(np.int32)


class VolumeReader:
    """Reads volumes in network units for one process: whole ones kept in a `VolumeCache` of
    --volume_cache_mb, patches of those beyond it read lazily (`read_region`)."""

    def __init__(self, cache_mb: float) -> None:
        self.cache = VolumeCache(cache_mb * 2 ** 20)

    @staticmethod
    def whole(file: VolumeFile) -> np.ndarray:
        """The whole volume (C, D, H, W) in [-1, 1], read now (not cached: inference reads each once)."""
        return to_network(read_volume(file.path, file.spec.channels, file.spec.flag).array, file.window)

    def _cached_whole(self, file: VolumeFile) -> np.ndarray | None:
        """The whole volume from the cache, read into it when it fits there; None when it does not."""
        key = (file.path, file.window)  # both domains may read one file, each with its own window
        volume = self.cache.get(key)
        if volume is None and file.nbytes <= self.cache.budget_bytes:
            volume = self.whole(file)
            self.cache.put(key, volume)
        return volume

    def patch(self, file: VolumeFile, corner: Shape3, size: Shape3) -> np.ndarray:
        """The box of `size` voxels at `corner`, (C, d, h, w) in [-1, 1]: the same values whether cached or not."""
        volume = self._cached_whole(file)
        if volume is None:
            return to_network(read_region(file.path, file.spec.channels, corner, size, file.spec.flag), file.window)
        return volume[(slice(None), *(slice(c, c + s) for c, s in zip(corner, size)))].copy()

    def foreground(self, file: VolumeFile, patch: Shape3) -> np.ndarray:
        """`foreground_corners` of `file` for `patch`, cached (they need the whole volume)."""
        key = (file.path, file.window, "foreground", patch)
        corners = self.cache.get(key)
        if corners is None:
            volume = self._cached_whole(file)
            corners = foreground_corners(self.whole(file) if volume is None else volume, patch)
            self.cache.put(key, corners)
        return corners


class VolumeDataset(BaseDataset):
    """What both volume modes share: the flags, the reader and the training patch (see the module docstring).

    Subclasses set `self.files` (their domains' `VolumeFile`s) before calling `check_files`."""

    spatial_dims = 3

    @staticmethod
    def modify_commandline_options(parser: argparse.ArgumentParser, is_train: bool) -> argparse.ArgumentParser:
        """--patch_size, --foreground_fraction, --intensity_jitter, --volume_cache_mb, and how whole volumes
        are translated and scored (--window_overlap, --window_batch, --eval_mask)."""
        return add_volume_flags(parser)

    def __init__(self, opt: argparse.Namespace) -> None:
        super().__init__(opt)
        self.spec_A, self.spec_B = domain_specs(opt)
        self.patch: Shape3 = tuple(opt.patch_size)
        self.training = opt.isTrain
        self.reader = VolumeReader(opt.volume_cache_mb)

    def domain_files(self, domain: str) -> list[VolumeFile]:
        """The files of domain "A" or "B"."""
        raise NotImplementedError

    def samples(self, volumes: int) -> int:
        """How many samples an epoch of `volumes` volumes has: --patches_per_volume patches of each when
        training (sample i cuts a patch of volume i % volumes), each volume once whole for inference."""
        return volumes * (self.opt.patches_per_volume if self.training else 1)

    def window(self, domain: str) -> Window:
        """The values of domain "A" or "B" that map to the network's -1 and 1 (of its first file: every
        file of a domain has the --data_range window, or, uint8 data without one, 0..255)."""
        return self.domain_files(domain)[0].window

    def scan(self, paths: Sequence[str], spec: DomainSpec) -> list[VolumeFile]:
        """`scan_volumes`, and for training the check that every volume holds a patch."""
        files = scan_volumes(paths, spec)
        if self.training:
            check_patch_fits(files, self.patch)
        return files

    # ----------------------------------------------------------------------------------- training patches
    def draw_corner(self, rng: random.Random, file: VolumeFile) -> Shape3:
        """A patch corner in `file`: centred on a foreground voxel with probability --foreground_fraction
        (uniform when the volume has none where a patch fits), else uniform."""
        wants_foreground = rng.random() < self.opt.foreground_fraction
        if wants_foreground:
            corners = self.reader.foreground(file, self.patch)
            if len(corners):
                return tuple(int(c) for c in corners[rng.randrange(len(corners))])
        return tuple(rng.randint(0, n - p) for n, p in zip(file.spatial_shape, self.patch))

    def draw_flip(self, rng: random.Random) -> bool:
        """Whether to flip along the first spatial axis (drawn with --no_flip too, so later draws do not shift)."""
        return rng.random() < 0.5 and not self.opt.no_flip

    def draw_jitter(self, rng: random.Random) -> tuple[float, float]:
        """(scale, shift) of --intensity_jitter (drawn when it is 0 too)."""
        strength = self.opt.intensity_jitter
        return 1.0 + rng.uniform(-strength, strength), rng.uniform(-strength, strength)

    @staticmethod
    def finish(patch: np.ndarray, flip: bool, jitter: tuple[float, float] | None = None) -> torch.Tensor:
        """The patch flipped and jittered as drawn, as a contiguous float tensor in [-1, 1]."""
        if flip:
            patch = patch[:, ::-1]
        if jitter is not None and jitter != (1.0, 0.0):
            scale, shift = jitter
            patch = np.clip(patch * np.float32(scale) + np.float32(shift), -1.0, 1.0)
        return torch.from_numpy(np.ascontiguousarray(patch, dtype=np.float32))

    def random_patch(self, rng: random.Random, file: VolumeFile, jitter: bool) -> torch.Tensor:
        """One training patch of `file` (corner, flip, jitter drawn in that order; jitter used if `jitter`)."""
        corner = self.draw_corner(rng, file)
        flip, scale_shift = self.draw_flip(rng), self.draw_jitter(rng)
        return self.finish(self.reader.patch(file, corner, self.patch), flip, scale_shift if jitter else None)

    def whole(self, file: VolumeFile) -> torch.Tensor:
        """The whole volume (inference: no patch, flip or jitter)."""
        return torch.from_numpy(self.reader.whole(file))


def split_folders(root: str, phase: str) -> tuple[str, str]:
    """`<phase>/A` and `<phase>/B` when both are folders, else `<phase>A` and `<phase>B`."""
    inside = os.path.join(root, phase, "A"), os.path.join(root, phase, "B")
    if all(os.path.isdir(folder) for folder in inside):
        return inside
    return os.path.join(root, phase + "A"), os.path.join(root, phase + "B")

