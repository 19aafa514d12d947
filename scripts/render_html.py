#!/usr/bin/env python3
"""Render an HTML page in headless Chromium, save a screenshot and check that the page is sound.

    python scripts/render_html.py checkpoints/NAME/web/index.html -o shot.png
    python scripts/render_html.py results/NAME/test_latest/index.html -o shot.png --colors 64

Checks, each reported on its own line; the exit status is 0 only if all hold:
  * every <img src> (and <a href> to a local file) in the page exists on disk,
  * Chromium renders the page and writes the screenshot, with no console messages (our pages
    have no scripts, so any console message means something is wrong),
  * the screenshot is not blank: the fraction of non-white pixels is above --min-ink.
Exit status 1: a check failed; 3: no Chromium binary was found (install it with
`apt-get install -y chromium`, or name one with --chromium or $CHROMIUM).

Needs only the Python standard library and Pillow (for reading the screenshot).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from util.console import setup_logging  # noqa: E402
from util.errors import exit_with_status  # noqa: E402
from util.flag_types import Bounded, OneParagraphParser, image_side  # noqa: E402

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--enable-logging=stderr", "--v=0"]
EXIT_FAILED, EXIT_NO_CHROMIUM = 1, 3


class LinkCollector(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images: list[str] = []
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs.get("src") or "")
        elif tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])


def find_chromium(explicit: str | None = None) -> str | None:
    """The Chromium (or Chrome) binary: --chromium, then $CHROMIUM, then the usual names on PATH."""
    for candidate in (explicit, os.environ.get("CHROMIUM")):
        if candidate:
            return shutil.which(candidate) or (candidate if os.path.isfile(candidate) else None)
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def local_target(page: Path, url: str) -> Path | None:
    """The file a relative or file:// URL points to; None for data:, http(s): and in-page anchors."""
    parsed = urlparse(url)
    if parsed.scheme in ("data", "http", "https", "mailto") or url.startswith("#"):
        return None
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    return (page.parent / unquote(parsed.path)).resolve()


def check_references(page: Path) -> tuple[list[str], int]:
    """Problems with the page's images and links, and the number of images."""
    collector = LinkCollector()
    collector.feed(page.read_text(encoding="utf-8", errors="replace"))
    problems = []
    for src in collector.images:
        if not src:
            problems.append("an <img> has no src")
            continue
        if urlparse(src).scheme in ("http", "https"):
            problems.append(f"image {src} is remote: the page does not work offline")
            continue
        target = local_target(page, src)
        if target is not None and not target.is_file():
            problems.append(f"image {src} is missing ({target})")
    for href in collector.links:
        target = local_target(page, href)
        if target is not None and not target.exists():
            problems.append(f"link {href} points to a missing file ({target})")
    return problems, len(collector.images)


def screenshot(chromium: str, page: Path, out: Path, width: int, height: int,
               timeout: float = 60.0) -> tuple[bool, list[str], str]:
    """(written, console messages, Chromium's log tail)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():
        out.unlink()
    with tempfile.TemporaryDirectory(prefix="render_html_") as profile:
        cmd = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={out.resolve()}",
               f"--window-size={width},{height}", page.resolve().as_uri()]
        try:
            result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                    env={**os.environ, "HOME": profile})
            log = result.stdout + result.stderr
        except subprocess.TimeoutExpired as err:
            log = f"Chromium did not finish within {timeout:.0f} s\n{err.stderr or ''}"
    console = [line.split("]", 1)[-1].strip() for line in log.splitlines() if ":CONSOLE" in line]
    return out.is_file() and out.stat().st_size > 0, console, "\n".join(log.splitlines()[-15:])


def ink_fraction(png: Path, white: int = 245) -> float:
    """Fraction of pixels that are not (nearly) white."""
    from PIL import Image
    with Image.open(png) as img:
        gray = img.convert("L")
        histogram = gray.histogram()
    total = sum(histogram)
    return sum(histogram[:white]) / total if total else 0.0


def quantize(png: Path, colors: int) -> None:
    """Rewrite the screenshot with a palette of `colors` colours (much smaller, e.g. for docs)."""
    from PIL import Image
    with Image.open(png) as img:
        small = img.convert("RGB").quantize(colors=colors, method=Image.Quantize.MEDIANCUT)
    small.save(png, optimize=True)


def main(argv: list[str] | None = None) -> int:
    setup_logging()
    parser = OneParagraphParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("page", type=Path, help="the HTML file, e.g. checkpoints/NAME/web/index.html")
    parser.add_argument("-o", "--output", type=Path, default=Path("shot.png"), help="screenshot PNG to write")
    parser.add_argument("--width", type=image_side, default=1200, help="window width in pixels")
    parser.add_argument("--height", type=image_side, default=900, help="window height in pixels")
    parser.add_argument("--min-ink", type=Bounded(float, low=0, high=1, name="fraction"), default=0.02,
                        help="smallest fraction of non-white pixels for the page to count as rendered")
    parser.add_argument("--colors", type=Bounded(int, low=0, high=256, name="colors"), default=0,
                        help="if > 0, save the screenshot with this many colours")
    parser.add_argument("--chromium", default=None, help="the browser binary (default: $CHROMIUM or chromium on PATH)")
    parser.add_argument("--timeout", type=Bounded(float, low=0, low_open=True, high=3600, name="timeout"),
                        default=60.0, help="seconds Chromium may take")
    args = parser.parse_args(argv)

    if not args.page.is_file():
        print(f"error: no such page: {args.page}", file=sys.stderr)
        return EXIT_FAILED
    chromium = find_chromium(args.chromium)
    if chromium is None:
        print("error: no Chromium found (tried $CHROMIUM and " + ", ".join(CHROMIUM_NAMES) + "); install it "
              "with `apt-get install -y chromium` (Debian/Ubuntu) or pass --chromium PATH.", file=sys.stderr)
        return EXIT_NO_CHROMIUM

    problems, n_images = check_references(args.page)
    written, console, log = screenshot(chromium, args.page, args.output, args.width, args.height, args.timeout)
    if not written:
        problems.append(f"Chromium wrote no screenshot; its log ends with:\n{log}")
    problems += [f"console message: {message}" for message in console]
    ink = 0.0
    if written:
        ink = ink_fraction(args.output)
        if ink < args.min_ink:
            problems.append(f"the screenshot is (nearly) blank: {100 * ink:.2f}% non-white pixels, "
                            f"fewer than --min-ink {100 * args.min_ink:.2f}%")
        if args.colors > 0:
            quantize(args.output, args.colors)
    for problem in problems:
        print(f"problem: {problem}")
    status = "ok" if not problems else "FAILED"
    print(f"{status}: {args.page} -> {args.output} ({args.width}x{args.height}, {n_images} images, "
          f"{100 * ink:.1f}% non-white)")
    return 0 if not problems else EXIT_FAILED


if __name__ == "__main__":
    exit_with_status(main())
