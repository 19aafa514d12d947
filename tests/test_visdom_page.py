"""visdom's page in the browser (scripts/visdom_server.py): the server starts and says which of the
page's scripts are missing, --install_scripts fetches them from an npm registry (here a fake one,
served from tmp_path: the tests need no internet) and refuses tarballs that do not match the
registry's integrity or reach outside their folder, and a run trained with --display_id 1 shows on a
page whose every script and stylesheet is served, or is told once that the page lacks them.
"""
from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request
import warnings
from collections import OrderedDict
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from urllib.error import HTTPError
from urllib.parse import urljoin

import pytest
import torch

from conftest import FAST_FLAGS, ROOT, free_port, load_script, run_script

visdom = pytest.importorskip("visdom")  # a requirement: CI fails rather than skip (tests/skip_policy.py)
server_script = load_script("scripts/visdom_server.py")
PACKAGES = server_script.PAGE_PACKAGES
PAGE_FILES = [path for package in PACKAGES for paths in package.files.values() for path in paths]
TINY_RUN = ["--model", "pix2pix", "--direction", "BtoA", "--netG", "resnet_6blocks", "--load_size", "32", "--crop_size",
            "32", "--n_epochs", "1", "--n_epochs_decay", "0", "--max_dataset_size", "2", "--no_html"]


def fake_content(package, name: str) -> bytes:
    return f"/* {package.spec} {name} */\n".encode()


def tarball_of(members: dict[str, bytes], symlinks: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (symlinks or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return buffer.getvalue()


class FakeRegistry:
    """An npm registry on 127.0.0.1 serving, for each page package, its version document
    (/<name>/<version>, with dist.tarball, dist.integrity and dist.shasum) and a tarball of the files
    the page needs (under package/, as npm packs them)."""

    def __init__(self):
        self.routes: dict[str, bytes] = {}
        routes = self.routes

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                body = routes.get(self.path)
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        for package in PACKAGES:
            files = {f"package/{name}": fake_content(package, name) for name in package.files}
            self.publish(package, tarball_of(files))

    def publish(self, package, tarball: bytes, dist: dict | None = None) -> None:
        """Serve `tarball` as the package, with the registry's integrity of it unless `dist` says otherwise."""
        tarball_path = f"/{package.name}/-/{package.name}-{package.version}.tgz"
        integrity = "sha512-" + base64.b64encode(hashlib.sha512(tarball).digest()).decode()
        document = {"name": package.name, "version": package.version,
                    "dist": {"tarball": self.url.rstrip("/") + tarball_path, "integrity": integrity,
                             "shasum": hashlib.sha1(tarball).hexdigest(), **(dist or {})}}
        self.routes[f"/{package.name}/{package.version}"] = json.dumps(document).encode()
        self.routes[tarball_path] = tarball

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def registry():
    fake = FakeRegistry()
    yield fake
    fake.close()


def page_without_scripts(folder: Path) -> Path:
    """A copy of visdom's own page (index.html, main.js, ...) without the files --install_scripts adds."""
    shutil.copytree(server_script.visdom_static_dir(), folder)
    for path in PAGE_FILES + ["version.built"]:
        (folder / path).unlink(missing_ok=True)
    return folder


def install(static: Path, registry_url: str, capsys) -> tuple[int, str, str]:
    code = server_script.main(["--install_scripts", "--static_dir", str(static), "--registry", registry_url])
    out, err = capsys.readouterr()
    return code, out, err


class ScriptServer:
    """`python scripts/visdom_server.py` in a child process, with its environments in tmp_path."""

    def __init__(self, tmp: Path, static: Path):
        self.port = free_port()
        self.log = tmp / f"visdom_server_{self.port}.log"
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "visdom_server.py"), "--port",
                                      str(self.port), "--env_path", str(tmp / "visdom_env"), "--static_dir",
                                      str(static), "-logging_level", "WARNING"],
                                     stdout=self.log.open("w"), stderr=subprocess.STDOUT, cwd=tmp)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the visdom server exited: {self.log.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the visdom server did not listen within 30 s: {self.log.read_text()[-2000:]}")

    @property
    def url(self) -> str:
        return f"http://localhost:{self.port}/"

    def output(self) -> str:
        return self.log.read_text()

    def window(self, env: str, win: str) -> dict:
        with warnings.catch_warnings():  # visdom 0.2.4 calls the deprecated logger.warn
            warnings.simplefilter("ignore", DeprecationWarning)
            client = visdom.Visdom(server="http://localhost", port=self.port, env=env, use_incoming_socket=False,
                                   raise_exceptions=True)
        return json.loads(client.get_window_data(win, env=env))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def start_server(tmp_path):
    servers = []

    def start(static: Path) -> ScriptServer:
        servers.append(ScriptServer(tmp_path, static))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()  # always, even when the test fails


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except HTTPError as err:
        return err.code, b""


class Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag, attrs):
        found = dict(attrs)
        if tag == "script" and found.get("src"):
            self.urls.append(found["src"])
        elif tag == "link" and found.get("href"):
            self.urls.append(found["href"])


