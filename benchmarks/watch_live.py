"""The live view in the GradWatch benchmark: a WatchWidget attached as in a notebook.

No browser is needed: Plotly's FigureWidget updates happen in Python all the same. Its
messages go through `comm.create_comm` (the comm package's seam for a kernel's comm) into a
comm that serialises each one with a real `jupyter_client` Session, as ipykernel does on the
thread that sends it (the writer thread here), and counts the bytes.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import comm
from jupyter_client.session import Session


class KernelComm(comm.DummyComm):
    """A comm that pays a kernel's per-message cost (JSON, signature) and counts bytes."""

    session = Session()
    messages = 0
    bytes = 0

    def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):  # type: ignore[override]
        content = {"data": data, "comm_id": self.comm_id, **keys}
        msg = self.session.msg(msg_type, content=content, metadata=metadata or {})
        KernelComm.messages += 1
        KernelComm.bytes += sum(len(p) for p in self.session.serialize(msg))
        KernelComm.bytes += sum(memoryview(b).nbytes for b in buffers or [])


@contextlib.contextmanager
def kernel_comms() -> Iterator[type[KernelComm]]:
    """Widgets created inside talk through KernelComm."""
    before = comm.create_comm
    comm.create_comm = lambda *a, **k: KernelComm(*a, **k)
    try:
        yield KernelComm
    finally:
        comm.create_comm = before


def open_view(watch: Any) -> Any:
    """`watch.show()` with kernel-like comms; the view is then toggled with `follow`."""
    with kernel_comms():
        return watch.show()


def follow(watch: Any, view: Any, on: bool) -> None:
    """Attach or detach the view from the writer's flushes (the view open or closed)."""
    listeners = watch._writer.listeners
    if on and view._on_flush not in listeners:
        listeners.append(view._on_flush)
    elif not on and view._on_flush in listeners:
        listeners.remove(view._on_flush)


def load() -> float:
    """The 1-minute load average (0 where the OS has none)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0
