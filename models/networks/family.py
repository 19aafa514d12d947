"""The network families: each kind of generator or discriminator declares its own facts here.

A family is one class in one file (models/networks/<family>.py for the built-in ones, or a module
of your own named by `--netG mypackage.my_net` / `--netD mypackage.my_net`, whose one
`NetworkFamily` subclass is used). It says
  - which `--netG`/`--netD`/`--netE` values it answers to (`names`) and whether it is a generator,
    a discriminator or an encoder (`role`: an image to a latent code, for BicycleGAN);
  - how to build a network from the options (`build`), and which options define that network's
    shape (`shape_flags`: what architecture.json records and a changed resume refuses), adding
    options of its own if it needs them (`add_flags`). `build` makes the network the run needs,
    once: e.g. with pads built from slices for --deterministic and blocks that recompute their
    activations for --checkpoint_activations (models/networks/layers.py); nothing changes it later;
  - how to rebuild a network from saved weights alone (`from_weights`: the options the weights
    show) and anything the weights decide beyond the options (`rebuild`);
  - what a generator takes beside the image (`latent_size`: a latent code, for many answers per input;
    `time_conditioned`: a step's time index, for the steps of a Schrödinger bridge), summed up by `takes`,
    which a model's `NetworkCall` must give exactly (the options refuse any other pairing, naming the flag);
  - the sizes it takes, in any number of spatial dimensions (`size_rule`), how far an output
    pixel sees (`receptive_radius`, for tiled inference), whether its network recomputes
    activations under --checkpoint_activations (`recomputes_activations`), and how many of its
    generator's layers `forward(x, layers, encode_only=True)` can read (`feature_layers`, for CUT).
Nothing outside a family's file switches on its names: code asks `family_of(name, role)`.
"""
from __future__ import annotations

import argparse
import functools
from dataclasses import dataclass
from typing import Any, ClassVar, Collection, Mapping

from torch import nn

from util.errors import UserError
from util.registry import DeclaredNames, Registry, argument_type

GENERATOR, DISCRIMINATOR, ENCODER = "generator", "discriminator", "encoder"
FLAG_OF_ROLE = {GENERATOR: "netG", DISCRIMINATOR: "netD", ENCODER: "netE"}
# What a network's forward may take beside the image(s) (`NetworkFamily.takes`), as a model calling it gives
# them (`NetworkCall.gives`): a step's time index (N whole numbers), a random code drawn afresh at each step
# (N x step_code_size), a latent code choosing one of many answers (N x latent_size). A family or model of
# one's own may name other inputs (e.g. "a class label"): any string both sides agree on.
TIME_INDEX, STEP_CODE, LATENT_CODE = "a time index", "a code per step", "a latent code"


@dataclass(frozen=True)
class SizeRule:
    """The sizes a network translates to the same size: every spatial size (height, width, and depth
    for volumes) a multiple of `multiple` and at least `minimum`; `dims` spatial dimensions."""

    multiple: int
    minimum: int
    dims: int = 2

    def fits(self, *sizes: int) -> bool:
        return min(sizes) >= self.minimum and all(size % self.multiple == 0 for size in sizes)


