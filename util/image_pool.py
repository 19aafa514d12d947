"""A buffer of previously generated images (Shrivastava et al.), so D also sees older fakes."""
from __future__ import annotations

import random

import torch

from util import distributed


class ImagePool:
    """Return, per image, either the new fake or (half the time, once full) a stored older one.

    The pool draws from its own `random.Random`, so that its choices are reproducible from the
    run's seed and its state can be saved and restored with a checkpoint.

    Under DDP it is one pool for the whole run, not one per process: every rank gathers the
    fakes of all ranks, passes the global batch through its copy of the pool in the order one
    process with that batch would (same seed, same draws, so every copy stays identical), and
    keeps the answers for its own images. N processes x batch b thus choose exactly what one
    process x batch N*b chooses, and the pool holds `pool_size` images in total, as in one process.
    """

    def __init__(self, pool_size: int, seed: int = 0):
        self.pool_size = pool_size
        self.images: list[torch.Tensor] = []
        self.rng = random.Random(seed)

    def query(self, images: torch.Tensor) -> torch.Tensor:
        if self.pool_size == 0:
            return images
        per_rank = distributed.all_gather_tensor(images.detach())
        world = len(per_rank)
        # Image j of rank r is image j * world + r of the global batch (util.distributed.global_batch_positions).
        global_batch = [per_rank[rank][j] for j in range(len(images)) for rank in range(world)]
        answers = [self._choose(image.unsqueeze(0)) for image in global_batch]
        return torch.cat([answers[i] for i in distributed.global_batch_positions(len(images))], 0)

    def _choose(self, image: torch.Tensor) -> torch.Tensor:
        """The answer for one new fake (1xCxHxW): itself, or a stored one that it replaces."""
        if len(self.images) < self.pool_size:
            self.images.append(image.clone())
            return image
        if self.rng.uniform(0, 1) > 0.5:
            slot = self.rng.randint(0, self.pool_size - 1)
            stored = self.images[slot]
            self.images[slot] = image.clone()
            return stored
        return image

    def state_dict(self) -> dict:
        return {"images": [image.cpu() for image in self.images], "rng": self.rng.getstate()}

    def load_state_dict(self, state: dict, device: torch.device | None = None) -> None:
        self.images = [image.to(device) if device is not None else image for image in state["images"]]
        self.rng.setstate(state["rng"])
