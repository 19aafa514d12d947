"""Seeing training: visdom (against a real visdom server), the HTML pages (rendered in headless
Chromium), TensorBoard event files, wandb offline, the progress bar/lines, loss_log.txt and
loss_plot.png, and that only the main process shows or writes anything.

The end-to-end tests train tiny pix2pix models for 2 epochs x 4 images through train.py and read back
what each display received. They call train.py's main(argv) in this process (the same files and
messages, without ~2 s of interpreter start-up), except where the process is the point: train.py
without a visdom server (its real stdout and stderr hold exactly one warning), train.py and test.py
with dominate and visdom hidden from a fresh interpreter, plot_losses.py and render_html.py once each
as a user types them.
"""
from __future__ import annotations

import base64
import io
import json
import math
import re
import shutil
import socket
import struct
import subprocess
import sys
import time
import warnings
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import FAST_FLAGS, free_port, load_script, run_in_process, run_script

SMALL = ["--model", "pix2pix", "--direction", "BtoA", "--netG", "resnet_6blocks", "--load_size", "32",
         "--crop_size", "32", "--n_epochs", "1", "--n_epochs_decay", "1", "--max_dataset_size", "4"]
LOSS_NAMES = ["G_GAN", "G_L1", "D_real", "D_fake"]  # pix2pix, in its order
LOSS_LINE = re.compile(r"^\(epoch: (\d+), iters: (\d+), time: [\d.]+, data: [\d.]+\) (.*)$")
CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
needs_chromium = pytest.mark.skipif(CHROMIUM is None,
                                    reason="no chromium binary on PATH (Debian: apt-get install -y chromium)")


def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, (f"exit {result.returncode}\nstdout:\n{result.stdout[-4000:]}"
                                    f"\nstderr:\n{result.stderr[-4000:]}")
    return result


def train_args(root: Path, ckpt: Path, *extra: str) -> list[str]:
    """train.py's flags for the tiny pix2pix run "p"."""
    return ["--dataroot", str(root), "--name", "p", *FAST_FLAGS, *SMALL, "--checkpoints_dir", str(ckpt), *extra]


def logged_losses(run_dir: Path) -> list[tuple[int, int, dict[str, float]]]:
    """(epoch, iters, losses) of each loss line of loss_log.txt."""
    rows = []
    for line in (run_dir / "loss_log.txt").read_text().splitlines():
        m = LOSS_LINE.match(line)
        if m:
            pairs = re.findall(r"(\S+): (\S+)", m.group(3))
            rows.append((int(m.group(1)), int(m.group(2)), {k: float(v) for k, v in pairs}))
    return rows


def parse_train_options(tmp_path: Path, *argv: str):
    from options.train_options import TrainOptions
    return TrainOptions().parse(["--dataroot", str(tmp_path), "--name", "v", "--checkpoints_dir",
                                 str(tmp_path / "ck"), "--display_id", "0", *argv])


def fake_visuals(seed: int = 0) -> OrderedDict:
    g = torch.Generator().manual_seed(seed)
    return OrderedDict((k, torch.rand(1, 3, 16, 16, generator=g) * 2 - 1) for k in ("real_A", "fake_B", "real_B"))


