"""Volume files (3-D medical images) in and out, and the mapping of their values to the network's [-1, 1].

The one place that reads and writes volume files. A volume is a float32 array (C, D, H, W): (D, H, W) are
the file's voxel axes in the file's order (NIfTI's i, j, k), never reoriented, so that an output written
with its input's `reference` lies exactly over the input in any viewer.

    is_volume_file(path), VOLUME_EXTENSIONS  .nii, .nii.gz (NIfTI-1/2, through nibabel) and .npy
    list_volumes(folder, max_size)           the volume files under a folder, sorted
    volume_stem(path)                        the name without its (double) extension: pairs A with B
    probe_volume(path) -> VolumeInfo         shape (C, D, H, W), value type and affine from the header only
                                             (at most MAX_VOLUME_VOXELS, no empty axis; a file cut short refused)
    check_finite(info)                       NaN or infinite values refused, the file read once
    volume_shape(path) -> (C, D, H, W)
    read_volume(path, channels) -> Volume    the whole volume and its geometry (`reference`)
    read_region(path, channels, corner, size)  one box of it, reading little more than that box
    volume_window(info, data_range)          the values that map to -1 and 1 (--data_range)
    to_network(array, window) / from_network(array, window)
    write_volume(path, array, reference)     NIfTI with the input's geometry, or .npy

Channels: a 3-D NIfTI file is one channel, a 4-D file (X, Y, Z, T) T channels (modalities); a .npy
file holds (D, H, W) (one channel) or (C, D, H, W). Unreadable files raise `UserError` naming the file.
"""
from __future__ import annotations

import gzip
import os
import sys
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from util.errors import UserError
from util.paths import broken_link, why_missing

NIFTI_EXTENSIONS = (".nii", ".nii.gz")
VOLUME_EXTENSIONS: tuple[str, ...] = (*NIFTI_EXTENSIONS, ".npy")

# What reading a damaged file raises: gzip's errors (BadGzipFile is an OSError), zlib's, a stream that
# ends early (EOFError), numpy's and nibabel's ValueError for a file shorter than its header says, and
# nibabel's own (`_read_errors`). Caught only around the calls that read files.
_READ_ERRORS = (OSError, EOFError, zlib.error, ValueError)

Window = tuple[float, float]

# The most voxels (channels x depth x height x width) a volume file may declare: every reader allocates the
# whole volume as float32 (4 GiB at this limit), so a header asking for more (a damaged or hostile file, or
# one of another scale than a scan) is refused from the header, before anything is allocated for it.
MAX_VOLUME_VOXELS = 2 ** 30


@dataclass(frozen=True)
class NiftiReference:
    """What an output needs to lie exactly over its input: the input's affine and NIfTI header."""
    affine: np.ndarray
    header: Any  # nib.Nifti1Header or nib.Nifti2Header


@dataclass(frozen=True)
class Volume:
    """A volume's values, float32 (C, D, H, W) in the file's units, and its geometry (None for .npy)."""
    array: np.ndarray
    reference: NiftiReference | None


@dataclass(frozen=True)
class VolumeInfo:
    """What the header of a volume file says: `shape` (C, D, H, W), the type of its values as read
    (`dtype`: float where NIfTI scaling applies), the dimensions of the array in the file, and where its
    voxels lie (`affine`: voxel indices to millimetres, a NIfTI file's; None for .npy)."""
    path: str
    shape: tuple[int, int, int, int]
    dtype: np.dtype
    file_dims: int
    affine: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def spatial_shape(self) -> tuple[int, int, int]:
        return self.shape[1:]

    def describe(self) -> str:
        """e.g. "a 4-D file of 33x41x25x2 voxels (2 channels)"."""
        file_shape = self.spatial_shape + ((self.shape[0],) if self.file_dims == 4 else ())
        channels = f"{self.shape[0]} channel{'s' if self.shape[0] > 1 else ''}"
        return f"a {self.file_dims}-D file of {'x'.join(map(str, file_shape))} voxels ({channels})"


