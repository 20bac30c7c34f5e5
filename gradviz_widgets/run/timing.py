"""Opt-in wall time of each stage of a run, for the benchmarks ("Where the time goes").

Off by default: a stage call then costs one global read more than calling the stage itself.
Inside `stage_times()`, every run in this process adds the wall seconds of each named stage to
the clock it yields, and the process CPU seconds beside them (steadier on shared cores; several
runs add up; `runs` counts them).

Example:
    >>> from torch import nn
    >>> from gradviz_widgets.run.capture import capture
    >>> with stage_times() as clock:
    ...     _ = capture(nn.Linear(2, 1), torch.ones(1, 2))
    >>> clock.runs, set(clock.seconds) <= set(STAGES), "forward" in clock.seconds
    (1, True, True)
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch  # noqa: F401 - the doctest's namespace

T = TypeVar("T")

#: the stages a run reports, in run order
STAGES: tuple[str, ...] = (
    "prepare",  # inputs and stand-ins on the device, the module tracker
    "swap_in",  # the stand-ins and buffer copies swapped into the model, RNG forked, hooks on
    "forward",  # the model's forward and the loss, with the attribution
    "walk",  # the raw graph from the loss, stable ids
    "flow_hooks",  # a hook on every op node (registering them; their cost lands in backward)
    "hook_nodes",  # the user's hooks on the graph's nodes
    "backward",  # torch.autograd.grad, with every hook that fires during it
    "swap_out",  # everything of the model put back
    "norms",  # the gradients' numbers queued and read back (the one host sync)
    "release",  # references to autograd nodes dropped
    "freeze",  # the frozen graph and the report
)


class StageClock:
    """Wall and process CPU seconds per stage, summed over the runs timed."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.runs = 0

    def add(self, name: str, seconds: float, cpu: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        self.cpu[name] = self.cpu.get(name, 0.0) + cpu


_active: StageClock | None = None


@contextlib.contextmanager
def stage_times() -> Iterator[StageClock]:
    """Time every stage of the runs in this block (one block at a time, per process)."""
    global _active
    outer, _active = _active, StageClock()
    try:
        yield _active
    finally:
        _active = outer


def timed(name: str, fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)`, its wall time added to stage `name` when timing is on."""
    clock = _active
    if clock is None:
        return fn(*args)
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        return fn(*args)
    finally:
        clock.add(name, time.perf_counter() - t0, time.process_time() - c0)


@contextlib.contextmanager
def timed_block(enter: str, leave: str, cm: contextlib.AbstractContextManager) -> Iterator[None]:
    """`with cm:`, the time of its entry added to stage `enter` and of its exit to `leave`."""
    clock = _active
    if clock is None:
        with cm:
            yield
        return
    t0, c0 = time.perf_counter(), time.process_time()
    cm.__enter__()
    clock.add(enter, time.perf_counter() - t0, time.process_time() - c0)
    try:
        yield
    except BaseException as e:
        if not cm.__exit__(type(e), e, e.__traceback__):
            raise
    else:
        t1, c1 = time.perf_counter(), time.process_time()
        cm.__exit__(None, None, None)
        clock.add(leave, time.perf_counter() - t1, time.process_time() - c1)


def count_run() -> None:
    if _active is not None:
        _active.runs += 1
