"""GradWatch across ranks (DDP, FSDP2): where each rank writes, and the one collective per step.

Every rank records its own gradients locally, into its own file. Then, per step, the writer
thread (never the training thread) sends ONE `all_reduce` (SUM) of a float64 vector of 4 x
n_params numbers over a gloo side group created by the watch:

- a rank bit (2^rank) per parameter whose gradient this rank's own backward produced (under DDP:
  the parameter's grad accumulator ran here, seen by a post-accumulate-grad hook; elsewhere:
  `p.grad is not None`), so every rank learns which ranks produced one;
- DDP and plain replicas: the norm each rank saw, its square and a 1 per rank with a gradient, so
  every rank sees the spread of the norms (equal after DDP's all-reduce, up to rounding);
- FSDP2: the sum of squares and the non-zero count of this rank's shard (Shard placements count
  once, Replicate dimensions divided by their size), so every rank records the FULL gradient's
  norm and zero share; max |g| stays this rank's shard's.

Divergence (gradients produced on some ranks only; norms whose relative spread exceeds
`NORM_RTOL`) becomes the anomaly kind "rank_divergence", first step per parameter.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import time
import warnings
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from ..distributed.ddp import unwrap
from .anomalies import RANK_DIVERGENCE

#: relative spread of the ranks' norms taken as divergence (DDP's averaged gradients are equal
#: on every rank, bit for bit with gloo and NCCL; the check's own rounding is ~1e-8)
NORM_RTOL = 1e-6
#: rank bits are exact in float64 up to this world size (above it: counts, ranks not named)
MAX_BITS = 53
KIND = RANK_DIVERGENCE


@dataclasses.dataclass
class RankSetup:
    """Where this process stands: rank, world size, mode ("local", "ddp", "fsdp") and the side
    group of the per-step check (None: no collective)."""

    rank: int = 0
    world: int = 1
    mode: str = "local"
    group: Any = None
    timeout_s: float = 60.0
    #: why there is no side group (with `group` None and a world above 1), or no check
    why: str = ""
    #: the ranks watch different parameters: the side group agrees the run id, no check
    apart: bool = False

    @property
    def checked(self) -> bool:
        """Whether the per-step cross-rank check runs (one all_reduce per step)."""
        return self.group is not None and not self.apart

    def directory(self, path: Path) -> Path:
        """`path` for one process; `path/rank{r}` for each rank of a world larger than 1.

        Example:
            >>> RankSetup(1, 2).directory(Path("run")).as_posix()
            'run/rank1'
        """
        return path / f"rank{self.rank}" if self.world > 1 else path

    def meta(self) -> dict[str, str]:
        check = "one all_reduce per step" if self.checked else "off"
        return {"rank": str(self.rank), "world": str(self.world), "mode": self.mode, "check": check}


def rank_setup(
    model: nn.Module, ranks: bool | None, timeout_s: float
) -> tuple[nn.Module, RankSetup]:
    """The user's module (DDP / compile unwrapped) and the setup. The side group is created only
    once every rank of the default group has come to create its GradWatch (`handshake`)."""
    inner, kind = unwrap(model)
    on = dist.is_available() and dist.is_initialized()
    rank, world = (dist.get_rank(), dist.get_world_size()) if on else (0, 1)
    sharded = (kind and "fully_shard" in kind) or any(
        hasattr(p, "placements") for p in inner.parameters()
    )  # DTensor parameters: FSDP2 on the root or on some submodules only
    mode = "fsdp" if sharded else ("ddp" if world > 1 else "local")
    group, why = None, "ranks=False: no collective"
    if on and world > 1 and ranks is not False:
        group, why = _side_group(rank, world, timeout_s)
    apart = group is not None and not _same_parameters(group, inner, world)
    if apart:
        why = "the ranks watch different parameters"
    return inner, RankSetup(rank, world, mode, group, timeout_s, why, apart)


def _same_parameters(group: Any, model: nn.Module, world: int) -> bool:
    """Whether every rank watches the same parameters (names and shapes: one all_gather of a
    checksum); if not, warned on every rank: ranks that watch other models (pipeline stages)
    sent per-step vectors of other sizes, and gloo aborted the process."""
    named = list(model.named_parameters())
    text = "\n".join(f"{n}:{tuple(p.shape)}" for n, p in named)
    mine = torch.tensor([float(zlib.crc32(text.encode())), float(len(named))], dtype=torch.float64)
    every = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(every, mine, group=group)
    if all(torch.equal(t, every[0]) for t in every):
        return True
    counts = ", ".join(f"rank {r}: {int(t[1])}" for r, t in enumerate(every))
    why = f"the ranks watch different parameters ({counts} parameters, or other names)"
    warnings.warn(
        f"GradWatch: no cross-rank check ({why}: pipeline stages?); each rank records its own "
        "gradients.",
        stacklevel=4,
    )
    return False


def _side_group(rank: int, world: int, timeout_s: float) -> tuple[Any, str]:
    """The watch's gloo group, or None and why (warned): a rank did not come, or a failure."""
    try:  # torch has no public accessor of the store init_process_group made
        came = handshake(dist.distributed_c10d._get_default_store(), rank, world, timeout_s)
        if came == world:
            timeout = datetime.timedelta(seconds=timeout_s)
            return dist.new_group(backend="gloo", timeout=timeout), ""
        why = f"{came} of {world} ranks created a GradWatch within rank_timeout_s={timeout_s:g} s"
    except Exception as e:  # a store without add / check, or a rank died meanwhile
        why = f"{type(e).__name__}: {str(e)[:200]}"
    warnings.warn(
        f"GradWatch: no cross-rank check ({why}); this rank records its own gradients. "
        "Create the GradWatch on every rank.",
        stacklevel=5,
    )
    return None, why