class NetworkFamily:
    """One kind of network (see the module docstring); an instance is one of its `names`."""

    role: ClassVar[str] = GENERATOR
    names: ClassVar[tuple[str, ...]] = ()
    # The options that define the network's shape besides --netG/--netD and the channel counts.
    shape_flags: ClassVar[tuple[str, ...]] = ()
    # One line for --help: what the names mean.
    description: ClassVar[str] = ""
    # A family for volumes names the picture networks it stands in for (2-D name -> its own name): a
    # volume dataset's run that names no network gets this one instead of the model's 2-D default.
    stands_in_for: ClassVar[Mapping[str, str]] = {}

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    @staticmethod
    def add_flags(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        """Add options of the family's own (declared with their resume class); none by default."""
        return parser

    def build(self, flags: Any, input_nc: int, output_nc: int = 1) -> nn.Module:
        """The network for the options `flags` (attribute access: the parsed options, or an
        architecture read back from a run), uninitialised (`networks.init_weights` follows).
        A discriminator takes `input_nc` channels and ignores `output_nc`."""
        raise NotImplementedError

    def rebuild(self, flags: Any, state: Mapping[str, Any], input_nc: int, output_nc: int) -> nn.Module:
        """The network that the weights `state` fit, given `flags`: by default `build`; a family
        whose weights decide more than its options (e.g. optional blur layers) looks at them."""
        return self.build(flags, input_nc, output_nc)

    @classmethod
    def from_weights(cls, state: Mapping[str, Any]) -> dict | None:
        """The options a state_dict of this family shows (at least the name, under "netG" or
        "netD", and "input_nc"/"output_nc"), or None for weights of another family."""
        return None

    def size_rule(self, flags: Any) -> SizeRule:
        """The input sizes the network takes; any size by default."""
        return SizeRule(1, 1)

    def latent_size(self, flags: Any) -> int:
        """How many numbers the generator takes as a latent code beside the image (`forward(x, z)`,
        z: N x latent_size): several codes give several answers per input. 0: the image alone."""
        return 0

    def time_conditioned(self, flags: Any) -> bool:
        """Whether the network takes a step's time index beside the image (`forward(x, t, ...)`: t, N
        whole step numbers), as UNSB's networks do (--model sb); False by default."""
        return False

    def step_code_size(self, flags: Any) -> int:
        """How many numbers of random code a time-conditioned generator takes with each step (`forward(x,
        t, z)`, z: N x step_code_size, drawn afresh at every step); 0 for the others."""
        return 0

    def takes(self, flags: Any) -> frozenset[str]:
        """What the network's forward takes beside the image(s) (TIME_INDEX, STEP_CODE, LATENT_CODE or an
        input of one's own): a model can call it only if it gives exactly these (`NetworkCall`). By default
        what `time_conditioned`, `step_code_size` and `latent_size` declare: nothing, for a family that
        declares none of them (forward(x))."""
        taken = {TIME_INDEX: self.time_conditioned(flags), STEP_CODE: self.step_code_size(flags) > 0,
                 LATENT_CODE: self.latent_size(flags) > 0}
        return frozenset(name for name, given in taken.items() if given)

    def recomputes_activations(self, flags: Any) -> bool:
        """Whether the network `build` makes for `flags` has blocks that keep only their input and
        recompute their activations in the backward pass when the run asks (--checkpoint_activations,
        `layers.wants_checkpointing(flags)`). False by default: the flag then changes nothing here."""
        return False

    def feature_layers(self, flags: Any) -> int:
        """How many layers of the generator's `model` its `forward(x, layers, encode_only=True)` can
        return the outputs of (CUT's PatchNCE reads them, --nce_layers); 0: it cannot."""
        return 0

    def receptive_radius(self, flags: Any) -> int | None:
        """Pixels from an output pixel to the farthest input pixel that influences it; None when
        it sees the whole input (tiled inference can then never equal whole-image inference)."""
        return None

    def check_input_size(self, flags: Any, *sizes: int) -> None:
        """Raise a UserError when the network cannot take an input of these spatial sizes."""
        rule = self.size_rule(flags)
        if rule.fits(*sizes):
            return
        shown = "x".join(map(str, sizes))
        flag = FLAG_OF_ROLE[self.role]
        raise UserError(f"--{flag} {self.name} needs images whose sides are multiples of {rule.multiple} and at "
                        f"least {rule.minimum} pixels, but got {shown}; set --crop_size (or --load_size with "
                        f"--preprocess none/scale_width) to a size that fits.")

    def check_flags(self, flags: Any) -> tuple[str, str] | None:
        """(the flag, why) when the options do not suit this network, for the parser's one-paragraph
        error; None when they do."""
        return None


def described_inputs(inputs: Collection[str]) -> str:
    """`inputs` (what a network takes beside the image) in words: "the image alone", "the image with a
    time index and a code per step"."""
    known = (TIME_INDEX, STEP_CODE, LATENT_CODE)
    named = [name for name in known if name in inputs] + sorted(set(inputs) - set(known))
    if not named:
        return "the image alone"
    return "the image with " + (named[0] if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1])


