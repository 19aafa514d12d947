"""Colorization: predict the ab colour channels of an image from its L (lightness) channel.

Includes a NumPy sRGB <-> CIE Lab conversion (D65 white, 2 degree observer), using the same
constants and formulas as `skimage.color.rgb2lab` / `lab2rgb`, so no scikit-image dependency.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import numpy as np
import torch

from data.base_dataset import BaseDataset, check_preprocess, get_params, get_transform
from data.image_folder import load_image, make_dataset
from data.layout import FileGroup, RequiredFolder, first_samples, phase_folder
from util.errors import UserError

_XYZ_FROM_RGB = np.array([
    [0.412453, 0.357580, 0.180423],
    [0.212671, 0.715160, 0.072169],
    [0.019334, 0.119193, 0.950227],
])
_RGB_FROM_XYZ = np.linalg.inv(_XYZ_FROM_RGB)
_WHITE_D65 = np.array([0.95047, 1.0, 1.08883])

# Scales that map L in [0, 100] to [-1, 1] and ab (|ab| < 110 for sRGB colours) into [-1, 1].
L_SCALE = 50.0
AB_SCALE = 110.0


def rgb_to_lab(rgb: np.ndarray) -> np.ndarray:
    """Convert uint8 sRGB (...x3, 0..255) to float64 Lab (L in [0, 100], a/b roughly +-110)."""
    c = np.asarray(rgb, dtype=np.float64) / 255.0
    linear = np.where(c > 0.04045, ((c + 0.055) / 1.055) ** 2.4, c / 12.92)
    xyz = linear @ _XYZ_FROM_RGB.T / _WHITE_D65
    f = np.where(xyz > 0.008856, np.cbrt(xyz), 7.787 * xyz + 16.0 / 116.0)
    fx, fy, fz = f[..., 0], f[..., 1], f[..., 2]
    return np.stack([116.0 * fy - 16.0, 500.0 * (fx - fy), 200.0 * (fy - fz)], axis=-1)


def lab_to_srgb(lab: np.ndarray) -> np.ndarray:
    """Inverse of `rgb_to_lab`: float Lab (...x3) to float sRGB in [0, 1] (out-of-gamut clipped)."""
    lab = np.asarray(lab, dtype=np.float64)
    fy = (lab[..., 0] + 16.0) / 116.0
    fx = lab[..., 1] / 500.0 + fy
    fz = np.maximum(fy - lab[..., 2] / 200.0, 0.0)  # negative Z is impossible; clip as skimage does
    f = np.stack([fx, fy, fz], axis=-1)
    xyz = np.where(f > 0.2068966, f ** 3, (f - 16.0 / 116.0) / 7.787) * _WHITE_D65
    linear = xyz @ _RGB_FROM_XYZ.T
    srgb = np.where(linear > 0.0031308, 1.055 * np.abs(linear) ** (1 / 2.4) - 0.055, 12.92 * linear)
    return np.clip(srgb, 0.0, 1.0)


def _as_chw(x: torch.Tensor | np.ndarray, channels: int, name: str) -> np.ndarray:
    arr = x.detach().cpu().double().numpy() if isinstance(x, torch.Tensor) else np.asarray(x, dtype=np.float64)
    if arr.ndim == 4:  # a batch: convert its first sample, as the visuals do
        arr = arr[0]
    if arr.ndim == 2 and channels == 1:
        arr = arr[None]
    if arr.ndim != 3 or arr.shape[0] != channels:
        raise ValueError(f"{name} must have shape ({channels},H,W) or (N,{channels},H,W), got {arr.shape}")
    return arr


def lab_to_rgb(L: torch.Tensor | np.ndarray, ab: torch.Tensor | np.ndarray) -> np.ndarray:
    """Turn the dataset's normalized channels back into a uint8 HxWx3 RGB image.

    `L` is (1,H,W) or (H,W) in [-1, 1] (L/50 - 1); `ab` is (2,H,W) scaled by 1/110. With a
    leading batch dimension, the first sample is converted.
    """
    L_arr = (_as_chw(L, 1, "L") + 1.0) * L_SCALE
    ab_arr = _as_chw(ab, 2, "ab") * AB_SCALE
    lab = np.concatenate([L_arr, ab_arr], axis=0).transpose(1, 2, 0)
    return np.rint(lab_to_srgb(lab) * 255.0).astype(np.uint8)


class ColorizationDataset(BaseDataset):
    """RGB images in `dataroot/phase`; "A" is the L channel, "B" the ab channels.

    Sample: {"A": 1xHxW in [-1, 1], "B": 2xHxW (ab / 110), "A_paths": str, "B_paths": str}.
    Requires --input_nc 1, --output_nc 2 and --direction AtoB (the defaults this mode sets).
    """

    paired = True

    @staticmethod
    def modify_commandline_options(parser: argparse.ArgumentParser, is_train: bool) -> argparse.ArgumentParser:
        """Default to 1 input channel (L), 2 output channels (ab), direction AtoB."""
        parser.set_defaults(input_nc=1, output_nc=2, direction="AtoB")
        return parser

    @classmethod
    def required_folders(cls, opt: argparse.Namespace) -> list[RequiredFolder]:
        """`dataroot/phase`."""
        return [phase_folder(opt)]

    @classmethod
    def files_read(cls, opt: argparse.Namespace) -> list[FileGroup]:
        """Its images, with no channel check: any image is converted to RGB."""
        return [FileGroup(first_samples(opt, make_dataset(os.path.join(opt.dataroot, opt.phase),
                                                          opt.max_dataset_size)))]

    def __init__(self, opt: argparse.Namespace) -> None:
        super().__init__(opt)
        check_preprocess(opt)
        if (opt.input_nc, opt.output_nc, opt.direction) != (1, 2, "AtoB"):
            raise UserError(
                f"--dataset_mode colorization predicts 2 ab channels from 1 L channel, but got "
                f"--input_nc {opt.input_nc} --output_nc {opt.output_nc} --direction {opt.direction}; "
                f"use --input_nc 1 --output_nc 2 --direction AtoB (or leave them at their defaults)."
            )
        self.dir = os.path.join(opt.dataroot, opt.phase)
        self.AB_paths = make_dataset(self.dir, opt.max_dataset_size)

    def __len__(self) -> int:
        return len(self.AB_paths)

    def __getitem__(self, index: int) -> dict[str, Any]:
        path = self.AB_paths[index]
        img = load_image(path, "RGB")
        params = get_params(self.opt, img.size, self.sample_rng(index))
        img = get_transform(self.opt, params, convert=False)(img)
        lab = torch.from_numpy(rgb_to_lab(np.asarray(img)).astype(np.float32)).permute(2, 0, 1)
        A = lab[[0]] / L_SCALE - 1.0
        B = lab[1:] / AB_SCALE
        return {"A": A, "B": B, "A_paths": path, "B_paths": path}
