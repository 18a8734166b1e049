"""One large file of a restore, assembled from parts and hashed in order on the way.

Parts land at their offsets in the job's staging file (or in the runner-local tier's temp file,
which the job's file is made from after); a :class:`~gpuci.hashcursor.HashCursor` consumes the
bytes in order, re-reading parts that landed early, so the file is verified the moment its last
byte is written, before it gets its final name. With the tier filling beside the job's file,
each piece the hash eats is also written into the tier's temp file, ``O_DIRECT``
(:meth:`BlobTarget._mirror`): the tier only ever gets bytes that were hashed.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from gpuci.cache._format.manifest import Entry, placed_mode
from gpuci.cache._stores.tier_fill import TierFill
from gpuci.cache._transfer import directio
from gpuci.errors import IntegrityError
from gpuci.hashcursor import HashCursor
from gpuci.ranged._plan import Plan

__all__ = ["BlobTarget", "Corrupt"]


class Corrupt(Exception):
    """A file's bytes did not hash to the manifest's digest (fetched once more, then an error)."""

    def __init__(self, what: str, expected: str, got: str) -> None:
        super().__init__(what)
        self.what, self.expected, self.got = what, expected, got


@dataclass
class BlobTarget:
    """One large file assembled from parts, hashed in order by a :class:`HashCursor`."""

    entry: Entry
    path: Path
    file: directio.TargetFile | None = None
    cursor: HashCursor = field(init=False)
    refetched: bool = False
    fill: TierFill | None = None  # the tier's temp file: the parts land in it, or it is mirrored
    plan: Plan | None = None  # its parts: who fetches which (set by the downloader)
    lock: threading.Lock = field(default_factory=threading.Lock)  # guards the plan's segments
    mirror: directio.TargetFile | None = None  # the tier's temp file, written O_DIRECT
    mirror_error: OSError | None = None  # why the tier's copy was dropped (a full disk, say)

    def __post_init__(self) -> None:
        self.reset()

    def open(self, direct: bool, mirror: bool = False) -> None:
        """Open the file the parts land in: the job's staging file, with the tier's temp file
        beside it that gets the hashed bytes when ``mirror``, else the tier's temp file the job's
        file is made from after (:mod:`gpuci.cache._stores.tier_fill`)."""
        if self.fill is not None and not mirror:
            self.file = directio.TargetFile(
                Path(self.fill.temp), self.entry.size, direct, fd=self.fill.fd
            )
            return
        self.file = directio.TargetFile(self.path, self.entry.size, direct)
        if self.fill is not None:
            try:
                self.mirror = directio.TargetFile(
                    Path(self.fill.temp), self.entry.size, True, fd=self.fill.fd
                )
            except OSError as exc:
                self._drop_mirror(exc)
            self.reset()  # a cursor that tells the mirror

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
        self._drop_mirror(None)  # never finished: a failed restore leaves the tier as it was

    def reset(self) -> None:
        mirror = self._mirror if self.mirror is not None else None
        self.cursor = HashCursor(self._read_into, short_read=self._short_read, mirror=mirror)

    def _mirror(self, data: memoryview, pos: int) -> None:
        """Write bytes just hashed into the tier's temp file; a failure there (a full tier
        disk) drops the tier's copy, never the restore (a cache never fails a job)."""
        mirror = self.mirror
        if mirror is None:
            return
        try:
            mirror.write(data, pos)
        except OSError as exc:
            self._drop_mirror(exc)

    def _drop_mirror(self, exc: OSError | None) -> None:
        if exc is not None and self.mirror_error is None:
            self.mirror_error = exc
        mirror, self.mirror = self.mirror, None
        if mirror is not None:
            mirror.close()
        fill, self.fill = self.fill, None
        if fill is not None:
            fill.discard()

    def advance(self, pos: int, length: int, data: memoryview | None, scratch: memoryview) -> bool:
        """Record ``length`` bytes written at ``pos``; True when this call completed the file.

        ``data`` holds those bytes, or is None when they never passed through user space
        (spliced): the hash then reads them back from the file into ``scratch``, as it does for
        parts that arrived before their turn.
        """
        if data is None:
            return self.cursor.landed_on_disk(pos, length, scratch) == self.entry.size
        return self.cursor.landed(pos, (data,), scratch) == self.entry.size

    def _read_into(self, view: memoryview, position: int, length: int) -> int:
        assert self.file is not None
        return self.file.read_into(view, position, length)

    def _short_read(self, position: int, end: int) -> None:
        raise IntegrityError(
            f"{self.path}: ends before byte {end}, which was written; something else "
            "truncated the staging file",
            hint="make sure no other process writes into the restore's target folder",
        )

    def finish(self) -> None:
        digest = self.cursor.hexdigest()
        if digest != self.entry.sha256:
            raise Corrupt(self.entry.path or self.path.name, self.entry.sha256, digest)
        assert self.file is not None
        mirror, fill = self.mirror, self.fill
        self.mirror = self.fill = None
        if fill is not None and mirror is None:  # landed in the tier: the job's file from it
            self.file.close()
            fill.finish(digest, self.path, placed_mode(self.entry.mode))
            return
        self.file.chmod(placed_mode(self.entry.mode))
        self.file.close()
        if mirror is not None and fill is not None:
            mirror.close()
            fill.publish(digest)  # exactly the bytes hashed, under their digest
