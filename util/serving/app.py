"""The HTTP server of a trained model (scripts/serve.py): a page to try it, an API that batches.

    GET  /           the page: drop images (or volumes), see each output beside its input, download it
    GET  /health     {"status": "ok", ...}
    GET  /info       the model: what it takes and gives, its options and this server's limits
    POST /translate  a file in (the body, or the form field "file"), the output file out; options as query
                     or form fields: direction (CycleGAN), n_samples and seed (BicycleGAN; a zip of the
                     samples when n_samples is given), reference (a form file: BicycleGAN's encoded
                     output), response=json (the outputs base64-encoded with 8-bit previews, for the page)
    GET  /docs       the OpenAPI page FastAPI makes

Outputs are what `Translator.translate` gives for the same file (models/translator.py): pictures as PNG at
the output's precision (8 or 16 bits), or TIFF where PNG cannot hold them (float data, more than 4 bands);
volumes in the upload's format (.nii, .nii.gz with the input's geometry, or .npy). Every file lives in a
temporary folder of the request's, removed when it is answered.

At most `queue_size` requests are in the server at once (reading, waiting or translating): one more is
answered 503 with Retry-After before its body is read. Pictures of one size and the same options that
arrive within `batch_timeout_ms` of each other go through the generator together, up to `max_batch`
(util/serving/batching.py), on one of the translators (one per --devices entry).
"""
from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import os
import shutil
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from PIL import Image

from data.image_io import output_extension, probe_image, read_image, write_image
from data.volume_io import read_volume
from models.saved_generator import find_generator
from models.translator import Translator
from util.errors import UserError
from util.flag_types import MAX_SAMPLES, MAX_SEED
from util.serving.batching import MicroBatcher
from util.serving.uploads import BadRequest, Limits, Upload, describe_upload_error, download_name, save_upload

PAGE = Path(__file__).with_name("page.html")
MEDIA_TYPES = {".png": "image/png", ".tif": "image/tiff", ".npy": "application/octet-stream",
               ".nii": "application/octet-stream", ".nii.gz": "application/gzip", ".zip": "application/zip"}


@dataclass(frozen=True)
class ServerSettings:
    """How the server batches and what it admits (scripts/serve.py's flags)."""

    limits: Limits
    max_batch: int = 8
    batch_timeout_ms: float = 10.0
    queue_size: int = 64
    retry_after_s: int = 1


@dataclass
class ServedModel:
    """The translators of one run: `replicas[k][direction]`, one dict per device, and the run's name."""

    name: str
    replicas: list[dict[str, Translator]]
    default_direction: str

    @property
    def first(self) -> Translator:
        return self.replicas[0][self.default_direction]

    @property
    def directions(self) -> list[str]:
        return list(self.replicas[0])

    @property
    def has_encoder(self) -> bool:
        return self.first.latent_size > 0 and _loads_encoder(self.first)


def _loads_encoder(translator: Translator) -> bool:
    try:
        return translator.encoder is not None
    except UserError:
        return False


def load_model(checkpoint: str, devices: list[str], epoch: str = "latest", precision: str = "fp32") -> ServedModel:
    """The translators of the run in `checkpoint` on each of `devices`, in every direction the run can
    translate (CycleGAN's two; the trained one elsewhere). Raises UserError as Translator.load does."""
    trained = find_generator(checkpoint, None, epoch).direction
    directions = [trained]
    other = "BtoA" if trained == "AtoB" else "AtoB"
    if os.path.isdir(checkpoint):
        try:  # CycleGAN's other generator; pix2pix and the others translate one way only
            find_generator(checkpoint, other, epoch)
            directions.append(other)
        except UserError:
            pass
    replicas = [{direction: Translator.load(checkpoint, direction=None if direction == trained else direction,
                                            epoch=epoch, device=device, precision=precision)
                 for direction in directions} for device in devices]
    return ServedModel(os.path.basename(os.path.normpath(checkpoint)), replicas, trained)


# ------------------------------------------------------------------------------------------ one request
@dataclass
class Job:
    """One request's work: the stored upload, its options, and (pictures of a batchable kind) its pixels."""

    upload: Upload
    folder: str
    client_name: str | None
    direction: str
    n_samples: int | None
    seed: int | None
    reference: Upload | None = None
    pixels: np.ndarray | None = None  # H x W x C as read_image reads it, when the job may share a batch
    alpha: bool = False


@dataclass
class Translated:
    """What a job gives: the output files (name, media type, bytes) and an 8-bit PNG preview of each."""

    files: list[tuple[str, str, bytes]]
    previews: list[bytes] = field(default_factory=list)
    seconds: float = 0.0


def batch_key(job: Job) -> tuple | None:
    """Jobs with equal keys go through the generator together; None: alone (volumes, a reference image,
    an alpha channel, which need the file's own path through the Translator)."""
    if job.pixels is None:
        return None
    return (job.direction, job.pixels.shape, job.pixels.dtype.str, job.n_samples, job.seed)


