#!/usr/bin/env python3
"""Start a visdom server whose page works, also offline; or install that page's scripts from npm.

    python scripts/visdom_server.py                     # http://localhost:8097, where --display_id 1 sends
    python scripts/visdom_server.py --port 8098 --hostname gpu-box
    python scripts/visdom_server.py --install_scripts   # once, where the npm registry is reachable
    python scripts/visdom_server.py --install_scripts --registry https://npm.example.com/   # a mirror

visdom's package lacks the scripts, stylesheets and fonts of its own page (jQuery, React, Plotly,
MathJax, ...): `python -m visdom.server` downloads them from CDNs each time it starts, and crashes
where they cannot be reached. This script downloads nothing when it starts: it checks that they are in
visdom's static folder, says in one paragraph which are missing and how to install them, and starts
anyway (the server then receives everything training sends, but its page stays blank). With
--install_scripts it fetches them instead, as the npm packages they come from, from the npm registry
(--registry, or $NPM_CONFIG_REGISTRY, for a mirror); each tarball must match the integrity the
registry publishes for it (sha512, or sha1 for packages that only have that), and only the files the
page needs are taken from it, written where visdom looks for them.

The server is visdom's own (arguments this script does not know, such as -readonly, -bind_local or
-enable_login, are passed to it), with one change: its page also opens under tornado 6.6 and later,
which refuse it with HTTP 403 (docs/visualization.md).

Exit status: 0; 2 a bad flag (a --port outside 1..65535, a --static_dir that is a file), visdom missing,
a port already in use, or (--install_scripts) a package that could not be fetched or verified, each
named in one paragraph. Needs only the standard library, visdom and util/flag_types.py (the flags'
types and parser of every script here), not PyTorch, so it also runs from an environment that has
nothing else.
"""
from __future__ import annotations

import base64
import errno
import hashlib
import io
import json
import os
import posixpath
import shutil
import sys
import tarfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from util.flag_types import OneParagraphParser, port_number  # noqa: E402 (train.py's --display_port)
from util.paths import unwritable_folder_reason  # noqa: E402

DEFAULT_REGISTRY = "https://registry.npmjs.org/"
EXIT_FAILED = 2
TIMEOUT = 30.0  # seconds without an answer from the registry before giving up on a request


@dataclass(frozen=True)
class NpmPackage:
    """An npm package version, and where each file the page needs goes: {file in the package (without
    its top folder): (paths under visdom's static folder, ...)}."""

    name: str
    version: str
    files: dict[str, tuple[str, ...]]

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.version}"


MATHJAX_FILES = ("MathJax.js", "config/Safe.js", "config/TeX-AMS-MML_HTMLorMML.js", "extensions/Safe.js",
                 "jax/output/SVG/config.js", "jax/output/SVG/jax.js", "jax/output/SVG/fonts/TeX/fontdata.js",
                 "jax/output/SVG/fonts/TeX/Size1/Regular/Main.js")
GLYPHICONS = "glyphicons-halflings-regular"
# What visdom 0.2.4's server/build.py downloads (from unpkg, cdn.plot.ly, d3js.org, cdnjs), under the same
# names. The browser asks for fonts/<GLYPHICONS>.svg; visdom saves it with its #fragment, so it gets both.
PAGE_PACKAGES: tuple[NpmPackage, ...] = (
    NpmPackage("jquery", "3.1.1", {"dist/jquery.min.js": ("js/jquery.min.js",)}),
    NpmPackage("bootstrap", "3.3.7", {
        "dist/js/bootstrap.min.js": ("js/bootstrap.min.js",),
        "dist/css/bootstrap.min.css": ("css/bootstrap.min.css",),
        **{f"dist/fonts/{GLYPHICONS}.{ext}": (f"fonts/{GLYPHICONS}.{ext}",)
           for ext in ("eot", "woff2", "woff", "ttf")},
        f"dist/fonts/{GLYPHICONS}.svg": (f"fonts/{GLYPHICONS}.svg",
                                         f"fonts/{GLYPHICONS}.svg#glyphicons_halflingsregular"),
    }),
    NpmPackage("react", "16.2.0", {"umd/react.production.min.js": ("js/react-react.min.js",)}),
    NpmPackage("react-dom", "16.2.0", {"umd/react-dom.production.min.js": ("js/react-dom.min.js",)}),
    NpmPackage("react-modal", "3.1.10", {"dist/react-modal.min.js": ("js/react-modal.min.js",)}),
    NpmPackage("plotly.js-dist-min", "2.11.1", {"plotly.min.js": ("js/plotly-plotly.min.js",)}),
    NpmPackage("sjcl", "1.0.7", {"sjcl.js": ("js/sjcl.js",)}),
    NpmPackage("layout-bin-packer", "1.4.0", {"dist/layout-bin-packer.js": ("js/layout_bin_packer.js",),
                                              "dist/layout-bin-packer.js.map": ("js/layout-bin-packer.js.map",)}),
    NpmPackage("d3", "3.5.17", {"d3.min.js": ("js/d3.v3.min.js",)}),
    NpmPackage("d3-selection-multi", "1.0.1", {"build/d3-selection-multi.js": ("js/d3-selection-multi.v1.js",)}),
    NpmPackage("save-svg-as-png", "1.4.17", {"lib/saveSvgAsPng.js": ("js/saveSvgAsPng.js",)}),
    NpmPackage("react-resizable", "1.4.6", {"css/styles.css": ("css/react-resizable-styles.css",)}),
    NpmPackage("react-grid-layout", "0.16.3", {"css/styles.css": ("css/react-grid-layout-styles.css",)}),
    NpmPackage("classnames", "2.2.5", {"index.js": ("fonts/classnames",)}),
    NpmPackage("mathjax", "2.7.5", {name: (f"js/mathjax/2.7.5/{name}",) for name in MATHJAX_FILES}),
)


