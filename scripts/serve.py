"""Serve a trained model: a web page to try it and an HTTP API that batches concurrent requests.

    python scripts/serve.py --checkpoint checkpoints/horse2zebra            # http://127.0.0.1:8000/
    curl -F file=@horse.jpg http://127.0.0.1:8000/translate -o zebra.png

Any run that the Translator loads (CycleGAN in either direction, pix2pix, CUT, BicycleGAN with its
samples and encoder, volume models): the page at / takes images (or volumes) by drag and drop and shows
each output beside its input; POST /translate takes a file and answers the translated file; GET /info
describes the model and GET /health says the server is up; /docs is the API's OpenAPI page.
docs/serving.md has the options, the API with curl and Python examples, and the measured throughput.
Binds to 127.0.0.1 unless --host says otherwise. Exit status 2 with one paragraph for a bad flag or
checkpoint, before anything is served.
"""
from __future__ import annotations

import argparse
import os
import re
import socket
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from models.inference.records import resolve_device  # noqa: E402
from options.inference_flags import add_checkpoint_flags, add_exact_flags, add_precision_flag, exact_budget  # noqa: E402,E501
from util.console import setup_logging  # noqa: E402
from util.errors import UserError, exit_with_status, exits_on_user_error  # noqa: E402
from util.flag_types import Bounded, OneParagraphParser  # noqa: E402

port_number = Bounded(int, low=0, high=65535, name="port")
batch_images = Bounded(int, low=1, high=256, name="max_batch")
# On a GPU a batch uses the device better; on the CPU one image at a time was faster: CycleGAN (ngf 64,
# 256 px) translated 1.58 images/s one by one and 1.16-1.21 in batches of 8 on 2 Zen 4 cores (docs/serving.md).
AUTO_BATCH = {"cuda": 8, "cpu": 1}
MAX_DEVICES = 64  # translators, each a copy of the model in memory

# Listening on loopback, the server answers only requests addressed to loopback names (models/inference/serving/app.py).
LOOPBACK = ("127.0.0.1", "localhost", "::1")
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]", "::1")


def device_names(text: str) -> list[str]:
    """--devices: comma-separated devices (auto, cpu, cuda, cuda:N), at most MAX_DEVICES, each one PyTorch has."""
    names = [name.strip() for name in text.split(",") if name.strip()] or ["auto"]
    if len(names) > MAX_DEVICES:
        raise argparse.ArgumentTypeError(f"{len(names)} devices; give at most {MAX_DEVICES} (each loads the model)")
    for name in names:
        if not re.fullmatch(r"auto|cpu|cuda(:\d{1,3})?", name):
            raise argparse.ArgumentTypeError(f"{name!r} is not a device; give auto, cpu, cuda or cuda:N, separated "
                                             f"by commas")
        try:
            resolve_device(name)  # one the machine has
        except UserError as err:
            raise argparse.ArgumentTypeError(str(err).rstrip(".")) from None
    return names


def max_batch(text: str) -> int | str:
    """--max_batch: "auto", or a whole number of images from 1 to 256."""
    return text if text == "auto" else batch_images(text)


batch_timeout = Bounded(float, low=0.0, high=10_000.0, name="batch_timeout_ms")
queue_size = Bounded(int, low=1, high=100_000, name="queue_size")
upload_mb = Bounded(float, low=0.001, high=4096.0, name="max_upload_mb")
pixel_count = Bounded(int, low=1, high=2 ** 30, name="max_pixels")
voxel_count = Bounded(int, low=1, high=2 ** 30, name="max_voxels")
sample_limit = Bounded(int, low=1, high=1000, name="max_samples")
read_timeout = Bounded(float, low=0.1, high=3600.0, name="read_timeout_s")


def parse_args(argv: list[str] | None):
    parser = OneParagraphParser(description=__doc__.split("\n\n")[0])
    parser = add_checkpoint_flags(parser)
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on; 0.0.0.0 lets other machines in")
    parser.add_argument("--port", type=port_number, default=8000, help="the port; 0 takes a free one (printed)")
    parser.add_argument("--devices", type=device_names, default="auto",
                        help="comma-separated devices, one translator each (e.g. cuda:0,cuda:1); auto: CUDA when "
                             "available, else the CPU")
    parser = add_exact_flags(add_precision_flag(parser))
    parser.add_argument("--max_batch", type=max_batch, default="auto",
                        help="at most this many images of one size go through the generator together; auto: 8 on "
                             "GPUs, 1 on the CPU (where batches were slower)")
    parser.add_argument("--batch_timeout_ms", type=batch_timeout, default=10.0,
                        help="how long the first request of a batch waits for others")
    parser.add_argument("--queue_size", type=queue_size, default=64,
                        help="requests in the server at once; more are answered 503 with Retry-After")
    parser.add_argument("--max_upload_mb", type=upload_mb, default=64.0, help="the largest upload, in MiB")
    parser.add_argument("--max_pixels", type=pixel_count, default=4096 * 4096,
                        help="the most pixels (width x height) of an uploaded image, checked from its header before "
                             "decoding")
    parser.add_argument("--max_voxels", type=voxel_count, default=2 ** 27,
                        help="the most values (channels x D x H x W) of an uploaded volume, checked from its header")
    parser.add_argument("--max_samples", type=sample_limit, default=16,
                        help="the most samples one request may ask of a BicycleGAN (n_samples)")
    parser.add_argument("--read_timeout_s", type=read_timeout, default=60.0,
                        help="a client whose upload takes longer is answered 408 and loses its place")
    return parser.parse_args(argv)


@exits_on_user_error(memory_advice="lower --max_pixels, --max_voxels, --max_batch or --exact_memory")
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    args = parse_args(argv)
    try:
        import uvicorn

        from models.inference.serving.app import ServerSettings, create_app, load_model
    except ImportError as err:
        raise UserError(f"serving needs FastAPI and uvicorn ({err}); pip install -r requirements.txt") from None
    from models.inference.serving.uploads import Limits

    model = load_model(args.checkpoint, args.devices, args.epoch, args.precision, exact_budget(args))
    if args.max_batch == "auto":
        args.max_batch = min(AUTO_BATCH.get(r[model.default_direction].running.device.type, 1) for r in model.replicas)
    settings = ServerSettings(Limits(int(args.max_upload_mb * 2 ** 20), args.max_pixels, args.max_voxels),
                              args.max_batch, args.batch_timeout_ms, args.queue_size, args.max_samples,
                              args.read_timeout_s, allowed_hosts=LOOPBACK_NAMES if args.host in LOOPBACK else None)
    app = create_app(model, settings)
    listening = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET, socket.SOCK_STREAM)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listening.bind((args.host, args.port))
    except OSError as err:
        raise UserError(f"cannot listen on {args.host}:{args.port} ({err.strerror or err}); choose another --port "
                        f"(0 takes a free one) or --host.") from None
    # Listening before the address is printed: whoever reads it and connects at once (a script, the tests) is
    # queued, not refused, while uvicorn starts (it accepts from this backlog, uvicorn's default size).
    listening.listen(2048)
    host, port = listening.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    on = ", ".join(str(replica[model.default_direction].running.device) for replica in model.replicas)
    print(f"serving {model.name} ({model.first.loaded.netG}, {on}) "
          f"at http://{shown}:{port}/ - the page; POST /translate, GET /info, /health, /docs (batches of up to "
          f"{settings.max_batch}, {settings.queue_size} requests at most)", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5))
    server.run(sockets=[listening])
    return 0


if __name__ == "__main__":
    exit_with_status(main())