# ---------------------------------------------------------------------------------- a real visdom server
class VisdomServer:
    """visdom's own server in a child process. `python -m visdom.server` first downloads its
    JavaScript from the internet and crashes offline, so this calls the server's main() directly."""

    def __init__(self, tmp: Path):
        self.port = free_port()
        self.log = tmp / f"visdom_{self.port}.log"
        code = ("import sys; from visdom.server.run_server import main; "
                f"sys.argv = ['visdom', '-port', '{self.port}', '-env_path', {str(tmp / 'visdom_env')!r}, "
                "'-logging_level', 'WARNING']; main()")
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdout=self.log.open("w"),
                                     stderr=subprocess.STDOUT, cwd=tmp)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the visdom server exited: {self.log.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the visdom server did not listen within 30 s: {self.log.read_text()[-2000:]}")

    def client(self, env: str):
        import visdom
        with warnings.catch_warnings():  # visdom 0.2.4 calls the deprecated logger.warn
            warnings.simplefilter("ignore", DeprecationWarning)
            return visdom.Visdom(server="http://localhost", port=self.port, env=env, use_incoming_socket=False,
                                 raise_exceptions=True)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def visdom_server(tmp_path):
    pytest.importorskip("visdom")
    server = VisdomServer(tmp_path)
    try:
        yield server
    finally:
        server.stop()  # always, even when the test fails


def find_tile(grid: np.ndarray, tile: np.ndarray) -> bool:
    """Is `tile` an exact sub-image of `grid`?"""
    th, tw = tile.shape[:2]
    for y in range(grid.shape[0] - th + 1):
        for x in range(grid.shape[1] - tw + 1):
            if np.array_equal(grid[y:y + th, x:x + tw], tile):
                return True
    return False


@pytest.mark.slow
def test_visdom_server_receives_image_grid_labels_and_loss_curves(visdom_server, paired_root, tmp_path, capsys):
    env = "vistest"
    result = ok(run_in_process("train.py", *train_args(paired_root, tmp_path, "--display_id", "1", "--display_port",
                                                       str(visdom_server.port), "--display_env", env,
                                                       "--display_freq", "1", "--print_freq", "1",
                                                       "--update_html_freq", "1", "--val_freq", "1"), capsys=capsys))
    output = (result.stdout + result.stderr).lower()
    # the one warning allowed: the page's scripts are not installed (scripts/visdom_server.py --install_scripts)
    server_script = load_script("scripts/visdom_server.py")
    page_complete = not server_script.missing_files(server_script.visdom_static_dir())
    warnings = [line for line in output.splitlines() if "warning" in line]
    assert (warnings == []) if page_complete else (len(warnings) == 1 and "--install_scripts" in warnings[0]), output
    vis = visdom_server.client(env)
    windows = {w: json.loads(vis.get_window_data(w, env=env)) for w in ("1", "2", "3", "validation")}

    # display_id: the loss curves, one trace per loss, one point per printed loss line
    plot = windows["1"]
    assert plot["type"] == "plot" and plot["title"] == "p loss over time"
    traces = plot["content"]["data"]
    assert [t["name"] for t in traces] == LOSS_NAMES
    rows = logged_losses(tmp_path / "p")
    assert len(rows) == 8  # 2 epochs x 4 images, printed after each
    for trace in traces:
        assert trace["x"] == pytest.approx([e - 1 + i / 4 for e, i, _ in rows])
        assert trace["y"] == pytest.approx([r[trace["name"]] for _, _, r in rows], abs=6e-4)

    # display_id + 1: the images of the last step in one grid, display_id + 2: their labels
    images = windows["2"]
    assert images["type"] == "image" and images["title"] == "p images"
    src = images["content"]["src"]
    assert src.startswith("data:image/png;base64,")
    grid = np.asarray(Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1]))).convert("RGB"))
    assert grid.shape[1] >= 3 * 32 and 32 <= grid.shape[0] < 2 * 32  # real_A, fake_B, real_B in one row
    web_images = tmp_path / "p" / "web" / "images"  # --update_html_freq 1: the same last step's images
    for label in ("real_A", "fake_B", "real_B"):
        assert find_tile(grid, np.asarray(Image.open(web_images / f"epoch002_{label}.png").convert("RGB"))), label
    labels = windows["3"]
    assert labels["type"] == "text"
    assert re.search(r"<td>real_A</td><td>fake_B</td><td>real_B</td>", labels["content"])

    # the validation metrics after each epoch, one trace per metric
    validations = [json.loads(line) for line in (tmp_path / "p" / "metrics.jsonl").read_text().splitlines()]
    traces = {t["name"]: t for t in windows["validation"]["content"]["data"]}
    assert list(traces) == ["L1", "PSNR", "SSIM"]
    for name, trace in traces.items():
        assert trace["x"] == [1, 2]
        assert trace["y"] == pytest.approx([v["metrics"][name] for v in validations])


class ConnectionAttempts:
    """Records every TCP connect of this process to `port`, with the socket's timeout."""

    def __init__(self, monkeypatch, port: int):
        self.timeouts: list[float | None] = []
        original = socket.socket.connect

        def connect(sock, address):
            if isinstance(address, tuple) and address[1] == port:
                self.timeouts.append(sock.gettimeout())
            return original(sock, address)

        monkeypatch.setattr(socket.socket, "connect", connect)


