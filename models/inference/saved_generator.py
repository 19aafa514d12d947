"""Finding a trained generator's weights and building the network they belong to, without flags.

A run folder written by train.py holds `<epoch>_net_<name>.pth` files and `architecture.json`
(models/base_model.py); a reference checkpoint has only the .pth files. `find_generator` picks the
file of the generator that translates in the requested direction (the model class's `translators`,
looked up by the name architecture.json gives, models/__init__.py) and the architecture to build
it with, taken in this order: explicit keyword arguments, architecture.json, and what the weights
themselves show (`infer_architecture`: generator type, ngf, channels, norm, and dropout for
resnets). `load_generator` builds it with `networks.define_G`, as train.py and test.py do, and
loads the weights with a message that names the file and the architecture when they do not fit.
What else inference needs from training, the --data_range (how data values map to the network's)
and, for volumes, the --patch_size (the window whole volumes are translated in), and for a
Schrödinger-bridge run its --num_timesteps and --tau, comes from the options train.py saved beside the
weights (`train_opt.json`), or, for a run trained by the reference's, CUT's or UNSB's code, from the
`train_opt.txt` its train.py wrote (models/inference/run_options.py).
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

import torch
from torch import nn

from models import builtin_models, find_model_using_name, networks
from models.base_model import BaseModel
from models.inference.run_options import OPTIONS_FILES, find_options_file, read_options_file
from models.networks.checkpoint_files import ARCHITECTURE_FILE, drop_old_instance_norm_stats, read_architecture_file
from util.checkpoint_io import load_state_dict_file
from util.errors import UserError
from util.paths import why_missing

# What every generator's architecture names, under the names of the flags (and of Translator.load's
# keywords); its family adds the flags that shape it (`NetworkFamily.shape_flags`).
BASE_KEYS = ("netG", "input_nc", "output_nc")
# The reference's test.py defaults, for what neither the weights nor a keyword says (U-Net dropout).
REFERENCE_DEFAULTS = {"netG": networks.DEFAULT_GENERATOR, "norm": "instance", "ngf": 64, "input_nc": 3,
                      "output_nc": 3, "upsample": "transpose", "no_dropout": False}
DIRECTIONS = ("AtoB", "BtoA")
# The order in which describe_architecture writes the flags it knows; others follow.
_SHOWN_FIRST = ("netG", "norm", "ngf", "input_nc", "output_nc", "upsample")


def architecture_keys(netG: str) -> tuple[str, ...]:
    """The architecture keys of a generator of family `netG`: BASE_KEYS and its shape flags."""
    return BASE_KEYS + tuple(networks.family_of(netG).shape_flags)


def known_architecture_keys(netG: str | None = None) -> set[str]:
    """Every key an architecture may give: those of every built-in generator family, and of `netG`'s."""
    keys = set(BASE_KEYS)
    for name in networks.generators() + ([netG] if netG else []):
        keys.update(networks.family_of(name).shape_flags)
    return keys


@dataclass(frozen=True)
class GeneratorCheckpoint:
    """One generator's weights file and the architecture (`architecture_keys`) to build it with; the
    `direction` it translates in terms of the dataset's domains ("AtoB": domain A -> domain B), the
    numbers of the --data_range its run trained with, the --patch_size (D, H, W) of a volume run's
    training patches, and the --num_timesteps and --tau of a Schrödinger-bridge run (--model sb) (each
    None when not given or not known); `options_file` is the file they were read from (None: none there)."""

    path: str
    architecture: dict
    direction: str = "AtoB"
    data_range: tuple[float, ...] | None = None
    patch_size: tuple[int, ...] | None = None
    num_timesteps: int | None = None
    tau: float | None = None
    options_file: str | None = None

    def bridge(self, num_timesteps: int | None, tau: float | None) -> tuple[int | None, float | None]:
        """The steps and tau a time-conditioned generator (--model sb) walks: `num_timesteps` and `tau` where
        given, else its run's; a UserError naming where it looked when one is known from neither (never a
        default the run may not have trained with). Other generators get what is given (which they refuse)."""
        arch = SimpleNamespace(**self.architecture)
        if not networks.family_of(arch.netG).time_conditioned(arch):
            return num_timesteps, tau
        steps = self.num_timesteps if num_timesteps is None else num_timesteps
        tau = self.tau if tau is None else tau
        missing = [name for name, value in (("num_timesteps", steps), ("tau", tau)) if value is None]
        if missing:
            where = (f"{self.options_file} has no {' or '.join(f'`{name}:`' for name in missing)} line"
                     if self.options_file else f"no {' or '.join(OPTIONS_FILES)} lies beside {self.path}")
            raise UserError(f"{self.path} holds a Schrödinger-bridge generator (--netG {arch.netG}, --model sb), which "
                            f"walks the --num_timesteps steps with the noise --tau its run trained with, but {where}, "
                            f"so its {' and '.join(missing)} are not known. Pass them: num_timesteps=N, tau=T to "
                            f"Translator.load (scripts/translate.py: --num_timesteps N --tau T; UNSB's defaults are 5 "
                            f"and 0.01), or put the train_opt.txt its training wrote beside the weights.")
        return steps, tau


