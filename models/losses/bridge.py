"""The Schrödinger bridge's steps (UNSB, Kim et al., ICLR 2024): its time schedule, and the walk that
takes an input image to its translation in `steps` refinements, each a call of the time-conditioned
generator G(x_t, t, z) plus fresh noise between calls.

Times t_0 = 0 < t_1 = 1/2 < ... < t_T = 1 follow UNSB's harmonic schedule. From the input x_0, step
t (0-based) makes G's guess of the target, x_hat = G(x_t, t, z_t); the next state lies between x_t and
that guess with Gaussian noise of variance tau * s_t (the bridge's conditional law):

    x_{t+1} = (1 - a_t) x_t + a_t x_hat + sqrt(tau * s_t) eps,   a_t = (t_{t+1} - t_t) / (1 - t_t),
                                                                  s_t = (t_{t+1} - t_t) (1 - a_t).

Training (models/sb_model.py) walks a random number of steps without gradient, then trains G on the
state reached; inference walks all --num_timesteps and keeps each step's guess (test.py's fake_1 ..
fake_T; the last is the translation). The noise comes from a `NoiseSource`: a seeded stream, so the
same seed gives the same outputs, or noise given by the caller (to match another program's draws).
"""
from __future__ import annotations

import hashlib
import operator
import os
from typing import Any, Callable, Protocol, Sequence

import torch

from util.errors import UserError

MAX_STEPS = 100  # --num_timesteps: more than UNSB's papers ever use (1 to 5), bounded before anything is drawn
DEFAULTS = (5, 0.01)  # UNSB's --num_timesteps and --tau, for a run that did not save them


def bridge_times(steps: int) -> torch.Tensor:
    """UNSB's times t_0 .. t_steps (float64): 0, then from 1/2 to 1 by the harmonic series' partial sums."""
    if not 1 <= steps <= MAX_STEPS:
        raise UserError(f"--num_timesteps {steps}: the bridge takes from 1 to {MAX_STEPS} steps (UNSB uses 1 to 5).")
    increments = torch.tensor([0.0] + [1.0 / (i + 1) for i in range(steps - 1)], dtype=torch.float64)
    partial = torch.cumsum(increments, 0)
    partial = partial / partial[-1] if steps > 1 else torch.ones(1, dtype=torch.float64)
    return torch.cat([torch.zeros(1, dtype=torch.float64), 0.5 + 0.5 * partial])


def step_weights(times: torch.Tensor, step: int) -> tuple[float, float]:
    """(a_t, s_t) of the move into step `step` >= 1: how far towards the guess, and the noise's variance
    before tau."""
    delta = float(times[step] - times[step - 1])
    remaining = float(times[-1] - times[step - 1])
    return delta / remaining, delta * (1 - delta / remaining)


class NoiseSource(Protocol):
    """What a walk draws: `noise(like, step)` (eps, shaped like the state) and `codes(count, width, step)` (z)."""

    def noise(self, like: torch.Tensor, step: int) -> torch.Tensor: ...

    def codes(self, count: int, width: int, step: int) -> torch.Tensor: ...


class SeededNoise:
    """Draws from one torch.Generator seeded once (on the CPU, in float64, so any device and precision
    draw the same numbers), per image in the order of the batch."""

    def __init__(self, seed: int):
        self.generator = torch.Generator().manual_seed(seed)

    def noise(self, like: torch.Tensor, step: int) -> torch.Tensor:
        drawn = torch.randn(like.shape, generator=self.generator, dtype=torch.float64)
        return drawn.to(like.device, like.dtype)

    def codes(self, count: int, width: int, step: int) -> torch.Tensor:
        return torch.randn(count, width, generator=self.generator, dtype=torch.float64)


