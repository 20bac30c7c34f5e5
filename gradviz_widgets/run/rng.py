"""Every random number generator a run can draw from, forked: torch's (CPU and the run's CUDA
device), numpy's global one and Python's `random`, seeded alike when the run has a seed, and each
put back as it was when the run ends. A forward that draws from numpy or `random` (wav2vec2-style
time masking in training) neither advances the user's streams nor gives two runs with one seed
different numbers.

Generators the model owns (a `torch.Generator`, a numpy `Generator`, `RandomState` or bit
generator, a `random.Random`) are saved and set back by run/model_state.py through
`OwnedGenerators` here: a run starts from their state and leaves it as it was. They are found as
module attributes and inside them: lists, tuples, sets, dicts and plain helper objects (their
`__dict__` and slots), to `SEARCH_DEPTH` levels, never inside tensors, modules or arrays.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import random
import types
import weakref
from collections.abc import Callable, Collection, Iterator
from typing import Any

import numpy as np
import torch

#: numpy's legacy seed takes 32 bits: seed=s seeds numpy with s mod 2**32 (as Lightning's
#: seed_everything does for seeds in range)
NUMPY_SEEDS = 2**32

#: levels of containers and helper objects searched below a module attribute for generators
SEARCH_DEPTH = 6
#: values one attribute's search looks at: a module holding a big list costs a run little (a
#: container bigger than what is left is not looked into)
SEARCH_ITEMS = 4_096

#: values with nothing inside to search (the common elements of a container), by exact type
_LEAVES = frozenset({bool, int, float, complex, str, bytes, type(None)})
#: never searched: tensors, modules (visited as modules), arrays, classes, code
_OPAQUE = (
    torch.Tensor,
    torch.nn.Module,
    np.ndarray,
    np.generic,
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
)
_SEQUENCES = (list, tuple, set, frozenset, collections.deque)


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
    if isinstance(value, np.random.BitGenerator):
        return functools.partial(setattr, value, "state", value.state)
    if isinstance(value, random.Random):
        return functools.partial(value.setstate, value.getstate())
    return None


class OwnedGenerators:
    """The generators reachable from a model's module attributes, each found once, and how to
    set them all back to their state when found.

    Example:
        >>> helper = types.SimpleNamespace(g=torch.Generator().manual_seed(0))
        >>> owned = OwnedGenerators()
        >>> owned.search([{"noise": helper}]); owned.search(helper)
        >>> first = torch.rand(1, generator=helper.g)
        >>> owned.put_back(); bool(torch.rand(1, generator=helper.g) == first), len(owned)
        (True, 1)
    """

    def __init__(self) -> None:
        self._found: dict[int, Callable[[], None]] = {}
        self._seen: set[int] = set()  # ids of the objects looked at, generators included
        self._left = 0

    def __len__(self) -> int:
        return len(self._found)

    def search(self, value: Any) -> None:
        """Look for generators in one attribute value (with a budget of its own)."""
        self._left = SEARCH_ITEMS
        self._visit(value, 0)

    def put_back(self) -> None:
        """Every generator found, set back to its state when it was found."""
        for put_back in self._found.values():
            put_back()

    def _visit(self, value: Any, depth: int) -> None:
        if type(value) in _LEAVES or id(value) in self._seen:
            return
        if put_back := owned_state(value):
            self._found[id(value)] = put_back
        elif not isinstance(value, _OPAQUE):
            if depth >= SEARCH_DEPTH or len(inside := _inside(value)) > self._left:
                return  # not marked seen: another path may reach it higher up, or with budget
            self._seen.add(id(value))  # before its contents: a cycle ends here
            self._left -= len(inside)
            for item in inside:
                self._visit(item, depth + 1)
        self._seen.add(id(value))


def _inside(value: Any) -> Collection[Any]:
    """The values held by a container, by a bound method (its object) or by a plain object (its
    `__dict__` and slots, read without running the object's own attribute code)."""
    if isinstance(value, dict):
        return dict.values(value)
    if isinstance(value, _SEQUENCES):
        return value
    if isinstance(value, types.MethodType):
        return (value.__self__,)
    try:
        own = object.__getattribute__(value, "__dict__")
    except (AttributeError, TypeError):
        own = None
    found = list(dict.values(own)) if type(own) is dict else []
    for slot in _slots(type(value)):
        try:
            found.append(slot.__get__(value, type(value)))
        except AttributeError:  # a slot never set
            continue
    return found


def _slots(cls: type) -> tuple[Any, ...]:
    """The slot descriptors of a class and its bases (once per class)."""
    found = _SLOTS.get(cls)
    if found is None:
        found = _SLOTS[cls] = tuple(
            d
            for c in cls.__mro__
            for name in _names(vars(c).get("__slots__", ()))
            if isinstance(d := vars(c).get(name), types.MemberDescriptorType)
        )
    return found


def _names(slots: Any) -> list[str]:
    """A class's `__slots__` (a string or an iterable of them) as a list."""
    return [slots] if isinstance(slots, str) else list(slots)


#: weakly keyed: a class made at run time is not kept alive
_SLOTS: weakref.WeakKeyDictionary[type, tuple[Any, ...]] = weakref.WeakKeyDictionary()
