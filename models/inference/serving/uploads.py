"""What a client uploads, checked before anything is decoded, and decoded as the Translator decodes files.

    Limits(max_bytes, max_pixels, max_voxels)   what one upload may hold (scripts/serve.py's flags)
    BadRequest(status, reason)                   an upload refused: the HTTP status and a one-line reason
    shown(text)                                  a client's text quoted in a refusal, cut to 100 characters
    sniff(head) -> extension | None              the format from the first bytes, never from a name
    save_upload(body, folder, limits) -> Upload  the body stored in `folder` under a name of ours, its size and
                                                 its header's pixel or voxel count checked
    download_name(client_name, extension)        a name for the output's download, never used as a path

The client's file name is only ever shown back (sanitised, in the download's name): every file is written
inside the request's temporary folder under a name of the server's. Formats are recognised by their content
(magic bytes), so a pickle named .png is "not an image"; .npy is read without pickles (allow_pickle=False);
a header declaring more pixels, bands or voxels than the limits is refused before its data are decoded (a
PNG that would decompress to 60000 x 60000 pixels, a TIFF of a thousand bands, a NIfTI header describing
terabytes), and a .nii.gz is decompressed header first, then no further than that header describes.
"""
from __future__ import annotations

import gzip
import io
import logging
import math
import os
import re
import struct
import zlib
from dataclasses import dataclass

from data.image_io import ImageInfo, probe_image_as_shown
from data.volume_io import probe_volume
from util.errors import UserError

logger = logging.getLogger(__name__)

# The image formats the server reads (those data/image_io.py reads), by their first bytes.
_IMAGE_MAGIC = ((b"\x89PNG\r\n\x1a\n", ".png"), (b"\xff\xd8\xff", ".jpg"), (b"II*\x00", ".tif"),
                (b"MM\x00*", ".tif"), (b"BM", ".bmp"), (b"GIF87a", ".gif"), (b"GIF89a", ".gif"))
_NPY_MAGIC = b"\x93NUMPY"
_GZIP_MAGIC = b"\x1f\x8b"
VOLUME_SUFFIXES = (".nii", ".nii.gz", ".npy")
READABLE = "PNG, JPEG, TIFF, BMP, GIF, WebP, .npy, and for volume models NIfTI (.nii, .nii.gz) and .npy"


@dataclass(frozen=True)
class Limits:
    """What one upload may hold: bytes on the wire, pixels of a picture (width x height), values of a
    volume (channels x depth x height x width)."""

    max_bytes: int
    max_pixels: int
    max_voxels: int


