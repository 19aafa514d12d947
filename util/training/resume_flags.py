"""Which flags may change when a run is continued, and what happens when one does.

A training state (util/training/training_state.py) records the options the run trained with
(`recorded_options`). On `--continue_train` (and `--auto_resume`, torchrun and SLURM restarts)
`check_changed_flags` compares them with this command's flags, each flag by its class here:

  REFUSED    the saved networks or learning-rate schedule were built for the recorded value and
             cannot be continued with another: one message naming every such flag with both
             values, before anything is written.
  REAPPLIED  optimizer and schedule settings, which the loaded optimizer and scheduler states
             would otherwise silently override: honoured from here on (the model re-applies them,
             models/networks.py `reapply_schedule_flags`), with a note.
  NOTED      what the run learns from and how (data, losses, precision): honoured from here on,
             with a note saying the run no longer matches one that was never interrupted.
  IGNORED    values a continued run takes from its training state: ignored, with a note when this
             command sets one (a flag left at its default was simply not repeated).
  SILENT     how the run is shown, logged, saved, validated or where it runs: honoured silently.

A flag in none of them (one a model or dataset of your own adds) is honoured with a note. Every
flag of the built-in models and datasets is in exactly one class (tests/test_resume.py checks);
docs/resume.md shows the table. Training states written before options were recorded resume
as before, unchecked.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from util.errors import UserError

ARCHITECTURE = ("model", "netG", "netD", "n_layers_D", "ngf", "ndf", "norm", "no_dropout", "input_nc", "output_nc",
                "direction", "num_D", "upsample", "D_spectral",
                # --model cut's networks (models/cut_model.py): netF's MLPs follow --nce_layers
                "normD", "no_antialias", "no_antialias_up", "netF", "netF_nc", "nce_layers")
REFUSED = frozenset(ARCHITECTURE + ("lr_policy",))
REAPPLIED = frozenset(("lr", "beta1", "fused_adam", "n_epochs", "n_epochs_decay", "lr_decay_iters"))
NOTED = frozenset((
    # the data
    "dataroot", "dataset_mode", "phase", "max_dataset_size", "batch_size", "load_size", "crop_size", "preprocess",
    "no_flip", "serial_batches", "data_range", "new_dataset_option",
    # the losses and what they see
    "gan_mode", "pool_size", "lambda_L1", "lambda_A", "lambda_B", "lambda_identity", "lambda_regression",
    "ema_decay", "save_best", "lambda_feat", "diff_augment", "ada_target", "ada_kimg",
    "CUT_mode", "lambda_GAN", "lambda_NCE", "nce_idt", "nce_includes_all_negatives_from_minibatch", "nce_T",
    "num_patches", "flip_equivariance",
    # the global batch (a checkpoint is written between optimizer steps, so any K continues)
    "accum_steps",
    # the arithmetic
    "dtype", "amp", "channels_last", "deterministic"))
IGNORED = {
    "seed": "a continued run keeps the seed it started with, which its data order and augmentations follow",
    "init_type": "the weights are loaded, not initialised",
    "init_gain": "the weights are loaded, not initialised",
    "epoch_count": "the schedule counts from the epoch the run started at",
}
SILENT = frozenset((
    "name", "checkpoints_dir", "suffix", "continue_train", "auto_resume", "epoch", "load_iter", "isTrain",
    "device", "gpu_ids", "compile", "compile_probe", "num_threads", "ddp_backend", "ddp_timeout", "skip_bad_images", "verbose",
    "display_freq", "display_ncols", "display_id", "display_server", "display_env", "display_port",
    "display_channels", "display_winsize", "update_html_freq", "print_freq", "no_html", "use_tensorboard",
    "no_progress", "logger", "progress_interval", "use_wandb", "wandb_project_name",
    "save_latest_freq", "save_epoch_freq", "save_by_iter",
    "val_freq", "val_phase", "val_max_images", "val_mode", "inception_weights",
    # the same gradients, recomputed: memory, not results
    "checkpoint_activations"))
CLASSES = {"refused": REFUSED, "reapplied": REAPPLIED, "noted": NOTED, "ignored": frozenset(IGNORED),
           "silent": SILENT}


def _plain(value: Any) -> Any:
    """`value` as the training state can hold it (loaded with weights_only), or None if it cannot."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, (bool, int, float, str)) for v in value):
        return list(value)
    return None


