"""Networks to and from checkpoint files in the reference's format.

`<label>_net_<name>.pth` holds one plain state_dict (written from the unwrapped module, so it loads
anywhere: one process, the CPU, the reference's test.py). `architecture.json` beside the weights
records the options that decide the networks' shapes -- every flag of the run declared
`on_resume="architecture"` (util/resume_flags.py), --model and --direction among them, and
the shape flags of its network families -- so that loading with other flags can say exactly which
flags to pass, and models/inference/saved_generator.py can rebuild a generator without flags.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Mapping

import torch
from torch import nn

from models.networks import DISCRIMINATOR, GENERATOR, family_of, recognise_network
from util.checkpoint_io import atomic_torch_save, load_state_dict_file
from util.errors import UserError
from util.resume_flags import ARCHITECTURE
from util.safe_files import atomic_write_json, read_json_object

ARCHITECTURE_FILE = "architecture.json"
# Recorded to find the run's generator (its model class, the direction trained), not a network's
# shape: test.py loads one generator of any run with --model test, in either --direction.
NOT_SHAPES = ("model", "direction")


def architecture_options(opt) -> list[str]:
    """The options architecture.json records: every flag of the run declared `on_resume="architecture"`
    (`opt._flag_classes`, as parsed: --model and --direction among them), and the shape flags the run's
    network families name (a family of your own may add its flags without declaring them)."""
    classes = getattr(opt, "_flag_classes", {})
    shape = [*family_of(opt.netG, GENERATOR).shape_flags]
    if hasattr(opt, "netD"):
        shape += family_of(opt.netD, DISCRIMINATOR).shape_flags
    declared = [key for key, resume_class in classes.items() if resume_class == ARCHITECTURE]
    return [key for key in dict.fromkeys([*declared, *shape]) if hasattr(opt, key)]


def write_networks(save_dir: str, label: str, nets: dict[str, nn.Module], opt) -> None:
    """`<label>_net_<name>.pth` for each of `nets` (plain modules) and architecture.json, in `save_dir`."""
    os.makedirs(save_dir, exist_ok=True)
    for name, net in nets.items():
        state = {k: v.detach().cpu() for k, v in net.state_dict().items()}
        atomic_torch_save(state, os.path.join(save_dir, f"{label}_net_{name}.pth"))
    architecture = {key: getattr(opt, key) for key in architecture_options(opt)}
    atomic_write_json(os.path.join(save_dir, ARCHITECTURE_FILE), architecture, indent=1)  # whole, even if killed


# Whether the model of this command can call the networks an architecture.json names (its options as a dict)
RunsRecorded = Callable[[Mapping[str, Any]], bool]


def read_network(path: str, net: nn.Module, device: torch.device, opt, save_dir: str, *,
                 runs_recorded: RunsRecorded | None = None) -> None:
    """Load the state_dict file `path` into the plain module `net`; a UserError naming the file
    and the flags to pass when it does not fit (`mismatch_message`)."""
    state = load_state_dict_file(path, device)
    drop_old_instance_norm_stats(state, net)
    try:
        net.load_state_dict(state)
    except RuntimeError as err:
        raise UserError(mismatch_message(path, err, opt, save_dir, state, runs_recorded=runs_recorded)) from None


def mismatch_message(path: str, err: RuntimeError, opt, save_dir: str, state: dict | None = None, *,
                     runs_recorded: RunsRecorded | None = None) -> str:
    """Which file does not fit the networks the flags build, and the flags it was trained with: from
    architecture.json, or, without one (the reference's, CUT's and UNSB's runs), from what the generator
    weights `state` show. With architecture.json, the --model it was trained with too where
    `runs_recorded` says this command's model cannot call the networks recorded (UNSB's under --model
    cut), so that passing the flags named works."""
    flags = _trained_flags(os.path.join(save_dir, ARCHITECTURE_FILE), opt, runs_recorded) or \
        _flags_seen_in(state, opt)
    first = str(err).splitlines()[1].strip() if len(str(err).splitlines()) > 1 else str(err)
    return (f"checkpoint {path} does not fit the network built from your flags "
            f"(--netG {opt.netG} --norm {opt.norm} --ngf {opt.ngf}"
            f"{' --no_dropout' if opt.no_dropout else ''}).{flags} "
            f"PyTorch says: {first}")


def _trained_flags(saved: str, opt, runs_recorded: RunsRecorded | None = None) -> str:
    """The sentence naming the flags architecture.json `saved` records where they differ from
    `opt`'s ("" without the file or a difference; what is wrong with the file when it is damaged),
    and its --model where this command's cannot call its networks (`runs_recorded`)."""
    if not os.path.exists(saved):
        return ""
    try:
        arch = read_architecture_file(saved)
    except UserError as damaged:  # it would only have added a hint: say so, and give the rest
        return f" ({damaged})"
    parts = []
    for key, value in arch.items():  # the shapes recorded that this command has otherwise
        if key in NOT_SHAPES or value == getattr(opt, key, value):
            continue
        if isinstance(value, bool) or value is None:
            parts.append(f"--{key}" if value else f"(without --{key})")
        else:
            parts.append(f"--{key} {value}")
    trained_in = arch.get("model")
    if parts and trained_in and trained_in != opt.model and runs_recorded is not None and not runs_recorded(arch):
        parts.insert(0, f"--model {trained_in}")  # its networks run in that model only (e.g. UNSB's time index)
    return " It was trained with " + " ".join(parts) + "; pass the same flags." if parts else ""


def _flags_seen_in(state: dict | None, opt) -> str:
    """The sentence naming the shape flags that the generator weights `state` show where they differ from
    `opt`'s ("" for weights no built-in generator family recognises, or none differing), e.g. a UNSB run
    trained with dropout (its `--no_dropout False`), which test.py builds only when told."""
    seen = recognise_network(state) if state else {}
    parts = []
    for key in ("netG", "norm", "ngf", "no_dropout"):  # what a test command may name wrongly; channels are swapped
        if key not in seen or seen[key] == getattr(opt, key, seen[key]):  # per generator (G_B), so not named here
            continue
        parts.append(("--no_dropout" if seen[key] else "--no_dropout False") if key == "no_dropout"
                     else f"--{key} {seen[key]}")
    return f" Its weights show a generator built with {' '.join(parts)}; pass that." if parts else ""


def read_architecture_file(path: str) -> dict:
    """The options architecture.json `path` records; a UserError naming it when it is damaged."""
    return read_json_object(path, "train.py rewrites it at every save; delete it and the architecture is taken "
                                  "from the flags or the weights.")


def drop_old_instance_norm_stats(state: dict, net: nn.Module) -> None:
    """Checkpoints from PyTorch < 0.4 store InstanceNorm running stats that today's modules lack."""
    expected = set(net.state_dict().keys())
    for key in list(state.keys()):
        if key not in expected and key.rsplit(".", 1)[-1] in ("running_mean", "running_var", "num_batches_tracked"):
            module_name = key.rsplit(".", 1)[0]
            module = dict(net.named_modules()).get(module_name)
            if isinstance(module, nn.InstanceNorm2d):
                del state[key]
