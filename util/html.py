"""Static HTML pages of result images, written with dominate."""
from __future__ import annotations

import os

import dominate
from dominate.tags import a, br, h3, img, meta, p, table, td, tr


class HTML:
    """A page in `web_dir/index.html` with images stored in `web_dir/images/`."""

    def __init__(self, web_dir: str, title: str, refresh: int = 0):
        self.title = title
        self.web_dir = web_dir
        self.img_dir = os.path.join(self.web_dir, "images")
        os.makedirs(self.img_dir, exist_ok=True)
        self.doc = dominate.document(title=title)
        if refresh > 0:
            with self.doc.head:
                meta(http_equiv="refresh", content=str(refresh))

    def get_image_dir(self) -> str:
        return self.img_dir

    def add_header(self, text: str) -> None:
        with self.doc:
            h3(text)

    def add_text(self, text: str) -> None:
        with self.doc:
            p(text)

    def add_images(self, ims: list[str], txts: list[str], links: list[str], width: int = 400) -> None:
        """A row of images (paths relative to the page), each captioned and linked."""
        row_table = table(border=1, style="table-layout: fixed;")
        self.doc.add(row_table)
        with row_table:
            with tr():
                for im, txt, link in zip(ims, txts, links):
                    with td(style="word-wrap: break-word;", halign="center", valign="top"):
                        with p():
                            with a(href=os.path.join("images", link)):
                                img(style=f"width:{width}px", src=os.path.join("images", im))
                            br()
                            p(txt)

    def save(self) -> str:
        path = os.path.join(self.web_dir, "index.html")
        tmp = path + ".tmp"
        with open(tmp, "wt") as f:
            f.write(self.doc.render())
        os.replace(tmp, path)
        return path