class PackageError(Exception):
    """A package that could not be fetched, verified or unpacked (the message says which and why)."""


def visdom_static_dir() -> Path:
    """The static folder of the installed visdom package (where its server serves the page from)."""
    from visdom.utils.shared_utils import get_visdom_path
    return Path(get_visdom_path("static"))


class ServerError(Exception):
    """A flag or an environment the server cannot start with (the message says which and what to do)."""


def prepare_static_dir(static_dir: Path) -> None:
    """A folder other than visdom's own gets a copy of visdom's page first (index.html, main.js, ...),
    e.g. for a visdom installed where this user cannot write. ServerError when `static_dir` is not a
    folder or cannot be written."""
    if static_dir.exists() and not static_dir.is_dir():
        raise ServerError(f"--static_dir {static_dir} is a file, not a folder; pass a folder (it gets a copy of "
                          f"visdom's page), or leave --static_dir out to serve visdom's own")
    if not (static_dir / "index.html").is_file() and static_dir.resolve() != visdom_static_dir().resolve():
        try:
            shutil.copytree(visdom_static_dir(), static_dir, dirs_exist_ok=True)
        except OSError as err:
            raise ServerError(f"--static_dir {static_dir}: cannot copy visdom's page there ({err}); pass a folder "
                              f"you can write to") from err


def missing_files(static_dir: Path, packages: tuple[NpmPackage, ...] = PAGE_PACKAGES) -> list[str]:
    """The page's files (paths under static_dir) that are not there."""
    return [path for package in packages for paths in package.files.values() for path in paths
            if not (static_dir / path).is_file()]


def missing_paragraph(static_dir: Path, missing: list[str]) -> str:
    every = sum(len(paths) for package in PAGE_PACKAGES for paths in package.files.values())
    return (f"visdom_server: {len(missing)} of the {every} scripts, stylesheets and fonts of visdom's page are "
            f"missing from {static_dir} ({', '.join(missing)}), so the page stays blank in a browser; the server "
            f"starts anyway and receives everything training sends. Install them once, where the npm registry is "
            f"reachable, with `python scripts/visdom_server.py --install_scripts` (a mirror: --registry URL or "
            f"$NPM_CONFIG_REGISTRY), then reload the page (the running server serves them at once); see "
            f"docs/visualization.md.")


# ---------------------------------------------------------------------------------- installing from npm
def fetch(url: str) -> bytes:
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": "application/json"}),
                                timeout=TIMEOUT) as response:
        return response.read()


def integrity_problem(data: bytes, dist: dict) -> str | None:
    """None if `data` matches the registry's `dist.integrity` (Subresource Integrity: sha512 and the
    like) or, for packages published without one, `dist.shasum` (sha1); otherwise what is wrong."""
    supported = [entry.split("?")[0].split("-", 1) for entry in str(dist.get("integrity") or "").split()]
    supported = [(algorithm, digest) for algorithm, digest in supported if algorithm in ("sha512", "sha384", "sha256")]
    if supported:
        for algorithm, digest in supported:
            if base64.b64encode(hashlib.new(algorithm, data).digest()).decode() == digest:
                return None
        return f"its {supported[0][0]} does not match the integrity the registry publishes"
    if dist.get("shasum"):
        if hashlib.sha1(data).hexdigest() == dist["shasum"]:
            return None
        return "its sha1 does not match the shasum the registry publishes"
    return "the registry publishes no integrity or shasum to check it against"