@pytest.mark.slow
def test_visdom_server_that_dies_mid_run_gives_one_warning_and_training_goes_on(visdom_server, tmp_path, capsys,
                                                                                monkeypatch):
    from util.display.visdom_backend import VisdomBackend
    from util.position import Position
    from util.visualizer import Visualizer
    opt = parse_train_options(tmp_path, "--display_id", "1", "--display_port", str(visdom_server.port),
                              "--display_env", "dies", "--no_progress", "--n_epochs", "1", "--n_epochs_decay", "0")
    vis = Visualizer(opt)
    visdom = vis.backend(VisdomBackend)
    losses = OrderedDict((k, 0.5) for k in LOSS_NAMES)
    vis.begin_epoch(Position(1, 0, 0), 10)
    vis.log_images(Position(1, 1, 1), fake_visuals(), True)
    visdom.log_step(Position(1, 1, 1), losses, 2e-4, 0.01, 0.0)  # the loss plot only: no loss line yet
    assert visdom.client is not None and visdom_server.client("dies").win_exists("1", env="dies")
    visdom_server.stop()
    attempts = ConnectionAttempts(monkeypatch, visdom_server.port)
    for step in range(2, 7):
        vis.log_images(Position(1, step, step), fake_visuals(step), False)
        vis.log_step(Position(1, step, step), losses, 2e-4, 0.01, 0.0)
        vis.advance(Position(1, step, step))
    vis.close()
    # No retries and no stall: one connection attempt, with a time limit, finds the server gone.
    assert len(attempts.timeouts) == 1 and attempts.timeouts[0] is not None, attempts.timeouts
    out = capsys.readouterr().out
    assert len(re.findall("lost the visdom server", out)) == 1, out
    assert visdom.client is None
    assert len(logged_losses(tmp_path / "ck" / "v")) == 5  # the log goes on


def test_no_visdom_server_costs_one_bounded_connection_attempt(tmp_path, monkeypatch, capsys):
    from util.display.visdom_backend import VisdomBackend
    from util.position import Position
    from util.visualizer import Visualizer
    port = free_port()  # nothing listens there
    attempts = ConnectionAttempts(monkeypatch, port)
    vis = Visualizer(parse_train_options(tmp_path, "--display_id", "1", "--display_port", str(port), "--no_progress"))
    assert vis.backend(VisdomBackend).client is None
    losses = OrderedDict((k, 0.5) for k in LOSS_NAMES)
    vis.begin_epoch(Position(1, 0, 0), 10)
    for step in range(1, 4):  # training goes on without asking again
        vis.log_images(Position(1, step, step), fake_visuals(step), True)
        vis.log_step(Position(1, step, step), losses, 2e-4, 0.01, 0.0)
    vis.close()
    assert len(attempts.timeouts) == 1 and attempts.timeouts[0] is not None, attempts.timeouts
    assert capsys.readouterr().out.count("warning") == 1


@pytest.mark.slow
def test_no_visdom_server_warns_once_with_the_start_command_and_training_goes_on(paired_root, tmp_path):
    # train.py as a user types it: a new process's stdout and stderr (Python's own warnings included)
    port = free_port()
    result = ok(run_script("train.py", *train_args(paired_root, tmp_path, "--display_freq", "1", "--print_freq", "1",
                                                   "--no_progress", "--display_id", "1", "--display_port", str(port))))
    lines = (result.stdout + result.stderr).splitlines()
    warnings = [line for line in lines if "warning" in line.lower()]
    assert len(warnings) == 1, warnings
    assert f"python -m visdom.server -port {port}" in warnings[0]
    assert len([line for line in lines if "visdom.server" in line]) == 1, lines
    assert "Traceback" not in result.stderr
    assert len(logged_losses(tmp_path / "p")) == 8  # 2 epochs x 4 images, printed after each
    assert (tmp_path / "p" / "latest_net_G.pth").is_file()


# ---------------------------------------------------------------------------------- one run, every file display
@pytest.fixture(scope="module")
def full_run(paired_root, tmp_path_factory):
    """2 epochs x 4 images with TensorBoard, HTML, progress lines after every step and validation after
    every epoch, then test.py."""
    ckpt = tmp_path_factory.mktemp("vis_ckpt")
    result = ok(run_in_process("train.py", *train_args(paired_root, ckpt, "--use_tensorboard", "--print_freq",
                                                                 "1", "--display_freq", "2", "--progress_interval",
                                                                 "0", "--val_freq", "1")))
    results = tmp_path_factory.mktemp("vis_results")
    ok(run_in_process("test.py", "--dataroot", str(paired_root), "--name", "p", "--model", "pix2pix",
                                "--direction", "BtoA", "--netG", "resnet_6blocks", "--ngf", "8", "--ndf", "8",
                                "--num_threads", "0", "--load_size", "32", "--crop_size", "32",
                                "--checkpoints_dir", str(ckpt), "--results_dir", str(results)))
    return ckpt / "p", result, results / "p" / "test_latest" / "index.html"


