"""test.py's outputs at the precision of its inputs (16-bit, float, any channel count), beside the 8-bit
PNG previews that the results page shows.

For each visual of a test image whose data is not ordinary 8-bit gray or RGB, `write_full_precision`
writes `<name>_<label><ext>` in the format of the input file of that visual's domain (its extension and
dtype: a 16-bit PNG gives 16-bit PNGs, a float32 TIFF float32 TIFFs, a .npy .npy files), mapping the
network's [-1, 1] back through the same value range the dataset used (data/image_io.py). Ordinary 8-bit
gray/RGB data (PNG, JPEG, TIFF, ...) get nothing here: their PNG previews already hold every value.
Which domain each visual belongs to is the model's to say (test.py passes its `visual_domains`);
visuals it places in neither get no full-precision file.
"""
from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

import numpy as np
import torch

from data import volume_io
from data.base_dataset import data_ranges
from data.image_io import NUMPY_EXTENSIONS, ValueRange, from_network, output_extension, probe_image, write_image

FOLDER = "full_precision"  # beside images/ in the results folder
VOLUME_FOLDER = "volumes"  # test.py's translated volumes, beside images/ (which holds their middle slices)


def _needs_full_precision(ext: str, dtype: np.dtype, channels: int) -> bool:
    return dtype != np.uint8 or channels not in (1, 3) or ext in NUMPY_EXTENSIONS


def write_full_precision(folder: str, visuals: Mapping[str, torch.Tensor], sample: Mapping[str, list[str]],
                         opt: argparse.Namespace, domains: Mapping[str, str]) -> list[str]:
    """Write the first image of each visual that needs it (see the module docstring) into `folder`;
    `sample` is the batch (its "A_paths"/"B_paths" name the input files; a dataset of one domain has
    only "A_paths", which then stand for both), `domains` the dataset domain ("A" or "B") of each
    visual. Returns the written paths."""
    ranges = dict(zip("AB", data_ranges(opt)))
    sources = {"A": sample["A_paths"][0], "B": sample.get("B_paths", sample["A_paths"])[0]}
    name = os.path.splitext(os.path.basename(sources["A"]))[0]
    written = []
    for label, tensor in visuals.items():
        if label not in domains:
            continue
        domain = domains[label]
        source = sources[domain]
        info = probe_image(source)
        ext = os.path.splitext(source)[1].lower()
        channels = tensor.shape[-3]
        if not _needs_full_precision(ext, info.dtype, channels):
            continue
        value_range = ValueRange.for_dtype(info.dtype, ranges[domain])
        path = os.path.join(folder, f"{name}_{label}{output_extension(ext, info.dtype, channels)}")
        os.makedirs(folder, exist_ok=True)
        write_image(path, from_network(tensor[0], value_range, info.dtype),
                    alpha=info.alpha and channels == info.channels)
        written.append(path)
    return written


def write_volume_outputs(folder: str, visuals: Mapping[str, torch.Tensor], sample: Mapping[str, list[str]],
                         opt: argparse.Namespace, domains: Mapping[str, str]) -> list[str]:
    """Write the first volume of each visual of a domain into `folder` as `<name>_<label>` in its input
    file's format (.nii.gz for NIfTI inputs, .npy for .npy), mapped back to the domain's units through its
    --data_range window, with the input's affine and header: the output lies exactly over its input in a
    viewer. `sample` and `domains` as for `write_full_precision`. Returns the written paths."""
    ranges = dict(zip("AB", data_ranges(opt)))
    sources = {"A": sample["A_paths"][0], "B": sample.get("B_paths", sample["A_paths"])[0]}
    name = os.path.basename(volume_io.volume_stem(sources["A"]))
    written = []
    for label, tensor in visuals.items():
        if label not in domains:
            continue
        source = sources[domains[label]]
        window = volume_io.volume_window(volume_io.probe_volume(source), ranges[domains[label]])
        ext = ".npy" if source.lower().endswith(".npy") else ".nii.gz"
        path = os.path.join(folder, f"{name}_{label}{ext}")
        os.makedirs(folder, exist_ok=True)
        values = volume_io.from_network(tensor[0].detach().float().cpu().numpy(), window)
        volume_io.write_volume(path, values, volume_io.read_reference(source))
        written.append(path)
    return written
