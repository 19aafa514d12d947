"""What the user sees during training: the console (loss lines and a progress bar), `loss_log.txt`,
the HTML page, visdom, TensorBoard, wandb, and `loss_plot.png` at the end.

Only the main process shows or writes anything: `make_visualizer` gives every other rank a
`NullVisualizer` whose methods do nothing, so the training loop has no rank checks.

Back ends (see docs/visualization.md):
  console + loss_log.txt   always; the progress bar unless --no_progress
  HTML                     checkpoints/<name>/web/index.html unless --no_html
  visdom                   --display_id > 0 and a server at --display_server:--display_port
  TensorBoard              --use_tensorboard: event files in checkpoints/<name>/tensorboard/
  wandb                    --use_wandb (optional package; WANDB_MODE=offline works without network)
A display back end that fails (no visdom server, a server that goes away) is reported once and
dropped; training never stops or stalls for it.
"""
from __future__ import annotations

import atexit
import html as html_escape
import logging
import os
import shutil
import socket
import time
import warnings
from collections import OrderedDict
from urllib.parse import urlparse

import numpy as np

from util import html, util
from util.errors import UserError
from util.display.progress import TrainingProgress
from util.display.validation_log import METRICS_PLOT, ValidationLog, metric_series, plot_metrics

VISDOM_TIMEOUT = (2.0, 10.0)   # seconds to connect to / hear back from the visdom server
HTML_PLOT_EVERY = 300.0        # seconds between refreshes of the loss plot on the HTML page
HTML_REFRESH = 30              # the training page reloads itself this often while training runs


def save_result_images(image_dir: str, visuals: OrderedDict, image_path: list[str],
                       aspect_ratio: float = 1.0, display_channels: list[int] | None = None
                       ) -> tuple[str, list[str], list[str]]:
    """Save the 8-bit preview (`util.tensor2im`) of the first image of each visual as `<name>_<label>.png`;
    returns (name, files, labels)."""
    name = os.path.splitext(os.path.basename(image_path[0]))[0]
    files, labels = [], []
    for label, im_data in visuals.items():
        image_name = f"{name}_{label}.png"
        util.save_image(util.tensor2im(im_data, channels=display_channels), os.path.join(image_dir, image_name),
                        aspect_ratio)
        files.append(image_name)
        labels.append(label)
    return name, files, labels


def save_images(webpage: html.HTML, visuals: OrderedDict, image_path: list[str],
                aspect_ratio: float = 1.0, width: int = 256) -> None:
    """Save the images of one test input and add them as a row of `webpage` (the reference's API)."""
    name, files, labels = save_result_images(webpage.get_image_dir(), visuals, image_path, aspect_ratio)
    webpage.add_header(name)
    webpage.add_images(files, labels, files, width=width)


class NullVisualizer:
    """The visualizer of non-main ranks: accepts every call, shows and writes nothing."""

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: None


def make_visualizer(opt, is_main: bool):
    return Visualizer(opt) if is_main else NullVisualizer()


def visdom_start_command(port: int) -> str:
    return f"python -m visdom.server -port {port}"


