"""One request's work, done in a translating thread: its upload translated as the Translator translates the
file, alone or in a batch of its kind, and the output files and previews it answers with.

    Job, batch_key(job)            what a request asks, and which requests may share a batch
    stored_job(...)                a request's upload stored, checked from its header (decoded when translated)
    translate_jobs(translators, key, jobs) -> [Translated | BadRequest]   the batcher's call
    preview_png(array), volume_preview_png(volume)                        8-bit previews for the page
"""
from __future__ import annotations

import io
import logging
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from data.image_io import output_extension, read_image_as_shown, write_image
from data.volume_io import read_volume
from models.inference.serving.uploads import (
    BadRequest,
    Limits,
    Upload,
    describe_upload_error,
    download_name,
    save_upload,
)
from models.inference.translator import Translator
from util.errors import UserError

logger = logging.getLogger(__name__)

MEDIA_TYPES = {".png": "image/png", ".tif": "image/tiff", ".npy": "application/octet-stream",
               ".nii": "application/octet-stream", ".nii.gz": "application/gzip", ".zip": "application/zip"}


@dataclass
class Job:
    """One request's work: the stored upload, its options, and (a picture that may share a batch) what its
    header says it holds: (height, width, channels) and sample type."""

    upload: Upload
    folder: str
    client_name: str | None
    direction: str
    n_samples: int | None
    seed: int | None
    reference: Upload | None = None
    layout: tuple[tuple[int, int, int], str] | None = None  # None: translated alone, from its file
    steps: int | None = None  # --model sb: the number of steps of its walk (None: the run's)


@dataclass
class Translated:
    """What a job gives: the output files (name, media type, bytes), an 8-bit PNG preview of each, and
    whether they are samples (answered as a zip, however many)."""

    files: list[tuple[str, str, bytes]]
    previews: list[bytes] = field(default_factory=list)
    samples: bool = False
    seconds: float = 0.0


def batch_key(job: Job) -> tuple | None:
    """Jobs with equal keys go through the generator together; None: alone (volumes, a reference image,
    an alpha channel, which need the file's own path through the Translator)."""
    if job.layout is None:
        return None
    return (job.direction, *job.layout, job.n_samples, job.seed, job.steps)


def _picture_files(job: Job, outputs: list[np.ndarray]) -> Translated:
    files, previews = [], []
    several = len(outputs) > 1 or job.n_samples is not None
    info = job.upload.picture
    for k, array in enumerate(outputs):
        extension = output_extension(".png", array.dtype, array.shape[-1])
        path = os.path.join(job.folder, f"output{k}{extension}")
        # alpha stays marked where the output has the input's channels, as Translator.translate_file writes it
        write_image(path, array, alpha=info.alpha and array.shape[-1] == info.channels)
        name = download_name(job.client_name, extension, f"_sample{k}" if several else "")
        files.append((name, MEDIA_TYPES[extension], Path(path).read_bytes()))
        previews.append(files[-1][2] if extension == ".png" and array.dtype == np.uint8 else preview_png(array))
    return Translated(files, previews, samples=job.n_samples is not None)


def _volume_files(job: Job, translator: Translator) -> Translated:
    extension = job.upload.extension
    path = os.path.join(job.folder, "output" + extension)
    translator.translate_file(job.upload.path, path)
    volume = read_volume(path, None).array
    name = download_name(job.client_name, extension)
    return Translated([(name, MEDIA_TYPES[extension], Path(path).read_bytes())], [volume_preview_png(volume)])


def translate_jobs(translators: dict[str, Translator], key: tuple | None, jobs: list[Job]) -> list[Any]:
    """The batcher's call, in a translating thread, on one device's `translators` (by direction): one
    Translated (or BadRequest) per job, in order. A batch that fails is translated again one job at a
    time, so that one bad upload (or a device out of memory) costs only its own request."""
    started = time.perf_counter()
    results: list[Any] | None = None
    if key is not None and len(jobs) > 1:
        try:
            results = _translate_together(translators[key[0]], jobs)
        except Exception as err:  # any failure: each job is translated alone below, so only a bad one fails
            logger.warning("a batch of %d jobs failed (%s: %s); translating them one at a time",
                           len(jobs), type(err).__name__, err)
            results = None
    if results is None:
        results = [_translate_alone(translators, job) for job in jobs]
    seconds = time.perf_counter() - started
    for result in results:
        if isinstance(result, Translated):
            result.seconds = seconds
    return results


def _translate_together(translator: Translator, jobs: list[Job]) -> list[Translated]:
    # decoded here, on the translating thread; upright as the Translator reads a file (its EXIF orientation)
    batch = np.stack([read_image_as_shown(job.upload.path) for job in jobs])
    first = jobs[0]
    if translator.bridge is not None:
        outputs = translator.translate(batch, seed=first.seed, steps=first.steps)
        return [_picture_files(job, [out]) for job, out in zip(jobs, outputs)]
    if translator.latent_size == 0:
        return [_picture_files(job, [out]) for job, out in zip(jobs, translator.translate(batch))]
    answers = translator.translate(batch, n_samples=first.n_samples, seed=first.seed)
    samples = answers if first.n_samples is not None else [answers]  # n_samples x (N x H x W x C)
    return [_picture_files(job, [sample[i] for sample in samples]) for i, job in enumerate(jobs)]