def describe_architecture(arch: dict) -> str:
    """The architecture as the flags that build it, e.g. `--netG unet_256 --norm batch --ngf 64 ...`."""
    order = [key for key in _SHOWN_FIRST if key in arch] + sorted(set(arch) - set(_SHOWN_FIRST) - {"no_dropout"})
    words = []
    for key in order:
        value = arch[key]
        if (key, value) == ("upsample", "transpose") or value is False or value is None:  # defaults: unsaid
            continue
        words.append(f"--{key}" if value is True else f"--{key} {value}")
    return " ".join(words) + (" --no_dropout" if arch.get("no_dropout") else "")


def infer_architecture(state: dict, netG: str | None = None) -> dict:
    """What a generator state_dict shows of its architecture (the families' `from_weights`: netG,
    ngf, input_nc, output_nc, norm, and where the weights show it, no_dropout and upsample): of
    family `netG` when it is named (a family of your own reads its own weights), else of whichever
    built-in family recognises them; {} when none does."""
    if netG is not None:
        return networks.family_of(netG).from_weights(state) or {}
    return networks.recognise_network(state)


def load_generator(path: str, arch: dict, device: torch.device | str = "cpu",
                   flags_for: Callable[[dict], str] = describe_architecture) -> nn.Module:
    """The generator of architecture `arch` (`architecture_keys`), loaded with the weights in
    `path`; raises a UserError naming the file, the architecture tried and the one the weights show,
    written by `flags_for` as the flags that build it in the caller's command line (default: the
    flags of scripts/translate.py and Translator.load's keywords)."""
    state = load_state_dict_file(path, device)
    # the family sees in the weights what the flags do not say (CUT's blur layers)
    net = networks.rebuild_generator(SimpleNamespace(**arch), state, arch["input_nc"], arch["output_nc"])
    drop_old_instance_norm_stats(state, net)
    try:
        net.load_state_dict(state)
    except RuntimeError as err:
        lines = str(err).splitlines()
        seen = infer_architecture(state)
        hint = (f" The weights look like {describe_architecture(seen)}; pass {flags_for(seen)}." if seen
                else " They do not look like a generator of this project or the reference.")
        raise UserError(f"{path} does not fit {describe_architecture(arch)}.{hint} "
                        f"PyTorch says: {(lines[1] if len(lines) > 1 else lines[0]).strip()}") from None
    return net.to(device)


def find_generator(source: str, direction: str | None = None, epoch: str = "latest",
                   overrides: dict | None = None) -> GeneratorCheckpoint:
    """The weights file and architecture of the generator in `source` (a run folder or a .pth file)
    that translates in `direction` (see docs/inference.md); `overrides` are explicit
    architecture values, which win over everything else."""
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    known = known_architecture_keys(overrides.get("netG"))
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise UserError(f"unknown architecture keyword(s) {', '.join(unknown)}; the generator is described "
                        f"by {', '.join(sorted(known))}.")
    if direction not in (None, *DIRECTIONS):
        raise UserError(f"direction {direction!r} is neither AtoB nor BtoA (nor None: the trained direction).")
    source = os.fspath(source)
    folder = source if os.path.isdir(source) else os.path.dirname(source) or "."
    if not os.path.exists(source):
        raise UserError(f"checkpoint {source} {why_missing(source)}; pass a run folder (e.g. checkpoints/<name>) or a "
                        f"<epoch>_net_<name>.pth file.")
    saved = _read_architecture_json(folder)
    trained = saved.get("direction", "AtoB")
    if os.path.isdir(source):
        name, swap = _generator_for_direction(folder, saved, direction, epoch)
        backward = swap
        path = os.path.join(folder, f"{epoch}_net_{name}.pth")
        if not os.path.isfile(path):
            raise UserError(missing_weights_message(folder, name, epoch))
    else:
        if direction is not None:
            raise UserError(f"{source} is one generator's weights file, which translates one way only; pass its "
                            f"run folder to choose a direction, or leave the direction out.")
        backward = _is_backward_generator_file(source, saved)
        path, swap = source, backward and bool(saved)
    arch = dict(REFERENCE_DEFAULTS)
    if saved:
        arch.update({k: saved[k] for k in architecture_keys(saved.get("netG", arch["netG"])) if k in saved})
        if swap:  # G_B maps domain B (output_nc channels) back to A (input_nc)
            arch["input_nc"], arch["output_nc"] = arch["output_nc"], arch["input_nc"]
    else:
        arch.update(infer_architecture(load_state_dict_file(path), overrides.get("netG")))
    arch.update(overrides)
    translates = DIRECTIONS[1 - DIRECTIONS.index(trained)] if backward else trained
    options_file = find_options_file(folder)
    options = read_options_file(options_file) if options_file else {}
    return GeneratorCheckpoint(path, arch, translates, _numbers(options.get("data_range"), float),
                               _numbers(options.get("patch_size"), int), options.get("num_timesteps"),
                               options.get("tau"), options_file)