# ------------------------------------------------------------------------------------------ files
def _nibabel() -> Any:
    """nibabel, imported when a NIfTI file is first met: users of images (and .npy volumes) need not install it."""
    try:
        import nibabel
    except ModuleNotFoundError as err:
        raise UserError("NIfTI volumes (.nii, .nii.gz) are read and written with the nibabel package, which is not "
                        "installed: pip install nibabel (requirements.txt).") from err
    return nibabel


def _read_errors() -> tuple[type[BaseException], ...]:
    nib = sys.modules.get("nibabel")
    if nib is None:
        return _READ_ERRORS
    return (nib.filebasedimages.ImageFileError, nib.spatialimages.HeaderDataError, *_READ_ERRORS)


def is_volume_file(path: str) -> bool:
    """True when `path` ends with one of `VOLUME_EXTENSIONS`, in any letter case."""
    return path.lower().endswith(VOLUME_EXTENSIONS)


def volume_stem(path: str) -> str:
    """`path` without its volume extension (both parts of .nii.gz), so x.nii.gz pairs with x.npy."""
    lower = path.lower()
    for ext in sorted(VOLUME_EXTENSIONS, key=len, reverse=True):
        if lower.endswith(ext):
            return path[:-len(ext)]
    return os.path.splitext(path)[0]


def list_volumes(folder: str, max_dataset_size: float = float("inf")) -> list[str]:
    """The sorted paths of the volume files under `folder` (recursively), at most `max_dataset_size`.
    Raises `UserError` when `folder` is not a folder or holds none."""
    if not os.path.isdir(folder):
        what = "is a file, not a folder" if os.path.exists(folder) else why_missing(folder)
        raise UserError(f"dataset folder {folder} {what}; check --dataroot/--phase (and --dataset_mode, which "
                        f"decides the expected subfolders).")
    found = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        found += [os.path.join(root, name) for name in sorted(files)
                  if is_volume_file(name) and not name.startswith("._")]  # "._x": macOS metadata, no volume
    if not found:
        raise UserError(f"dataset folder {folder} contains no volumes; put volume files with one of the extensions "
                        f"{', '.join(VOLUME_EXTENSIONS)} in it, or point --dataroot elsewhere.")
    return found[: int(min(max_dataset_size, len(found)))]


def _unreadable(path: str, err: BaseException) -> UserError:
    link = broken_link(path) if isinstance(err, OSError) else None
    if link:
        return UserError(f"cannot read volume {path}: {link}; fix the link or remove it.")
    if isinstance(err, FileNotFoundError):
        return UserError(f"cannot read volume {path}: the file no longer exists (it was moved or deleted after the "
                         f"dataset folder was listed).")
    reason = " ".join((str(err) or type(err).__name__).split())
    kind = "NumPy .npy file" if path.lower().endswith(".npy") else "NIfTI file"
    return UserError(f"cannot read volume {path}: it is damaged, cut short or not a {kind} ({type(err).__name__}: "
                     f"{reason}); replace or remove the file.")


def _is_npy(path: str) -> bool:
    return path.lower().endswith(".npy")


def _load_nifti(path: str) -> Any:
    """The NIfTI image (header read, data left on disk)."""
    nib = _nibabel()
    try:
        image = nib.load(path)
    except _read_errors() as err:
        raise _unreadable(path, err) from err
    if not isinstance(image, (nib.Nifti1Image, nib.Nifti2Image)):
        raise UserError(f"cannot read volume {path}: nibabel reads it as {type(image).__name__}, not NIfTI; save it "
                        f"as .nii or .nii.gz.")
    return image


def _load_npy(path: str) -> np.ndarray:
    """The .npy array memory-mapped (nothing read but the header)."""
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except _read_errors() as err:
        raise _unreadable(path, err) from err
    if not isinstance(array, np.ndarray) or array.dtype.kind not in "biuf":
        raise UserError(f"cannot read volume {path}: it holds {getattr(array, 'dtype', type(array).__name__)} "
                        f"values, not numbers; save the volume as an integer or float array.")
    return array