class BadRequest(Exception):
    """An upload or option refused: `status` (4xx) and `reason`, one line naming the fix."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


# The most characters of a client's text (an option's name or value) a refusal quotes.
SHOWN_CHARACTERS = 100


def shown(text: object, most: int = SHOWN_CHARACTERS) -> str:
    """`text` quoted for a refusal (escaped: one line), cut to its first `most` characters with a note of its
    length, so that a refusal stays short whatever a client sends."""
    text = str(text)
    if len(text) <= most:
        return repr(text)
    return f"{text[:most]!r}... (cut: {len(text)} characters)"


@dataclass(frozen=True)
class Upload:
    """An upload stored in the request's folder: `path` (a name of the server's), `kind` ("picture" or
    "volume"), `extension` (its format's, e.g. ".png", ".nii.gz"), and a picture's header as read."""

    path: str
    kind: str
    extension: str
    picture: ImageInfo | None = None


def sniff(head: bytes) -> str | None:
    """The extension of the format the bytes `head` (at least the first 348) begin, or None."""
    for magic, extension in _IMAGE_MAGIC:
        if head.startswith(magic):
            return extension
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return ".webp"
    if head.startswith(_NPY_MAGIC):
        return ".npy"
    if head.startswith(_GZIP_MAGIC):
        return ".nii.gz"  # the only compressed format read: what else a gzip stream holds is refused (save_upload)
    if _is_nifti(head):
        return ".nii"
    return None


def _is_nifti(head: bytes) -> bool:
    """Whether `head` (a file's first 348 bytes or more) begins a NIfTI-1 or NIfTI-2 file: its magic."""
    return head[344:348] in (b"n+1\x00", b"ni1\x00") or head[4:8] in (b"n+2\x00", b"ni2\x00")


def save_upload(body: bytes, folder: str, limits: Limits, volumes: bool, channels: int = 4) -> Upload:
    """Store `body` in `folder` as a file of its format and check what its header declares against
    `limits`; `volumes`: whether the model takes volumes (else pictures); `channels`: the model's input
    channels (a picture may hold max(4, channels) values per pixel). Raises BadRequest: 413 for too much,
    415 for what the server does not read or the model does not take, 400 for a damaged file."""
    if not body:
        raise BadRequest(400, "the request has no file: send the image (or volume) as the request's body or as "
                              "the form field 'file'")
    if len(body) > limits.max_bytes:
        raise BadRequest(413, f"the upload is {len(body)} bytes, more than this server's {limits.max_bytes} "
                              f"(scripts/serve.py --max_upload_mb)")
    extension = sniff(body[:512])
    if extension is None:
        raise BadRequest(415, f"the upload is not a file this server reads ({READABLE}): its content, not its "
                              f"name, is checked")
    if extension == ".nii.gz" and not _is_nifti(_gunzip_head(body, 540)):
        raise BadRequest(415, f"the upload is gzip-compressed, but what it holds is not a NIfTI volume (the one "
                              f"compressed format this server reads); send the file uncompressed if it is one this "
                              f"server reads ({READABLE})")
    kind = "volume" if extension in (".nii", ".nii.gz") or (extension == ".npy" and volumes) else "picture"
    if kind == "volume" and not volumes:
        raise BadRequest(415, "the upload is a volume (NIfTI), but this model translates pictures; send an image")
    if kind == "picture" and volumes:
        raise BadRequest(415, "the upload is a picture, but this model translates volumes; send a NIfTI file "
                              "(.nii, .nii.gz) or a .npy array (D x H x W or C x D x H x W)")
    path = os.path.join(folder, "upload" + (".nii" if extension == ".nii.gz" else extension))
    if extension == ".nii":
        _nifti_header(body[:540], limits.max_voxels)  # its size checked before anything reads the file
    if extension == ".nii.gz":  # decompressed here, no further than its header says the volume needs
        _gunzip_nifti(body, path, limits.max_voxels)
    else:
        with open(path, "wb") as f:
            f.write(body)
    try:
        if kind == "volume":
            _check_volume(path, limits.max_voxels)
            return Upload(path, kind, extension)
        return Upload(path, kind, extension, _check_picture(body, path, extension, limits.max_pixels,
                                                            max(4, channels)))
    except UserError as err:
        raise BadRequest(400, describe_upload_error(err, path)) from None


def _check_picture(body: bytes, path: str, extension: str, max_pixels: int, values_per_pixel: int) -> ImageInfo:
    """The picture's header, read; refused when it declares more than `max_pixels` pixels, or more than
    `values_per_pixel` values a pixel (a TIFF of a thousand bands), before any of it is decoded."""
    if extension == ".png" and len(body) >= 24 and body[12:16] == b"IHDR":
        # read here: PIL refuses a header past its own limit without saying the size
        width, height = struct.unpack(">II", body[16:24])
        if width * height > max_pixels:
            raise BadRequest(413, f"the image is {width}x{height} pixels, more than this server's {max_pixels} "
                                  f"(scripts/serve.py --max_pixels)")
    try:
        info = probe_image_as_shown(path)  # a photo's size as shown (EXIF orientation): its batch's layout
    except UserError as err:
        if "decompression bomb" in str(err):  # PIL's refusal of a header declaring hundreds of millions of pixels
            raise BadRequest(413, "the image declares more pixels than this server's limit "
                                  "(scripts/serve.py --max_pixels) and than PIL decodes") from None
        raise
    if info.width * info.height > max_pixels:
        raise BadRequest(413, f"the image is {info.width}x{info.height} pixels, more than this server's "
                              f"{max_pixels} (scripts/serve.py --max_pixels)")
    if info.channels > values_per_pixel:
        raise BadRequest(413, f"the image has {info.channels} channels (bands); this model takes at most "
                              f"{values_per_pixel}")
    return info


def _check_volume(path: str, max_voxels: int) -> None:
    info = probe_volume(path)
    if math.prod(info.shape) > max_voxels:
        raise BadRequest(413, f"the volume is {'x'.join(map(str, info.shape))} (channels x D x H x W), more values "
                              f"than this server's {max_voxels} (scripts/serve.py --max_voxels)")
    if info.dtype.kind not in "biuf":
        raise BadRequest(415, f"the volume holds {info.dtype} values; send integers or floats")


def _nifti_header(head: bytes, max_voxels: int) -> int:
    """The bytes a NIfTI file whose first bytes are `head` holds (header and data, as the header says);
    BadRequest when it is no NIfTI header (400) or declares more than `max_voxels` values (413)."""
    import nibabel

    header = None
    for kind in (nibabel.Nifti1Header, nibabel.Nifti2Header):
        try:
            header = kind.from_fileobj(io.BytesIO(head), check=False)
            break
        except Exception as err:  # not this kind of header (nibabel raises several types)
            logger.debug("the upload is not a %s: %s: %s", kind.__name__, type(err).__name__, err)
            continue
    if header is None:
        raise BadRequest(400, "the upload is not a NIfTI file: its header cannot be read")
    shape = [int(side) for side in header.get_data_shape()]
    values = math.prod(max(side, 1) for side in shape)
    if values > max_voxels:
        raise BadRequest(413, f"the volume's header declares {'x'.join(map(str, shape))} values, more than this "
                              f"server's {max_voxels} (scripts/serve.py --max_voxels)")
    return int(header.get_data_offset()) + values * max(int(header["bitpix"]), 8) // 8


def _gunzip_nifti(body: bytes, path: str, max_voxels: int) -> None:
    """Decompress the gzip stream `body` (a .nii.gz) into `path`: its NIfTI header first, refused when it
    declares more than `max_voxels` values, then no more bytes than that header describes."""
    try:
        with gzip.GzipFile(fileobj=_BytesReader(body)) as stream, open(path, "wb") as out:
            head = stream.read(540)
            cap = _nifti_header(head, max_voxels) + (1 << 16)
            out.write(head)
            written = len(head)
            while chunk := stream.read(1 << 20):
                written += len(chunk)
                if written > cap:
                    raise BadRequest(413, f"the gzip upload decompresses to more than the {cap} bytes its header "
                                          f"describes")
                out.write(chunk)
    except (EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise BadRequest(400, f"the gzip upload cannot be decompressed ({' '.join(str(err).split())}): it is "
                              f"damaged or cut short") from None


def _gunzip_head(body: bytes, size: int) -> bytes:
    """The first `size` bytes (or fewer) the gzip stream `body` decompresses to; 400 when it cannot be read."""
    try:
        with gzip.GzipFile(fileobj=_BytesReader(body)) as stream:
            return stream.read(size)
    except (EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise BadRequest(400, f"the gzip upload cannot be decompressed ({' '.join(str(err).split())}): it is "
                              f"damaged or cut short") from None


class _BytesReader:
    """A read-only file over bytes (io.BytesIO would copy them)."""

    def __init__(self, data: bytes) -> None:
        self._view = memoryview(data)
        self._at = 0

    def read(self, size: int = -1) -> bytes:
        end = len(self._view) if size < 0 else min(len(self._view), self._at + size)
        chunk = bytes(self._view[self._at:end])
        self._at = end
        return chunk


def describe_upload_error(err: BaseException, path: str) -> str:
    """A reader's message about the stored upload, the server's file name replaced by "the upload", on one line."""
    text = " ".join(str(err).split())
    folder = os.path.dirname(path)
    text = re.sub(re.escape(folder) + r"/[^\s:,;)]+", "the upload", text)
    return text.removeprefix("error: ")


def download_name(client_name: str | None, extension: str, suffix: str = "") -> str:
    """`<stem><suffix><extension>` for the download of an output: the client's file name reduced to its
    stem's letters, digits, '-' and '_' (at most 64), or "translation"; shown, never used as a path."""
    stem = os.path.basename((client_name or "").replace("\\", "/"))
    for known in (".nii.gz", *(os.path.splitext(stem)[1:] or ())):
        if known and stem.lower().endswith(known.lower()):
            stem = stem[: -len(known)]
            break
    stem = re.sub(r"[^A-Za-z0-9_-]+", "_", stem).strip("_")[:64] or "translation"
    return f"{stem}{suffix}{extension}"