def missing_weights_message(folder: str, name: str, epoch: str) -> str:
    """Why the run folder `folder` gives no `<epoch>_net_<name>.pth`, and what to pass instead, in the
    flags of the tools that load a run (--checkpoint, --epoch: scripts/translate.py and scripts/serve.py,
    options/inference_flags.py; Translator.load's keywords of the same names)."""
    wanted = f"{epoch}_net_{name}.pth"
    saved = sorted(entry for entry in os.listdir(folder) if entry.endswith(".pth"))
    epochs = sorted(entry[: -len(f"_net_{name}.pth")] for entry in saved if entry.endswith(f"_net_{name}.pth"))
    if epochs:  # that generator at other epochs
        example = "latest" if "latest" in epochs else epochs[-1]
        return (f"{folder} holds no {wanted}, but the same weights at other epochs ({', '.join(epochs[:12])}); "
                f"choose one with --epoch, e.g. --epoch {example}.")
    runs = sorted(entry for entry in os.listdir(folder) if os.path.isdir(os.path.join(folder, entry))
                  and any(inner.endswith(".pth") for inner in os.listdir(os.path.join(folder, entry))))
    if runs and not saved:  # e.g. checkpoints/ itself
        return (f"{folder} holds no weights of its own, but run folders that do ({', '.join(runs[:12])}); pass one "
                f"of them, e.g. --checkpoint {os.path.join(folder, runs[0])}.")
    held = f"only {', '.join(saved[:12])}" if saved else "no weights yet (no <epoch>_net_<name>.pth file)"
    return (f"{folder} holds no {wanted}: {held}. A run folder holds its generator's weights once its training has "
            f"saved them (at the end of its first epoch); pass --checkpoint a run folder that holds them, or one "
            f"<epoch>_net_<name>.pth file.")


def _numbers(values, kind: type) -> tuple | None:
    """The numbers of a saved list option (--data_range, --patch_size) as a tuple of `kind`; None when absent."""
    return tuple(kind(v) for v in values) if values else None


def _read_architecture_json(folder: str) -> dict:
    """architecture.json of `folder` ({} without one); a UserError when the model it names cannot translate."""
    path = os.path.join(folder, ARCHITECTURE_FILE)
    if not os.path.isfile(path):
        return {}
    saved = read_architecture_file(path)
    if "model" in saved:
        model_class = _saved_model_class(folder, saved["model"])
        refusal = model_class.translator_refusal or ("" if model_class.translators else
                                                      "which has no generator to translate with")
        if refusal:
            raise UserError(f"{folder} holds a --model {saved['model']} run, {refusal}.")
    return saved


def _saved_model_class(folder: str, model: str) -> type[BaseModel]:
    try:
        return find_model_using_name(model)
    except UserError as err:
        raise UserError(f"{folder}/{ARCHITECTURE_FILE} names --model {model}, which is not found here: {err}") from None


def _reference_model_class(folder: str, epoch: str) -> type[BaseModel]:
    """The model of a run folder without a model name (the reference's): the built-in model with a
    generator per direction whose first generator's file is there, else a one-generator model."""
    for model_class in builtin_models().values():
        if len(model_class.translators) > 1 and \
                os.path.exists(os.path.join(folder, f"{epoch}_net_{model_class.translators[0]}.pth")):
            return model_class
    return BaseModel


def _is_backward_generator_file(path: str, saved: dict) -> bool:
    """Whether `path` holds the weights of a generator that translates back (CycleGAN's G_B): of the
    model architecture.json names, or, for the reference's files, of any built-in model."""
    classes = [_saved_model_class(os.path.dirname(path), saved["model"])] if "model" in saved \
        else builtin_models().values()
    return any(len(c.translators) > 1 and path.endswith(f"_net_{c.translators[1]}.pth") for c in classes)


def _generator_for_direction(folder: str, saved: dict, direction: str | None, epoch: str) -> tuple[str, bool]:
    """(network name, whether it translates back against the trained direction) for `direction` in
    terms of the dataset's domains: `trainA -> trainB` is AtoB whichever --direction the run trained with."""
    trained = saved.get("direction", "AtoB")  # the reference's default, for folders without the file
    wanted = direction or trained
    model = saved.get("model")
    model_class = _saved_model_class(folder, model) if model else _reference_model_class(folder, epoch)
    translators = model_class.translators
    if len(translators) > 1:
        backward = wanted != trained
        return translators[1 if backward else 0], backward
    if saved and wanted != trained:
        raise UserError(f"{folder} holds a {model or 'one-generator'} model trained --direction {trained}: its one "
                        f"generator translates {trained} only (a CycleGAN has one per direction); ask for {trained} "
                        f"or leave the direction out.")
    return translators[0], False
