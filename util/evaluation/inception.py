"""The Inception-v3 network of FID and KID: torch-fidelity's port of the TensorFlow FID graph.

FID/KID values are comparable with published ones only with that graph and its weights, so we use
torch-fidelity's `FeatureExtractorInceptionV3` through torchmetrics' `NoTrainInceptionV3` (2048-d
pool3 features, TensorFlow-1 bilinear resizing to 299x299, i.e. `antialias=False`, as torch-fidelity
and the original TensorFlow code do; torchmetrics' own default, antialiased resizing, gives other
numbers).

The weights file is looked up, in this order:
  1. an explicit path (`--inception_weights`), which must exist;
  2. $IMG2IMG_INCEPTION_WEIGHTS;
  3. torch-fidelity's file in torch's hub cache, `$TORCH_HOME/hub/checkpoints/weights-inception-2015-12-05-6726825d.pth`
     (where torch-fidelity itself downloads it), or pytorch-fid's `pt_inception-2015-12-05-6726825d.pth`
     there (the same parameter names; this project's earlier versions asked for that file).
If none exists, `ensure_inception_weights` downloads torch-fidelity's file into the hub cache, as the
library does on first use, but gives up within seconds when the network is unreachable (and never
tries when $IMG2IMG_OFFLINE=1): training must not hang on a machine without internet access.
"""
from __future__ import annotations

import contextlib
import os
import pickle
import socket
import urllib.error
import warnings
from typing import Any, Iterator

import torch
from torch import nn

from util.errors import UserError

INCEPTION_WEIGHTS_URL = ("https://github.com/toshas/torch-fidelity/releases/download/v0.2.0/"
                         "weights-inception-2015-12-05-6726825d.pth")  # torch_fidelity.feature_extractor_inceptionv3
INCEPTION_WEIGHTS_NAME = INCEPTION_WEIGHTS_URL.rsplit("/", 1)[1]
PYTORCH_FID_WEIGHTS_NAME = "pt_inception-2015-12-05-6726825d.pth"
WEIGHTS_ENV = "IMG2IMG_INCEPTION_WEIGHTS"
OFFLINE_ENV = "IMG2IMG_OFFLINE"
FEATURE_DIM = 2048
DOWNLOAD_TIMEOUT_S = 10.0  # per network operation: an unreachable host fails within this, a slow download goes on


def add_inception_weights_flag(parser: Any) -> Any:
    """--inception_weights (read by `find_inception_weights`), into `parser` or an argument group."""
    parser.add_argument("--inception_weights", type=str, default="", on_resume="silent",
                        help=f"Inception weights file for FID/KID (default: ${WEIGHTS_ENV}, else torch-fidelity's "
                             f"{INCEPTION_WEIGHTS_NAME} in $TORCH_HOME/hub/checkpoints, downloaded there when "
                             f"missing and online)")
    return parser


def inception_weights_dir() -> str:
    """Where torch-fidelity (through torch.hub) keeps its weights: $TORCH_HOME/hub/checkpoints."""
    return os.path.join(torch.hub.get_dir(), "checkpoints")


def find_inception_weights(explicit: str | None = None) -> str | None:
    """The local Inception weights file to use (see the module docstring), or None if there is none.
    A UserError if `explicit` or $IMG2IMG_INCEPTION_WEIGHTS names a file that does not exist."""
    for path, origin in ((explicit, "--inception_weights"), (os.environ.get(WEIGHTS_ENV), f"${WEIGHTS_ENV}")):
        if path:
            if not os.path.isfile(path):
                raise UserError(f"{origin} {path} is not a file. {missing_inception_weights_message()}")
            return path
    for name in (INCEPTION_WEIGHTS_NAME, PYTORCH_FID_WEIGHTS_NAME):
        cached = os.path.join(inception_weights_dir(), name)
        if os.path.isfile(cached):
            return cached
    return None


def downloads_allowed() -> bool:
    return os.environ.get(OFFLINE_ENV, "").strip().lower() not in ("1", "true", "yes")


