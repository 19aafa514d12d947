"""What the user sees during training: console lines, `loss_log.txt`, the HTML page, visdom, wandb.

Only the main process shows or writes anything: `make_visualizer` gives every other rank a
`NullVisualizer` whose methods do nothing, so the training loop has no rank checks.
"""
from __future__ import annotations

import os
import socket
import time
from collections import OrderedDict
from urllib.parse import urlparse

import numpy as np

from util import html, util
from util.errors import UserError


def save_result_images(image_dir: str, visuals: OrderedDict, image_path: list[str],
                       aspect_ratio: float = 1.0) -> tuple[str, list[str], list[str]]:
    """Save the first image of each visual as `<name>_<label>.png`; returns (name, files, labels)."""
    name = os.path.splitext(os.path.basename(image_path[0]))[0]
    files, labels = [], []
    for label, im_data in visuals.items():
        image_name = f"{name}_{label}.png"
        util.save_image(util.tensor2im(im_data), os.path.join(image_dir, image_name), aspect_ratio)
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


class Visualizer:
    """Console + loss_log.txt always; HTML unless --no_html; visdom if --display_id > 0; wandb if --use_wandb."""

    def __init__(self, opt):
        self.opt = opt
        self.display_id = opt.display_id if opt.isTrain else 0
        self.use_html = opt.isTrain and not opt.no_html
        self.win_size = opt.display_winsize
        self.name = opt.name
        self.ncols = opt.display_ncols
        self.plot_data: dict = {"X": [], "Y": [], "legend": []}
        self.saved = False
        self.vis = self._connect_visdom() if self.display_id > 0 else None
        self.wandb_run = self._start_wandb() if opt.use_wandb else None
        self.web_dir = os.path.join(opt.checkpoints_dir, opt.name, "web")
        self.img_dir = os.path.join(self.web_dir, "images")
        if self.use_html:
            util.mkdirs([self.web_dir, self.img_dir])
        self.log_name = os.path.join(opt.checkpoints_dir, opt.name, "loss_log.txt")
        os.makedirs(os.path.dirname(self.log_name), exist_ok=True)
        with open(self.log_name, "a") as log_file:
            log_file.write(f"================ Training Loss ({time.strftime('%c')}) ================\n")

    # ------------------------------------------------------------------ back ends
    def _connect_visdom(self):
        """A visdom client if a server answers; otherwise one warning and no visdom at all."""
        host = urlparse(self.opt.display_server).hostname or self.opt.display_server
        try:
            with socket.create_connection((host, self.opt.display_port), timeout=1.0):
                pass
            import visdom
            return visdom.Visdom(server=self.opt.display_server, port=self.opt.display_port,
                                 env=self.opt.display_env, use_incoming_socket=False, raise_exceptions=True)
        except (OSError, ImportError, ConnectionError) as err:
            print(f"warning: no visdom server answers at {self.opt.display_server}:{self.opt.display_port} ({err}); "
                  f"training goes on without it. Start one with `python -m visdom.server -port {self.opt.display_port}` "
                  f"or pass --display_id 0 to silence this.")
            return None

    def _start_wandb(self):
        try:
            import wandb
        except ImportError:
            raise UserError("--use_wandb needs the wandb package, which is not installed; "
                            "run `pip install wandb` or drop --use_wandb.") from None
        return wandb.init(project=self.opt.wandb_project_name, name=self.opt.name, config=vars(self.opt)) \
            if wandb.run is None else wandb.run

    def _visdom_failed(self, err: Exception) -> None:
        print(f"warning: lost the visdom server ({err}); training goes on without visdom.")
        self.vis = None

    # ------------------------------------------------------------------ training display
    def reset(self) -> None:
        """Called at the start of each epoch so that the next display also saves to HTML."""
        self.saved = False

    def begin_epoch(self, epoch: int, images_in_epoch: int, images_done: int) -> None:
        """Called at the start of each epoch (images_done > 0 when resuming mid-epoch)."""

    def end_iteration(self, images_done: int, total_iters: int) -> None:
        """Called after every training step, with the images done in this epoch and overall."""

    def log_training_scalars(self, total_iters: int, losses: OrderedDict, lr: float, images_per_sec: float) -> None:
        """Called with the rank-averaged losses whenever they are printed."""

    def close(self) -> None:
        """Called once when training ends."""

    def display_current_results(self, visuals: OrderedDict, epoch: int, save_result: bool) -> None:
        """Show current images in visdom and, when `save_result`, add them to the HTML page."""
        if self.vis is not None:
            try:
                self._show_in_visdom(visuals)
            except Exception as err:  # a server that went away must not end the training run
                self._visdom_failed(err)
        if self.wandb_run is not None:
            import wandb
            self.wandb_run.log({label: wandb.Image(util.tensor2im(image)) for label, image in visuals.items()})
        if self.use_html and (save_result or not self.saved):
            self.saved = True
            for label, image in visuals.items():
                util.save_image(util.tensor2im(image), os.path.join(self.img_dir, f"epoch{epoch:03d}_{label}.png"))
            self._write_html(epoch, list(visuals.keys()))

    def _show_in_visdom(self, visuals: OrderedDict) -> None:
        images = [util.tensor2im(image).transpose([2, 0, 1]) for image in visuals.values()]
        ncols = self.ncols if self.ncols > 0 else len(images)
        while len(images) % ncols:
            images.append(np.full_like(images[0], 255))
        self.vis.images(images, nrow=ncols, win=self.display_id + 1, padding=2,
                        opts=dict(title=self.name + " images"))
        labels = "".join(f"<td>{label}</td>" for label in visuals)
        self.vis.text(f"<table><tr>{labels}</tr></table>", win=self.display_id + 2,
                      opts=dict(title=self.name + " labels"))

    def _write_html(self, epoch: int, labels: list[str]) -> None:
        webpage = html.HTML(self.web_dir, f"Experiment name = {self.name}", refresh=0)
        for n in range(epoch, 0, -1):
            names = [f"epoch{n:03d}_{label}.png" for label in labels]
            if not all(os.path.exists(os.path.join(self.img_dir, name)) for name in names):
                continue
            webpage.add_header(f"epoch [{n}]")
            webpage.add_images(names, labels, names, width=self.win_size)
        webpage.save()

    def plot_current_losses(self, epoch: int, counter_ratio: float, losses: OrderedDict) -> None:
        """Append the losses to the visdom loss plot (x axis: fractional epoch)."""
        if self.wandb_run is not None:
            self.wandb_run.log(dict(losses))
        if self.vis is None:
            return
        if not self.plot_data["legend"]:
            self.plot_data["legend"] = list(losses.keys())
        self.plot_data["X"].append(epoch + counter_ratio)
        self.plot_data["Y"].append([losses[k] for k in self.plot_data["legend"]])
        n = len(self.plot_data["legend"])
        try:
            self.vis.line(X=np.stack([np.array(self.plot_data["X"])] * n, 1),
                          Y=np.array(self.plot_data["Y"]),
                          opts=dict(title=self.name + " loss over time", legend=self.plot_data["legend"],
                                    xlabel="epoch", ylabel="loss"),
                          win=self.display_id)
        except Exception as err:
            self._visdom_failed(err)

    def print_current_losses(self, epoch: int, iters: int, losses: OrderedDict, t_comp: float, t_data: float) -> None:
        """Print `(epoch: E, iters: I, time: T, data: D) name: value ...` and append it to loss_log.txt."""
        message = f"(epoch: {epoch}, iters: {iters}, time: {t_comp:.3f}, data: {t_data:.3f}) "
        message += "".join(f"{k}: {v:.3f} " for k, v in losses.items())
        print(message, flush=True)
        with open(self.log_name, "a") as log_file:
            log_file.write(message + "\n")

    def print_message(self, message: str) -> None:
        print(message, flush=True)
        with open(self.log_name, "a") as log_file:
            log_file.write(message + "\n")