def handshake(store: Any, rank: int, world: int, timeout_s: float) -> int:
    """How many ranks come to create a GradWatch now, learnt through the default group's store
    (no collective): `world` when every rank came (each rank then calls `new_group`), fewer
    when some did not within `timeout_s` (then no rank calls it).

    Why not a torch facility: `new_group` is a collective of every rank of the default group,
    and a rank calling it alone moves its group counter (the names of every later group) away
    from the other ranks'; `new_group(use_local_synchronization=True)` leaves the counter
    alone (the name hashes the ranks and `len(pg_names)`), but a lone rank's try leaves its gloo
    address in the store under the name the next group of the same ranks gets (torch 2.13:
    that group then failed to connect in 1 of 4 tries); `torch.distributed.elastic.utils.store`
    barriers need a key prefix the ranks already agree on, which is what is to be found here.

    Rank 0 opens round n (a counter in the store) and waits for the others' joins; it then
    closes the round with one atomic `add`, so a rank joining late sees the round closed, and
    says whether everyone came. A rank joins the latest round it has not joined yet (its own
    per-rank key: a second watch never joins the same round twice) and waits for the verdict.
    """
    if rank == 0:
        return _lead(store, world, timeout_s)
    return _join(store, rank, timeout_s)


_KEY = "gradviz_widgets/gradwatch"
#: added by rank 0 to close a round: a join after it returns more than this
_CLOSED = 1 << 40
_POLL_S = 0.05


def _lead(store: Any, world: int, timeout_s: float) -> int:
    n = store.add(f"{_KEY}/round", 1)
    joins = f"{_KEY}/{n}/in"
    store.add(joins, 0)  # exists before the round is announced
    store.set(f"{_KEY}/open", str(n))
    deadline = time.monotonic() + timeout_s
    while int(store.get(joins)) < world - 1 and time.monotonic() < deadline:
        time.sleep(_POLL_S)
    came = 1 + store.add(joins, _CLOSED) - _CLOSED
    store.set(f"{_KEY}/{n}/came", str(came))
    return came


def _join(store: Any, rank: int, timeout_s: float) -> int:
    deadline, tried = time.monotonic() + timeout_s, set()
    while time.monotonic() < deadline:
        n = int(store.get(f"{_KEY}/open")) if store.check([f"{_KEY}/open"]) else 0
        # round n not joined by this rank yet (nor by an earlier watch of it), and still open
        mine = n and n not in tried and store.add(f"{_KEY}/{n}/rank{rank}", 1) == 1
        if mine and store.add(f"{_KEY}/{n}/in", 1) < _CLOSED:
            verdict = f"{_KEY}/{n}/came"
            store.wait([verdict], datetime.timedelta(seconds=timeout_s + 30))
            return int(store.get(verdict))
        tried.add(n)
        time.sleep(_POLL_S)
    return 1