@dataclass(frozen=True)
class NetworkCall:
    """How a model calls the network one of its flags names (`BaseModel.network_calls`): the family's
    `role`, what the model `gives` it beside the image(s) (the family must take exactly that), and whether
    it also reads the outputs of the network's layers (`features`: `forward(x, layers, encode_only=True)`,
    as CUT's PatchNCE does; the family must declare `feature_layers`)."""

    role: str
    gives: Collection[str] = frozenset()  # kept as a frozenset
    features: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "gives", frozenset(self.gives))

    def refusal(self, family: NetworkFamily, flags: Any, caller: str = "the model") -> str | None:
        """Why `caller` (e.g. "--model cut") cannot call so `family`'s network as `flags` build it (a
        phrase completing "--netG NAME ..."), or None when it can."""
        taken = family.takes(flags)
        if taken != self.gives:
            return f"takes {described_inputs(taken)}, but {caller} gives its {self.role} {described_inputs(self.gives)}"
        if self.features and not family.feature_layers(flags):
            return (f"cannot give the outputs of its layers (forward(x, layers, encode_only=True): its family "
                    f"declares no feature_layers), which {caller} reads from its {self.role}")
        return None

    def fitting_names(self, flags: Any, dims: int) -> list[str]:
        """The built-in names of its role whose networks, as `flags` build them, have `dims` spatial
        dimensions and can be called so: the choices a refusal offers."""
        fitting = []
        for name in builtin_names(self.role):
            family = family_of(name, self.role)
            if family.size_rule(flags).dims == dims and self.refusal(family, flags) is None:
                fitting.append(name)
        return fitting


# ---------------------------------------------------------------------------------- the registry
# One registry per role (util/registry.py): the built-in families are found in models/networks/ by the
# names they declare; a family of one's own is the one NetworkFamily subclass of the module its path names.
_REGISTRIES: dict[str, Registry[NetworkFamily]] = {
    role: Registry(f"--{flag}", NetworkFamily, kind=role, example="mypackage.my_net",
                   see="docs/extending.md, \"A network family\"",
                   builtins=DeclaredNames("models.networks", keep=lambda family, role=role: family.role == role))
    for role, flag in FLAG_OF_ROLE.items()}


@functools.cache
def builtin_families() -> dict[str, dict[str, type[NetworkFamily]]]:
    """role -> {name: family class} of every family in models/networks/ (found by its files)."""
    return {role: registry.builtin_classes() for role, registry in _REGISTRIES.items()}


def builtin_names(role: str) -> list[str]:
    """The built-in `--netG` (role generator) or `--netD` values, in the order the families list them."""
    return _REGISTRIES[role].builtin_names()


@functools.cache
def family_of(name: str, role: str = GENERATOR) -> NetworkFamily:
    """The family answering to `--netG name` (or `--netD name` for role discriminator): a built-in
    name, or the module path of your own family. A UserError naming the choices otherwise."""
    family = _REGISTRIES[role].find(name)
    if family.role != role:  # a family of one's own, given to the flag of another role
        raise UserError(f"--{FLAG_OF_ROLE[role]} {name}: its NetworkFamily {family.__name__} is a {family.role}, not "
                        f"a {role}; pass it to --{FLAG_OF_ROLE[family.role]}.")
    return family(name)


def family_name_type(role: str):
    """argparse `type` of --netG / --netD: the name when a family answers to it (exit 2 with one
    paragraph otherwise, while options are parsed)."""
    return argument_type(lambda text: family_of(text, role), f"--{FLAG_OF_ROLE[role]}")


def recognise_network(state: Mapping[str, Any], role: str = GENERATOR) -> dict:
    """The options the weights of a built-in generator (or network of `role`) show ({} for weights no
    family recognises)."""
    for family in dict.fromkeys(builtin_families()[role].values()):
        seen = family.from_weights(state)
        if seen:
            return seen
    return {}


def volume_counterpart(name: str, role: str) -> str | None:
    """The built-in 3-D network that stands in for the picture network `name` of `role` (its family's
    `stands_in_for`), or None."""
    for family in dict.fromkeys(builtin_families()[role].values()):
        if name in family.stands_in_for:
            return family.stands_in_for[name]
    return None

