"""The reference's module path: `from util.visualizer import Visualizer` keeps working.

The code lives in util/display/ (the training loop's `Visualizer` in util/display/visualizer.py,
one file per back end beside it); `save_result_images`, which test.py uses, in util/html.py.
`save_images`, the reference's way to put them on a results page, is a face over it.
"""
from collections.abc import Mapping
from typing import Any

from util.display.visdom_backend import visdom_start_command  # noqa: F401
from util.display.visualizer import NullVisualizer, Visualizer, make_visualizer  # noqa: F401
from util.html import HTML, save_result_images


def save_images(webpage: HTML, visuals: Mapping[str, Any], image_path: list[str], aspect_ratio: float = 1.0,
                width: int = 256) -> None:
    """Compatibility face for the reference's users: `save_result_images` into `webpage`'s image folder
    (`<name>_<label>.png`, `name` the first input's file name), then a header and a row of them on the page."""
    name, files, labels = save_result_images(webpage.get_image_dir(), visuals, image_path, aspect_ratio)
    webpage.add_header(name)
    webpage.add_images(files, labels, files, width=width)