def unpack(tarball: bytes, package: NpmPackage) -> dict[str, bytes]:
    """The package's needed files, by their name in the package. The whole tarball is refused if any
    entry is not a plain file or folder, or would be extracted outside the folder it is extracted into
    (an absolute path, or `..` leading out): npm never makes such a tarball."""
    try:
        with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:*") as tar:
            members = {}
            for member in tar.getmembers():
                name = posixpath.normpath(member.name)
                if name.startswith(("/", "../")) or name == ".." or not (member.isfile() or member.isdir()):
                    raise PackageError(f"{package.spec}: its tarball has an entry that is not a file or folder inside "
                                       f"it ({member.name!r}); refused")
                members[name.split("/", 1)[-1]] = member  # without npm's top folder (usually package/)
            files = {}
            for name in package.files:
                member = members.get(name)
                if member is None or not member.isfile():
                    raise PackageError(f"{package.spec}: its tarball has no file {name}")
                files[name] = tar.extractfile(member).read()
            return files
    except (tarfile.TarError, OSError, EOFError) as err:
        raise PackageError(f"{package.spec}: its tarball cannot be read ({err})") from err


def download(package: NpmPackage, registry: str) -> dict[str, bytes]:
    """The package's needed files, from a tarball that matches the registry's published integrity."""
    metadata_url = f"{registry.rstrip('/')}/{package.name}/{package.version}"
    try:
        dist = json.loads(fetch(metadata_url))["dist"]
        tarball_url = dist["tarball"]
    except (ValueError, KeyError, TypeError) as err:
        raise PackageError(f"{package.spec}: {metadata_url} is not an npm version document ({err!r})") from err
    tarball = fetch(tarball_url)
    problem = integrity_problem(tarball, dist)
    if problem:
        raise PackageError(f"{package.spec}: the tarball {tarball_url} was refused: {problem}")
    return unpack(tarball, package)


def write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    os.replace(partial, path)


def install_scripts(static_dir: Path, registry: str, packages: tuple[NpmPackage, ...] = PAGE_PACKAGES) -> int:
    """Fetch and place every package with a missing file; 0, or 2 after one paragraph naming the failures."""
    wanted = [package for package in packages if missing_files(static_dir, (package,))]
    if not wanted:
        print(f"visdom_server: all the page's files are already in {static_dir}.")
        return 0
    failures, installed = [], 0
    for i, package in enumerate(wanted):
        try:
            files = download(package, registry)
        except PackageError as err:
            failures.append(str(err))
            continue
        except urllib.error.HTTPError as err:
            failures.append(f"{package.spec}: {err.url} answered HTTP {err.code}")
            continue
        except (urllib.error.URLError, OSError) as err:  # no answer at all: the rest would fare no better
            reason = getattr(err, "reason", err)
            failures.append(f"{', '.join(p.spec for p in wanted[i:])}: the registry {registry} cannot be reached "
                            f"({reason})")
            break
        try:
            for name, paths in package.files.items():
                for path in paths:
                    write_atomically(static_dir / path, files[name])
        except OSError as err:
            failures.append(f"{package.spec}: cannot write into {static_dir} ({err}); --static_dir names a folder "
                            f"you can write to")
            break
        installed += 1
        print(f"visdom_server: installed {package.spec}")
    if failures:
        print(f"error: could not install all of visdom's page scripts into {static_dir}: {'; '.join(failures)}. "
              f"{installed} of the {len(wanted)} packages needed were installed (a package is written whole or not "
              f"at all). Point --registry (or $NPM_CONFIG_REGISTRY) at an npm registry or mirror this machine can "
              f"reach, or run this command where one is reachable and copy that static folder here; the server "
              f"starts without them, with a blank page.", file=sys.stderr)
        return EXIT_FAILED
    import visdom  # so that `python -m visdom.server` also finds them complete and does not download them again
    (static_dir / "version.built").write_text(visdom.__version__)
    print(f"visdom_server: the page's scripts are in {static_dir}; start the server with "
          f"`python scripts/visdom_server.py` (one already running serves them at once: reload its page).")
    return 0


