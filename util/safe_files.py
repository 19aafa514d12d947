"""Writing files so that a crash at any instant never leaves a damaged one.

Every file a run writes goes through here (checkpoints through util/checkpoint_io.py):

- whole files (weights, training states, architecture.json, <phase>_opt.txt/json, best.json,
  metrics.json, images) with `atomic_write`: into a temporary file beside the target, flushed to
  disk, then renamed over it, so the target is the old file or the new one, never half of one;
- files written by a library that wants a file name (scripts/export.py's ONNX) with
  `atomic_write_by_name`, the same way;
- logs that grow line by line (loss_log.txt, val_log.txt, metrics.jsonl) with `append_line`: one
  write per line, so a kill can cut only the last line, and the next line then starts on a line of
  its own instead of joining the cut one (readers skip a cut line; see `read_json_lines`).

Temporary files are named `.<name>.<random>.tmp` in the target's folder (the Checkpointer removes a
killed run's at the next start).

No tool writes over what it reads: before writing, every script that writes files asks
`refuse_output_over_inputs` whether the folder it writes is, lies inside or contains an input folder,
and `refuse_overwriting_inputs` whether a file it writes is one of its input files.
"""
from __future__ import annotations

import json
import os
import secrets
from typing import BinaryIO, Callable, Iterable

from util.errors import UserError


def atomic_write(path: str, write: Callable[[BinaryIO], None]) -> None:
    """Call `write(file)` on a temporary file beside `path`, then rename it to `path`: a crash at
    any instant leaves the old `path` or the new one, never a truncated one."""
    def write_file(name: str) -> None:
        with open(name, "wb") as f:
            write(f)

    atomic_write_by_name(path, write_file)


def atomic_write_by_name(path: str, write: Callable[[str], None]) -> None:
    """`atomic_write` for writers that take a file name rather than a file (torch.onnx.export):
    `write(temporary_path)` beside `path`, flushed to disk, then renamed to `path`."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp_path = new_temporary_file(folder, os.path.basename(path))
    try:
        write(tmp_path)
        with open(tmp_path, "rb") as f:
            os.fsync(f.fileno())  # on disk before the rename, so the rename never points at nothing
        os.replace(tmp_path, path)
    except BaseException:
        if os.path.exists(tmp_path):
            os.remove(tmp_path)
        raise


def new_temporary_file(folder: str, name: str, suffix: str = ".tmp") -> str:
    """A new empty file `.<name>.<random><suffix>` in `folder`, made with the permissions a plain open() gives
    a new file (0666 less the process's umask, applied by the system; mkstemp's would be 0600), so that
    the renamed file has them too. No umask is read: reading it means setting it, for the whole process."""
    while True:
        tmp_path = os.path.join(folder, f".{name}.{secrets.token_hex(4)}{suffix}")
        try:
            fd = os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:  # another writer's temporary file of the same name: draw again
            continue
        os.close(fd)
        return tmp_path


def atomic_write_text(path: str, text: str) -> None:
    """Write `text` (UTF-8) to `path` whole or not at all."""
    data = text.encode("utf-8")
    atomic_write(path, lambda f: f.write(data))


def atomic_write_json(path: str, obj: object, **dump_args) -> None:
    """`json.dump(obj)` into `path` whole or not at all (`dump_args`: json.dumps's, e.g. indent)."""
    atomic_write_text(path, json.dumps(obj, **dump_args) + "\n")


def append_line(path: str, line: str) -> None:
    """Append `line` and a newline to the log `path` in one write. If a killed process left the
    log's last line cut short (no newline at its end), the new line starts on a line of its own."""
    with open(path, "a+b") as f:
        f.seek(0, os.SEEK_END)
        cut = False
        if f.tell() > 0:
            f.seek(-1, os.SEEK_END)
            cut = f.read(1) != b"\n"
        f.write((("\n" if cut else "") + line + "\n").encode("utf-8"))


def read_json_lines(path: str) -> tuple[list[dict], list[int]]:
    """The records of the JSON-lines log `path`, and the numbers (from 1) of the lines that are no
    JSON object (cut short by a kill, or damaged), which are skipped."""
    records, damaged = [], []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if isinstance(record, dict):
                records.append(record)
            else:
                damaged.append(number)
    return records, damaged


def read_json_object(path: str, advice: str) -> dict:
    """The JSON object in the file `path`; a UserError naming it, saying what is wrong (empty, cut
    short, not an object) and giving `advice` (what to do) when it is damaged."""
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
    except (OSError, ValueError) as err:
        saved = err
    if isinstance(saved, dict):
        return saved
    if os.path.exists(path) and os.path.getsize(path) == 0:
        why = "it is empty"
    else:
        why = f"{type(saved).__name__}: {saved}" if isinstance(saved, Exception) else "it holds no JSON object"
    raise UserError(f"{path} is damaged ({why}). {advice}")


# ---------------------------------------------------------------------------------- outputs apart from inputs
def folder_overlap(output: str, input_folder: str) -> str | None:
    """How the folder `output` overlaps the folder `input_folder`: "is", "lies inside" or "contains";
    None when they are apart. Both are compared as real paths (relative paths and symbolic links
    resolved, as far as they exist), so a link to an input folder is that folder; neither needs to exist."""
    out, into = os.path.realpath(output), os.path.realpath(input_folder)
    if out == into:
        return "is"
    if out.startswith(into.rstrip(os.sep) + os.sep):
        return "lies inside"
    if into.startswith(out.rstrip(os.sep) + os.sep):
        return "contains"
    return None


def refuse_output_over_inputs(output: str, output_flag: str, inputs: Iterable[tuple[str, str]],
                              fix: str = "") -> None:
    """Raise `UserError` when the folder a tool writes, `output` (named by `output_flag`, e.g.
    "--fold_AB D/A" or "the output folder D/train (--dataset-path D)"), is, lies inside or contains
    one of the `inputs`, (what names it, folder) pairs such as ("--fold_A", "D/A"): a tool that wrote
    there would replace, or mix its files into, what it reads. Call it before anything is written.
    `fix` says what to do instead (default: choose a folder apart from the inputs)."""
    for name, folder in inputs:
        how = folder_overlap(output, folder)
        if how is None:
            continue
        real = os.path.realpath(output)
        linked = "" if real == os.path.abspath(output) else f" (through a symbolic link: {real})"
        same = "" if os.path.realpath(folder) == os.path.abspath(folder) else f" (really {os.path.realpath(folder)})"
        effect = ("would replace its files" if how == "is" else
                  "would put the outputs among the files it reads" if how == "lies inside" else
                  "would mix the outputs with the files it reads")
        raise UserError(f"{output_flag}{linked} {how} the input folder {name} {folder}{same}: writing there {effect}, "
                        f"so nothing was written. {fix or 'Choose an output folder apart from every input folder.'}")


def refuse_overwriting_inputs(outputs: Iterable[tuple[str, str]], inputs: Iterable[str], fix: str = "") -> None:
    """Raise `UserError` when one of the files about to be written, `outputs` ((what names it, path)
    pairs), is one of the `inputs` files (compared as real paths). Call it before anything is written."""
    real_inputs = {os.path.realpath(path): path for path in inputs}
    for name, path in outputs:
        source = real_inputs.get(os.path.realpath(path))
        if source is not None:
            raise UserError(f"{name} {path} would overwrite the input {source}, so nothing was written. "
                            f"{fix or 'Choose another output folder.'}")
