"""Which flags may change when a run is continued, and what happens when one does.

Every flag says so where it is declared, with its class (`on_resume`) at its `add_argument`
(util/flag_types.py `OneParagraphParser`): the options' own flags (options/), each model's and
dataset's (`modify_commandline_options`), a network family's and a logger's. The parsed options
carry the classification (`opt._flag_classes`, options/base_options.py), and nothing here names a
flag. The classes:

  "architecture"  the flag defines a network's shape: recorded in architecture.json beside the
                  weights (models/networks/checkpoint_files.py) and refused when it changes.
  "refused"       something else saved was built for the recorded value and cannot be continued
  refused(what, advice)   with another: `what` it built (the learning-rate schedule for --lr_policy)
                  and `advice` on how to change it anyway are said in the message.
                  Both: one message naming every such flag with both values, before anything is
                  written.
  "reapplied"     optimizer and schedule settings, which the loaded optimizer and scheduler states
                  would otherwise silently override: honoured from here on (the model re-applies
                  them, models/training/schedules.py `reapply_schedule_flags`), with a note.
  "noted"         what the run learns from and how (data, losses, precision): honoured from here
                  on, with a note saying the run no longer matches one that was never interrupted.
  ignored(why)    values a continued run takes from its training state: ignored, with a note giving
                  `why` when this command sets one (a flag left at its default was simply not repeated).
  "silent"        how the run is shown, logged, saved, validated or where it runs: honoured silently,
                  and not recorded in the training state.

A training state (models/training/training_state.py) records the options the run trained with
(`recorded_options`). On `--continue_train` (and `--auto_resume`, torchrun and SLURM restarts)
`check_changed_flags` compares them with this command's, each flag by its class. A flag declared
without a class (one a model or dataset of your own adds) is honoured with a note; every built-in
flag declares one (tests/test_resume.py checks), and docs/resume.md's table lists them (checked
against the declarations too). Training states written before options were recorded resume as
before, unchecked.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Union

from util.errors import UserError

ARCHITECTURE, REFUSED, REAPPLIED, NOTED, SILENT = "architecture", "refused", "reapplied", "noted", "silent"


@dataclass(frozen=True)
class Refused:
    """The class of a flag refused for what it built other than a network's shape (`what`, e.g. the
    learning-rate schedule), with `advice` on how to change it anyway (said in the refusal)."""

    what: str = "saved state"
    advice: str = ""


def refused(what: str, advice: str = "") -> Refused:
    """`on_resume=refused("learning-rate schedule", "To change it, ...")`; the plain "refused" says "saved state"."""
    return Refused(what, advice)


@dataclass(frozen=True)
class Ignored:
    """The class of a flag whose new value a continued run ignores, and why (said in the note)."""

    reason: str


def ignored(reason: str) -> Ignored:
    """`on_resume=ignored("the weights are loaded, not initialised")`: see the module docstring."""
    return Ignored(reason)


ResumeClass = Union[str, Refused, Ignored]
CLASS_NAMES = (ARCHITECTURE, REFUSED, REAPPLIED, NOTED, "ignored", SILENT)  # the order docs/resume.md shows


def class_name(resume_class: ResumeClass | None) -> str | None:
    """The name of a class ("refused" for a `Refused`, "ignored" for an `Ignored`); None: undeclared."""
    if isinstance(resume_class, (Refused, Ignored)):
        return REFUSED if isinstance(resume_class, Refused) else "ignored"
    return resume_class


def checked_class(resume_class: Any) -> ResumeClass | None:
    """`resume_class` (the plain "refused" as a `Refused`) if it is a class, or None (undeclared);
    ValueError naming the classes otherwise."""
    if resume_class == REFUSED:
        return Refused()
    if resume_class is None or isinstance(resume_class, (Refused, Ignored)) or \
            resume_class in (ARCHITECTURE, REAPPLIED, NOTED, SILENT):
        return resume_class
    raise ValueError(f"on_resume={resume_class!r} is no resume class; use {ARCHITECTURE!r}, {REFUSED!r} (or "
                     f"refused(what, advice)), {REAPPLIED!r}, {NOTED!r}, ignored(why) or {SILENT!r} "
                     f"(util/resume_flags.py)")


def _plain(value: Any) -> Any:
    """`value` as the training state can hold it (loaded with weights_only), or None if it cannot."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, (bool, int, float, str)) for v in value):
        return list(value)
    return None


def recorded_options(options: Mapping[str, Any], classes: Mapping[str, ResumeClass]) -> dict[str, Any]:
    """What a training state records of the run's options (`opt.as_dict()`, classified by `classes`,
    `opt._flag_classes`): those a continuation compares (not the "silent" ones, e.g. --name: the same
    run saved under two names holds the same state), as plain values."""
    return {key: _plain(value) for key, value in options.items() if classes.get(key) != SILENT}


