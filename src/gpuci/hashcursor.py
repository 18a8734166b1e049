"""sha256 of a file whose pieces land out of order, without a second pass over it.

Several connections write one file at once (segmented downloads, parallel ranged GETs of a
blob), so bytes land at many offsets while sha256 can only eat them in order. The cursor
hashes a piece straight from memory when it lands exactly at the cursor; a piece that lands
ahead is only noted (its bytes are already on disk) and read back from the file (the page
cache, in practice) once the cursor reaches it. Whoever moves the cursor drains what became
contiguous, so no thread waits for another. Kept free of the cache's types: segmented
downloads (:mod:`gpuci.fetch._partial`) and the cache's parallel blob parts
(:class:`gpuci.cache._transfer.blob_target.BlobTarget`) both hash through it.

Rule for callers: report a piece only after its bytes are written, since the cursor may read
them back from the file at any moment after that.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from typing import Any

_SCRATCH = 1 << 20

# (buffer, offset, length) -> bytes read (at most ``length``) into the buffer's start; the buffer
# may be longer than ``length`` (room for a reader that rounds up, e.g. O_DIRECT).
ReadInto = Callable[[memoryview, int, int], int]
# (position, end) when the file holds no bytes at ``position`` although they were reported
# written: may raise; if it returns, the piece is kept for later.
ShortRead = Callable[[int, int], None]
# (bytes, offset): told every piece right after it is hashed, in order, by the thread that hashed
# it, from the very buffer the hash read (the runner-local tier's copy of a restored file).
Mirror = Callable[[memoryview, int], None]


class HashCursor:
    """An in-order sha256 over pieces reported in any order (thread-safe)."""

    def __init__(
        self,
        read_into: ReadInto,
        start: int = 0,
        hasher: Any = None,
        short_read: ShortRead | None = None,
        mirror: Mirror | None = None,
    ) -> None:
        self._read_into = read_into
        self._short_read = short_read
        self._mirror = mirror
        self._hasher = hasher if hasher is not None else hashlib.sha256()
        self._next = start
        self._ahead: dict[int, int] = {}  # offset -> length, written but not hashed yet
        self._busy = False
        self._lock = threading.Lock()
        self._scratch: memoryview | None = None

    @property
    def position(self) -> int:
        """Bytes hashed so far, all from offset 0: the contiguous prefix."""
        with self._lock:
            return self._next

    def landed(
        self,
        offset: int,
        chunks: Sequence[bytes | memoryview],
        scratch: memoryview | None = None,
    ) -> int | None:
        """Report ``chunks`` written at ``offset``: hashed now if at the cursor, else later.

        Returns where this call left the cursor, or None when it only noted the piece (another
        thread is hashing, or the piece lies ahead). ``scratch`` is the buffer to read noted
        pieces back into (default: the cursor's own, 1 MiB).
        """
        length = len(chunks[0]) if len(chunks) == 1 else sum(len(c) for c in chunks)
        if not length:
            return None
        with self._lock:
            if offset < self._next <= offset + length and not self._busy:
                chunks = _skip(chunks, self._next - offset)  # bytes written twice: hash once
                offset, length = self._next, offset + length - self._next
            if self._busy or offset != self._next:
                self._note(offset, length)
                return None
            self._busy = True
        mirror, at = self._mirror, offset
        for chunk in chunks:
            self._hasher.update(chunk)
            if mirror is not None:
                mirror(memoryview(chunk), at)
                at += len(chunk)
        return self._drain(offset + length, scratch)

    def landed_on_disk(
        self, offset: int, length: int, scratch: memoryview | None = None
    ) -> int | None:
        """Report bytes already in the file (a resumed run, or spliced there by the kernel):
        read back once the cursor is there. Returns as :meth:`landed` does."""
        if length <= 0:
            return None
        with self._lock:
            self._note(offset, length)
            if self._busy or offset != self._next:
                return None
            self._busy = True
            start = self._next
        return self._drain(start, scratch)

    def forget_ahead(self) -> None:
        """Drop the pieces noted ahead: they will be written (and reported) again in order."""
        with self._lock:
            self._ahead.clear()

    def hexdigest(self) -> str:
        return self._hasher.hexdigest()

    def _note(self, offset: int, length: int) -> None:
        if offset + length <= self._next:
            return  # already hashed (a piece written twice after a retry)
        if offset < self._next:  # overlaps the hashed prefix: keep only the new part
            length -= self._next - offset
            offset = self._next
        self._ahead[offset] = max(length, self._ahead.get(offset, 0))

    def _drain(self, position: int, scratch: memoryview | None) -> int | None:
        """Move the cursor to ``position``, then eat every noted piece that now touches it;
        return where the cursor stopped (None when a read-back came up short)."""
        while True:
            with self._lock:
                self._next = position
                length = self._ahead.pop(position, None)
                if length is None:
                    self._busy = False
                    return position
            if scratch is None:
                if self._scratch is None:
                    self._scratch = memoryview(bytearray(_SCRATCH))
                scratch = self._scratch
            end = position + length
            while position < end:
                got = self._read_into(scratch, position, min(len(scratch), end - position))
                if got <= 0:
                    with self._lock:  # cannot happen on a regular file; keep it for later
                        self._next = position
                        self._ahead[position] = end - position
                        self._busy = False
                    if self._short_read is not None:
                        self._short_read(position, end)
                    return None
                self._hasher.update(scratch[:got])
                if self._mirror is not None:
                    self._mirror(scratch[:got], position)
                position += got


def _skip(chunks: Sequence[bytes | memoryview], count: int) -> list[memoryview]:
    """``chunks`` without their first ``count`` bytes (no copy)."""
    out: list[memoryview] = []
    for chunk in chunks:
        view = memoryview(chunk)
        if count >= len(view):
            count -= len(view)
            continue
        out.append(view[count:])
        count = 0
    return out