@pytest.mark.slow
def test_tensorboard_events_hold_every_logged_loss_and_image_grids(full_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    run_dir, _, _ = full_run
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0, "images": 0})
    events.Reload()
    rows = logged_losses(run_dir)
    assert len(rows) == 8
    steps = [(e - 1) * 4 + i for e, i, _ in rows]  # images seen since the start
    for name in LOSS_NAMES:
        scalars = events.Scalars(f"loss/{name}")
        assert [s.step for s in scalars] == steps, name
        assert [s.value for s in scalars] == pytest.approx([r[name] for _, _, r in rows], abs=6e-4), name
    lr = events.Scalars("train/learning_rate")
    assert [s.step for s in lr] == steps and lr[0].value == pytest.approx(2e-4)
    assert lr[-1].value == pytest.approx(1e-4)  # linear decay over the second epoch
    assert all(s.value > 0 for s in events.Scalars("train/images_per_sec"))
    validations = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for name in ("L1", "PSNR", "SSIM"):  # after each epoch, at the images seen by then
        scalars = events.Scalars(f"val/{name}")
        assert [s.step for s in scalars] == [4, 8], name
        assert [s.value for s in scalars] == pytest.approx([v["metrics"][name] for v in validations], rel=1e-6)
    images = events.Images("visuals")
    assert [im.step for im in images] == [2, 4, 6, 8]  # --display_freq 2
    grid = Image.open(io.BytesIO(images[-1].encoded_image_string))
    assert grid.width >= 3 * 32 and grid.height >= 32


@pytest.mark.slow
def test_progress_lines_are_plain_without_carriage_returns_when_stdout_is_not_a_terminal(full_run):
    _, result, _ = full_run
    assert "\r" not in result.stdout and "\r" not in result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("[progress]")]
    # --progress_interval 0: a line after each step; the last one of each epoch says how long it took
    assert len(lines) == 8, lines
    assert lines[0].startswith("[progress] epoch 1/2: 1/4 images (25%), ")
    assert re.match(r"\[progress\] epoch 2/2: 4/4 images \(100%\), [\d.]+ img/s, took \d+:\d\d:\d\d, run ETA 0:00:00$",
                    lines[-1]), lines[-1]
    # the loss lines stay whole, one per line
    assert sum(1 for line in result.stdout.splitlines() if LOSS_LINE.match(line)) == 8


@pytest.mark.slow
def test_training_writes_loss_plot_and_html_page_with_epochs_newest_first(full_run):
    run_dir, result, _ = full_run
    plot = run_dir / "loss_plot.png"
    assert f"loss curves: {plot}" in result.stdout
    with Image.open(plot) as img:
        assert img.width > 300 and img.height > 200
    page = (run_dir / "web" / "index.html").read_text()
    assert page.index("epoch [2]") < page.index("epoch [1]")
    assert 'src="images/loss_plot.png"' in page and "http-equiv" not in page  # final page: no reloading
    last = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert f"validation after epoch 2: L1 {last['metrics']['L1']:.4f}" in page  # the latest validation
    for label in ("real_A", "fake_B", "real_B"):
        assert f'src="images/val_latest_{label}.png"' in page
    assert 'src="images/metrics_plot.png"' in page
    for src in re.findall(r'<img[^>]*src="([^"]+)"', page):
        assert (run_dir / "web" / src).is_file(), src


@needs_chromium
@pytest.mark.slow
def test_training_html_page_renders_in_headless_chromium(full_run, tmp_path):
    # render_html.py as a user types it (the other render tests call its main() in this process)
    run_dir, _, _ = full_run
    shot = tmp_path / "train.png"
    result = ok(run_script("scripts/render_html.py", str(run_dir / "web" / "index.html"), "-o", str(shot),
                           "--chromium", CHROMIUM, timeout=120))
    assert result.stdout.splitlines()[-1].startswith("ok: ")
    assert "problem" not in result.stdout
    with Image.open(shot) as img:
        assert img.size == (1200, 900)