def release(setup: RankSetup, writer_done: bool) -> None:
    """Destroy the side group (a local call) once the writer no longer uses it."""
    if setup.group is None or not writer_done:
        return
    try:
        dist.destroy_process_group(setup.group)
    except Exception:  # already destroyed with the default group: nothing to do
        pass
    setup.group = None


def local_part(grad: torch.Tensor, world: int) -> tuple[torch.Tensor, float]:
    """This rank's values of `grad` (a DTensor's local shard) and their weight in the sums."""
    from ..distributed.fsdp import local_and_weight

    if getattr(grad, "placements", None) is None:
        return grad, 1.0
    return local_and_weight(grad, world)


def rank_part(
    setup: RankSetup, used: set[int] | None, params: list, ids: list[int], grads: list
) -> tuple:
    """Which parameters this rank's own backward reached (`used`: DDP's post-accumulate
    record, cleared here); FSDP2: the weights of the shards."""
    own = np.zeros(len(params), dtype=bool)
    if used is not None:
        own[[i for i, p in enumerate(params) if id(p) in used]] = True
        used.clear()
    else:
        own[ids] = True
    weights = None
    if setup.mode == "fsdp":
        weights = np.array([local_part(g, setup.world)[1] for g in grads])
    return own, weights


class Exchange:
    """The writer thread's side of the check: one all_reduce per step, in step order."""

    def __init__(self, setup: RankSetup) -> None:
        self.setup = setup
        self.failed: str | None = None
        self._seen: set[tuple[int, str]] = set()
        #: steps at which every rank's norms agreed so far
        self._agreed = 0

    @property
    def active(self) -> bool:
        return self.setup.checked and self.failed is None

    def combine(
        self, step: int, ids: np.ndarray, values: np.ndarray, extra: Any, names: list[str]
    ) -> list:
        """Send this step's numbers; FSDP2: put the full norms and counts into `values` (in
        place). Returns the anomaly rows found (kind "rank_divergence"); never raises."""
        if not self.active:
            return []
        try:
            return self._combine(step, ids, values, extra, names)
        except Exception as e:  # the record of this step stays; the check stops
            self._fail(step, f"{type(e).__name__}: {e}")
            return []

    def _combine(
        self, step: int, ids: np.ndarray, values: np.ndarray, extra: Any, names: list[str]
    ) -> list:
        n, s = len(names), self.setup
        local, weights = extra if extra is not None else (np.zeros(0, dtype=bool), None)
        vec = np.zeros(4 * n + 3)
        vec[-3] = n  # a rank that watches other parameters shows up as a mismatch
        # the step and its square: their sums are world x each only when every rank is at
        # this step (a rank that joined early under DDP's Join took fewer optimizer steps)
        vec[-2], vec[-1] = step, float(step) * step
        bit = 2.0**s.rank if s.world <= MAX_BITS else 1.0
        m = min(len(local), n)
        vec[:m][local[:m]] = bit
        norm = values[:, 0]
        if s.mode == "fsdp":
            w = np.ones(len(ids)) if weights is None else weights  # Replicate dims: 1/size
            vec[n + ids], vec[2 * n + ids] = norm * norm * w, values[:, 2] * w
            vec[3 * n + ids] = w
        else:
            vec[n + ids], vec[2 * n + ids], vec[3 * n + ids] = norm, norm * norm, 1.0
        total = self._all_reduce(step, vec)
        if total is not None:
            self._check_aligned(step, n, total)
        if total is None or self.failed:
            return [
                (step, KIND, {"params": [], "detail": f"cross-rank check stopped at {self.failed}"})
            ]
        if s.mode == "fsdp":
            values[:, 0] = np.sqrt(total[n + ids])
            values[:, 2] = np.round(total[2 * n + ids])
            # a shard without non-zero values says nothing of the full max |g|: unknown
            values[:, 1] = np.where((values[:, 1] == 0) & (values[:, 2] > 0), np.nan, values[:, 1])
        return self._divergence(step, total, local, values[:, 0], ids, names)

    def _check_aligned(self, step: int, n: int, total: np.ndarray) -> None:
        """Stop (`_fail`) when the ranks are not at the same step or watch different
        parameters: their numbers would be compared across different steps."""
        world = self.setup.world
        if total[-2] != step * world or total[-1] != float(step) * step * world:
            self._fail(
                step,
                f"the ranks are at different steps (mean {total[-2] / world:g}): a rank "
                "took fewer optimizer steps, e.g. one that joined early under DDP's Join "
                "or ran fewer batches; from here their steps would not line up",
            )
        elif not math.isclose(total[-3], n * world):
            self._fail(
                step, f"the ranks watch different parameters ({total[-3]:g} != {n} x {world})"
            )

    def _all_reduce(self, step: int, vec: np.ndarray) -> np.ndarray | None:
        tensor = torch.from_numpy(vec)
        try:
            work = dist.all_reduce(tensor, group=self.setup.group, async_op=True)
            if work is not None:
                work.wait(datetime.timedelta(seconds=self.setup.timeout_s))
        except Exception as e:  # a rank died, or left the loop early: never wait again
            self._fail(
                step,
                "another rank stopped answering: it closed its watch or ended its loop "
                "earlier (fewer steps), or it failed; the collective said "
                f"{type(e).__name__}: {str(e)[:200]}",
            )
            return None
        return tensor.numpy()

    def _fail(self, step: int, why: str) -> None:
        self.failed = f"step {step}: {why}"
        warnings.warn(
            f"GradWatch: the cross-rank check stopped at step {step} ({why}); every rank "
            "goes on recording its own gradients",
            stacklevel=1,
        )

    def _divergence(
        self,
        step: int,
        total: np.ndarray,
        local: np.ndarray,
        norms: np.ndarray,
        ids: np.ndarray,
        names: list[str],
    ) -> list:
        n, s = len(names), self.setup
        hit: list[str] = []
        notes: list[str] = []
        mine = dict(zip(ids.tolist(), norms.tolist()))
        compared = differing = 0
        for i in range(n):
            bits = total[i]
            with_ = _ranks_of(bits, s.world)
            if bits > 0 and len(with_) < s.world and (i, "none") not in self._seen:
                self._seen.add((i, "none"))
                hit.append(names[i])
                notes.append(f"{names[i]}: {_gradient_on(with_, s.world, bits)}")
            k = total[3 * n + i] if s.mode != "fsdp" else 0.0
            if k >= 2 and (i, "norm") not in self._seen:
                compared += 1
                mean = total[n + i] / k
                spread = math.sqrt(max(total[2 * n + i] / k - mean * mean, 0.0))
                if spread > NORM_RTOL * abs(mean) and math.isfinite(spread):
                    differing += 1
                    self._seen.add((i, "norm"))
                    hit += [] if names[i] in hit else [names[i]]
                    here = mine.get(i)
                    notes.append(
                        f"{names[i]}: ‖g‖ differs across ranks more than the all-reduce "
                        f"explains (mean {mean:.6g}, spread {spread:.3g}"
                        + (f"; rank {s.rank}: {here:.6g})" if here is not None else ")")
                    )
        if not hit:
            self._agreed += compared > 0
            return []
        if differing and differing == compared and self._agreed:
            notes.insert(0, _out_of_step(step, self._agreed))
        return [(step, KIND, {"params": hit, "detail": "; ".join(notes)})]