Generator = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def walk(generator: Generator, x: torch.Tensor, steps: int, tau: float, code_width: int, source: NoiseSource,
         last_step: int | None = None) -> tuple[list[torch.Tensor], torch.Tensor]:
    """The bridge from x (N x C x H x W): (each step's guess G(x_t, t, z_t), the last state x_t fed to G).
    Walks steps 0 .. `last_step` (default: all `steps`). `generator` is called as G(x_t, t, z) with t a
    tensor of N step numbers and z N x `code_width` on x's device and dtype."""
    times = bridge_times(steps)
    last = steps - 1 if last_step is None else last_step
    guesses: list[torch.Tensor] = []
    state = x
    for step in range(last + 1):
        if step > 0:
            towards, variance = step_weights(times, step)
            state = (1 - towards) * state + towards * guesses[-1] + (variance * tau) ** 0.5 * source.noise(state, step)
        index = torch.full((x.shape[0],), step, dtype=torch.long, device=x.device)
        code = source.codes(x.shape[0], code_width, step).to(x.device, x.dtype)
        guesses.append(generator(state, index, code))
    return guesses, state


def settings(family: Any, architecture: Any, steps: int | None, tau: float | None,
             source: str) -> tuple[int, float, int] | None:
    """(steps, tau, code size) with which inference walks the bridge of a time-conditioned generator of
    `family` (None for the others, which refuse `steps` and `tau`): UNSB's defaults where not given."""
    if not family.time_conditioned(architecture):
        if steps is not None or tau is not None:
            raise UserError(f"num_timesteps and tau are the steps of a Schrödinger-bridge generator (--model sb); "
                            f"the generator of {source} translates in one pass: leave them out.")
        return None
    steps = DEFAULTS[0] if steps is None else steps
    bridge_times(steps)  # a UserError for a count out of range, before anything is translated
    return steps, DEFAULTS[1] if tau is None else float(tau), family.step_code_size(architecture)


def checked_steps(steps: int | None, settings: tuple[int, float, int] | None, source: str) -> int | None:
    """A call's number of steps for a bridge of `settings` (its own when None), refused in words outside
    1 .. MAX_STEPS, or for a generator without a bridge (`settings` None), which translates in one pass."""
    if settings is None:
        if steps is not None:
            raise UserError(f"steps={steps}: the generator of {source} translates in one pass; only a "
                            f"Schrödinger-bridge run (--model sb) walks steps. Leave steps out.")
        return None
    if steps is None:
        return settings[0]
    try:
        whole = operator.index(steps)  # int, numpy's integers; not floats or strings
    except TypeError:
        whole = None
    if isinstance(steps, bool) or whole is None or not 1 <= whole <= MAX_STEPS:
        raise UserError(f"steps={steps!r}: a Schrödinger bridge walks a whole number of steps from 1 to {MAX_STEPS} "
                        f"(UNSB samples with 1 to 5).")
    return whole


def check_no_codes(n_samples: Any, codes: Any, reference: Any, source: str) -> None:
    """A bridge draws its own noise: refuse a latent generator's answers (many samples, codes, a reference)."""
    if n_samples is not None or codes is not None or reference is not None:
        raise UserError(f"the generator of {source} draws its own noise at each step of its bridge: leave out "
                        f"n_samples, codes and reference, and pass a seed for another draw.")


def image_seed(seed: int, path: str | None) -> int:
    """The seed of one image's walk: `seed` itself for an image without a file (a tensor or picture handed
    to the Translator), else one derived from `seed` and the file's name (not its folder), so that every
    image of a test set walks its own noise, the same whatever else is translated with it."""
    if path is None:
        return seed
    digest = hashlib.sha256(f"{seed}/{os.path.basename(path)}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1  # below 2**63: any torch.Generator seed


def walk_each(generator: Generator, batch: torch.Tensor, steps: int, tau: float, code_width: int,
              seeds: Sequence[int]) -> list[torch.Tensor]:
    """Each step's output for `batch` (N x C x H x W), image i walking with noise drawn from `seeds[i]`
    (`image_seed`) afresh, so an image's outputs depend on neither the batch nor its place in it: how
    test.py (the model's forward) and the Translator sample, alike."""
    walks = [walk(generator, image[None], steps, tau, code_width, SeededNoise(seed))[0]
             for image, seed in zip(batch, seeds, strict=True)]
    return [torch.cat([guesses[step] for guesses in walks]) for step in range(steps)]
