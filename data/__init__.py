"""Datasets and the loader that batches them.

`DATASETS` maps each `--dataset_mode` name to its class. `create_dataset(opt, seed, ...)`
checks the dataset folder, builds the dataset and wraps it in a `DatasetLoader`, whose
(possibly distributed) sampler and per-sample RNG make every epoch reproducible from `seed`.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch.utils.data

from data.aligned_dataset import AlignedDataset
from data.base_dataset import BaseDataset
from data.colorization_dataset import ColorizationDataset
from data.single_dataset import SingleDataset
from data.template_dataset import TemplateDataset
from data.unaligned_dataset import UnalignedDataset
from data.validation import check_dataset_root
from util.errors import UserError

DATASETS: dict[str, type[BaseDataset]] = {
    "aligned": AlignedDataset,
    "unaligned": UnalignedDataset,
    "single": SingleDataset,
    "colorization": ColorizationDataset,
    "template": TemplateDataset,
}


def find_dataset_using_name(name: str) -> type[BaseDataset]:
    """The dataset class registered as `name`; raises `UserError` listing the valid names."""
    try:
        return DATASETS[name]
    except KeyError:
        raise UserError(
            f"unknown --dataset_mode {name!r}; use one of {', '.join(DATASETS)} "
            f"(custom datasets must be added to DATASETS in data/__init__.py)."
        ) from None


def get_option_setter(name: str) -> Callable[[argparse.ArgumentParser, bool], argparse.ArgumentParser]:
    """The `modify_commandline_options` static method of dataset `name`."""
    return find_dataset_using_name(name).modify_commandline_options


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
        if opt.isTrain:
            # One code path for 1 and N processes: with num_replicas=1 this is a plain seeded,
            # epoch-dependent shuffle (or sequential order with --serial_batches).
            self.sampler = torch.utils.data.DistributedSampler(
                dataset, num_replicas=world_size, rank=rank, shuffle=not opt.serial_batches,
                seed=seed, drop_last=False,
            )
        else:
            # Inference: the first `limit` images, dealt out round-robin with no padding, so that
            # the ranks together process every image exactly once.
            self.sampler = InferenceShardSampler(len(dataset), rank, world_size, limit)
        # Workers are not persistent: they are forked at each epoch's iter() and so see the
        # dataset's current epoch. More workers than cores only adds contention.
        workers = min(int(opt.num_threads), len(os.sched_getaffinity(0)))
        self.dataloader = torch.utils.data.DataLoader(
            dataset, batch_size=opt.batch_size, sampler=self.sampler,
            num_workers=workers, pin_memory=device_type == "cuda", drop_last=False,
        )

    def load_data(self) -> DatasetLoader:
        """Return self (kept for scripts written against the original API)."""
        return self

    def set_epoch(self, epoch: int) -> None:
        """Select the shuffle order and augmentations of `epoch`."""
        if isinstance(self.sampler, torch.utils.data.DistributedSampler):
            self.sampler.set_epoch(epoch)
        self.dataset.set_epoch(epoch)

    @property
    def batches_per_epoch(self) -> int:
        """Number of batches this process's DataLoader yields per epoch (before the cap)."""
        return len(self.dataloader)

    def __len__(self) -> int:
        """Number of samples in the dataset, capped at --max_dataset_size."""
        return int(min(len(self.dataset), self.opt.max_dataset_size))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i, batch in enumerate(self.dataloader):
            if i * self.opt.batch_size >= self.opt.max_dataset_size:
                break
            yield batch


class InferenceShardSampler(torch.utils.data.Sampler):
    """Indices rank, rank + world_size, ... of the first `limit` samples (all when None)."""

    def __init__(self, dataset_size: int, rank: int, world_size: int, limit: int | None = None) -> None:
        total = dataset_size if limit is None else min(dataset_size, limit)
        self.indices = list(range(rank, total, world_size))

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


def create_dataset(opt: argparse.Namespace, seed: int, rank: int = 0, world_size: int = 1,
                   device_type: str = "cpu", limit: int | None = None) -> DatasetLoader:
    """Check the dataset folder, build the `--dataset_mode` dataset and its loader.

    `seed` fixes the shuffle and all augmentations; `rank`/`world_size` select this
    process's share for distributed training; `device_type` "cuda" enables pinned memory.
    At inference (`opt.isTrain` false) the ranks share the first `limit` samples, each once.
    Raises `UserError` for problems with the dataset folder or flags.
    """
    dataset_class = find_dataset_using_name(opt.dataset_mode)
    check_dataset_root(opt)
    dataset = dataset_class(opt)
    dataset.set_seed(seed)
    return DatasetLoader(opt, dataset, seed, rank=rank, world_size=world_size, device_type=device_type,
                         limit=limit)