def recorded_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """What a training state records of the run's options (`opt.as_dict()`): those a continuation
    compares (not the SILENT ones, e.g. --name: the same run saved under two names holds the same
    state), as plain values."""
    return {key: _plain(value) for key, value in options.items() if key not in SILENT}


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


def changed_flags(saved: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The flags whose value differs: name -> (recorded, current). A flag the run did not have is
    not compared (it was added since, and has no recorded value)."""
    now = recorded_options(current)

    def same(key: str) -> bool:
        alias = SAME_NETWORKS.get(key, {})
        return alias.get(saved[key], saved[key]) == alias.get(now[key], now[key])
    return {key: (saved[key], now[key]) for key in sorted(now) if key in saved and not same(key)}


def check_changed_flags(saved: Mapping[str, Any] | None, current: Mapping[str, Any], defaults: Mapping[str, Any],
                        where: str) -> list[str]:
    """Compare the options recorded in the training state `where` (`saved`; None for a state that
    recorded none: nothing is checked) with this command's (`current`, its parser `defaults`).
    Raises UserError naming every REFUSED flag with both values; returns the notes to show for
    the other changes (see the module docstring)."""
    if saved is None:
        return []
    changes = changed_flags(saved, current)
    refused = {key: change for key, change in changes.items() if key in REFUSED}
    if refused:
        raise UserError(refusal(refused, where))
    return notes(changes, defaults)


def refusal(refused: Mapping[str, tuple[Any, Any]], where: str) -> str:
    """The message for flags that cannot change on --continue_train."""
    listed = "; ".join(f"it trained with {flag_text(key, old)}, this command has {flag_text(key, new)}"
                       for key, (old, new) in refused.items())
    same = " ".join(flag_text(key, old) for key, (old, _) in refused.items() if old not in (False, None))
    schedule, networks = "lr_policy" in refused, len(refused) > ("lr_policy" in refused)
    what = " and ".join(part for part, changed in (("networks", networks), ("learning-rate schedule", schedule))
                        if changed)
    another_schedule = (" To change the schedule, continue from its weights alone with --continue_train "
                        "--epoch_count N (fresh optimizers and schedule)." if schedule else "")
    return (f"--continue_train: {where} continues a run whose {what} cannot change: {listed}. Pass the same flags "
            f"to continue it{' (' + same + ')' if same else ''}, or another --name to start a new run."
            f"{another_schedule}")


def notes(changes: Mapping[str, tuple[Any, Any]], defaults: Mapping[str, Any]) -> list[str]:
    """The notes for changed flags that are honoured or ignored (none for SILENT ones)."""
    honoured = [key for key in changes if key in REAPPLIED or key in NOTED]
    unknown = [key for key in changes if not any(key in members for members in CLASSES.values())]
    ignored = [key for key in changes if key in IGNORED and changes[key][1] != defaults.get(key, changes[key][1])]
    said = []

    def described(keys: list[str]) -> str:
        return ", ".join(f"{flag_text(key, changes[key][1])} (it trained with {flag_text(key, changes[key][0])})"
                         for key in keys)

    if honoured or unknown:
        said.append(f"note: continuing with changed flags, honoured from here on: {described(honoured + unknown)}; "
                    f"the run no longer matches one that was never interrupted.")
    for key in ignored:
        said.append(f"note: {flag_text(key, changes[key][1])} is ignored when continuing a run: {IGNORED[key]} "
                    f"({flag_text(key, changes[key][0])}).")
    return said