def _translate_alone(translators: dict[str, Translator], job: Job) -> Translated | BadRequest:
    translator = translators[job.direction]
    try:
        if job.upload.kind == "volume":
            return _volume_files(job, translator)
        answers, image = {}, job.upload.path
        if translator.bridge is not None:
            answers = {"seed": job.seed, "steps": job.steps}
            # the decoded picture, as in a batch: the noise of the seed itself, not of the server's file name
            image = read_image_as_shown(job.upload.path)
        elif translator.latent_size > 0:
            answers = ({"reference": job.reference.path} if job.reference is not None else
                       {"n_samples": job.n_samples, "seed": job.seed})
        output = translator.translate(image, **answers)
        return _picture_files(job, output if isinstance(output, list) else [output])
    except UserError as err:
        reason = _without_server_paths(describe_upload_error(err, job.upload.path), translator)
        # the readers' "cannot read image/volume ...": the file itself is damaged (400); else the model cannot take it
        return BadRequest(400 if reason.startswith("cannot read") else 422, reason)
    except Exception as err:  # a bug or the machine (memory, disk): this request's 500, the server goes on
        logger.exception("translating %s failed", job.upload.path)  # the traceback, for whoever runs the server
        reason = _without_server_paths(" ".join(f"{type(err).__name__}: {err}".split()), translator)
        return BadRequest(500, f"the server failed to translate this file ({reason[:300]})")


def _without_server_paths(text: str, translator: Translator) -> str:
    """`text` with the model's checkpoint folder named by the run's name only."""
    source = translator.loaded.source
    folder = os.path.dirname(os.path.abspath(source)) if source else ""
    return text.replace(folder, os.path.basename(folder)) if folder else text


# ------------------------------------------------------------------------------------------ previews
def _to_8bit(array: np.ndarray, low: float, high: float) -> np.ndarray:
    if array.dtype == np.uint8:
        return array
    if array.dtype == np.uint16:
        return (array >> 8).astype(np.uint8)
    span = high - low if high > low else 1.0
    return np.clip((array.astype(np.float64) - low) / span * 255 + 0.5, 0, 255).astype(np.uint8)


def preview_png(array: np.ndarray) -> bytes:
    """An 8-bit PNG of an H x W x C output for a browser: 16 bits shifted, floats stretched from their
    lowest to their highest value; 1-4 channels as gray, gray+alpha, RGB, RGBA; more: the first three."""
    array = array if array.ndim == 3 else array[:, :, None]
    if array.shape[-1] > 4:
        array = array[:, :, :3]
    finite = array[np.isfinite(array)] if array.dtype.kind == "f" else array
    eight = _to_8bit(array, float(finite.min()) if finite.size else 0.0, float(finite.max()) if finite.size else 1.0)
    buffer = io.BytesIO()
    Image.fromarray(eight[:, :, 0] if eight.shape[-1] == 1 else eight).save(buffer, format="PNG")
    return buffer.getvalue()


def volume_preview_png(volume: np.ndarray) -> bytes:
    """The middle slices of a (C, D, H, W) volume's first channel across its three axes, side by side,
    stretched from the volume's lowest to its highest value, as one 8-bit gray PNG."""
    values = volume[0]
    low, high = float(np.nanmin(values)), float(np.nanmax(values))
    slices = [values[values.shape[0] // 2], values[:, values.shape[1] // 2], values[:, :, values.shape[2] // 2]]
    height = max(s.shape[0] for s in slices)
    padded = [np.pad(_to_8bit(s, low, high), ((0, height - s.shape[0]), (0, 2))) for s in slices]
    buffer = io.BytesIO()
    Image.fromarray(np.concatenate(padded, axis=1)).save(buffer, format="PNG")
    return buffer.getvalue()


def stored_job(body: bytes, folder: str, client_name: str | None, direction: str, n_samples: int | None,
               seed: int | None, reference_body: bytes | None, limits: Limits, volumes: bool,
               channels: int, steps: int | None = None) -> Job:
    """The upload stored and checked from its header, in a thread (`channels`: the model's input channels)."""
    upload = save_upload(body, folder, limits, volumes, channels)
    reference = None
    if reference_body:
        reference_folder = tempfile.mkdtemp(dir=folder)
        reference = save_upload(reference_body, reference_folder, limits, volumes, channels)
    job = Job(upload, folder, client_name, direction, n_samples, seed, reference, steps=steps)
    info = upload.picture
    if info is not None and reference is None and not info.alpha:  # alpha needs the file's path through the Translator
        job.layout = ((info.height, info.width, info.channels), np.dtype(info.dtype).str)
    return job