@needs_chromium
@pytest.mark.slow
def test_test_results_page_renders_in_headless_chromium(full_run, tmp_path, capsys):
    _, _, page = full_run
    shot = tmp_path / "test.png"
    result = ok(run_in_process("scripts/render_html.py", str(page), "-o", str(shot), "--chromium", CHROMIUM,
                               "--width", "800", "--height", "600", capsys=capsys))
    assert result.stdout.splitlines()[-1].startswith("ok: "), result.stdout
    assert "12 images" in result.stdout  # 4 test inputs x 3 visuals


@needs_chromium
def test_render_html_fails_on_a_missing_image_and_on_a_blank_page(tmp_path, capsys):
    (tmp_path / "images").mkdir()
    (tmp_path / "missing.html").write_text('<!DOCTYPE html><html><body><h1>Results</h1>'
                                           '<img src="images/gone.png" style="width:200px"></body></html>')
    result = run_in_process("scripts/render_html.py", str(tmp_path / "missing.html"), "-o", str(tmp_path / "a.png"),
                            "--chromium", CHROMIUM, capsys=capsys)
    assert result.returncode == 1 and "image images/gone.png is missing" in result.stdout
    (tmp_path / "blank.html").write_text("<!DOCTYPE html><html><body></body></html>")
    result = run_in_process("scripts/render_html.py", str(tmp_path / "blank.html"), "-o", str(tmp_path / "b.png"),
                            "--chromium", CHROMIUM, capsys=capsys)
    assert result.returncode == 1 and "blank" in result.stdout


def test_render_html_without_chromium_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    (tmp_path / "p.html").write_text("<html><body>x</body></html>")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CHROMIUM", "")
    result = run_in_process("scripts/render_html.py", str(tmp_path / "p.html"), "-o", str(tmp_path / "s.png"),
                            capsys=capsys)
    assert result.returncode == 3
    assert "apt-get install -y chromium" in result.stderr


# ---------------------------------------------------------------------------------- wandb, offline
def read_wandb_history(run_file: Path) -> list[dict[str, str]]:
    """The history rows of an offline run file: a LevelDB-style log (32 KiB blocks of chunks with a
    7-byte header) of wandb's own protobuf `Record`s. wandb >= 0.2x reads these files only in its Go
    core (its Python `datastore` reader is gone), so the framing is unpacked here and each record
    is decoded by wandb's protobuf classes."""
    from wandb.proto import wandb_internal_pb2 as pb
    data = run_file.read_bytes()
    block, pos, chunk, rows = 32768, 7, b"", []  # after the 7-byte ":W&B" header
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        pos += 7
        if kind == 0 and length == 0:  # zero padding to the end of the block
            pos += left - 7
            continue
        chunk += data[pos:pos + length]
        pos += length
        if kind in (1, 4):  # a full record, or the last piece of one
            record = pb.Record()
            record.ParseFromString(chunk)
            chunk = b""
            if record.WhichOneof("record_type") == "history":
                rows.append({"/".join(i.nested_key) or i.key: i.value_json for i in record.history.item})
    return rows


