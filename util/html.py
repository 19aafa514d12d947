"""Static HTML pages of result images, written with dominate.

The API is the reference implementation's (`HTML(web_dir, title, refresh)`, `add_header`,
`add_text`, `add_images`, `save`, `get_image_dir`), so code written for it keeps working. The page
is self-contained: images live in `web_dir/images/` and are linked by relative, URL-quoted paths, so
the folder can be copied anywhere and opened from disk.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from util import util
from util.safe_files import atomic_write_text

try:  # needed only for the pages: without it train.py and test.py run on and say that no page is written
    import dominate
    from dominate.tags import a, div, h1, h3, img, meta, p, style, table, td, tr
    from dominate.util import raw
except ImportError:
    dominate = None

MISSING = "the HTML pages are written with the dominate package, which is not installed (`pip install dominate`)"
# test.py --results_layout: our files only, or also the originals' folders (`save_result_images`)
RESULT_LAYOUTS = ("ours", "original")

PAGE_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 16px; color: #222; }
h1 { font-size: 20px; margin: 0 0 12px 0; }
h3 { font-size: 16px; margin: 18px 0 6px 0; }
table { border-collapse: collapse; table-layout: fixed; }
td { border: 1px solid #bbb; padding: 4px; text-align: center; vertical-align: top; word-wrap: break-word; }
td p { margin: 2px 0; font-size: 13px; }
img { display: block; margin: 0 auto; background: #eee; }
.note { color: #555; font-size: 14px; }
"""


def available() -> bool:
    """Whether pages can be written (dominate is installed)."""
    return dominate is not None


def image_href(name: str) -> str:
    """The relative URL of `images/<name>`, quoted so that spaces, '#' or '?' in file names work."""
    return "images/" + quote(name.replace(os.sep, "/"))


class HTML:
    """A page in `web_dir/index.html` with images stored in `web_dir/images/` (needs `available()`)."""

    def __init__(self, web_dir: str, title: str, refresh: int = 0):
        self.title = title
        self.web_dir = web_dir
        self.img_dir = os.path.join(self.web_dir, "images")
        os.makedirs(self.img_dir, exist_ok=True)
        self.doc = dominate.document(title=title)
        with self.doc.head:
            meta(charset="utf-8")
            meta(name="viewport", content="width=device-width, initial-scale=1")
            if refresh > 0:
                meta(http_equiv="refresh", content=str(refresh))
            style(raw(PAGE_CSS))  # raw: CSS inside <style> is not HTML-unescaped by browsers
        with self.doc:
            h1(title)

    def get_image_dir(self) -> str:
        return self.img_dir

    def add_header(self, text: str) -> None:
        with self.doc:
            h3(text)

    def add_text(self, text: str) -> None:
        with self.doc:
            p(text, cls="note")

    def add_images(self, ims: list[str], txts: list[str], links: list[str], width: int = 400) -> None:
        """A row of images (file names inside `images/`), each captioned and linked to `links`."""
        row_table = table()
        self.doc.add(row_table)
        with row_table:
            with tr():
                for im, txt, link in zip(ims, txts, links):
                    with td(style=f"width:{width + 8}px"):
                        with a(href=image_href(link)):
                            img(style=f"width:{width}px", src=image_href(im), alt=str(txt))
                        p(str(txt))

    def add_figure(self, image: str, caption: str, width: int = 720) -> None:
        """One wide image (e.g. the loss plot), file name inside `images/`, with a caption."""
        with self.doc:
            with div():
                with a(href=image_href(image)):
                    img(style=f"max-width:{width}px; width:100%", src=image_href(image), alt=caption)
                p(caption, cls="note")

    def save(self) -> str:
        """Write `index.html` (atomically: a browser reloading it never sees half a page)."""
        path = os.path.join(self.web_dir, "index.html")
        atomic_write_text(path, self.doc.render())
        return path


def file_stem(path: str) -> str:
    """The file name of `path` without its extension, both parts of a compressed NIfTI's (x.nii.gz -> x)."""
    name = os.path.basename(path)
    if name.lower().endswith(".nii.gz"):
        return name[:-len(".nii.gz")]
    return os.path.splitext(name)[0]


def save_result_images(image_dir: str, visuals: Mapping[str, Any], image_path: list[str],
                       aspect_ratio: float = 1.0, display_channels: list[int] | None = None,
                       folders: Mapping[str, str] | None = None) -> tuple[str, list[str], list[str]]:
    """Save the 8-bit preview (`util.tensor2im`) of the first image of each visual as `<name>_<label>.png`
    in `image_dir`, `name` the first input's file name; returns (name, files, labels) for a row of a page.
    With `folders` (test.py --results_layout original) each is also saved as `<folder>/<name>.png`, one
    folder per visual as CUT's and UNSB's test.py write them (`folders.get(label, label)`: the folder their
    code names that visual by), so that their evaluation commands find them."""
    name = file_stem(image_path[0])
    files, labels = [], []
    for label, im_data in visuals.items():
        image_name = f"{name}_{label}.png"
        preview = util.tensor2im(im_data, channels=display_channels)
        util.save_image(preview, os.path.join(image_dir, image_name), aspect_ratio)
        if folders is not None:
            folder = os.path.join(image_dir, folders.get(label, label))
            os.makedirs(folder, exist_ok=True)  # every rank may make it: exist_ok
            util.save_image(preview, os.path.join(folder, f"{name}.png"), aspect_ratio)
        files.append(image_name)
        labels.append(label)
    return name, files, labels