def _picture_files(job: Job, outputs: list[np.ndarray]) -> Translated:
    files, previews = [], []
    several = len(outputs) > 1 or job.n_samples is not None
    info = probe_image(job.upload.path)
    for k, array in enumerate(outputs):
        extension = output_extension(".png", array.dtype, array.shape[-1])
        path = os.path.join(job.folder, f"output{k}{extension}")
        # alpha stays marked where the output has the input's channels, as Translator.translate_file writes it
        write_image(path, array, alpha=info.alpha and array.shape[-1] == info.channels)
        name = download_name(job.client_name, extension, f"_sample{k}" if several else "")
        files.append((name, MEDIA_TYPES[extension], Path(path).read_bytes()))
        previews.append(files[-1][2] if extension == ".png" and array.dtype == np.uint8 else preview_png(array))
    return Translated(files, previews)


def _volume_files(job: Job, translator: Translator) -> Translated:
    extension = job.upload.extension
    path = os.path.join(job.folder, "output" + extension)
    translator.translate_file(job.upload.path, path)
    volume = read_volume(path, None).array
    name = download_name(job.client_name, extension)
    return Translated([(name, MEDIA_TYPES[extension], Path(path).read_bytes())], [volume_preview_png(volume)])


def translate_jobs(model: ServedModel, replica: int, key: tuple | None, jobs: list[Job]) -> list[Any]:
    """The batcher's call, in a translating thread: one Translated (or BadRequest) per job."""
    translators = model.replicas[replica]
    started = time.perf_counter()
    if key is not None and len(jobs) > 1:
        try:
            results = _translate_together(translators[key[0]], jobs)
        except UserError:
            results = [_translate_alone(translators, job) for job in jobs]  # each its own verdict
    else:
        results = [_translate_alone(translators, job) for job in jobs]
    seconds = time.perf_counter() - started
    for result in results:
        if isinstance(result, Translated):
            result.seconds = seconds
    return results


def _translate_together(translator: Translator, jobs: list[Job]) -> list[Translated]:
    batch = np.stack([job.pixels for job in jobs])
    first = jobs[0]
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
        answers = {}
        if translator.latent_size > 0:
            answers = ({"reference": job.reference.path} if job.reference is not None else
                       {"n_samples": job.n_samples, "seed": job.seed})
        output = translator.translate(job.upload.path, **answers)
        return _picture_files(job, output if isinstance(output, list) else [output])
    except UserError as err:
        return BadRequest(422, describe_upload_error(err, job.upload.path))


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


# ------------------------------------------------------------------------------------------ the app
def _option(fields: dict[str, Any], name: str, low: int, high: int) -> int | None:
    value = fields.get(name)
    if value in (None, ""):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise BadRequest(400, f"{name}={value!r} is not a whole number; give one from {low} to {high}") from None
    if not low <= number <= high:
        raise BadRequest(400, f"{name}={number} is out of range; give one from {low} to {high}")
    return number