# ---------------------------------------------------------------------------------- serving
def page_static_handler():
    """tornado's StaticFileHandler, except that a page may name a file outside the static folder:
    visdom 0.2.4's page asks for `../user/style.css` (which visdom's /user/ handler serves), and from
    6.6 tornado refuses to render such a page (HTTP 403). Its URL stays unversioned, as earlier tornado
    made it; requests for static files are checked exactly as before."""
    import tornado.web

    class PageStaticFileHandler(tornado.web.StaticFileHandler):
        @classmethod
        def get_version(cls, settings: dict, path: str) -> str | None:
            root = os.path.abspath(settings["static_path"])
            if not os.path.abspath(os.path.join(root, path)).startswith(root + os.sep):
                return None  # not a static file, so it has no version
            return super().get_version(settings, path)

    return PageStaticFileHandler


def serve(static_dir: Path, port: int, hostname: str, env_path: str | None, visdom_args: list[str]) -> None:
    """visdom's server (visdom.server.run_server.main), serving its page from `static_dir`; ServerError
    when it cannot listen on `port` (in use, or not this user's to take)."""
    from visdom.server import app
    from visdom.server.run_server import main as visdom_main
    # visdom turns tornado's debug mode on, which would restart the server whenever a module file changes
    # (an upgrade, an edit): autoreload=False keeps it serving.
    app.tornado_settings.update(static_path=str(static_dir), template_path=str(static_dir),
                                static_handler_class=page_static_handler(), autoreload=False)
    sys.argv = ["visdom", "-port", str(port), "--hostname", hostname,
                *(["-env_path", env_path] if env_path else []), *visdom_args]
    try:
        visdom_main()
    except OSError as err:  # from tornado's listen(), before anything is served
        if err.errno == errno.EADDRINUSE:
            why = "another program (perhaps a visdom server started earlier) already listens there"
        else:
            why = " ".join(str(err).split())
        raise ServerError(f"cannot listen on --port {port}: {why}; stop that program, or start this server on a "
                          f"free port (e.g. --port {port + 1 if port < 65535 else 8097}) and give train.py the "
                          f"same --display_port") from err


def main(argv: list[str] | None = None) -> int:
    parser = OneParagraphParser(description=__doc__.split("\n\n")[0], epilog="Other arguments go to visdom's "
                                "server: -readonly, -bind_local, -enable_login, -logging_level LEVEL, ...")
    parser.add_argument("--port", type=port_number, default=8097,
                        help="port to listen on, 1 to 65535 (train.py's --display_port)")
    parser.add_argument("--hostname", default="localhost",
                        help="host name in the address it prints (it listens on every interface unless -bind_local)")
    parser.add_argument("--env_path", default=None,
                        help="folder where visdom keeps the environments (default ~/.visdom/)")
    parser.add_argument("--static_dir", default=None,
                        help="folder of the page's files (default: visdom's own static folder); another folder first "
                             "gets a copy of visdom's page, e.g. where visdom is installed read-only")
    parser.add_argument("--install_scripts", action="store_true",
                        help="fetch the page's missing scripts from the npm registry and exit")
    parser.add_argument("--registry", default=None,
                        help="npm registry or mirror for --install_scripts (default: $NPM_CONFIG_REGISTRY, else "
                             f"{DEFAULT_REGISTRY})")
    args, visdom_args = parser.parse_known_args(argv)
    if args.install_scripts and visdom_args:
        parser.error(f"unrecognized arguments: {' '.join(visdom_args)}")
    reason = args.env_path and unwritable_folder_reason(args.env_path)
    if reason:  # visdom would fail to listen with an error that reads as the port's
        parser.error(f"argument --env_path: visdom cannot keep its environments in {args.env_path} ({reason}); "
                     f"give a folder you can write to")
    try:
        import visdom  # noqa: F401
    except ImportError:
        print("error: visdom is not installed here: `pip install visdom` (or `pip install -r requirements.txt`).",
              file=sys.stderr)
        return EXIT_FAILED
    static_dir = Path(args.static_dir).resolve() if args.static_dir else visdom_static_dir()
    try:
        prepare_static_dir(static_dir)
        if args.install_scripts:
            registry = (args.registry or os.environ.get("NPM_CONFIG_REGISTRY")
                        or os.environ.get("npm_config_registry") or DEFAULT_REGISTRY)
            return install_scripts(static_dir, registry)
        missing = missing_files(static_dir)
        if missing:
            print(missing_paragraph(static_dir, missing), flush=True)
        serve(static_dir, args.port, args.hostname, args.env_path, visdom_args)
    except ServerError as err:
        print(f"error: {err}.", file=sys.stderr)
        return EXIT_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main())
