"""Which samples each process loads, in which order.

`TrainingSampler` behaves like torch's DistributedSampler (a shuffle seeded by seed + epoch,
padded so that every rank gets as many samples, dealt out round-robin) and can also start in
the middle of an epoch: `set_epoch(epoch, images_done)` skips the first `images_done` samples
of that epoch's global order, which is how a resumed run continues exactly where it stopped,
with any number of processes.
"""
from __future__ import annotations

import math
from collections.abc import Iterator

import torch


class TrainingSampler(torch.utils.data.Sampler):
    def __init__(self, dataset_size: int, rank: int = 0, world_size: int = 1,
                 shuffle: bool = True, seed: int = 0) -> None:
        self.dataset_size = dataset_size
        self.rank = rank
        self.world_size = world_size
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.images_done = 0

    def set_epoch(self, epoch: int, images_done: int = 0) -> None:
        self.epoch = epoch
        self.images_done = images_done

    def global_order(self) -> list[int]:
        """This epoch's order over all ranks, padded to a multiple of world_size."""
        if self.shuffle:
            generator = torch.Generator()
            generator.manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.dataset_size, generator=generator).tolist()
        else:
            order = list(range(self.dataset_size))
        padded_size = math.ceil(self.dataset_size / self.world_size) * self.world_size
        while len(order) < padded_size:
            order += order[: padded_size - len(order)]
        return order

    def __iter__(self) -> Iterator[tuple[int, int]]:
        """(epoch, index) pairs: the epoch travels with each index to the loader's workers, which
        stay alive across epochs (persistent workers) and so cannot be told about it otherwise."""
        remaining = self.global_order()[self.images_done:]
        return iter([(self.epoch, index) for index in remaining[self.rank::self.world_size]])

    def __len__(self) -> int:
        padded_size = math.ceil(self.dataset_size / self.world_size) * self.world_size
        remaining = max(padded_size - self.images_done, 0)
        return len(range(self.rank, remaining, self.world_size))


class EpochIndexedDataset(torch.utils.data.Dataset):
    """Serves the (epoch, index) keys of a TrainingSampler: sets the epoch, then loads the index."""

    def __init__(self, dataset, epoch_holder) -> None:
        self.dataset = dataset            # what to load from (possibly wrapped)
        self.epoch_holder = epoch_holder  # the BaseDataset whose augmentations depend on the epoch

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, int]):
        epoch, index = key
        if self.epoch_holder.epoch != epoch:
            self.epoch_holder.set_epoch(epoch)
        return self.dataset[index]


class InferenceShardSampler(torch.utils.data.Sampler):
    """Indices rank, rank + world_size, ... of the first `limit` samples (all when None)."""

    def __init__(self, dataset_size: int, rank: int, world_size: int, limit: int | None = None) -> None:
        total = dataset_size if limit is None else min(dataset_size, limit)
        self.indices = list(range(rank, total, world_size))

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)
