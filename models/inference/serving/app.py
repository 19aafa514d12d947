"""The HTTP server of a trained model (scripts/serve.py): a page to try it, an API that batches.

    GET  /           the page: drop images (or volumes), see each output beside its input, download it
    GET  /health     {"status": "ok", ...}
    GET  /info       the model: what it takes and gives, its options and this server's limits
    POST /translate  a file in (the body, or the form field "file"), the output file out; options as query
                     or form fields: direction (CycleGAN), n_samples and seed (BicycleGAN; a zip of the
                     samples when n_samples is given), reference (a form file: BicycleGAN's encoded
                     output), seed and steps (--model sb: its noise and its number of steps),
                     response=json (the outputs base64-encoded with 8-bit previews, for the page);
                     any other option or form file, or one given twice, is refused (400) naming it
    GET  /docs       the OpenAPI page FastAPI makes

Outputs are what `Translator.translate` gives for the same file (models/inference/translator.py): pictures as PNG at
the output's precision (8 or 16 bits), or TIFF where PNG cannot hold them (float data, more than 4 bands);
volumes in the upload's format (.nii, .nii.gz with the input's geometry, or .npy). Every file lives in a
temporary folder of the request's, removed when it is answered.

At most `queue_size` requests are in the server at once (reading, waiting or translating): one more is
answered 503 with Retry-After before its body is read. Pictures of one size and the same options that
arrive within `batch_timeout_ms` of each other go through the generator together, up to `max_batch`
(models/inference/serving/batching.py), on one of the translators (one per --devices entry).
"""
from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import logging
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import ClientDisconnect

from models.inference.exact import ExactBudget
from models.inference.saved_generator import find_generator
from models.inference.serving.batching import MicroBatcher
from models.inference.serving.jobs import MEDIA_TYPES, Job, Translated, batch_key, stored_job, translate_jobs
from models.inference.serving.receiving import counting, form_upload, raw_upload, unless_disconnected
from models.inference.serving.request_options import named_options, whole_number
from models.inference.serving.uploads import BadRequest, Limits, shown
from models.inference.translator import Translator
from models.losses import bridge
from util.errors import UserError
from util.flag_types import MAX_SEED

PAGE = Path(__file__).with_name("page.html")


@dataclass(frozen=True)
class ServerSettings:
    """How the server batches and what it admits (scripts/serve.py's flags)."""

    limits: Limits
    max_batch: int = 8
    batch_timeout_ms: float = 10.0
    queue_size: int = 64
    max_samples: int = 16  # BicycleGAN's samples per request: each costs a translation and its memory
    read_timeout_s: float = 60.0  # a client slower than this with its upload loses its place (408)
    retry_after_s: int = 1
    # Host headers answered (None: any). Serving on 127.0.0.1, only loopback names: a web page elsewhere
    # cannot reach the server through a name of its own that resolves to 127.0.0.1 (DNS rebinding).
    allowed_hosts: tuple[str, ...] | None = None


@dataclass
class ServedModel:
    """The translators of one run: `replicas[k][direction]`, one dict per device, the run's name, and
    whether an encoder saved beside a latent generator turns reference images into codes."""

    name: str
    replicas: list[dict[str, Translator]]
    default_direction: str
    has_encoder: bool = False

    @property
    def first(self) -> Translator:
        return self.replicas[0][self.default_direction]

    @property
    def directions(self) -> list[str]:
        return list(self.replicas[0])


def _loads_encoder(translator: Translator) -> bool:
    try:
        return translator.encoder is not None
    except UserError:
        return False


def load_model(checkpoint: str, devices: list[str], epoch: str = "latest", precision: str = "fp32",
               exact: ExactBudget | None = ExactBudget()) -> ServedModel:
    """The translators of the run in `checkpoint` on each of `devices`, in every direction the run can
    translate (CycleGAN's two; the trained one elsewhere), pictures translated exactly within `exact`.
    Raises UserError as Translator.load does."""
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
                                            epoch=epoch, device=device, precision=precision, exact=exact)
                 for direction in directions} for device in devices]
    first = replicas[0][trained]  # its encoder loaded now, once, rather than at a request
    return ServedModel(os.path.basename(os.path.normpath(checkpoint)), replicas, trained,
                       has_encoder=first.latent_size > 0 and _loads_encoder(first))


