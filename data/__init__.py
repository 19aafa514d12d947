"""Datasets and the loader that batches them.

`find_dataset_using_name(mode)` finds the class a `--dataset_mode` names (data/registry.py: a
built-in `data/<mode>_dataset.py`, or a user's module by its dotted path); `DATASETS` maps the
built-in modes to their classes. `create_dataset(opt, seed, ...)`
checks the dataset folder, builds the dataset and wraps it in a `DatasetLoader`, whose
(possibly distributed) sampler and per-sample RNG make every epoch reproducible from `seed`.
`CustomDatasetDataLoader`, the reference's loader class, is a face over it for its users' code.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Iterator
from typing import Any

import torch.utils.data

from data.base_dataset import BaseDataset, options_at_crop_size
from data.input_checks import check_dataset_root, check_image_files
from data.registry import (
    built_in_datasets,
    builtin_dataset_names,
    dataset_mode_name,
    find_dataset_using_name,
    get_option_setter,
)
from data.samplers import EpochIndexedDataset, InferenceShardSampler, TrainingSampler
from util.console import THIS_RANK
from util.distributed import DistContext, current_context
from util.errors import UserError

logger = logging.getLogger(__name__)

__all__ = ["DATASETS", "builtin_dataset_names", "CustomDatasetDataLoader", "DatasetLoader", "create_dataset",
           "dataset_mode_name", "find_dataset_using_name", "folders_read", "get_option_setter", "spatial_dims"]

DATASETS: dict[str, type[BaseDataset]] = built_in_datasets()


def spatial_dims(opt: argparse.Namespace) -> int:
    """2 for pictures, 3 for volumes: what the dataset of `--dataset_mode` gives (its `spatial_dims`)."""
    return getattr(find_dataset_using_name(opt.dataset_mode), "spatial_dims", 2)


def folders_read(opt: argparse.Namespace) -> list[str]:
    """The folders the `--dataset_mode` dataset reads its files from under `opt` (its `required_folders`),
    or --dataroot for a dataset that declares none: what a run must never write into."""
    try:
        folders = find_dataset_using_name(opt.dataset_mode).required_folders(opt)
    except UserError:  # a dataset's own refusal is reported where its folders are checked, in its own words
        folders = []
    return [folder.path for folder in folders] or [opt.dataroot]


class DatasetLoader:
    """A dataset with its sampler and DataLoader; iterate it for batches of one epoch.

    Call `set_epoch(epoch)` before iterating each epoch: it reshuffles (seeded) and changes
    the augmentations. With world_size > 1 each rank gets a disjoint share of the samples
    (the sampler pads the last share by repeating samples so all ranks have equal counts).
    """

    def __init__(self, opt: argparse.Namespace, dataset: BaseDataset, seed: int,
                 rank: int = 0, world_size: int = 1, device_type: str = "cpu",
                 limit: int | None = None) -> None:
        self.opt = opt
        self.dataset = dataset
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        if opt.isTrain:
            self.sampler = TrainingSampler(len(dataset), rank, world_size, shuffle=not opt.serial_batches, seed=seed)
        else:
            # Inference: the first `limit` images, dealt out round-robin with no padding, so that
            # the ranks together process every image exactly once.
            self.sampler = InferenceShardSampler(len(dataset), rank, world_size, limit)
        # The loader draws its workers' seeds from its own generator, never from the global torch
        # RNG, so loading data does not change the random stream that training (dropout) sees.
        self.generator = torch.Generator()
        self.generator.manual_seed(seed)
        served = SkipBadImages(dataset) if opt.skip_bad_images else dataset
        if opt.isTrain:
            served = EpochIndexedDataset(served, dataset)
        # More workers than cores only adds contention. Workers persist across epochs (no
        # re-forking each epoch); they learn the epoch from the sampler's (epoch, index) keys.
        workers = min(int(opt.num_threads), len(os.sched_getaffinity(0)))
        self.dataloader = torch.utils.data.DataLoader(
            served, batch_size=opt.batch_size, sampler=self.sampler, generator=self.generator,
            num_workers=workers, persistent_workers=workers > 0, pin_memory=device_type == "cuda",
            drop_last=False,
        )

    def first_sample(self) -> dict[str, Any]:
        """The first sample as training would load it (so --skip_bad_images applies)."""
        served = self.dataloader.dataset
        return served[(0, 0)] if isinstance(served, EpochIndexedDataset) else served[0]

    def set_epoch(self, epoch: int, images_done: int = 0) -> None:
        """Select the order and augmentations of `epoch`, skipping its first `images_done` samples
        (counted over all ranks) when resuming in the middle of it."""
        if isinstance(self.sampler, TrainingSampler):
            self.sampler.set_epoch(epoch, images_done)
        self.generator.manual_seed(hash((self.seed, epoch, self.rank)) & 0xFFFF_FFFF)
        self.dataset.set_epoch(epoch)

    def __len__(self) -> int:
        """Number of samples in the dataset, capped at --max_dataset_size."""
        return int(min(len(self.dataset), self.opt.max_dataset_size))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        already = getattr(self.sampler, "images_done", 0) // self.world_size
        batches = iter(self.dataloader)
        try:
            for i, batch in enumerate(batches):
                if already + i * self.opt.batch_size >= self.opt.max_dataset_size:
                    break
                yield batch
        except Exception:
            self._stop_workers(batches)
            raise

    def _stop_workers(self, batches: Iterator) -> None:
        """End the loader's worker processes after an error (a bad image) raised through `batches`.
        Left to the garbage collector -- the error's traceback holds the iterator in a reference
        cycle -- PyTorch's shutdown meets the workers' queues already closed and waits 5 s for each
        worker before the process can exit."""
        shutdown = getattr(batches, "_shutdown_workers", None)  # only a multi-process iterator has workers
        if shutdown is not None:
            shutdown()
            if getattr(self.dataloader, "_iterator", None) is batches:  # persistent workers: start anew
                self.dataloader._iterator = None


class SkipBadImages(torch.utils.data.Dataset):
    """With --skip_bad_images: an unreadable sample is replaced by the next readable one, with a
    warning naming the file, instead of stopping the run."""

    def __init__(self, dataset: BaseDataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> dict[str, Any]:
        for attempt in range(len(self.dataset)):
            try:
                return self.dataset[(index + attempt) % len(self.dataset)]
            except UserError as err:
                # This process's own trouble: only it read that file.
                logger.warning("skipping a bad image (--skip_bad_images): %s", err, extra=THIS_RANK)
        raise UserError("--skip_bad_images: no readable image left in the dataset; check --dataroot.")


def create_dataset(opt: argparse.Namespace, seed: int = 0, ctx: DistContext | None = None, limit: int | None = None,
                   size_rule=None, crop_size_from: int | None = None) -> DatasetLoader:
    """Check the dataset folder, build the `--dataset_mode` dataset and its loader.

    `seed` fixes the shuffle and all augmentations (0 for the reference's callers, who pass only `opt`);
    `ctx` (default: `current_context()`, this process as started, one process on the CPU when nothing
    was) selects this process's share for distributed training, and a CUDA device enables pinned memory.
    At inference (`opt.isTrain` false) the ranks share the first `limit` samples, each once.
    `size_rule` (the generator's `networks.SizeRule`) refuses image sizes the generator cannot take.
    From epoch `crop_size_from` on, images load at --crop_size (`BaseDataset.load_at_crop_size_from`).
    Raises `UserError` for problems with the dataset folder or flags.
    """
    ctx = ctx or current_context()
    return DatasetLoader(opt, _checked_dataset(opt, seed, size_rule, crop_size_from), seed, rank=ctx.rank,
                         world_size=ctx.world_size, device_type=ctx.device.type, limit=limit)


def _checked_dataset(opt: argparse.Namespace, seed: int, size_rule=None,
                     crop_size_from: int | None = None) -> BaseDataset:
    dataset_class = find_dataset_using_name(opt.dataset_mode)
    check_dataset_root(opt, size_rule)
    if crop_size_from is not None and "scale_width" in opt.preprocess:
        # the width those epochs scale to is --crop_size: each image's height then must suit the generator too
        try:
            check_image_files(options_at_crop_size(opt), size_rule)
        except UserError as err:
            raise UserError(f"from epoch {crop_size_from} on (the decay epochs of --model {opt.model}, CUT's and "
                            f"UNSB's recipe) images load at --crop_size {opt.crop_size}, read below as --load_size: "
                            f"{err}") from None
    dataset = dataset_class(opt)
    dataset.set_seed(seed)
    if crop_size_from is not None:
        dataset.load_at_crop_size_from(crop_size_from)
    return dataset


class CustomDatasetDataLoader(DatasetLoader):
    """Compatibility face for the reference's users: the `DatasetLoader` that `create_dataset(opt)` makes
    (seed 0, this process's share), built from `opt` alone; `load_data()` returns it."""

    def __init__(self, opt: argparse.Namespace) -> None:
        ctx = current_context()
        super().__init__(opt, _checked_dataset(opt, 0), 0, rank=ctx.rank, world_size=ctx.world_size,
                         device_type=ctx.device.type)

    def load_data(self) -> CustomDatasetDataLoader:
        return self
