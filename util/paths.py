"""Why a path cannot be used, in words a message can quote: a symbolic link on the way that leads nowhere, a file
where a folder is needed, a folder this user cannot write. Nothing here creates or changes anything, and nothing
heavier than `os` is imported, so that light scripts (scripts/visdom_server.py) can use it."""
from __future__ import annotations

import os


def broken_link(path: str) -> str | None:
    """Why `path` cannot be reached when the cause is a symbolic link on the way that leads nowhere (to
    something that does not exist, or around a loop), e.g. "/data/x is a symbolic link to /mnt/x, which
    does not exist"; None when no part of `path` is such a link (it simply does not exist, or it exists)."""
    current = os.path.abspath(path)
    parts = current.split(os.sep)
    for depth in range(2, len(parts) + 1):
        prefix = os.sep.join(parts[:depth]) or os.sep
        if os.path.islink(prefix) and not os.path.exists(prefix):
            return _describe_link(prefix)
        if not os.path.lexists(prefix):
            return None
    return None


def _describe_link(link: str) -> str:
    chain = [link]
    while os.path.islink(chain[-1]) and len(chain) < 40:
        target = os.path.normpath(os.path.join(os.path.dirname(chain[-1]), os.readlink(chain[-1])))
        if target in chain:
            shown = " -> ".join([*chain, target])
            return f"{link} is a symbolic link in a loop ({shown}), which never reaches a file or folder"
        chain.append(target)
    return f"{link} is a symbolic link to {chain[-1]}, which does not exist"


def why_missing(path: str) -> str:
    """What to say after `path` when it was not found (do not ask for one that exists): "does not exist",
    or, when a symbolic link on its way leads nowhere, "cannot be reached: <that link and where it leads>"."""
    link = broken_link(path)
    return f"cannot be reached: {link}" if link else "does not exist"


def unwritable_folder_reason(path: str) -> str | None:
    """Why the folder `path` cannot be created or written to, or None if it can (nothing is created)."""
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        if os.path.lexists(existing):  # a symbolic link leading nowhere: nothing can be created there
            return broken_link(existing) or f"{existing} cannot be reached"
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return f"{existing} is a file, not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable by this user"
    return None


def unwritable_file_reason(path: str) -> str | None:
    """Why the file `path` cannot be written (created, or replaced through a temporary file beside it,
    its folder created if need be), or None if it can (nothing is created)."""
    if os.path.isdir(path):
        return f"{path} is a folder"
    return unwritable_folder_reason(os.path.dirname(os.path.abspath(path)))
