"""Byte ranges: how a download is cut into parts and what of it is already on disk.

Every range is ``[start, end)``. The cache cuts blobs into aligned parts of one size for the
whole restore (:func:`part_size`, :func:`cut`); retry-fetch keeps the ranges it wrote in its
sidecar and asks only for the holes between them (:func:`holes`); both merge what they wrote
(:func:`merge`) so a byte is counted once.
"""

from __future__ import annotations

#: Part boundaries sit on this: every chunk then starts at an offset ``O_DIRECT`` accepts, and
#: a stolen tail starts on a page.
ALIGN = 1 << 16


def align_up(offset: int, align: int = ALIGN) -> int:
    return -(-offset // align) * align


def merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, disjoint ``[start, end)`` ranges covering the same bytes; empty ones dropped."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(r for r in ranges if r[1] > r[0]):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def holes(offset: int, written: list[tuple[int, int]], total: int) -> list[tuple[int, int]]:
    """The ranges of ``[offset, total)`` that no written range covers."""
    found: list[tuple[int, int]] = []
    pos = offset
    for start, end in sorted(written):
        if start > pos:
            found.append((pos, start))
        pos = max(pos, end)
    if pos < total:
        found.append((pos, total))
    return found


def part_size(total: int, connections: int, smallest: int, largest: int, align: int) -> int:
    """One part size for ``total`` bytes: spread over ``connections`` (a lone big file still
    uses every one), within [``smallest``, ``largest``], rounded up to ``align``."""
    part = max(min(largest, -(-total // max(1, connections))), smallest)
    return align_up(part, align)


def cut(size: int, part: int) -> list[tuple[int, int]]:
    """``[0, size)`` as ``(offset, length)`` parts of ``part`` bytes (the last one shorter)."""
    return [(offset, min(part, size - offset)) for offset in range(0, size, part)]
