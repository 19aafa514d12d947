"""visdom (`--display_id` > 0, the reference's default): the loss curves, the current images and the
validation metrics, live in the browser, from a server at --display_server:--display_port.

No server, or one that goes away, is reported once and dropped: training never stops or stalls for
it (every request has a time limit, and nothing is retried). A server whose page cannot show the run in
a browser (scripts missing, HTTP 403) is reported once, and still receives everything.
"""
from __future__ import annotations

import html as html_escape
import logging
import socket
import warnings
from collections.abc import Mapping
from html.parser import HTMLParser
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlparse

import numpy as np

from util import util
from util.display.backend import LoggerBackend, RunInfo
from util.display.validation_log import metric_series
from util.position import Position

if TYPE_CHECKING:
    from util.evaluation.validation_result import ValidationResult

logger = logging.getLogger(__name__)

VISDOM_TIMEOUT = (2.0, 10.0)   # seconds to connect to / hear back from the visdom server


def visdom_start_command(port: int) -> str:
    return f"python -m visdom.server -port {port}"


def connect_visdom(run: RunInfo):
    """A visdom client if a server answers; otherwise one warning and None."""
    opt = run.opt
    server, port = opt.display_server, opt.display_port
    host = urlparse(server).hostname or server
    how = (f"Start one with `{visdom_start_command(port)}` (offline: `python scripts/visdom_server.py --port "
           f"{port}`; see docs/visualization.md) or pass --display_id 0 to silence this.")
    try:
        with socket.create_connection((host, port), timeout=1.0):
            pass
    except OSError as err:  # refused or unreachable: nothing listens there
        run.say(f"warning: no visdom server answers at {server}:{port} ({err}); training goes on without "
                f"visdom. {how}")
        return None
    try:
        import visdom
    except ImportError:
        run.say(f"warning: --display_id {opt.display_id} needs the visdom package, which is not installed "
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
            client = TimedVisdom(server=server, port=port, env=opt.display_env, use_incoming_socket=False,
                                 raise_exceptions=True)
    except Exception as err:  # something listens there, but it is not a visdom server that answers
        run.say(f"warning: the server at {server}:{port} does not answer as visdom does ({err}); training "
                f"goes on without visdom. {how}")
        return None
    problem = page_problem(client)
    if problem:
        run.say(f"warning: the visdom server at {server}:{port} receives the run, but {problem}. Training goes on "
                f"sending to it; see docs/visualization.md.")
    return client


class PageLinks(HTMLParser):
    """The scripts (<script src>) and stylesheets (<link rel=stylesheet href>) a page loads."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "script" and found.get("src"):
            self.urls.append(found["src"])
        elif tag == "link" and found.get("href") and "stylesheet" in (found.get("rel") or "").split():
            self.urls.append(found["href"])


def page_problem(client) -> str | None:
    """Why the server's page would not show the run in a browser: an error status, or scripts and
    stylesheets it lacks (`python -m visdom.server` downloads them from CDNs; offline they are missing
    unless scripts/visdom_server.py --install_scripts put them there). None when it looks whole, or
    when the page cannot be asked for (sending to the server is what matters, and is checked anyway)."""
    import requests  # visdom's own HTTP client: installed with it

    page_url = f"{client.server}:{client.port}{client.base_url}/"
    try:
        page = client.session.get(page_url, timeout=VISDOM_TIMEOUT)
        if page.status_code != 200:
            hint = (" (visdom 0.2.4 under tornado 6.6 or later: `pip install \"tornado<6.6\"`, or start the server "
                    "with `python scripts/visdom_server.py`)" if page.status_code == 403 else "")
            return f"its page {page_url} answers HTTP {page.status_code}{hint}, so a browser shows nothing"
        links = PageLinks()
        links.feed(page.text)
        missing = []
        for url in (urljoin(page_url, link) for link in links.urls):
            if urlparse(url).netloc != urlparse(page_url).netloc:
                continue  # from elsewhere (a CDN): the browser's business
            with client.session.get(url, timeout=VISDOM_TIMEOUT, stream=True) as answer:  # headers only
                if answer.status_code != 200:
                    missing.append(urlparse(url).path.rsplit("/", 1)[-1])
    except (requests.RequestException, ValueError) as err:  # no answer, or a link that is no URL
        logger.debug("visdom page %s not checked: %s: %s", page_url, type(err).__name__, err)
        return None
    if not missing:
        return None
    return (f"its page {page_url} lacks {len(missing)} of its {len(links.urls)} scripts and stylesheets "
            f"({', '.join(missing)}), so a browser shows a blank page: on the server's machine, install them with "
            f"`python scripts/visdom_server.py --install_scripts` (it needs the npm registry or a mirror) and "
            f"reload the page")


class VisdomBackend(LoggerBackend):
    """The reference's windows: `display_id` the loss curves, `display_id + 1` the images (one window
    each with --display_ncols 0), `display_id + 2` their labels, and `validation` the metrics.
    `client` is None without a server (then every event does nothing)."""

    def __init__(self, run: RunInfo) -> None:
        super().__init__(run)
        self.display_id = run.opt.display_id
        self.ncols = run.opt.display_ncols
        self.images_in_epoch = 1
        self.plot_data: dict = {"X": [], "Y": [], "legend": []}
        self.client = connect_visdom(run)

    def begin_epoch(self, position: Position, images_in_epoch: int) -> None:
        self.images_in_epoch = max(images_in_epoch, 1)

    def log_step(self, position: Position, losses: Mapping[str, float], lr: float, seconds_per_image: float,
                 data_seconds: float) -> None:
        """A point of each loss on the loss plot (x: epochs completed, as in loss_plot.png)."""
        if self.client is None:
            return
        if not self.plot_data["legend"]:
            self.plot_data["legend"] = list(losses.keys())
        self.plot_data["X"].append(position.epoch - 1 + min(position.images_done / self.images_in_epoch, 1.0))
        self.plot_data["Y"].append([float(losses.get(k, np.nan)) for k in self.plot_data["legend"]])
        n = len(self.plot_data["legend"])
        self._send(lambda: self.client.line(
            X=np.stack([np.array(self.plot_data["X"])] * n, 1), Y=np.array(self.plot_data["Y"]),
            opts=dict(title=self.run.name + " loss over time", legend=self.plot_data["legend"], xlabel="epoch",
                      ylabel="loss"),
            win=str(self.display_id)))

    def log_images(self, position: Position, images: Mapping[str, np.ndarray], save_html: bool) -> None:
        if self.client is not None:
            self._send(lambda: self._show_images(images))

    def log_validation(self, position: Position, result: ValidationResult, epoch_seconds: float) -> None:
        """All validations so far (metrics.jsonl, written by the console back end), one line per metric."""
        if self.client is None or not result.scores:
            return
        epochs, values = metric_series(self.run.run_dir)
        names = list(values)
        y = np.array([values[name] for name in names]).T  # one row per epoch, one column per metric
        self._send(lambda: self.client.line(
            X=np.stack([np.array(epochs, dtype=float)] * len(names), 1), Y=y, win="validation",
            opts=dict(title=self.run.name + " validation", legend=names, xlabel="epoch")))

    def _send(self, request) -> None:
        try:
            request()
        except Exception as err:  # a server that went away must not end the training run
            self.run.say(f"warning: lost the visdom server ({err}); training goes on without visdom.")
            self.client = None

    def _show_images(self, images: Mapping[str, np.ndarray]) -> None:
        """With --display_ncols > 0 one window of all images and one of their labels; with 0, one window each."""
        if self.ncols <= 0:
            for i, (label, image) in enumerate(images.items()):
                self.client.image(image.transpose([2, 0, 1]), win=str(self.display_id + 1 + i), opts=dict(title=label))
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
        self.client.images(tiles, nrow=ncols, win=str(self.display_id + 1), padding=2,
                           opts=dict(title=self.run.name + " images"))
        self.client.text(css + f"<table>{rows}</table>", win=str(self.display_id + 2),
                         opts=dict(title=self.run.name + " labels"))
