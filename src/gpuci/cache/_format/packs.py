"""Packs: many small files' bytes back to back in one object, so a tree of thousands of small
files costs a few requests instead of thousands.

A pack is content-addressed like a blob (``packs/sha256/<ab>/<hex>``). Its index is the
manifest: each packed file's entry names the pack and the offset of its bytes. On restore,
the files of one pack are fetched in runs of neighbours (one ranged GET each) and split apart
while streaming.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from gpuci.cache import _layout as layout
from gpuci.cache._format.manifest import Entry

# Bytes of unused pack data we would rather read and drop than pay a new request for.
MAX_GAP = 256 << 10


@dataclass
class Run:
    """One ranged GET of a pack: ``length`` bytes from ``start`` covering ``members``."""

    pack: str
    start: int
    length: int
    members: list[int] = field(default_factory=list)  # indexes into the caller's file list


def plan_runs(entries: list[Entry], limit: int = layout.PACK_RUN) -> list[Run]:
    """Group packed entries into runs of neighbouring bytes, each at most ``limit`` long."""
    by_pack: dict[str, list[int]] = defaultdict(list)
    for index, entry in enumerate(entries):
        by_pack[entry.pack].append(index)
    runs: list[Run] = []
    for pack, indexes in sorted(by_pack.items()):
        indexes.sort(key=lambda i: (entries[i].offset, entries[i].size))
        current: Run | None = None
        for i in indexes:
            entry = entries[i]
            end = entry.offset + entry.size
            if current is not None:
                run_end = current.start + current.length
                gap = entry.offset - run_end
                if 0 <= gap <= MAX_GAP and end - current.start <= limit:
                    current.length = end - current.start
                    current.members.append(i)
                    continue
            current = Run(pack, entry.offset, entry.size, [i])
            runs.append(current)
    return runs


class PackBuilder:
    """Accumulates small files into packs of about ``target`` bytes."""

    def __init__(self, target: int = layout.PACK_TARGET) -> None:
        self.target = target
        self.buffer = bytearray()
        self.members: list[Entry] = []

    def add(self, entry: Entry, data: bytes) -> bool:
        """Append one file's bytes; True when the pack is full and should be flushed."""
        entry.offset = len(self.buffer)
        self.buffer += data
        self.members.append(entry)
        return len(self.buffer) >= self.target

    def take(self) -> tuple[bytes, list[Entry]]:
        data, members = bytes(self.buffer), self.members
        self.buffer, self.members = bytearray(), []
        return data, members

    def __bool__(self) -> bool:
        return bool(self.members)
