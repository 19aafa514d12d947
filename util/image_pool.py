"""A buffer of previously generated images (Shrivastava et al.), so D also sees older fakes."""
from __future__ import annotations

import random

import torch


class ImagePool:
    """Return, per image, either the new fake or (half the time, once full) a stored older one.

    The pool draws from its own `random.Random`, so that its choices are reproducible from the
    run's seed and its state can be saved and restored with a checkpoint.
    """

    def __init__(self, pool_size: int, seed: int = 0):
        self.pool_size = pool_size
        self.images: list[torch.Tensor] = []
        self.rng = random.Random(seed)

    def query(self, images: torch.Tensor) -> torch.Tensor:
        if self.pool_size == 0:
            return images
        chosen = []
        for image in images.detach():
            image = image.unsqueeze(0)
            if len(self.images) < self.pool_size:
                self.images.append(image.clone())
                chosen.append(image)
            elif self.rng.uniform(0, 1) > 0.5:
                slot = self.rng.randint(0, self.pool_size - 1)
                chosen.append(self.images[slot].clone())
                self.images[slot] = image.clone()
            else:
                chosen.append(image)
        return torch.cat(chosen, 0)

    def state_dict(self) -> dict:
        return {"images": [image.cpu() for image in self.images], "rng": self.rng.getstate()}

    def load_state_dict(self, state: dict, device: torch.device | None = None) -> None:
        self.images = [image.to(device) if device is not None else image for image in state["images"]]
        self.rng.setstate(state["rng"])
