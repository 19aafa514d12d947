"""Corpus cases of tests/test_bad_input.py for scripts/visdom_server.py: a port it cannot listen on
(out of range, or taken by another program) and a --static_dir that is no folder end in one paragraph
with exit status 2, not in a traceback or a server listening somewhere else than the address it printed."""
from __future__ import annotations

import socket
import sys
from pathlib import Path

from bad_input_kit import Case, Setup

SCRIPT = "scripts/visdom_server.py"


def keep_argv(setup: Setup) -> Setup:
    """The script hands visdom its flags through sys.argv (visdom's main reads nothing else): the test
    process's own is put back afterwards."""
    argv = list(sys.argv)
    setup.cleanup.append(lambda: sys.argv.__setitem__(slice(None), argv))
    return setup


def port_refused(port: str, *names: str):
    def build(work: Path) -> Setup:
        return keep_argv(Setup(["--port", port, "--env_path", str(work / "env")], stderr_has=("--port", *names),
                               stdout_lacks=("It's Alive",), absent=(work / "env",)))
    return build


def b_port_in_use(work):
    taken = socket.socket()
    taken.bind(("", 0))
    taken.listen()
    port = taken.getsockname()[1]
    setup = Setup(["--port", str(port), "--env_path", str(work / "env")],
                  stderr_has=(f"--port {port}", "already listens there", "--display_port"),
                  stdout_lacks=("You can navigate to",))
    setup.cleanup.append(taken.close)
    return keep_argv(setup)


def b_static_dir_is_a_file(work):
    page = work / "page.html"
    page.write_text("<html></html>\n")
    return keep_argv(Setup(["--static_dir", str(page), "--env_path", str(work / "env")],
                           stderr_has=(f"--static_dir {page} is a file", "leave --static_dir out"),
                           unchanged=(page,), stdout_lacks=("It's Alive",)))


def b_static_dir_under_a_file(work):
    page = work / "page.html"
    page.write_text("<html></html>\n")
    return keep_argv(Setup(["--static_dir", str(page / "static"), "--env_path", str(work / "env")],
                           stderr_has=(f"--static_dir {page / 'static'}", "cannot copy visdom's page"),
                           unchanged=(page,), stdout_lacks=("It's Alive",)))


def b_env_path_under_a_file(work):
    notes = work / "notes.txt"
    notes.write_text("a file where visdom's folder would go\n")
    return keep_argv(Setup(["--env_path", str(notes / "env")],
                           stderr_has=("--env_path", f"{notes} is a file"), stdout_lacks=("It's Alive",),
                           unchanged=(notes,)))


VISDOM_SERVER_CASES = [
    Case("visdom_server.py --port 70000 is refused naming the range, not served on another port",
         port_refused("70000", ">= 1 and <= 65535", "'70000'"), 2, script=SCRIPT),
    Case("visdom_server.py --port 0 is refused naming the range", port_refused("0", ">= 1 and <= 65535"), 2,
         script=SCRIPT),
    Case("visdom_server.py --port eighty is refused", port_refused("eighty", "an integer", "'eighty'"), 2,
         script=SCRIPT),
    Case("visdom_server.py on a port another program listens on is refused naming the port", b_port_in_use, 2,
         script=SCRIPT),
    Case("visdom_server.py --static_dir naming a file is refused naming it", b_static_dir_is_a_file, 2,
         script=SCRIPT),
    Case("visdom_server.py --static_dir under a file is refused naming it", b_static_dir_under_a_file, 2,
         script=SCRIPT),
    Case("visdom_server.py --env_path under a file is refused naming it, not the port", b_env_path_under_a_file, 2,
         script=SCRIPT),
]