# ---------------------------------------------------------------------------------- the page, end to end
@pytest.mark.slow
def test_a_trained_run_shows_on_a_page_whose_every_script_and_stylesheet_is_served(registry, start_server,
                                                                                    paired_root, tmp_path, capsys):
    static = page_without_scripts(tmp_path / "static")
    code, out, err = install(static, registry.url, capsys)
    assert code == 0, out + err
    server = start_server(static)
    env = "pagetest"
    result = run_script("train.py", "--dataroot", str(paired_root), "--name", "p", *FAST_FLAGS, *TINY_RUN,
                        "--checkpoints_dir", str(tmp_path), "--display_id", "1", "--display_port", str(server.port),
                        "--display_env", env, "--display_freq", "1", "--print_freq", "1")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "warning" not in (result.stdout + result.stderr).lower(), result.stdout + result.stderr
    assert "missing" not in server.output(), server.output()

    status, page = get(server.url)
    assert status == 200
    links = Links()
    links.feed(page.decode())
    assert len(links.urls) >= 18, links.urls  # visdom 0.2.4's page: 13 scripts, 6 stylesheets, an icon
    for link in links.urls:
        assert get(urljoin(server.url, link))[0] == 200, link
    assert get(urljoin(server.url, "/static/js/jquery.min.js"))[1] == fake_content(PACKAGES[0], "dist/jquery.min.js")

    assert server.window(env, "1")["title"] == "p loss over time"
    assert [trace["name"] for trace in server.window(env, "1")["content"]["data"]] == ["G_GAN", "G_L1", "D_real",
                                                                                      "D_fake"]
    assert server.window(env, "2")["type"] == "image"
    assert re.search(r"<td>real_A</td><td>fake_B</td><td>real_B</td>", server.window(env, "3")["content"])


def test_a_server_without_the_scripts_names_them_starts_anyway_and_training_warns_once(start_server, tmp_path,
                                                                                        capsys):
    from options.train_options import TrainOptions
    from util.display.visdom_backend import VisdomBackend
    from util.position import Position
    from util.visualizer import Visualizer
    server = start_server(page_without_scripts(tmp_path / "static"))
    said = server.output()
    assert f"{len(PAGE_FILES)} of the {len(PAGE_FILES)} scripts" in said and "js/jquery.min.js" in said, said
    assert "python scripts/visdom_server.py --install_scripts" in said
    assert get(server.url)[0] == 200  # the page itself opens, blank

    opt = TrainOptions().parse(["--dataroot", str(tmp_path), "--name", "v", "--checkpoints_dir", str(tmp_path / "ck"),
                                "--display_id", "1", "--display_port", str(server.port), "--display_env", "blank",
                                "--no_progress", "--n_epochs", "1", "--n_epochs_decay", "0"])
    vis = Visualizer(opt)
    visuals = OrderedDict((k, torch.zeros(1, 3, 8, 8)) for k in ("real_A", "fake_B", "real_B"))
    vis.begin_epoch(Position(1, 0, 0), 2)
    for step in (1, 2):
        vis.log_images(Position(1, step, step), visuals, False)
        vis.backend(VisdomBackend).log_step(Position(1, step, step), {"G_GAN": 0.5}, 2e-4, 0.01, 0.0)
    vis.close()
    out = capsys.readouterr().out
    warned = [line for line in out.splitlines() if "warning" in line]
    assert len(warned) == 1, out
    assert "lacks" in warned[0] and "jquery.min.js" in warned[0] and "--install_scripts" in warned[0]
    assert server.window("blank", "1")["title"] == "v loss over time"  # the run is still sent