def _layout(path: str, shape: Sequence[int]) -> tuple[tuple[int, int, int, int], int]:
    """(C, D, H, W) and the file's dimension count for an array of `shape` in `path`."""
    shape = tuple(int(s) for s in shape)
    if not _is_npy(path):
        while len(shape) > 4 and shape[-1] == 1:  # NIfTI may pad its dimensions with 1s
            shape = shape[:-1]
        if len(shape) == 3:
            return _checked_size(path, (1, *shape)), 3
        if len(shape) == 4:
            return _checked_size(path, (shape[3], *shape[:3])), 4
    elif len(shape) in (3, 4):
        return _checked_size(path, (1, *shape) if len(shape) == 3 else shape), len(shape)
    layouts = "X x Y x Z, or X x Y x Z x channels" if not _is_npy(path) else "D x H x W, or C x D x H x W"
    raise UserError(f"volume {path} has {len(shape)} dimensions ({'x'.join(map(str, shape))}), but a volume is "
                    f"{layouts}; save it that way, or remove it.")


def _checked_size(path: str, shape: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    """`shape` (C, D, H, W), or a UserError naming the file when an axis holds no voxel or the whole is
    larger than `MAX_VOLUME_VOXELS` (read from the header: nothing has been allocated for it)."""
    shown = "x".join(map(str, shape[1:])) + (f" voxels x {shape[0]} channels" if shape[0] > 1 else " voxels")
    if min(shape) < 1:
        raise UserError(f"volume {path} is {shown}: an axis without a single voxel, so there is nothing to train on "
                        f"or translate; remove the file (or save the volume it should hold).")
    total = int(np.prod(shape, dtype=object))
    if total > MAX_VOLUME_VOXELS:
        raise UserError(f"volume {path} declares {shown} in its header ({total:.3g} values, {4 * total / 2 ** 30:.3g} "
                        f"GiB as float32), more than the {MAX_VOLUME_VOXELS:.3g} a volume may hold here "
                        f"(MAX_VOLUME_VOXELS, data/volume_io.py); a damaged header, or a volume to crop or resample "
                        f"into smaller ones. Remove or replace the file.")
    return shape


def _nifti_dtype(image: Any) -> np.dtype:
    """The type of the values as read: NIfTI scaling (scl_slope, scl_inter) makes any data float."""
    proxy = image.dataobj
    slope, inter = float(getattr(proxy, "slope", 1.0)), float(getattr(proxy, "inter", 0.0))
    return image.get_data_dtype() if (slope, inter) == (1.0, 0.0) else np.dtype(np.float32)


def _check_complete(path: str, image: Any) -> None:
    """Refuse a NIfTI file cut short, from its size alone where possible (a truncated copy or download),
    so that it is refused before training rather than when first read."""
    proxy = image.dataobj
    expected = int(proxy.offset) + int(np.prod(proxy.shape)) * np.dtype(proxy.dtype).itemsize
    try:
        size = os.path.getsize(path)
        if not path.lower().endswith(".gz"):
            if size < expected:
                raise UserError(f"cannot read volume {path}: it is cut short ({size} bytes, but its header describes "
                                f"{expected}), e.g. by an interrupted copy or download; replace or remove the file.")
            return
        with open(path, "rb") as f:  # gzip ends with the uncompressed size modulo 2**32
            f.seek(max(size - 4, 0))
            trailer = int.from_bytes(f.read(4), "little")
        if trailer != expected % 2 ** 32:
            # Not necessarily damaged (gzip files of several members, padding): decompress to be sure, counting
            # (a whole gzip stream of the header alone holds fewer bytes than the header describes), and no further
            # than the header's bytes: what follows them is never read, however much a file appends.
            count = 0
            with gzip.open(path, "rb") as stream:
                while count < expected and (chunk := stream.read(min(1 << 24, expected - count))):
                    count += len(chunk)
            if count < expected:
                raise UserError(f"cannot read volume {path}: it is cut short ({count} bytes decompressed, but its "
                                f"header describes {expected}), e.g. by an interrupted copy or download; replace or "
                                f"remove the file.")
    except _read_errors() as err:
        raise _unreadable(path, err) from err


def probe_volume(path: str) -> VolumeInfo:
    """What `read_volume` will return for `path`, from its header (and its size: a NIfTI file cut short is
    refused here; a .nii.gz whose gzip trailer disagrees with its header is decompressed once to check).
    Raises `UserError` naming the file when it cannot be read or is not a volume."""
    return _probe(path, check_complete=True)


def _probe(path: str, check_complete: bool) -> VolumeInfo:
    # Reading skips the completeness check: a file cut short fails there anyway, and a lazy read of a
    # region should not pay for it (or decompress a whole .nii.gz whose trailer it doubts) every time.
    if _is_npy(path):
        array = _load_npy(path)
        shape, dims = _layout(path, array.shape)
        return VolumeInfo(path, shape, array.dtype.newbyteorder("="), dims)
    image = _load_nifti(path)
    shape, dims = _layout(path, image.shape)
    if check_complete:
        _check_complete(path, image)
    return VolumeInfo(path, shape, _nifti_dtype(image).newbyteorder("="), dims, np.asarray(image.affine, float))


def volume_shape(path: str) -> tuple[int, int, int, int]:
    """(C, D, H, W) of the volume in `path`, from its header."""
    return probe_volume(path).shape


def channel_mismatch(info: VolumeInfo, channels: int, flag: str) -> UserError:
    """The error for a volume whose channel count is not the `channels` that `flag` asks for."""
    if info.file_dims == 4 and channels == 1:
        axis = "first" if _is_npy(info.path) else "last"
        fix = (f"a 4-D file where a 3-D volume is wanted: set {flag} {info.shape[0]} if its {axis} axis holds "
               f"{info.shape[0]} modalities, or save one 3-D volume per file")
    elif info.file_dims == 3:
        fix = (f"set {flag} 1, or save the {channels} modalities together as one 4-D file (X x Y x Z x {channels})"
               if not _is_npy(info.path) else f"set {flag} 1, or save a C x D x H x W array with C = {channels}")
    else:
        fix = f"set {flag} {info.shape[0]} if the data has {info.shape[0]} channels, or save the files again"
    return UserError(f"volume {info.path} is {info.describe()}, but {flag} is {channels}: {fix}.")


def _check_channels(info: VolumeInfo, channels: int | None, flag: str) -> None:
    if channels is not None and info.shape[0] != channels:
        raise channel_mismatch(info, channels, flag)


def check_finite(info: VolumeInfo) -> None:
    """Read the volume of `info` once and raise `UserError` naming it if it holds NaN or infinite values
    (float data, or integers NIfTI scaling makes float; other integers hold none and are not read), so
    that such a file is refused before a model is built rather than when a patch first meets the value."""
    if info.dtype.kind == "f":
        read_volume(info.path, None)


def _require_finite(path: str, array: np.ndarray) -> None:
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        count = int((~np.isfinite(array)).sum())
        raise UserError(f"volume {path} holds {count} NaN or infinite values; the networks need finite numbers (one "
                        f"NaN spreads through the whole output and every loss). Replace them (e.g. "
                        f"np.nan_to_num(array, nan=...)) or remove the file.")


def _channels_first(values: np.ndarray, info: VolumeInfo) -> np.ndarray:
    """The file's array (X, Y, Z[, T]) or the .npy's as float32 (C, D, H, W)."""
    if values.ndim > 4:
        values = values.reshape(values.shape[:4])  # trailing 1s of NIfTI's padded dimensions
    if values.ndim == 3:
        values = values[None]
    elif not _is_npy(info.path):
        values = np.moveaxis(values, 3, 0)
    return np.ascontiguousarray(values, dtype=np.float32)


def read_volume(path: str, channels: int | None, flag: str = "--input_nc") -> Volume:
    """The whole volume in `path` as float32 (C, D, H, W) in the file's units (NIfTI scaling applied),
    with its geometry. Raises `UserError` naming the file when it cannot be read, holds NaN or infinite
    values, or has another channel count than `channels` (asked for by `flag`; None: any)."""
    info = _probe(path, check_complete=False)
    _check_channels(info, channels, flag)
    try:
        if _is_npy(path):
            values, reference = np.array(_load_npy(path)), None  # a copy: not tied to the file
        else:
            image = _load_nifti(path)
            values = np.asanyarray(image.dataobj)
            reference = NiftiReference(image.affine.copy(), image.header.copy())
    except _read_errors() as err:
        raise _unreadable(path, err) from err
    array = _channels_first(values, info)
    _require_finite(path, array)
    return Volume(array, reference)


def read_reference(path: str) -> NiftiReference | None:
    """The geometry (affine and header) of the NIfTI file `path` without reading its voxels; None for .npy."""
    if _is_npy(path):
        return None
    try:
        image = _load_nifti(path)
    except _read_errors() as err:
        raise _unreadable(path, err) from err
    return NiftiReference(image.affine.copy(), image.header.copy())


def read_region(path: str, channels: int | None, corner: Sequence[int], size: Sequence[int],
                flag: str = "--input_nc") -> np.ndarray:
    """The box of `size` (d, h, w) voxels at `corner` of the volume in `path`, float32 (C, d, h, w): equal
    to `read_volume(path, channels).array[:, d0:d0+d, h0:h0+h, w0:w0+w]`, reading only that box from a .nii
    or .npy file (a .nii.gz is decompressed up to it). Raises `UserError` as `read_volume` does, and
    ValueError for a box that leaves the volume."""
    info = _probe(path, check_complete=False)
    _check_channels(info, channels, flag)
    box = tuple(slice(int(c), int(c) + int(s)) for c, s in zip(corner, size))
    if len(box) != 3 or any(b.start < 0 or b.stop > n or b.stop <= b.start for b, n in zip(box, info.spatial_shape)):
        raise ValueError(f"box at {tuple(corner)} of {tuple(size)} voxels is not inside {path}'s "
                         f"{info.spatial_shape}")
    try:
        if _is_npy(path):
            stored = _load_npy(path)
            values = np.array(stored[box] if stored.ndim == 3 else stored[(slice(None), *box)])
        else:
            values = np.asanyarray(_load_nifti(path).dataobj[box + (Ellipsis,)])
    except _read_errors() as err:
        raise _unreadable(path, err) from err
    array = _channels_first(values, info)
    _require_finite(path, array)
    return array


# ------------------------------------------------------------------------------------------ geometry
# How far apart two volumes' voxels may be and still be one voxel grid: NIfTI stores affines as float32
# (qform, sform), so a header copied through another tool moves them by rounding, by far less than this.
GRID_TOLERANCE_MM = 0.01


def same_grid(affine_A: np.ndarray | None, affine_B: np.ndarray | None, shape: Sequence[int]) -> bool:
    """Whether two volumes of the spatial `shape` (D, H, W) lie voxel for voxel in the same place: their
    affines (voxel index to millimetres) put each corner voxel of the volume within `GRID_TOLERANCE_MM` of
    each other; a .npy file (None) has no geometry and agrees with anything."""
    if affine_A is None or affine_B is None:
        return True
    corners = np.array(np.meshgrid(*[(0, max(int(n) - 1, 0)) for n in shape], indexing="ij")).reshape(3, -1)
    corners = np.vstack([corners, np.ones((1, corners.shape[1]))])
    placed_A, placed_B = (np.asarray(affine, float) @ corners for affine in (affine_A, affine_B))
    return bool(np.abs(placed_A - placed_B)[:3].max() <= GRID_TOLERANCE_MM)


def describe_grid(affine: np.ndarray) -> str:
    """e.g. "1x1x1.2 mm voxels, axes RAS, origin (0, -120, 0) mm": where a NIfTI file's voxels lie."""
    spacing = np.sqrt((np.asarray(affine, float)[:3, :3] ** 2).sum(axis=0))
    try:
        axes = "".join(_nibabel().aff2axcodes(affine))
    except (ValueError, np.linalg.LinAlgError):
        axes = "(not a rotation)"
    origin = ", ".join(f"{v:g}" for v in np.round(np.asarray(affine, float)[:3, 3], 2))
    return f"{'x'.join(f'{v:g}' for v in np.round(spacing, 4))} mm voxels, axes {axes}, origin ({origin}) mm"


# ------------------------------------------------------------------------------------------ values
def volume_window(info: VolumeInfo, data_range: Window | None) -> Window:
    """The values of the volume `info` that map to the network's -1 and 1: `data_range` (--data_range,
    for every type of data), else 0..255 for uint8 data. Raises `UserError` for any other volume without
    one: integer CT/MR data need a window, their type's full range makes no sense."""
    if data_range is not None:
        return float(data_range[0]), float(data_range[1])
    if info.dtype == np.uint8:
        return 0.0, 255.0
    raise UserError(
        f"volume {info.path} holds {info.dtype.name} values and no --data_range says which of them map to the "
        f"network's -1 and 1: volumes need a window (values outside it are clipped). Pass --data_range MIN MAX for "
        f"both domains (e.g. for CT in Hounsfield units: --data_range -1000 2000) or A_MIN A_MAX B_MIN B_MAX; "
        f"`python scripts/data_range.py --dataroot <dataroot>` suggests one from the volumes' percentiles.")


def to_network(array: np.ndarray, window: Window) -> np.ndarray:
    """`array` mapped linearly from window (low, high) to [-1, 1], clipped outside; float32."""
    low, high = float(window[0]), float(window[1])
    scaled = (np.asarray(array, dtype=np.float32) - np.float32(low)) * np.float32(2.0 / (high - low)) - np.float32(1)
    return np.clip(scaled, -1.0, 1.0, out=scaled)


def from_network(array: np.ndarray, window: Window) -> np.ndarray:
    """The inverse of `to_network` (without the clipping): [-1, 1] back to the window's units, float32."""
    low, high = float(window[0]), float(window[1])
    return ((np.asarray(array, dtype=np.float32) + np.float32(1)) * np.float32((high - low) / 2.0)
            + np.float32(low)).astype(np.float32, copy=False)


# ------------------------------------------------------------------------------------------ writing
def write_volume(path: str, array: np.ndarray, reference: NiftiReference | None) -> None:
    """Write `array` (C, D, H, W, in the data's own units) to `path`: a .nii or .nii.gz file with the
    reference's affine and header (float32, no scaling, so the values are exact; identity affine
    without a reference), 3-D for one channel and 4-D (X, Y, Z, C) for more; or a .npy file of
    (D, H, W) or (C, D, H, W). Overwrites `path`."""
    array = np.asarray(array, dtype=np.float32)
    if array.ndim != 4:
        raise ValueError(f"write_volume takes a (C, D, H, W) array, not one of shape {array.shape}")
    if _is_npy(path):
        np.save(path, array[0] if array.shape[0] == 1 else array)
        return
    if not path.lower().endswith(NIFTI_EXTENSIONS):
        raise ValueError(f"write_volume writes {', '.join(VOLUME_EXTENSIONS)} files, not {path}")
    nib = _nibabel()
    data = array[0] if array.shape[0] == 1 else np.moveaxis(array, 0, 3)
    if reference is None:
        image = nib.Nifti1Image(data, np.eye(4))
    else:
        header = reference.header.copy()
        image_class = nib.Nifti2Image if isinstance(header, nib.Nifti2Header) else nib.Nifti1Image
        image = image_class(data, reference.affine, header)
    image.set_data_dtype(np.float32)
    image.header.set_slope_inter(np.nan, np.nan)  # no scaling: the float32 values are stored as they are
    nib.save(image, path)
