"""The reference's dataset downloader, `GetData`, at the path its users import.

It fetches the archives that scripts/download_cyclegan_dataset.sh and scripts/download_pix2pix_dataset.sh
fetch, from the same server: IMG2IMG_DOWNLOAD_BASE (default the reference's, http://efrosgans.eecs.berkeley.edu;
a mirror, or a file:// URL of a local copy, with the same paths under it), waiting at most
IMG2IMG_DOWNLOAD_TIMEOUT seconds (default 20) for an answer; then it unpacks them into the folder asked for.
"""
from __future__ import annotations

import logging
import os
import shutil
import tarfile
import urllib.request
import zipfile
from html.parser import HTMLParser
from pathlib import Path

from util.errors import UserError

DEFAULT_BASE = "http://efrosgans.eecs.berkeley.edu"
FOLDERS = {"cyclegan": "cyclegan/datasets", "pix2pix": "pix2pix/datasets"}  # under the base, by technique
ARCHIVE_ENDINGS = (".zip", ".tar.gz")

logger = logging.getLogger(__name__)


class _ArchiveLinks(HTMLParser):
    """The archive names a server's folder listing links to."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href") or ""
        if tag == "a" and href.endswith(ARCHIVE_ENDINGS):
            self.names.append(href.rsplit("/", 1)[-1])


class GetData:
    """Compatibility face for the reference's users: downloads and unpacks a CycleGAN or pix2pix dataset
    archive, as scripts/download_cyclegan_dataset.sh and scripts/download_pix2pix_dataset.sh do."""

    def __init__(self, technique: str = "cyclegan", verbose: bool = True) -> None:
        if technique.lower() not in FOLDERS:
            raise UserError(f"GetData(technique={technique!r}): the technique is one of {', '.join(FOLDERS)}.")
        self.technique = technique.lower()
        self.base = os.environ.get("IMG2IMG_DOWNLOAD_BASE", DEFAULT_BASE).rstrip("/")
        self.url = f"{self.base}/{FOLDERS[self.technique]}"
        self.timeout_s = float(os.environ.get("IMG2IMG_DOWNLOAD_TIMEOUT", "20"))
        self.verbose = verbose

    def get(self, save_path: str | os.PathLike, dataset: str | None = None) -> Path:
        """Download the archive `dataset` (its name with the extension, e.g. "horse2zebra.zip"; None: choose
        one from the server's list, asked on the terminal) into `save_path` and unpack it there. Returns the
        absolute path of the dataset's folder, `save_path/<name>`; one that exists already is kept and
        nothing is downloaded. Raises `UserError` (one paragraph) when the download fails, e.g. offline."""
        chosen = dataset or self._choose()
        folder = Path(save_path) / chosen.split(".")[0]
        if folder.is_dir():
            logger.warning("%s already exists, so %s is not downloaded again; delete it to download again.",
                           folder, chosen)
            return folder.resolve()
        archive = Path(save_path) / chosen
        archive.parent.mkdir(parents=True, exist_ok=True)
        self._say(f"downloading {self.url}/{chosen}")
        part = archive.with_name(archive.name + ".part")  # an interrupted download leaves no archive behind
        try:
            with self._open(chosen, save_path) as response, open(part, "wb") as out:
                shutil.copyfileobj(response, out)
            part.replace(archive)
            self._say(f"unpacking {archive}")
            _unpack(archive, Path(save_path))
        finally:
            part.unlink(missing_ok=True)
            archive.unlink(missing_ok=True)
        return folder.resolve()

    def _open(self, name: str, save_path: str | os.PathLike):
        url = f"{self.url}/{name}"
        try:
            return urllib.request.urlopen(url, timeout=self.timeout_s)
        except OSError as err:  # URLError, HTTPError, timeouts, refused connections
            reason = getattr(err, "reason", None) or err
            raise UserError(
                f"could not download {url} ({reason}): the name may be wrong, this machine may be offline, or "
                f"the server is down. On a machine with internet access download that file and unpack it into "
                f"{save_path}, or set IMG2IMG_DOWNLOAD_BASE to a mirror or a local copy (now {self.base}); "
                f"bash scripts/download_{self.technique}_dataset.sh NAME does the same from the shell.") from None

    def _choose(self) -> str:
        """The archive the user picks by number from the server's listing."""
        with self._open("", ".") as response:
            links = _ArchiveLinks()
            links.feed(response.read().decode("utf-8", errors="replace"))
        if not links.names:
            raise UserError(f"{self.url}/ lists no dataset archives; name one, e.g. GetData().get(path, 'mini.zip').")
        print("Options:\n")  # user-facing: the listing the user picks a number from
        for number, name in enumerate(links.names):
            print(f"{number}: {name}")  # user-facing (as above)
        choice = input("\nPlease enter the number of the dataset above you wish to download: ").strip()
        if not choice.isdigit() or int(choice) >= len(links.names):
            raise UserError(f"{choice!r} is not one of the numbers 0 to {len(links.names) - 1}.")
        return links.names[int(choice)]

    def _say(self, text: str) -> None:
        if self.verbose:
            print(text)  # user-facing: GetData(verbose=True) narrates its steps, as the reference's does


def _unpack(archive: Path, into: Path) -> None:
    """Unpack a .zip or .tar.gz archive into `into`; members that would land outside it are refused."""
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as opened:
            opened.extractall(into)  # zipfile drops absolute paths and ".." from member names
    elif archive.name.endswith(".tar.gz"):
        with tarfile.open(archive) as opened:
            if hasattr(tarfile, "data_filter"):  # Python 3.10.12+ and 3.11.4+: no links or paths out of `into`
                opened.extractall(into, filter="data")
            else:
                outside = [m.name for m in opened if m.name.startswith("/") or ".." in Path(m.name).parts]
                if outside:
                    raise UserError(f"{archive} holds files outside its folder ({outside[0]}); not unpacked.")
                opened.extractall(into)
    else:
        raise UserError(f"{archive.name} is neither a .zip nor a .tar.gz archive; name the dataset with its "
                        f"extension, e.g. horse2zebra.zip (CycleGAN) or facades.tar.gz (pix2pix).")
