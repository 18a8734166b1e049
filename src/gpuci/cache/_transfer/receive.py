"""How a ranged GET's bytes are received: into a lane's two buffers, or spliced to the file.

The ranged-download engine's driver (:func:`gpuci.ranged._drive.pump`) pulls chunks from one of
these generators while the lane's helper writes and hashes the chunk before; every read is
told to the controller as it happens (``record``), and a cancelled restore stops at the next
chunk.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator

from gpuci.cache import _layout as layout
from gpuci.cache._stores import splicing
from gpuci.cache._stores.base import RangeReader, TransientError
from gpuci.cache._transfer import directio
from gpuci.ranged._plan import Segment
from gpuci.ranged._pool import Cancelled, Lane

__all__ = ["OnDisk", "filled", "scratch", "spliced"]


def filled(
    reader: RangeReader,
    lane: Lane,
    seg: Segment,
    cancelled: threading.Event,
    record: Callable[[int], None],
) -> Generator[memoryview, None, None]:
    """A segment's bytes, read into the lane's two buffers in turn, each filled whole (writes
    stay whole and aligned) up to its end, read afresh for each buffer (another worker may take
    the tail); the sink has handed one buffer on before the next read reuses it. Every read is
    told to the controller as it happens (throughput)."""
    turn, pos = 0, seg.pos
    while pos < seg.end:
        if cancelled.is_set():
            raise Cancelled()
        buf = lane.buffers[turn % 2]
        turn += 1
        want = min(len(buf), seg.end - pos)
        got = 0
        while got < want:
            n = reader.readinto(buf[got:want])
            if n == 0:
                raise TransientError("the store closed the stream early")
            record(n)
            got += n
        yield buf[:want]
        pos += want


class OnDisk(int):
    """A chunk the kernel already wrote (spliced): only its length passes through here."""

    def __len__(self) -> int:
        return int(self)

    def __getitem__(self, cut: slice) -> OnDisk:  # the driver cuts a chunk at a lowered end
        return OnDisk(len(range(int(self))[cut]))


def spliced(
    splice_into: Callable[[splicing.Pipe, int], int],
    fd: int,
    seg: Segment,
    lock: threading.Lock,
    cancelled: threading.Event,
    record: Callable[[int], None],
) -> Generator[OnDisk, None, None]:
    """A segment moved socket -> pipe -> file in the kernel, an IO_CHUNK at a time (each splice
    told to the controller, as a read is). Bytes reach the disk before the driver claims them,
    so each drain holds ``lock`` (the one a thief lowers ``seg.end`` under) and stops at the
    end as it is then: what the pipe holds past a tail another worker took is dropped, never
    written over the thief's bytes after it hashed them (a server may send other bytes)."""
    pipe = splicing.Pipe()
    pos = seg.pos
    try:
        while pos < seg.end:
            start, stop = pos, min(seg.end, pos + layout.IO_CHUNK)
            while pos < min(stop, seg.end):
                if cancelled.is_set():
                    raise Cancelled()
                if (n := splice_into(pipe, min(stop, seg.end) - pos)) == 0:
                    raise TransientError("the store closed the stream early")
                record(n)
                with lock:
                    pos += pipe.drain(fd, pos, max(0, seg.end - pos))
            yield OnDisk(pos - start)
    finally:
        pipe.close()


_SCRATCH = threading.local()


def scratch() -> memoryview:
    """A per-thread buffer for reading back bytes to hash (spliced, or early parts): small, so
    each piece is hashed while it is still in the CPU cache."""
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None:
        buf = _SCRATCH.buf = directio.aligned_buffer(layout.WRITE_SLICE)
    return buf
