"""The planner: one file's ranges, who fetches which, and what of it is written.

A :class:`Segment` is one connection's range, resumed from ``written`` (every byte before it
reached the sink) after a failure: the cache's blob parts and retry-fetch's segments both
retry that way. A :class:`Plan` holds a whole file's segments: retry-fetch's first,
open-ended one and the holes an earlier run left (:func:`gpuci.ranged._extents.holes`), or the
cache's parts (:meth:`Plan.parts`); and, as connections free up, the far half of the largest
range still to come (work stealing), so a connection never waits for a range to free up.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuci.ranged import _extents as extents

# What a near server may have sent ahead of an answer's reads: socket buffers (Linux: up to 6 MiB
# to receive, 4 MiB to send); cut nearer, those bytes come twice (docs/benchmarks.md).
_IN_FLIGHT = 16 << 20


@dataclass
class Segment:
    start: int
    pos: int  # the next byte this segment's connection delivers
    end: int  # exclusive; lowered when another worker takes the tail
    written: int  # every byte in [start, written) is on disk: a retry resumes here
    asked: int = 0  # where the request in flight ends: the server sends up to here
    owned: bool = False
    failed: bool = False  # its last request failed: the next one sent for it is a retry
    open_ended: bool = False  # retry-fetch's first answer: cut short wherever it is stolen

    def rewind(self) -> int:
        """Go on from what reached the sink (a retry, or a new attempt); returns the bytes
        delivered that never reached it, which progress counted and must take back."""
        lost, self.pos = self.pos - self.written, self.written
        return lost

    def resend(self) -> bool:
        """Whether the request now sent retries a failed one (an attempt); once per failure."""
        failed, self.failed = self.failed, False
        return failed


class Plan:
    """A file of ``total`` bytes whose ``written`` ranges (and ``[0, offset)``) are on disk."""

    def __init__(
        self, offset: int, written: list[tuple[int, int]], total: int, steal_bytes: int
    ) -> None:
        holes = extents.holes(offset, written, total)
        head_end = holes[0][1] if holes and holes[0][0] == offset else offset
        self.head = Segment(offset, offset, head_end, offset, asked=total, open_ended=True)
        self.pending = [Segment(s, s, e, s) for s, e in holes if s != offset]
        self.segments = [self.head, *self.pending]
        self.static = list(written)  # written in an earlier attempt or run
        # Near the end, ranges smaller than this are no longer split.
        self.steal_bytes = steal_bytes

    @classmethod
    def parts(cls, total: int, part: int, steal_bytes: int) -> Plan:
        """A whole file as pending ranges of ``part`` bytes, each fetched by a bounded request
        (the cache's blobs); there is no open-ended first answer, so the head is empty."""
        plan = cls(0, [(0, total)], total, steal_bytes)
        plan.pending = [Segment(o, o, o + n, o) for o, n in extents.cut(total, part)]
        plan.segments = [plan.head, *plan.pending]
        plan.static = []
        return plan

    def done(self) -> bool:
        return not self.pending and all(s.pos >= s.end for s in self.segments)

    def take(self, steal: bool, near: bool = False) -> Segment | None:
        """A range nobody fetches, else (``steal``) the far half of the largest one to come;
        owned by the caller until :func:`~gpuci.ranged._retry.work_through` lets it go.

        The cut goes past what the owner's request asked for when it can: then the server
        sends nothing twice. Only the first, open-ended response must be cut short, and what
        was in flight on it is lost (a socket buffer's worth, once). A ``near`` server's ranged
        answers are only cut :data:`_IN_FLIGHT` ahead of their reads, or bytes come twice."""
        if self.pending:
            seg = self.pending.pop(0)
            seg.owned = True
            return seg
        if not steal:
            return None
        piece, in_flight = self.steal_bytes, _IN_FLIGHT if near else 0
        best: tuple[int, Segment, int] | None = None
        for seg in self.segments:
            left = seg.end - seg.pos
            if not seg.owned or left < 2 * piece:
                continue
            middle = extents.align_up(seg.pos + left // 2)
            if seg.asked + piece <= seg.end:
                middle = extents.align_up(max(middle, seg.asked))  # past the request: free
            elif not seg.open_ended and middle - seg.pos < in_flight:
                continue  # a near server already sent those bytes: they would come twice
            score = seg.end - middle - (max(0, seg.asked - middle) << 1)  # free cuts first
            if middle < seg.end and (best is None or score > best[0]):
                best = (score, seg, middle)
        if best is None:
            return None
        _, owner, middle = best
        seg = Segment(middle, middle, owner.end, middle, owned=True)
        owner.end = middle
        self.segments.append(seg)
        return seg

    def written(self) -> list[tuple[int, int]]:
        """Every range on disk: the prefix, earlier runs' ranges and each segment's."""
        ranges = [(0, self.head.start), *self.static]
        ranges += [(s.start, s.written) for s in self.segments]
        return extents.merge(ranges)