def _out_of_step(step: int, agreed: int) -> str:
    """What it means when every parameter differs across ranks at once, after `agreed` steps
    where all agreed: the check cannot tell the two causes apart."""
    return (
        f"every parameter's norm differs across ranks at step {step}, after {agreed} "
        f"step{'s' if agreed != 1 else ''} where all agreed: either the gradients were not "
        "averaged at this step (an optimizer step under no_sync()), or the ranks are at "
        "different iterations under the same step number (a rank that joined early under "
        "DDP's Join, or ran fewer batches, took fewer optimizer steps; its later steps pair "
        "with other ranks' other batches)"
    )


def _ranks_of(bits: float, world: int) -> list[int]:
    if world > MAX_BITS:
        return list(range(round(bits)))  # a count: which ranks is unknown
    b = round(bits)
    return [r for r in range(world) if b >> r & 1]


def _gradient_on(with_: list[int], world: int, bits: float) -> str:
    """Example:
    >>> _gradient_on([0, 2], 3, 5.0)
    'a gradient of its own on ranks 0, 2, none on rank 1'
    """
    if world > MAX_BITS:
        return f"a gradient of its own on {round(bits)} of {world} ranks"
    without = [r for r in range(world) if r not in with_]
    return f"a gradient of its own on {_named(with_)}, none on {_named(without)}"


def _named(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))