# ------------------------------------------------------------------------------------------ the app
class TranslationService:
    """The server's state and its answers: the model, the batcher, and how many requests are in."""

    def __init__(self, model: ServedModel, settings: ServerSettings) -> None:
        self.model = model
        self.settings = settings
        self.translator = model.first
        self.batcher = MicroBatcher(lambda replica, key, jobs: translate_jobs(model.replicas[replica], key, jobs),
                                    replicas=len(model.replicas), max_batch=settings.max_batch,
                                    batch_timeout_s=settings.batch_timeout_ms / 1000)
        self.in_server = 0
        self.served = 0
        self.refused_busy = 0
        self.scratch = ""

    def options_taken(self) -> list[str]:
        """The options of /translate this model takes, as GET /info lists them."""
        return list(self.info()["options"])

    def health(self) -> dict:
        return {"status": "ok", "requests_in_server": self.in_server, "served": self.served,
                "refused_busy": self.refused_busy, "batches": self.batcher.batches_run,
                "largest_batch": self.batcher.largest_batch}

    def info(self) -> dict:
        model, translator, settings = self.model, self.translator, self.settings
        latent = translator.latent_size > 0
        return {
            "model": model.name, "generator": translator.loaded.netG,
            "takes": "volumes" if translator.volumes else "pictures",
            "input_channels": translator.loaded.input_nc, "output_channels": translator.loaded.output_nc,
            "directions": model.directions, "default_direction": model.default_direction,
            "latent_size": translator.latent_size, "encoder": model.has_encoder,
            "window": translator.window.describe() if translator.window else None,
            "options": {"direction": model.directions,
                        **({"n_samples": [1, settings.max_samples], "seed": [0, MAX_SEED],
                            "reference": model.has_encoder} if latent else {}),
                        **({"seed": [0, MAX_SEED], "steps": [1, bridge.MAX_STEPS]} if translator.bridge else {}),
                        "response": ["json"]},
            "default_steps": translator.bridge[0] if translator.bridge else None,
            "limits": {"max_bytes": settings.limits.max_bytes, "max_pixels": settings.limits.max_pixels,
                       "max_voxels": settings.limits.max_voxels},
            "batching": {"max_batch": settings.max_batch, "batch_timeout_ms": settings.batch_timeout_ms,
                         "queue_size": settings.queue_size,
                         "devices": [str(replica[model.default_direction].running.device)
                                     for replica in model.replicas]},
        }

    async def translate(self, request: Request) -> Response:
        """POST /translate: admitted (or 503 before the upload is read), stored, batched, answered."""
        if self.in_server >= self.settings.queue_size:
            self.refused_busy += 1
            retry = self.settings.retry_after_s
            return JSONResponse({"error": f"the server holds {self.settings.queue_size} requests already; retry in "
                                          f"{retry} s"}, status_code=503, headers={"Retry-After": str(retry)})
        self.in_server += 1
        folder = None
        try:
            await self.ensure_started()
            folder = tempfile.mkdtemp(dir=self.scratch)
            job, as_json = await self._job_of(request, folder)
            result = await unless_disconnected(request, self.batcher.submit(batch_key(job), job))
            if isinstance(result, BadRequest):
                raise result
            self.served += 1
            return _answer(result, as_json)
        except BadRequest as err:
            return JSONResponse({"error": err.reason}, status_code=err.status)
        except ClientDisconnect:  # the client is gone: nobody reads an answer
            return Response(status_code=400)
        except Exception as err:  # a bug or the machine (disk, memory): this request's 500, the server goes on
            logging.getLogger(__name__).exception("serving a request failed")
            return JSONResponse({"error": f"the server failed on this request ({type(err).__name__})"},
                                status_code=500)
        finally:
            self.in_server -= 1
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)

    async def ensure_started(self) -> None:
        """The scratch folder made (again, if a cleaner removed it) and the batcher running (also where
        the app is mounted in another one, whose lifespan does not reach it)."""
        if not self.scratch or not os.path.isdir(self.scratch):
            self.scratch = tempfile.mkdtemp(prefix="img2img_serve_")
        if not self.batcher.running:
            await self.batcher.start()

    async def _job_of(self, request: Request, folder: str) -> tuple[Job, bool]:
        """The request's upload stored in `folder` and its options checked; whether it asks for JSON."""
        limits = self.settings.limits
        declared = request.headers.get("content-length")
        # a file and a reference image at most, and the form around them
        most = 2 * limits.max_bytes + (1 << 16)
        if declared is not None and declared.isdigit() and int(declared) > most:
            raise BadRequest(413, f"the request is {declared} bytes, more than this server takes (uploads of "
                                  f"{limits.max_bytes} bytes at most: scripts/serve.py --max_upload_mb)")
        taken = self.options_taken()
        # the query's options checked before the upload is read: a misspelt one costs no upload
        query = named_options(list(request.query_params.multi_items()), "query", taken)
        texts: list[tuple[str, str]] = []
        counted = counting(request, most)
        try:
            if request.headers.get("content-type", "").lower().startswith("multipart/form-data"):
                upload = form_upload(counted, limits.max_bytes, texts)
            else:
                upload = raw_upload(counted, limits.max_bytes)
            body, client_name, reference_body = await asyncio.wait_for(upload, self.settings.read_timeout_s)
        except asyncio.TimeoutError:
            raise BadRequest(408, f"the upload took more than {self.settings.read_timeout_s:g} s to arrive; send it "
                                  f"again") from None
        fields = named_options(texts, "form", taken, already=query)
        direction, n_samples, seed, steps = self._options(fields, bool(reference_body))
        job = await asyncio.to_thread(stored_job, body, folder, client_name, direction, n_samples, seed,
                                      reference_body, limits, self.translator.volumes,
                                      self.translator.loaded.input_nc, steps)
        return job, fields.get("response") == "json"

    def _options(self, fields: dict[str, Any], has_reference: bool) -> tuple[str, int | None, int | None, int | None]:
        """(direction, n_samples, seed, steps) from the request's fields, each checked against the model."""
        model, translator = self.model, self.translator
        generator = f"{model.name} ({translator.loaded.netG})"  # as the refusals below name it
        if fields.get("response") not in (None, "", "json"):
            raise BadRequest(400, f"response={shown(fields['response'])}: give response=json (the outputs "
                                  f"base64-encoded with previews) or leave it out (the output file)")
        direction = fields.get("direction") or model.default_direction
        if direction not in model.directions:
            raise BadRequest(400, f"direction={shown(direction)}: this model translates "
                                  f"{' or '.join(model.directions)}")
        n_samples = whole_number(fields, "n_samples", 1, self.settings.max_samples, "scripts/serve.py --max_samples")
        seed = whole_number(fields, "seed", 0, MAX_SEED)
        if translator.bridge is None and fields.get("steps") not in (None, ""):
            raise BadRequest(400, f"steps={shown(fields['steps'])}: {generator} translates in one "
                                  f"pass; only a Schrödinger-bridge run (--model sb) walks steps")
        steps = whole_number(fields, "steps", 1, bridge.MAX_STEPS)
        if translator.bridge is not None:
            if n_samples is not None or has_reference:
                raise BadRequest(400, f"{generator} draws its own noise at each step: leave out "
                                      f"n_samples and reference; send seed (and steps) for another draw")
            return direction, None, seed, steps
        if translator.latent_size == 0 and (n_samples is not None or seed is not None or has_reference):
            raise BadRequest(400, f"{generator} gives one translation per input: leave out "
                                  f"n_samples, seed and reference")
        if has_reference and n_samples is not None:
            raise BadRequest(400, "a reference image gives the one output that looks like it: send reference, or "
                                  "n_samples, not both")
        if has_reference and not model.has_encoder:
            raise BadRequest(400, f"{model.name} has no encoder saved beside its generator, so a reference image "
                                  f"cannot be encoded; ask for n_samples instead")
        return direction, n_samples, seed, None