class Visualizer:
    """Console + loss_log.txt always; progress bar, HTML, visdom, TensorBoard and wandb as chosen."""

    def __init__(self, opt):
        self.opt = opt
        self.name = opt.name
        self.run_dir = os.path.join(opt.checkpoints_dir, opt.name)
        self.display_id = opt.display_id if opt.isTrain else 0
        self.use_html = opt.isTrain and not opt.no_html
        self.win_size = opt.display_winsize
        self.display_channels = util.parse_display_channels(getattr(opt, "display_channels", ""))
        self.ncols = getattr(opt, "display_ncols", 4)
        self.plot_data: dict = {"X": [], "Y": [], "legend": []}
        self.saved = False
        self.closed = False
        last_epoch = opt.n_epochs + opt.n_epochs_decay if opt.isTrain else 1
        self.progress = TrainingProgress(last_epoch, enabled=opt.isTrain and not getattr(opt, "no_progress", False),
                                         interval=getattr(opt, "progress_interval", 60.0))
        # Optional packages first: a missing one stops the run before anything is written.
        self.tb_writer = self._start_tensorboard() if getattr(opt, "use_tensorboard", False) else None
        self.wandb_run = self._start_wandb() if opt.use_wandb else None
        self.vis = self._connect_visdom() if self.display_id > 0 else None
        if self.use_html and not html.available():  # a display, like visdom: training goes on without it
            self._say(f"warning: {html.MISSING}; training goes on without web/index.html. Pass --no_html to "
                      f"silence this.")
            self.use_html = False
        self.web_dir = os.path.join(self.run_dir, "web")
        self.img_dir = os.path.join(self.web_dir, "images")
        if self.use_html:
            util.mkdirs([self.web_dir, self.img_dir])
        self.last_html_plot: float | None = None
        self.html_epoch = 0
        self.html_labels: list[str] = []
        # The step of TensorBoard/wandb points: images seen since the start of training.
        self.expected_start = 0          # where the first epoch says we are (epoch, images done)
        self.step_offset: int | None = None
        self.last_step = 0
        self.pending_images: OrderedDict | None = None  # shown at display time, logged at the step's end
        self.validation_log = ValidationLog(self.run_dir)
        self.validation_caption = ""  # what the HTML page says above the latest validation images
        self.validation_labels: list[str] = []
        self.log_name = os.path.join(self.run_dir, "loss_log.txt")
        os.makedirs(self.run_dir, exist_ok=True)
        with open(self.log_name, "a") as log_file:
            log_file.write(f"================ Training Loss ({time.strftime('%c')}) ================\n")
        atexit.register(self.close)  # also flush TensorBoard/wandb if training ends early

    # ------------------------------------------------------------------ back ends
    def _connect_visdom(self):
        """A visdom client if a server answers; otherwise one warning and no visdom at all."""
        server, port = self.opt.display_server, self.opt.display_port
        host = urlparse(server).hostname or server
        try:
            with socket.create_connection((host, port), timeout=1.0):
                pass
        except OSError as err:  # refused or unreachable: nothing listens there
            self._say(f"warning: no visdom server answers at {server}:{port} ({err}); training goes on without "
                      f"visdom. Start one with `{visdom_start_command(port)}` (offline: see docs/visualization.md) "
                      f"or pass --display_id 0 to silence this.")
            return None
        try:
            import visdom
        except ImportError:
            self._say(f"warning: --display_id {self.display_id} needs the visdom package, which is not installed "
                      f"(`pip install visdom`); training goes on without visdom. Pass --display_id 0 to silence this.")
            return None
        try:
            logging.getLogger("visdom").setLevel(logging.ERROR)  # its 'no incoming socket' chatter

            class TimedVisdom(visdom.Visdom):
                """Every request has a timeout, and an HTTP error counts as a failure."""

                def _handle_post(self, url, data=None):
                    response = self.session.post(url, data=data if data is not None else {}, timeout=VISDOM_TIMEOUT)
                    response.raise_for_status()
                    return response.text

            with warnings.catch_warnings():  # visdom 0.2.4 calls the deprecated logger.warn
                warnings.simplefilter("ignore", DeprecationWarning)
                return TimedVisdom(server=server, port=port, env=self.opt.display_env,
                                   use_incoming_socket=False, raise_exceptions=True)
        except Exception as err:  # something listens there, but it is not a visdom server that answers
            self._say(f"warning: the server at {server}:{port} does not answer as visdom does ({err}); training "
                      f"goes on without visdom. Start one with `{visdom_start_command(port)}` (offline: see "
                      f"docs/visualization.md) or pass --display_id 0 to silence this.")
            return None

    def _visdom_failed(self, err: Exception) -> None:
        self._say(f"warning: lost the visdom server ({err}); training goes on without visdom.")
        self.vis = None

    def _start_tensorboard(self):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise UserError("--use_tensorboard needs the tensorboard package, which is not installed; run "
                            "`pip install tensorboard` (or `bash scripts/setup.sh`) or drop --use_tensorboard.") from None
        return SummaryWriter(log_dir=os.path.join(self.run_dir, "tensorboard"), flush_secs=30)

    def _start_wandb(self):
        try:
            import wandb
        except ImportError:
            raise UserError("--use_wandb needs the wandb package, which is not installed; "
                            "run `pip install wandb` or drop --use_wandb.") from None
        if wandb.run is not None:
            return wandb.run
        config = self.opt.as_dict() if hasattr(self.opt, "as_dict") else dict(vars(self.opt))
        kwargs = {} if os.environ.get("WANDB_DIR") else {"dir": self.run_dir}  # wandb/ next to the checkpoints
        os.makedirs(self.run_dir, exist_ok=True)
        return wandb.init(project=self.opt.wandb_project_name, name=self.opt.name, config=config, **kwargs)

    def _say(self, message: str) -> None:
        """A line on the console only (above the progress bar)."""
        self.progress.write(message)

    # ------------------------------------------------------------------ the training loop's hooks
    def reset(self) -> None:
        """Called at the start of each epoch so that the next display also saves to HTML."""
        self.saved = False

    def begin_epoch(self, epoch: int, images_in_epoch: int, images_done: int) -> None:
        """Called at the start of each epoch (images_done > 0 when resuming mid-epoch)."""
        if self.step_offset is None:
            self.expected_start = (epoch - 1) * images_in_epoch + images_done
        self.progress.begin_epoch(epoch, images_in_epoch, images_done)

    def end_iteration(self, images_done: int, total_iters: int) -> None:
        """Called after every training step, with the images done in this epoch and overall (cheap)."""
        self.progress.update(images_done)
        if self.pending_images is not None:
            self._log_images(self.pending_images, self._step(total_iters))
            self.pending_images = None

    def log_training_scalars(self, total_iters: int, losses: OrderedDict, lr: float, images_per_sec: float) -> None:
        """Called with the rank-averaged losses whenever they are printed: TensorBoard and wandb scalars."""
        step = self._step(total_iters)
        if self.tb_writer is not None:
            for name, value in losses.items():
                self.tb_writer.add_scalar(f"loss/{name}", float(value), step)
            self.tb_writer.add_scalar("train/learning_rate", float(lr), step)
            self.tb_writer.add_scalar("train/images_per_sec", float(images_per_sec), step)
        if self.wandb_run is not None:
            self._wandb_log({**{k: float(v) for k, v in losses.items()}, "learning_rate": float(lr),
                             "images_per_sec": float(images_per_sec)}, step)

    def log_validation(self, epoch: int, total_iters: int, scores: dict[str, float], seconds: float,
                       epoch_seconds: float, images: int, visuals: OrderedDict) -> None:
        """Called after each validation: val_log.txt and metrics.jsonl, the console, visdom, TensorBoard,
        wandb, metrics_plot.png and the HTML page's validation images."""
        self._say(self.validation_log.append(epoch, total_iters, scores, seconds, epoch_seconds, images))
        step = self._step(total_iters)
        if self.tb_writer is not None:
            for name, value in scores.items():
                self.tb_writer.add_scalar(f"val/{name}", float(value), step)
        if self.wandb_run is not None:
            self._wandb_log({f"val/{name}": float(value) for name, value in scores.items()}, step)
        if self.vis is not None and scores:
            self._plot_metrics_in_visdom()
        self._write_metrics_plot()
        if self.use_html and visuals:
            for label, image in visuals.items():
                util.save_image(util.tensor2im(image, channels=self.display_channels),
                                os.path.join(self.img_dir, f"val_latest_{label}.png"))
            self.validation_caption = f"validation after epoch {epoch}: " + (
                ", ".join(f"{k} {v:.4f}" for k, v in scores.items()) or "no metrics")
            self.validation_labels = list(visuals)
            self._write_html(self.html_epoch, self.html_labels)

    def _plot_metrics_in_visdom(self) -> None:
        epochs, values = metric_series(self.run_dir)
        names = list(values)
        y = np.array([values[name] for name in names]).T  # one row per epoch, one column per metric
        try:
            self.vis.line(X=np.stack([np.array(epochs, dtype=float)] * len(names), 1), Y=y, win="validation",
                          opts=dict(title=self.name + " validation", legend=names, xlabel="epoch"))
        except Exception as err:
            self._visdom_failed(err)

    def _write_metrics_plot(self) -> None:
        try:
            out = plot_metrics(self.run_dir, self.name)
            if out and self.use_html and os.path.isdir(self.img_dir):
                shutil.copyfile(out, os.path.join(self.img_dir, METRICS_PLOT))
        except ImportError as err:
            self._say(f"warning: no metrics plot: {err} (`pip install matplotlib`)")
        except Exception as err:  # a plot must never fail training
            self._say(f"warning: could not draw the metrics plot ({type(err).__name__}: {err})")

    def _step(self, total_iters: int) -> int:
        """Images seen since training began. A resumed run whose counter restarted at 0 is moved to
        where its first epoch says it is, so that its points follow the earlier run's."""
        if self.step_offset is None:
            self.step_offset = self.expected_start if total_iters <= self.expected_start else 0
        self.last_step = int(total_iters) + self.step_offset
        return self.last_step

    def _log_images(self, images: OrderedDict, step: int) -> None:
        if self.tb_writer is not None:
            grid = util.image_grid(list(images.values()), self.ncols if self.ncols > 0 else len(images),
                                   labels=list(images.keys()))
            self.tb_writer.add_image("visuals", grid, step, dataformats="HWC")
        if self.wandb_run is not None:
            import wandb
            self._wandb_log({label: wandb.Image(image, caption=label) for label, image in images.items()}, step)

    def _wandb_log(self, data: dict, step: int) -> None:
        current = getattr(self.wandb_run, "step", 0) or 0
        if step >= current:
            self.wandb_run.log(data, step=step)
        else:  # a run we did not start, already further along: let wandb number the point
            self.wandb_run.log(data)

    def close(self) -> None:
        """Called once when training ends: finish the bar, flush the logs, draw loss_plot.png."""
        if self.closed:
            return
        self.closed = True
        try:
            atexit.unregister(self.close)
        except Exception:
            pass
        self.progress.close()
        if self.tb_writer is not None:
            try:
                self.tb_writer.close()
            except Exception as err:
                self._say(f"warning: could not finish the TensorBoard log ({err})")
        if self.wandb_run is not None:
            try:
                self.wandb_run.finish()
            except Exception as err:
                self._say(f"warning: could not finish the wandb run ({err})")
        plot = self._write_loss_plot()
        if plot:
            self._say(f"loss curves: {plot}")
        if self.use_html and (self.html_epoch or self.validation_caption):
            try:
                self._write_html(self.html_epoch, self.html_labels, final=True)
            except OSError as err:
                self._say(f"warning: could not rewrite the HTML page ({err})")

    def _write_loss_plot(self) -> str | None:
        """loss_plot.png in the run folder (and on the HTML page) from loss_log.txt."""
        try:
            from util.display.loss_log import plot_loss_log
            out = plot_loss_log(self.log_name, os.path.join(self.run_dir, "loss_plot.png"), title=self.name)
            if out and self.use_html and os.path.isdir(self.img_dir):
                shutil.copyfile(out, os.path.join(self.img_dir, "loss_plot.png"))
            return out
        except ImportError as err:
            self._say(f"warning: no loss plot: {err} (`pip install matplotlib`)")
        except Exception as err:  # a plot must never fail the end of training
            self._say(f"warning: could not draw the loss plot ({type(err).__name__}: {err})")
        return None

    # ------------------------------------------------------------------ images: visdom, HTML
    def display_current_results(self, visuals: OrderedDict, epoch: int, save_result: bool) -> None:
        """Show current images in visdom (and TensorBoard/wandb); when `save_result`, add them to the HTML page."""
        images = OrderedDict((label, util.tensor2im(image, channels=self.display_channels))
                             for label, image in visuals.items())
        if self.vis is not None:
            try:
                self._show_in_visdom(images)
            except Exception as err:  # a server that went away must not end the training run
                self._visdom_failed(err)
        if self.tb_writer is not None or self.wandb_run is not None:
            self.pending_images = images  # logged by end_iteration, which knows the step
        if self.use_html and (save_result or not self.saved):
            self.saved = True
            for label, image in images.items():
                util.save_image(image, os.path.join(self.img_dir, f"epoch{epoch:03d}_{label}.png"))
            self._write_html(epoch, list(images.keys()))

    def _show_in_visdom(self, images: OrderedDict) -> None:
        """As the reference: with --display_ncols > 0 one window of all images (display_id + 1) and one
        of their labels (display_id + 2); with 0, one window per image (display_id + 1, + 2, ...)."""
        if self.ncols <= 0:
            for i, (label, image) in enumerate(images.items()):
                self.vis.image(image.transpose([2, 0, 1]), win=str(self.display_id + 1 + i), opts=dict(title=label))
            return
        ncols = min(self.ncols, len(images))
        h = max(image.shape[0] for image in images.values())
        w = max(image.shape[1] for image in images.values())
        tiles = [util.pad_to(image, h, w).transpose([2, 0, 1]) for image in images.values()]
        labels = [html_escape.escape(label) for label in images]
        while len(tiles) % ncols:
            tiles.append(np.full((3, h, w), 255, dtype=np.uint8))
            labels.append("")
        rows = "".join("<tr>" + "".join(f"<td>{label}</td>" for label in labels[i:i + ncols]) + "</tr>"
                       for i in range(0, len(labels), ncols))
        css = ("<style>table {border-collapse: separate; border-spacing: 4px; white-space: nowrap; "
               f"text-align: center}} table td {{width: {w}px; height: {h}px; padding: 4px; "
               "outline: 4px solid black}</style>")
        self.vis.images(tiles, nrow=ncols, win=str(self.display_id + 1), padding=2,
                        opts=dict(title=self.name + " images"))
        self.vis.text(css + f"<table>{rows}</table>", win=str(self.display_id + 2),
                      opts=dict(title=self.name + " labels"))

    def _write_html(self, epoch: int, labels: list[str], final: bool = False) -> None:
        """web/index.html: the loss plot (if drawn yet), then each epoch's images, newest first."""
        self.html_epoch, self.html_labels = max(epoch, self.html_epoch), labels
        now = time.monotonic()
        if not final and (self.last_html_plot is None or now - self.last_html_plot >= HTML_PLOT_EVERY):
            self.last_html_plot = now
            self._write_loss_plot()  # nothing (and no matplotlib import) before the first loss line
        webpage = html.HTML(self.web_dir, f"Experiment name = {self.name}", refresh=0 if final else HTML_REFRESH)
        if not final:
            webpage.add_text(f"Training is running; this page reloads every {HTML_REFRESH} s.")
        if os.path.exists(os.path.join(self.img_dir, "loss_plot.png")):
            webpage.add_header("losses")
            webpage.add_figure("loss_plot.png", "losses from loss_log.txt (x: epochs completed)")
        if self.validation_caption:
            webpage.add_header(self.validation_caption)
            if os.path.exists(os.path.join(self.img_dir, METRICS_PLOT)):
                webpage.add_figure(METRICS_PLOT, "validation metrics from metrics.jsonl")
            names = [f"val_latest_{label}.png" for label in self.validation_labels]
            webpage.add_images(names, self.validation_labels, names, width=self.win_size)
        for n in range(self.html_epoch, 0, -1):
            names = [f"epoch{n:03d}_{label}.png" for label in labels]
            if not all(os.path.exists(os.path.join(self.img_dir, name)) for name in names):
                continue
            webpage.add_header(f"epoch [{n}]")
            webpage.add_images(names, labels, names, width=self.win_size)
        webpage.save()

    # ------------------------------------------------------------------ losses: visdom, console, log
    def plot_current_losses(self, epoch: int, counter_ratio: float, losses: OrderedDict) -> None:
        """Append the losses to the visdom loss plot (x axis: epochs completed, as in loss_plot.png)."""
        if self.vis is None:
            return
        if not self.plot_data["legend"]:
            self.plot_data["legend"] = list(losses.keys())
        self.plot_data["X"].append(epoch - 1 + min(counter_ratio, 1.0))
        self.plot_data["Y"].append([float(losses.get(k, np.nan)) for k in self.plot_data["legend"]])
        n = len(self.plot_data["legend"])
        try:
            self.vis.line(X=np.stack([np.array(self.plot_data["X"])] * n, 1),
                          Y=np.array(self.plot_data["Y"]),
                          opts=dict(title=self.name + " loss over time", legend=self.plot_data["legend"],
                                    xlabel="epoch", ylabel="loss"),
                          win=str(self.display_id))
        except Exception as err:
            self._visdom_failed(err)

    def print_current_losses(self, epoch: int, iters: int, losses: OrderedDict, t_comp: float, t_data: float) -> None:
        """Print `(epoch: E, iters: I, time: T, data: D) name: value ...` and append it to loss_log.txt."""
        message = f"(epoch: {epoch}, iters: {iters}, time: {t_comp:.3f}, data: {t_data:.3f}) "
        message += "".join(f"{k}: {v:.3f} " for k, v in losses.items())
        self._say(message)
        with open(self.log_name, "a") as log_file:
            log_file.write(message + "\n")

    def print_message(self, message: str) -> None:
        self._say(message)
        with open(self.log_name, "a") as log_file:
            log_file.write(message + "\n")
