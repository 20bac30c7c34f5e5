"""Every random number generator a run can draw from, forked: torch's (CPU and the run's CUDA
device), numpy's global one and Python's `random`, seeded alike when the run has a seed, and each
put back as it was when the run ends. A forward that draws from numpy or `random` (wav2vec2-style
time masking in training) neither advances the user's streams nor gives two runs with one seed
different numbers.

Generators the model owns (module attributes: a `torch.Generator`, a numpy `Generator` or
`RandomState`, a `random.Random`) are saved and set back by run/model_state.py through
`owned_state` here: a run starts from their state and leaves it as it was.
"""

from __future__ import annotations

import contextlib
import functools
import random
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

#: numpy's legacy seed takes 32 bits: seed=s seeds numpy with s mod 2**32 (as Lightning's
#: seed_everything does for seeds in range)
NUMPY_SEEDS = 2**32


@contextlib.contextmanager
def forked_rng(device: torch.device, seed: int | None) -> Iterator[None]:
    """torch's, numpy's and Python's global RNGs forked, and seeded when `seed` is given:
    torch's CPU generator and the run's CUDA device's, `random.seed(seed)`,
    `numpy.random.seed(seed % 2**32)`."""
    cuda = [device.index or 0] if device.type == "cuda" else []
    numpy_state, python_state = np.random.get_state(), random.getstate()
    try:
        with torch.random.fork_rng(devices=cuda, device_type="cuda"):
            if seed is not None:
                _seed_forked_torch(device, seed)
                np.random.seed(seed % NUMPY_SEEDS)
                random.seed(seed)
            yield
    finally:
        np.random.set_state(numpy_state)
        random.setstate(python_state)


def _seed_forked_torch(device: torch.device, seed: int) -> None:
    """Seed the torch generators `forked_rng` forked, and only those: `torch.manual_seed`
    also seeds every other accelerator's (not forked: the user's stream would change) and,
    before CUDA is initialised, records a stack trace for its lazy call (~9 ms per run)."""
    torch.default_generator.manual_seed(seed)
    if device.type == "cuda":
        torch.cuda.default_generators[device.index or 0].manual_seed(seed)
    elif device.type != "cpu":
        torch.manual_seed(seed)  # the run's other accelerator (as before)


def owned_state(value: Any) -> Callable[[], None] | None:
    """For a generator object a module holds: a function that sets it back to its state now;
    None for anything else."""
    if isinstance(value, torch.Generator):
        return functools.partial(value.set_state, value.get_state())  # type: ignore[return-value]
    if isinstance(value, np.random.Generator):
        return functools.partial(setattr, value.bit_generator, "state", value.bit_generator.state)
    if isinstance(value, np.random.RandomState):
        return functools.partial(value.set_state, value.get_state())
    if isinstance(value, random.Random):
        return functools.partial(value.setstate, value.getstate())
    return None