def create_app(model: ServedModel, settings: ServerSettings) -> FastAPI:
    """The FastAPI app serving `model` (see the module docstring)."""
    service = TranslationService(model, settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        await service.ensure_started()
        try:
            yield
        finally:
            await service.batcher.stop()
            shutil.rmtree(service.scratch, ignore_errors=True)

    app = FastAPI(title=f"img2img: {model.name}", lifespan=lifespan,
                  description="Translate images (or volumes) with a trained model. POST a file to /translate.")
    if settings.allowed_hosts is not None:
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(settings.allowed_hosts), www_redirect=False)
    page = PAGE.read_text()
    app.add_api_route("/", lambda: HTMLResponse(page), methods=["GET"], include_in_schema=False)
    app.add_api_route("/health", service.health, methods=["GET"], summary="whether the server is up")
    app.add_api_route("/info", service.info, methods=["GET"], summary="the model, its options and the limits")
    app.add_api_route("/translate", service.translate, methods=["POST"], summary="translate one file",
                      responses={200: {"content": {"image/png": {}, "application/zip": {}}}})
    return app


def _answer(result: Translated, as_json: bool) -> Response:
    if as_json:
        return JSONResponse({
            "outputs": [{"name": name, "media_type": media, "data": base64.b64encode(data).decode()}
                        for name, media, data in result.files],
            "previews": [base64.b64encode(preview).decode() for preview in result.previews],
            "seconds": round(result.seconds, 4)})
    if len(result.files) == 1 and not result.samples:
        name, media, data = result.files[0]
        return Response(data, media_type=media, headers={"Content-Disposition": f'attachment; filename="{name}"'})
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, _, data in result.files:  # dated 1980: the same answers make the same zip
            archive.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
    return Response(buffer.getvalue(), media_type=MEDIA_TYPES[".zip"],
                    headers={"Content-Disposition": 'attachment; filename="translations.zip"'})