def ensure_inception_weights(explicit: str | None = None) -> str | None:
    """The Inception weights file, downloaded into the hub cache first if it is missing and
    downloads are allowed; None when it cannot be had (say `missing_inception_weights_message()`)."""
    path = find_inception_weights(explicit)
    if path is not None or not downloads_allowed():
        return path
    target = os.path.join(inception_weights_dir(), INCEPTION_WEIGHTS_NAME)
    return target if download_weights(INCEPTION_WEIGHTS_URL, target) else None


def download_weights(url: str, target: str) -> bool:
    """Download `url` into `target` (its folder made) as torch.hub does, giving up within seconds when
    the network is unreachable; whether the file is there now. Callers check `downloads_allowed()` first."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    try:
        with _socket_timeout(DOWNLOAD_TIMEOUT_S):
            torch.hub.download_url_to_file(url, target, progress=False)
    except (OSError, urllib.error.URLError, ValueError):  # no network, refused, timed out, HTTP error
        return False
    return True


def inception_weights_available(explicit: str | None = None) -> bool:
    """Whether FID/KID can run: the weights file exists or was just downloaded. Call it once at start
    (and on every rank: a missing file must lead every process to the same decision)."""
    return ensure_inception_weights(explicit) is not None


def missing_inception_weights_message() -> str:
    """One paragraph: which file FID/KID need, where to put it and where to get it."""
    folder = inception_weights_dir()
    why = (f"${OFFLINE_ENV}=1 forbids downloading it" if not downloads_allowed()
           else "it could not be downloaded (no internet access?)")
    return (f"FID/KID need the Inception weights file {INCEPTION_WEIGHTS_NAME}, which is not in {folder}/ and {why}. "
            f"On a machine with internet access download {INCEPTION_WEIGHTS_URL} and put it in {folder}/ "
            f"(that is $TORCH_HOME/hub/checkpoints), or pass --inception_weights PATH, or set ${WEIGHTS_ENV}=PATH. "
            f"See docs/evaluation.md.")


@contextlib.contextmanager
def _socket_timeout(seconds: float) -> Iterator[None]:
    # torch.hub opens its URL without a timeout; the process-wide default is the only way to bound it.
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(previous)


def refuse_stored_code(path: str, what: str, fix: str) -> None:
    """A UserError naming `path` unless it holds plain tensors. torch-fidelity and torchvision load their
    weights files with pickle's full power (`weights_only=False`), which runs code stored in a file; so
    we read the file first the safe way (`weights_only=True`, which never runs any) and refuse it there."""
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise UserError(f"{path} is not a plain file of {what} weights: loading it would run code stored inside it, "
                        f"which we refuse (nothing in it was run). {fix}") from None
    except Exception as err:  # noqa: BLE001 (damaged bytes fail in many ways; name the file and say why)
        first_line = (str(err).splitlines() or [""])[0][:200]
        raise UserError(f"{path} is not a file of {what} weights ({type(err).__name__}: {first_line}). {fix}") from None


def load_inception(path: str, device: torch.device | str = "cpu") -> nn.Module:
    """torchmetrics' NoTrainInceptionV3 (torch-fidelity's network) with the weights at `path`, on
    `device`: Nx3xHxW uint8 images (any H, W) -> Nx2048 float32 pool3 features. A UserError naming
    the file if it holds something else (code stored in it is never run)."""
    from torchmetrics.image.fid import NoTrainInceptionV3  # heavy import: only FID/KID runs need it

    refuse_stored_code(path, "Inception-v3", missing_inception_weights_message())
    try:
        network = NoTrainInceptionV3(name="inception-v3-compat", features_list=[str(FEATURE_DIM)],
                                     feature_extractor_weights_path=path, antialias=False)
    except Exception as err:  # noqa: BLE001 (whatever the file holds instead, name the file and say why)
        first_line = (str(err).splitlines() or [""])[0][:300]
        raise UserError(f"{path} is not a file of Inception-v3 weights ({type(err).__name__}: {first_line}). "
                        f"{missing_inception_weights_message()}") from None
    return network.to(device)


def to_uint8(images: torch.Tensor) -> torch.Tensor:
    """[-1, 1] images as the uint8 values the saved image files hold (the same float32 arithmetic
    and round-half-even as util.util.tensor2im), on the images' device."""
    return ((images.detach().float().clamp(-1.0, 1.0) + 1.0) / 2.0 * 255.0).round().to(torch.uint8)