def flag_text(name: str, value: Any) -> str:
    """How a value is written on the command line: `--ngf 64`, `--no_dropout`, `no --no_dropout`."""
    if value is True:
        return f"--{name}"
    if value is False or value is None:
        return f"no --{name}"
    if isinstance(value, list):
        return f"--{name} {' '.join(str(v) for v in value)}".rstrip()
    return f"--{name} {value}"


# Values that build the same networks: batch norm synchronised across processes (needed under
# torchrun) is batch norm, so a run may go from one process to several and back.
SAME_NETWORKS = {"norm": {"syncbatch": "batch"}}


def changed_flags(saved: Mapping[str, Any], current: Mapping[str, Any],
                  classes: Mapping[str, ResumeClass]) -> dict[str, tuple[Any, Any]]:
    """The flags whose value differs: name -> (recorded, current). A flag the run did not have is
    not compared (it was added since, and has no recorded value)."""
    now = recorded_options(current, classes)

    def same(key: str) -> bool:
        alias = SAME_NETWORKS.get(key, {})
        if not alias:  # e.g. --patch_size 64,64,32: a list, compared as it is
            return saved[key] == now[key]
        return alias.get(saved[key], saved[key]) == alias.get(now[key], now[key])
    return {key: (saved[key], now[key]) for key in sorted(now) if key in saved and not same(key)}


def check_changed_flags(saved: Mapping[str, Any] | None, current: Mapping[str, Any], defaults: Mapping[str, Any],
                        where: str, *, classes: Mapping[str, ResumeClass]) -> list[str]:
    """Compare the options recorded in the training state `where` (`saved`; None for a state that
    recorded none: nothing is checked) with this command's (`current`, its parser `defaults`), each
    flag by its class in `classes` (`opt._flag_classes`; a flag missing there is honoured with a note).
    Raises UserError naming every refused flag ("architecture" or "refused") with both values;
    returns the notes to show for the other changes (see the module docstring)."""
    if saved is None:
        return []
    changes = changed_flags(saved, current, classes)
    refused_now = {key: change for key, change in changes.items()
                   if classes.get(key) == ARCHITECTURE or isinstance(classes.get(key), Refused)}
    if refused_now:
        raise UserError(refusal(refused_now, where, classes))
    return notes(changes, defaults, classes)


def refusal(refused_now: Mapping[str, tuple[Any, Any]], where: str, classes: Mapping[str, ResumeClass]) -> str:
    """The message for flags that cannot change on --continue_train: the networks they shape
    ("architecture") and what the other refused ones built (`Refused.what`), with their advice."""
    listed = "; ".join(f"it trained with {flag_text(key, old)}, this command has {flag_text(key, new)}"
                       for key, (old, new) in refused_now.items())
    same = " ".join(flag_text(key, old) for key, (old, _) in refused_now.items() if old not in (False, None))
    others = [classes[key] for key in refused_now if classes[key] != ARCHITECTURE]
    networks = ["networks"] if len(others) < len(refused_now) else []
    what = " and ".join(dict.fromkeys(networks + [kind.what for kind in others]))
    advice = "".join(f" {text}" for text in dict.fromkeys(kind.advice for kind in others) if text)
    return (f"--continue_train: {where} continues a run whose {what} cannot change: {listed}. Pass the same flags "
            f"to continue it{' (' + same + ')' if same else ''}, or another --name to start a new run.{advice}")


def notes(changes: Mapping[str, tuple[Any, Any]], defaults: Mapping[str, Any],
          classes: Mapping[str, ResumeClass]) -> list[str]:
    """The notes for changed flags that are honoured (also those declared without a class) or
    ignored (these only when this command sets them); none for "silent" ones."""
    honoured = [key for key in changes if classes.get(key) in (REAPPLIED, NOTED)]
    undeclared = [key for key in changes if classes.get(key) is None]
    ignored_now = [key for key in changes if isinstance(classes.get(key), Ignored)
                   and changes[key][1] != defaults.get(key, changes[key][1])]
    said = []

    def described(keys: list[str]) -> str:
        return ", ".join(f"{flag_text(key, changes[key][1])} (it trained with {flag_text(key, changes[key][0])})"
                         for key in keys)

    if honoured or undeclared:
        said.append(f"note: continuing with changed flags, honoured from here on: {described(honoured + undeclared)}; "
                    f"the run no longer matches one that was never interrupted.")
    for key in ignored_now:
        said.append(f"note: {flag_text(key, changes[key][1])} is ignored when continuing a run: "
                    f"{classes[key].reason} ({flag_text(key, changes[key][0])}).")
    return said
