"""Packed small files in the runner-local tier: runs of their packs, one tier file per run.

A blob per small file costs an inode, a rename and often a folder each, several times the
write itself on ext4 (docs/cache-format.md), so in ``copy`` and ``verify`` modes the tier keeps
the stretch of a pack that held a restore's or a save's small files as one file, named
``runs/sha256/<ab>/<pack>.<start>-<end>``. A run is trusted for nothing but its name: it is
opened and checked as a blob is, and every file cut from it is hashed against the manifest
before it is written, in every mode; a run holding other bytes is dropped on sight.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from gpuci.cache import _layout as layout
from gpuci.cache._stores import copying
from gpuci.cache._stores.tier_entry import FROZEN_MTIME, touch
from gpuci.cache._stores.tier_fill import TierFill

__all__ = ["Runs"]


class _Shelf(Protocol):
    """What runs share with the tier's blobs (:class:`~gpuci.cache._stores.tier.LocalTier`)."""

    root: Path

    def room_for(self, size: int) -> bool: ...
    def temp_path(self) -> Path: ...
    def open_entry(self, path: str, size: int) -> tuple[int, os.stat_result] | None: ...
    def drop(self, path: Path | str, why: str, repair: bool = True) -> None: ...
    def intact(self, path: Path | str, st: os.stat_result, size: int, repair: bool) -> bool: ...


class Runs:
    """The runs of packs a :class:`~gpuci.cache._stores.tier.LocalTier` holds (``tier.runs``)."""

    def __init__(self, tier: _Shelf) -> None:
        self._tier = tier
        self._folder = os.path.join(tier.root, layout.TIER_RUNS)  # a str: per-file calls

    def start(self, pack: str, start: int, end: int) -> TierFill | None:
        """The temp file a cold restore writes bytes ``start`` to ``end`` of ``pack`` into as
        they arrive; None when it cannot be made (a cache never fails a job)."""
        try:
            temp = self._tier.temp_path()
            fd = os.open(temp, copying.CREATE_NEW, 0o600)
        except OSError:
            return None
        name = layout.run_name(pack, start, end)
        return TierFill(self._publish, FROZEN_MTIME, name, fd, str(temp))

    def keep(self, pack: str, data: bytes, start: int = 0) -> bool:
        """Keep bytes ``start`` on of ``pack`` that a save has just hashed: a whole pack it
        sent, or the files it found in a pack already stored, each hashed to the manifest's
        digest (``bytes`` are immutable: what is written is what was hashed; a restore hashes
        every file it cuts from a run all the same). Returns whether a run was added."""
        if not data or not self._tier.room_for(len(data)):
            return False
        name = layout.run_name(pack, start, start + len(data))
        fill = self.start(pack, start, start + len(data))
        return fill is not None and fill.keep((data,), name)

    def _publish(self, temp: str, name: str) -> None:
        folder = f"{self._folder}/{name[:2]}"
        os.makedirs(folder, mode=0o700, exist_ok=True)
        os.replace(temp, f"{folder}/{name}")

    def of(self, pack: str) -> list[tuple[int, int, str]]:
        """(start, end, path) of the runs of ``pack`` the tier names: one listing per pack."""
        folder = f"{self._folder}/{pack[:2]}"
        try:
            names = os.listdir(folder)
        except OSError:
            return []
        spans = ((layout.run_span(name, pack), name) for name in names)
        return sorted((span[0], span[1], f"{folder}/{name}") for span, name in spans if span)

    def intact(self, pack: str) -> list[tuple[int, int, str]]:
        out = []
        for start, end, path in self.of(pack):
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if self._tier.intact(path, st, end - start, repair=False):
                out.append((start, end, path))
        return out

    def place(self, pack: str, wanted: Sequence[tuple[int, int, str, Path, int]]) -> list[bool]:
        """Write each wanted file (offset in ``pack``, size, sha256, dest, mode) that a run of
        ``pack`` holds; returns which were placed, the rest are the caller's to fetch.

        A run is trusted for nothing but its name: it is opened and checked as a blob is, and
        every file cut from it is hashed against the manifest before it is written, in every
        mode; a run holding other bytes is dropped on sight.
        """
        placed = [False] * len(wanted)
        for start, end, path in self.of(pack):
            todo = [
                i
                for i, (offset, size, *_) in enumerate(wanted)
                if not placed[i] and start <= offset and offset + size <= end
            ]
            opened = self._tier.open_entry(path, end - start) if todo else None
            if opened is None:
                continue
            fd, st = opened
            try:
                touch(fd, st)
                for i in todo:
                    offset, size, digest, dest, mode = wanted[i]
                    why = copying.cut_hashed(fd, offset - start, size, digest, dest, mode)
                    if why is not None:
                        self._tier.drop(path, why)
                        break
                    placed[i] = True
            finally:
                os.close(fd)
        return placed