def create_app(model: ServedModel, settings: ServerSettings) -> FastAPI:
    """The FastAPI app serving `model` (see the module docstring)."""
    batcher = MicroBatcher(lambda replica, key, jobs: translate_jobs(model, replica, key, jobs),
                           replicas=len(model.replicas), max_batch=settings.max_batch,
                           batch_timeout_s=settings.batch_timeout_ms / 1000)
    admitted = {"now": 0, "refused": 0, "served": 0}
    scratch = tempfile.mkdtemp(prefix="img2img_serve_")

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        await batcher.start()
        try:
            yield
        finally:
            await batcher.stop()
            shutil.rmtree(scratch, ignore_errors=True)

    app = FastAPI(title=f"img2img: {model.name}", lifespan=lifespan,
                  description="Translate images (or volumes) with a trained model. POST a file to /translate.")
    page = PAGE.read_text()
    translator = model.first

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def the_page() -> str:
        return page

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "requests_in_server": admitted["now"], "served": admitted["served"],
                "refused_busy": admitted["refused"], "batches": batcher.batches_run,
                "largest_batch": batcher.largest_batch}

    @app.get("/info")
    async def info() -> dict:
        latent = translator.latent_size > 0
        return {
            "model": model.name, "generator": translator.netG,
            "takes": "volumes" if translator.volumes else "pictures",
            "input_channels": translator.input_nc, "output_channels": translator.output_nc,
            "directions": model.directions, "default_direction": model.default_direction,
            "latent_size": translator.latent_size, "encoder": model.has_encoder,
            "window": translator.window.describe() if translator.window else None,
            "options": {"direction": model.directions,
                        **({"n_samples": [1, MAX_SAMPLES], "seed": [0, MAX_SEED],
                            "reference": model.has_encoder} if latent else {})},
            "limits": {"max_bytes": settings.limits.max_bytes, "max_pixels": settings.limits.max_pixels,
                       "max_voxels": settings.limits.max_voxels},
            "batching": {"max_batch": settings.max_batch, "batch_timeout_ms": settings.batch_timeout_ms,
                         "queue_size": settings.queue_size, "devices": [str(r[model.default_direction].device)
                                                                        for r in model.replicas]},
        }

    @app.post("/translate", responses={200: {"content": {"image/png": {}, "application/zip": {}}}})
    async def translate(request: Request) -> Response:
        if admitted["now"] >= settings.queue_size:
            admitted["refused"] += 1
            return JSONResponse({"error": f"the server holds {settings.queue_size} requests already; retry in "
                                          f"{settings.retry_after_s} s"}, status_code=503,
                                headers={"Retry-After": str(settings.retry_after_s)})
        admitted["now"] += 1
        folder = tempfile.mkdtemp(dir=scratch)
        try:
            job, as_json = await _job_of(request, folder)
            result = await batcher.submit(batch_key(job), job)
            if isinstance(result, BadRequest):
                raise result
            admitted["served"] += 1
            return _answer(result, as_json)
        except BadRequest as err:
            return JSONResponse({"error": err.reason}, status_code=err.status)
        finally:
            admitted["now"] -= 1
            shutil.rmtree(folder, ignore_errors=True)

    async def _job_of(request: Request, folder: str) -> tuple[Job, bool]:
        limits = settings.limits
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limits.max_bytes + (1 << 16):
            raise BadRequest(413, f"the request is {declared} bytes, more than this server's {limits.max_bytes} "
                                  f"(scripts/serve.py --max_upload_mb)")
        fields: dict[str, Any] = dict(request.query_params)
        client_name = None
        reference_body = None
        if request.headers.get("content-type", "").startswith("multipart/form-data"):
            try:
                form = await request.form(max_files=2, max_fields=16, max_part_size=limits.max_bytes)
            except Exception as err:  # starlette's parser errors: a malformed or oversized form
                raise BadRequest(400, f"the form cannot be read ({' '.join(str(err).split())})") from None
            upload = form.get("file")
            if upload is None or isinstance(upload, str):
                raise BadRequest(400, "the form has no file field 'file': send the image as 'file'")
            body, client_name = await upload.read(), upload.filename
            reference = form.get("reference")
            if reference is not None and not isinstance(reference, str):
                reference_body = await reference.read()
            fields.update({k: v for k, v in form.items() if isinstance(v, str)})
        else:
            body = await _read_body(request, limits.max_bytes)
            client_name = request.headers.get("x-filename")
        direction = fields.get("direction") or model.default_direction
        if direction not in model.directions:
            raise BadRequest(400, f"direction={direction!r}: this model translates {' or '.join(model.directions)}")
        latent = translator.latent_size > 0
        n_samples = _option(fields, "n_samples", 1, MAX_SAMPLES)
        seed = _option(fields, "seed", 0, MAX_SEED)
        if not latent and (n_samples is not None or seed is not None or reference_body is not None):
            raise BadRequest(400, f"{model.name} ({translator.netG}) gives one translation per input: leave out "
                                  f"n_samples, seed and reference")
        if reference_body is not None and n_samples is not None:
            raise BadRequest(400, "a reference image gives the one output that looks like it: send reference, or "
                                  "n_samples, not both")
        if reference_body is not None and not model.has_encoder:
            raise BadRequest(400, f"{model.name} has no encoder saved beside its generator, so a reference image "
                                  f"cannot be encoded; ask for n_samples instead")
        job = await asyncio.to_thread(_stored_job, body, folder, client_name, direction, n_samples, seed,
                                      reference_body, limits, translator.volumes)
        return job, fields.get("response") == "json"

    return app


async def _read_body(request: Request, max_bytes: int) -> bytes:
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise BadRequest(413, f"the upload is more than this server's {max_bytes} bytes "
                                  f"(scripts/serve.py --max_upload_mb)")
        chunks.append(chunk)
    return b"".join(chunks)


def _stored_job(body: bytes, folder: str, client_name: str | None, direction: str, n_samples: int | None,
                seed: int | None, reference_body: bytes | None, limits: Limits, volumes: bool) -> Job:
    """The upload stored and checked (and a picture's pixels decoded, for a batch), in a thread."""
    upload = save_upload(body, folder, limits, volumes)
    reference = None
    if reference_body is not None:
        reference_folder = tempfile.mkdtemp(dir=folder)
        reference = save_upload(reference_body, reference_folder, limits, volumes)
    job = Job(upload, folder, client_name, direction, n_samples, seed, reference)
    if upload.kind == "picture" and reference is None:
        try:
            alpha = probe_image(upload.path).alpha
            if not alpha:
                job.pixels = read_image(upload.path)
        except UserError as err:
            raise BadRequest(400, describe_upload_error(err, upload.path)) from None
    return job


def _answer(result: Translated, as_json: bool) -> Response:
    if as_json:
        return JSONResponse({
            "outputs": [{"name": name, "media_type": media, "data": base64.b64encode(data).decode()}
                        for name, media, data in result.files],
            "previews": [base64.b64encode(preview).decode() for preview in result.previews],
            "seconds": round(result.seconds, 4)})
    if len(result.files) == 1:
        name, media, data = result.files[0]
        return Response(data, media_type=media, headers={"Content-Disposition": f'attachment; filename="{name}"'})
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, _, data in result.files:  # dated 1980: the same answers make the same zip
            archive.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
    return Response(buffer.getvalue(), media_type=MEDIA_TYPES[".zip"],
                    headers={"Content-Disposition": 'attachment; filename="translations.zip"'})
