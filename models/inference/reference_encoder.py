"""A reference image -> the latent code that makes a translation look like it ("like this one").

A model with many answers per input may train an encoder beside its generator (a network of role
"encoder", e.g. BicycleGAN's E(B) -> (mean, log-variance) of the code). Given a target-domain image,
the mean of its code makes the generator's output take that image's look (colours, texture): test.py
calls this the "encoded" output. `find_encoder` finds the encoder saved beside a generator: the
networks of role encoder of the model architecture.json names, or, in a folder without it (BicycleGAN's
own checkpoints), the `<epoch>_net_<name>.pth` files whose weights a built-in encoder family recognises.
"""
from __future__ import annotations

import glob
import os
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import nn

from data.image_folder import DomainSpec, network_input
from data.image_io import array_from_pil, as_shown, exif_orientation, probe_image, read_image_as_shown
from models import find_model_using_name, networks
from models.networks.checkpoint_files import ARCHITECTURE_FILE, read_architecture_file
from util.checkpoint_io import load_state_dict_file
from util.errors import UserError

# Encoders whose checkpoint does not say its normalisation are tried with these, in order.
_NORMS_TO_TRY = ("instance", "none", "batch")


class ReferenceEncoder:
    """An encoder network and the family it belongs to: `encode` gives a reference image's code."""

    def __init__(self, network: nn.Module, netE: str, flags: SimpleNamespace, path: str) -> None:
        self.network = network.eval()
        self.family = networks.family_of(netE, networks.ENCODER)
        self.flags = flags
        self.path = path

    def encode(self, reference: torch.Tensor) -> torch.Tensor:
        """1 x C x H x W in [-1, 1] (C: the generator's output channels) -> the 1 x nz code (float64,
        the mean of the encoder's Gaussian). An image of a size the encoder does not take is resized
        to the smallest it does (bilinear, antialiased), e.g. 128x128 for resnet_128."""
        device = next(self.network.parameters()).device
        image = reference.to(device, torch.float32)
        if not _takes(self.family, self.flags, image):
            side = self.family.size_rule(self.flags).minimum
            image = nn.functional.interpolate(image, size=(side, side), mode="bilinear", antialias=True,
                                              align_corners=False)
        with torch.inference_mode():
            mean, _ = self.network(image)
        return mean.double().cpu()


def _takes(family: networks.NetworkFamily, flags: SimpleNamespace, image: torch.Tensor) -> bool:
    try:
        family.check_input_size(flags, *image.shape[2:])
    except UserError:
        return False
    return True


def find_encoder(generator_path: str, channels: int, device: torch.device | str = "cpu") -> ReferenceEncoder | None:
    """The encoder of `channels`-channel images (the generator's outputs) saved beside the generator in
    `generator_path` (same epoch), loaded; None if none is."""
    folder, name = os.path.split(generator_path)
    epoch = name.split("_net_")[0]
    saved = _architecture(folder)
    if "model" in saved:
        roles = find_model_using_name(saved["model"]).network_roles
        candidates = [os.path.join(folder, f"{epoch}_net_{net}.pth") for net, role in roles.items()
                      if role == networks.ENCODER]
    else:
        candidates = sorted(glob.glob(os.path.join(glob.escape(folder), f"{glob.escape(epoch)}_net_*.pth")))
    for path in candidates:
        if os.path.abspath(path) == os.path.abspath(generator_path) or not os.path.isfile(path):
            continue
        state = load_state_dict_file(path, device)
        seen = networks.recognise_network(state, networks.ENCODER)
        if not seen and "netE" not in saved:
            continue
        arch = {**seen, **{k: saved[k] for k in ("netE", "nef", "nz", "norm") if k in saved}}
        return _load(path, state, arch, channels, device)
    return None


def _architecture(folder: str) -> dict:
    path = os.path.join(folder, ARCHITECTURE_FILE)
    return read_architecture_file(path) if os.path.isfile(path) else {}


def _load(path: str, state: dict, arch: dict, channels: int, device: torch.device | str) -> ReferenceEncoder:
    """The encoder of `arch` with the weights `state`; normalisations are tried where `arch` has none
    (a checkpoint alone does not show parameter-free instance normalisation)."""
    family = networks.family_of(arch["netE"], networks.ENCODER)
    for norm in (arch["norm"],) if "norm" in arch else _NORMS_TO_TRY:
        flags = SimpleNamespace(**{**arch, "norm": norm})
        network = family.build(flags, channels, arch["nz"])
        try:
            network.load_state_dict(state)
        except RuntimeError as err:
            failure = str(err).splitlines()[0]
            continue
        return ReferenceEncoder(network.to(device), arch["netE"], flags, path)
    raise UserError(f"{path} does not fit the encoder --netE {arch['netE']} --nef {arch.get('nef')} --nz {arch['nz']} "
                    f"({failure}); restore the file, or translate without a reference image.")


def reference_picture(reference: Any, channels: int, data_range: tuple[float, float] | None) -> torch.Tensor:
    """A reference image of the output domain (a path, PIL image, NumPy array HxW or HxWxC, or float
    tensor CxHxW in [-1, 1]) as the `channels` x H x W tensor in [-1, 1] the encoder takes, converted
    as test.py converts the dataset's B images (float data by `data_range`)."""
    if isinstance(reference, torch.Tensor):
        if not reference.is_floating_point() or reference.ndim != 3:
            raise UserError(f"a reference tensor must be a float C x H x W image in [-1, 1], not {reference.dtype} "
                            f"of shape {tuple(reference.shape)}.")
        picture = reference.float().cpu()
    else:
        if isinstance(reference, (str, os.PathLike)):
            path = os.fspath(reference)
            # upright as viewers show it (its EXIF orientation), as the Translator reads the image to translate
            array, alpha, what = read_image_as_shown(path), probe_image(path).alpha, f"reference image {path}"
        elif isinstance(reference, Image.Image):
            (array, alpha), what = array_from_pil(reference), "the reference image"
            array = as_shown(array, exif_orientation(reference))
        elif isinstance(reference, np.ndarray) and reference.ndim in (2, 3):
            array, alpha, what = (reference if reference.ndim == 3 else reference[:, :, None]), False, "the reference"
        else:
            raise UserError(f"cannot encode a reference {type(reference).__name__}: pass a file path, a PIL image, "
                            f"a NumPy array HxW or HxWxC, or a tensor CxHxW.")
        picture = network_input(array, alpha, DomainSpec(channels, "output_nc", data_range))
        if picture is None:
            raise UserError(f"{what} has {array.shape[-1]} channels and the encoder takes {channels}-channel images "
                            f"(gray and RGB convert into each other, other channel counts do not); convert it first.")
    if picture.shape[0] != channels or 0 in picture.shape:
        raise UserError(f"a reference of shape {tuple(picture.shape)}: the encoder takes {channels}-channel images "
                        f"of the output domain, with at least one pixel.")
    return picture
