"""The reference's module path: `from util.visualizer import Visualizer` keeps working.

The code lives in util/display/ (the training loop's `Visualizer` in util/display/visualizer.py,
one file per back end beside it); `save_result_images`, which test.py uses, in util/html.py.
"""
from util.display.visualizer import NullVisualizer, Visualizer, make_visualizer  # noqa: F401
from util.display.visdom_backend import visdom_start_command  # noqa: F401
from util.html import save_result_images  # noqa: F401