@pytest.mark.slow
def test_wandb_offline_run_records_losses_and_images(paired_root, tmp_path, capsys, monkeypatch):
    # wandb is optional for users but a test requirement (requirements-dev.txt): no skip here.
    for name, value in {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(tmp_path / "wb")}.items():
        monkeypatch.setenv(name, value)
    result = ok(run_in_process("train.py", *train_args(paired_root, tmp_path, "--use_wandb", "--print_freq", "2",
                                                       "--display_freq", "4", "--no_progress", "--val_freq", "1"),
                               capsys=capsys))
    assert "Traceback" not in result.stderr
    run_files = list((tmp_path / "wb" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(run_files) == 1
    history = read_wandb_history(run_files[0])
    loss_rows = [row for row in history if "G_L1" in row]
    assert [int(row["_step"]) for row in loss_rows] == [2, 4, 6, 8]
    logged = logged_losses(tmp_path / "p")
    assert [float(row["G_L1"]) for row in loss_rows] == pytest.approx([r["G_L1"] for _, _, r in logged], abs=6e-4)
    assert all("learning_rate" in row and "images_per_sec" in row for row in loss_rows)
    assert any(row.get("fake_B/_type") == '"image-file"' for row in history)
    validations = [json.loads(line) for line in (tmp_path / "p" / "metrics.jsonl").read_text().splitlines()]
    val_rows = [row for row in history if "val/L1" in row]
    assert [int(row["_step"]) for row in val_rows] == [4, 8]  # after each epoch
    assert [float(row["val/PSNR"]) for row in val_rows] == pytest.approx([v["metrics"]["PSNR"] for v in validations])
    assert list(run_files[0].parent.glob("files/media/images/*.png"))


def test_missing_optional_packages_are_user_errors_with_the_pip_command(tmp_path, monkeypatch):
    from util.errors import UserError
    from util.visualizer import Visualizer
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails as if not installed
    with pytest.raises(UserError, match=r"pip install tensorboard"):
        Visualizer(parse_train_options(tmp_path, "--use_tensorboard"))
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(UserError, match=r"pip install wandb"):
        Visualizer(parse_train_options(tmp_path, "--use_wandb"))
    assert not (tmp_path / "ck" / "v" / "loss_log.txt").exists()  # stopped before writing anything


def test_train_and_test_run_without_dominate_and_visdom_and_say_what_is_missing(paired_root, tmp_path):
    # As on many GPU machines (scripts/gpu_check.sh relies on it): both imports fail.
    for name in ("dominate", "visdom"):
        (tmp_path / "blocked" / name).mkdir(parents=True)
        (tmp_path / "blocked" / name / "__init__.py").write_text("raise ImportError('blocked by the test')")
    env = {"PYTHONPATH": str(tmp_path / "blocked")}
    common = ["--dataroot", str(paired_root), "--checkpoints_dir", str(tmp_path / "ck"), "--name", "n",
              "--model", "pix2pix", "--netG", "resnet_6blocks", "--load_size", "32", "--crop_size", "32",
              "--max_dataset_size", "4", "--ngf", "8", "--ndf", "8", "--num_threads", "0"]
    trained = run_script("train.py", *common, "--n_epochs", "1", "--n_epochs_decay", "0", "--display_id", "0",
                         "--display_freq", "1", env=env)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "dominate package, which is not installed" in trained.stdout + trained.stderr
    assert not (tmp_path / "ck" / "n" / "web" / "index.html").exists()
    tested = run_script("test.py", *common, "--results_dir", str(tmp_path / "results"), env=env)
    assert tested.returncode == 0, tested.stderr[-3000:]
    assert "no results page" in tested.stderr
    results = tmp_path / "results" / "n" / "test_latest"
    assert len(list((results / "images").glob("*_fake_B.png"))) == 4 and (results / "metrics.json").exists()
    assert not (results / "index.html").exists()


# ---------------------------------------------------------------------------------- progress, in process
class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_without_terminal_prints_a_plain_line_every_interval_and_at_epoch_end():
    from util.display.progress import ProgressBar
    out, clock = io.StringIO(), FakeClock()
    progress = ProgressBar(last_epoch=3, stream=out, interval=10, terminal=False, clock=clock)
    progress.begin_epoch(2, 100, 0)
    for done in range(1, 101):
        clock.now += 0.5  # 2 images/s: 50 s for the epoch
        progress.update(done)
        if done == 30:
            progress.write("(epoch: 2, iters: 30, time: 0.5, data: 0.0) G: 1.000 ")
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    progress_lines = [line for line in lines if line.startswith("[progress]")]
    assert len(progress_lines) == 5  # at 10, 20, 30, 40 s and the end of the epoch
    assert progress_lines[0] == ("[progress] epoch 2/3: 20/100 images (20%), 2.0 img/s, "
                                 "epoch ETA 0:00:40, run ETA 0:01:30")
    assert progress_lines[-1] == "[progress] epoch 2/3: 100/100 images (100%), 2.0 img/s, took 0:00:50, run ETA 0:00:50"
    assert "(epoch: 2, iters: 30, time: 0.5, data: 0.0) G: 1.000 " in lines


def test_progress_resumed_mid_epoch_counts_only_the_images_done_now():
    from util.display.progress import ProgressBar
    out, clock = io.StringIO(), FakeClock()
    progress = ProgressBar(last_epoch=1, stream=out, interval=1000, terminal=False, clock=clock)
    progress.begin_epoch(1, 10, 6)
    for done in (7, 8, 9, 10):
        clock.now += 1.0
        progress.update(done)
    assert out.getvalue() == "[progress] epoch 1/1: 10/10 images (100%), 1.0 img/s, took 0:00:04, run ETA 0:00:00\n"


def test_progress_bar_on_a_terminal_keeps_other_lines_whole():
    from util.display.progress import ProgressBar
    out = io.StringIO()
    progress = ProgressBar(last_epoch=1, stream=out, terminal=True)
    progress.begin_epoch(1, 4, 0)
    progress.update(2)
    progress.write("(epoch: 1, iters: 2, time: 0.1, data: 0.0) G: 1.000 ")
    progress.update(4)
    progress.write("End of epoch 1 / 1")
    text = out.getvalue()
    assert "epoch 1/1" in text and "img/s" in text and "\r" in text  # a live bar
    lines = text.replace("\r", "\n").splitlines()
    assert "(epoch: 1, iters: 2, time: 0.1, data: 0.0) G: 1.000 " in lines
    assert "End of epoch 1 / 1" in lines
    assert progress.bar is None  # closed when the epoch was full


def test_no_progress_prints_only_the_other_lines():
    from util.display.progress import ProgressBar
    out = io.StringIO()
    progress = ProgressBar(last_epoch=1, stream=out, enabled=False, terminal=True)
    progress.begin_epoch(1, 4, 0)
    progress.update(4)
    progress.write("hello")
    assert out.getvalue() == "hello\n"


# ---------------------------------------------------------------------------------- loss log and plot
MULTI_SECTION_LOG = """\
================ Training Loss (Mon Jan  1 10:00:00 2024) ================
The number of training images = 4; global batch = 1 (1 per process x 1 processes) on cpu
(epoch: 1, iters: 2, time: 0.010, data: 0.001) G_GAN: 1.000 D_real: 0.500 
(epoch: 1, iters: 4, time: 0.010, data: 0.001) G_GAN: 0.900 D_real: 0.400 
End of epoch 1 / 3 	 Time Taken: 0 sec 	 learning rate 0.0002000 -> 0.0002000
(epoch: 2, iters: 2, time: 0.010, data: 0.001) G_GAN: 0.800 D_real: 0.300 
(epoch: 2, iters: 4, time: 0.010, data: 0.001) G_GAN: 0.700 D_real: 0.200 
================ Training Loss (Mon Jan  1 11:00:00 2024) ================
The number of training images = 4; global batch = 1 (1 per process x 1 processes) on cpu
(epoch: 2, iters: 2, time: 0.010, data: 0.001) G_GAN: 0.750 D_real: nan 
(epoch: 2, iters: 4, time: 0.010, data: 0.001) G_GAN: 0.650 D_real: 0.250 
================ Training Loss (Mon Jan  1 12:00:00 2024) ================
(epoch: 3, iters: 2, time: 0.010, data: 0.001) G_GAN: 0.600 D_real: 0.150 G_extra: 3.000 
"""  # noqa: W291 - loss_log.txt's loss lines end with a space, as train.py writes them


def test_loss_log_with_resumed_sections_gives_one_curve_over_fractional_epochs(tmp_path):
    from util.display.loss_log import loss_curves, parse_loss_log
    log = tmp_path / "loss_log.txt"
    log.write_text(MULTI_SECTION_LOG)
    sections = parse_loss_log(str(log))
    assert [len(s.records) for s in sections] == [4, 2, 1]
    assert [s.images_per_epoch for s in sections] == [4, 4, None]
    curves = loss_curves(sections)
    assert curves.names == ["G_GAN", "D_real", "G_extra"]
    # the second run resumed in epoch 2 and replaces what the first logged there
    assert curves.x == [0.5, 1.0, 1.5, 2.0, 2.5]
    assert curves.values["G_GAN"] == [1.0, 0.9, 0.75, 0.65, 0.6]
    assert math.isnan(curves.values["D_real"][2]) and math.isnan(curves.values["G_extra"][0])
    assert curves.resumes == [1.5, 2.5]


def test_plot_losses_script_draws_a_png_from_a_run_folder_or_a_log(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "loss_log.txt").write_text(MULTI_SECTION_LOG)
    result = ok(run_script("scripts/plot_losses.py", str(tmp_path / "run")))  # as a user types it; then in process
    assert "3 losses (G_GAN, D_real, G_extra), 5 points, 3 section(s), 2 resume(s)" in result.stdout
    with Image.open(tmp_path / "run" / "loss_plot.png") as img:
        assert img.format == "PNG" and img.width > 300
    ok(run_in_process("scripts/plot_losses.py", str(tmp_path / "run" / "loss_log.txt"), "-o", str(tmp_path / "x.png"),
                      capsys=capsys))
    assert (tmp_path / "x.png").stat().st_size > 1000
    missing = run_in_process("scripts/plot_losses.py", str(tmp_path / "nowhere"), capsys=capsys)
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    (tmp_path / "empty.txt").write_text("================ Training Loss (x) ================\n")
    empty = run_in_process("scripts/plot_losses.py", str(tmp_path / "empty.txt"), capsys=capsys)
    assert empty.returncode == 2 and "no loss lines" in empty.stderr


# ---------------------------------------------------------------------------------- main process only, pieces
def test_null_visualizer_of_other_ranks_writes_and_prints_nothing(tmp_path, capsys):
    from util.evaluation.validation_result import ValidationResult
    from util.position import Position
    from util.visualizer import NullVisualizer, make_visualizer
    opt = parse_train_options(tmp_path, "--display_id", "1", "--display_port", str(free_port()), "--use_tensorboard")
    vis = make_visualizer(opt, is_main=False)
    assert isinstance(vis, NullVisualizer)
    losses = OrderedDict((k, 0.5) for k in LOSS_NAMES)
    vis.begin_epoch(Position(1, 0, 0), 4)
    vis.log_images(Position(1, 1, 1), fake_visuals(), True)
    vis.log_step(Position(1, 1, 1), losses, 2e-4, 0.1, 0.0)
    vis.log_validation(Position(1, 4, 4), ValidationResult({"L1": 0.5}, 1.0, 4, fake_visuals()), 10.0)
    vis.message("hello")
    vis.advance(Position(1, 1, 1))
    vis.close()
    assert not (tmp_path / "ck").exists()
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_tensorboard_step_continues_when_a_resumed_run_restarts_its_counter(tmp_path):
    from util.display.backend import ImagesSeen
    from util.display.tensorboard_backend import TensorBoardBackend
    from util.position import Position
    from util.visualizer import Visualizer
    vis = Visualizer(parse_train_options(tmp_path, "--no_html", "--no_progress", "--use_tensorboard"))
    vis.begin_epoch(Position(3, 0, 0), 100)  # epoch 3 of a run whose counter starts again at 0
    assert vis.backend(TensorBoardBackend).steps.step(Position(3, 10, 10)) == 210
    vis.close()
    steps = ImagesSeen()  # what TensorBoard and wandb both use
    steps.begin_epoch(Position(3, 40, 250), 100)  # resumed mid-epoch with the counter restored
    assert steps.step(Position(3, 50, 250)) == 250
    vis.close()  # a second close does nothing


def test_html_page_quotes_odd_file_names_and_keeps_the_reference_api(tmp_path):
    from util import html
    page = html.HTML(str(tmp_path / "web"), "Experiment = x, Phase = test")
    assert page.get_image_dir() == str(tmp_path / "web" / "images")
    page.add_text("mean L1 0.1")
    page.add_header("a b#1")
    page.add_images(["a b#1_real.png"], ["real"], ["a b#1_real.png"], width=64)
    text = Path(page.save()).read_text()
    assert text.startswith("<!DOCTYPE html>") and '<meta charset="utf-8">' in text
    assert 'src="images/a%20b%231_real.png"' in text and text.count("<table") == 1


def test_image_grid_places_tiles_in_rows_with_captions():
    from util.util import image_grid
    tiles = [np.full((8, 8, 3), v, dtype=np.uint8) for v in (0, 100, 200)]
    grid = image_grid(tiles, ncols=2, pad=2)
    assert grid.shape == (2 + 2 * 10, 2 + 2 * 10, 3)
    assert (grid[2:10, 12:20] == 100).all() and (grid[12:20, 2:10] == 200).all()
    captioned = image_grid(tiles, ncols=3, labels=["a", "b", "c"])
    assert captioned.shape[0] == 2 + 8 + 12 + 2 and (captioned[10:22] < 128).any()