# ---------------------------------------------------------------------------------- --install_scripts
def test_install_scripts_puts_each_file_where_visdom_looks_and_fetches_nothing_twice(registry, tmp_path, capsys):
    static = page_without_scripts(tmp_path / "static")
    code, out, err = install(static, registry.url, capsys)
    assert code == 0 and err == "", out + err
    for package in PACKAGES:
        for name, paths in package.files.items():
            for path in paths:
                assert (static / path).read_bytes() == fake_content(package, name), path
    assert (static / "version.built").read_text() == visdom.__version__  # `python -m visdom.server` downloads nothing
    registry.routes.clear()  # a second run must not need the registry
    code, out, err = install(static, registry.url, capsys)
    assert code == 0 and "already" in out, out + err


@pytest.mark.parametrize("dist", [{"integrity": "sha512-" + base64.b64encode(b"\0" * 64).decode()},
                                  {"integrity": None, "shasum": "0" * 40}, {"integrity": None, "shasum": None}],
                         ids=["sha512", "sha1-only", "none-published"])
def test_install_scripts_refuses_a_tarball_the_registry_does_not_vouch_for(dist, registry, tmp_path, capsys):
    jquery = PACKAGES[0]
    registry.publish(jquery, tarball_of({"package/dist/jquery.min.js": b"alert('tampered')"}), dist)
    static = page_without_scripts(tmp_path / "static")
    code, out, err = install(static, registry.url, capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "jquery@3.1.1" in err and "refused" in err, err
    assert not (static / "js" / "jquery.min.js").exists()
    assert (static / "js" / "react-react.min.js").exists()  # the others are installed
    assert not (static / "version.built").exists()


@pytest.mark.parametrize("members,symlinks", [({"package/../../evil.js": b"x"}, None),
                                              ({"/tmp/evil.js": b"x"}, None),
                                              ({}, {"package/dist/jquery.min.js": "/etc/passwd"})],
                         ids=["dot-dot", "absolute", "symlink"])
def test_install_scripts_refuses_a_tarball_with_an_entry_outside_its_folder(members, symlinks, registry, tmp_path,
                                                                             capsys):
    jquery = PACKAGES[0]
    registry.publish(jquery, tarball_of({"package/dist/jquery.min.js": b"/* jquery */", **members}, symlinks))
    static = page_without_scripts(tmp_path / "work" / "static")
    code, out, err = install(static, registry.url, capsys)
    assert code == 2 and "jquery@3.1.1" in err and "refused" in err, err
    assert not (static / "js" / "jquery.min.js").exists()
    assert not list(tmp_path.rglob("evil.js"))


def test_install_scripts_offline_exits_2_naming_every_package_it_could_not_fetch(tmp_path):
    static = page_without_scripts(tmp_path / "static")
    result = run_script("scripts/visdom_server.py", "--install_scripts", "--static_dir", str(static),
                        env={"NPM_CONFIG_REGISTRY": f"http://127.0.0.1:{free_port()}/"}, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    paragraph = result.stderr.strip()
    assert len(paragraph.splitlines()) == 1 and "cannot be reached" in paragraph, paragraph
    assert all(package.spec in paragraph for package in PACKAGES), paragraph
    assert not any((static / path).exists() for path in PAGE_FILES)


def test_the_page_names_visdoms_user_stylesheet_without_a_403_from_any_tornado(tmp_path):
    """visdom's page asks for static_url('../user/style.css'); tornado 6.6 answers such a page with 403."""
    handler = server_script.page_static_handler()
    (tmp_path / "css").mkdir()
    (tmp_path / "css" / "style.css").write_text("body {}")
    settings = {"static_path": str(tmp_path)}
    assert handler.get_version(settings, "../user/style.css") is None
    assert handler.get_version(settings, "css/style.css")  # files inside keep their version


def test_training_names_the_fix_when_the_page_answers_403():
    """visdom 0.2.4 started by `python -m visdom.server` under tornado 6.6 receives everything, but its
    page answers 403: training says so, naming the tornado bound and scripts/visdom_server.py."""
    import requests

    from util.display.visdom_backend import page_problem

    class Forbidden(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(403)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Forbidden)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = SimpleNamespace(server="http://127.0.0.1", port=server.server_address[1], base_url="",
                                 session=requests.Session())
        problem = page_problem(client)
    finally:
        server.shutdown()
        server.server_close()
    assert "HTTP 403" in problem and 'pip install "tornado<6.6"' in problem and "scripts/visdom_server.py" in problem
