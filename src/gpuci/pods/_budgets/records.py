"""What the ledger makes of its objects: each decoded as an untrusted input (sizes, nesting,
field types), amounts never below 0, and one pod's events folded into a :class:`PodRecord` so
that an event anyone can plant only adds (see :func:`_merge`).

:mod:`gpuci.pods._budgets.ledger` reads and writes the objects; this module only reads bytes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuci import untrusted_json
from gpuci.pods._runpod.naming import fold_owner

MAX_OBJECT = 64 * 1024  # an event is a few hundred bytes; anything bigger is not ours

# The fields the ledger reads, and the JSON types each must have (absent or null is fine):
# an object with any other type is not ours and is skipped, never half-read.
_STR = (str,)
_NUMBER = (int, float)
_FIELDS: dict[str, tuple[type, ...]] = {
    "event": _STR,
    "podId": _STR,
    "owner": _STR,
    "gpu": _STR,
    "runUrl": _STR,
    "reservation": _STR,
    "runner": _STR,
    "reason": _STR,
    "podName": _STR,
    "released": _STR,
    "time": _NUMBER,
    "costPerHr": _NUMBER,
    "expiresEpoch": _NUMBER,
    "untilEpoch": _NUMBER,
    "createdEpoch": _NUMBER,
    "budgetUsd": _NUMBER,
    "periodS": _NUMBER,
    "placeByEpoch": _NUMBER,
}


def _decode(data: bytes) -> tuple[dict[str, Any] | None, str]:
    """A ledger object from its bytes, or (None, why it is not one)."""
    try:
        return untrusted_json.parse_object(data, MAX_OBJECT, fields=_FIELDS), ""
    except untrusted_json.Unusable as exc:
        return None, str(exc)


def _num(value: Any, default: float = 0.0) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError, OverflowError):  # a JSON integer of 351 digits parses
        return default
    return out if out == out and abs(out) != float("inf") else default


def _amount(value: Any, default: float = 0.0) -> float:
    """USD (or USD/h) from a record: never below 0, so no object in the store, written by
    whoever can write there, lowers anyone's spending."""
    return max(0.0, _num(value, default))


@dataclass
class PodRecord:
    """What the ledger knows of one pod, merged over its events (see :func:`_merge`)."""

    pod_id: str
    owner: str = ""  # the first of ``owners``
    owners: list[str] = field(default_factory=list)  # every owner its spend counts for
    gpu: str = ""
    cost_per_hr: float = 0.0
    run_url: str = ""
    expires_at: float = float("nan")
    reservation: str = ""  # the reservation released when it ends: the last one named
    reservations: list[str] = field(default_factory=list)  # every reservation key named
    events: list[dict[str, Any]] = field(default_factory=list)

    def ended(self) -> bool:
        return any(e.get("event") in ("terminated", "reaped") for e in self.events)


def _merge(pod_id: str, events: list[dict[str, Any]]) -> PodRecord:
    """One pod's events, oldest first, folded so that an event anyone can plant only adds:
    every owner a created event names owns its spend (without a created event, every owner
    any event names), and every reservation a created or started event names is the pod's.
    The rest (GPU, rate, run) is the first given, for reports."""
    rec = PodRecord(pod_id, events=list(events))
    named = [e for e in events if e.get("event") == "created"] or events
    for event in named:
        owner = str(event.get("owner") or "")
        if owner and owner not in rec.owners:
            rec.owners.append(owner)
        rec.gpu = rec.gpu or str(event.get("gpu") or "")
        rec.cost_per_hr = rec.cost_per_hr or _amount(event.get("costPerHr"))
        rec.run_url = rec.run_url or str(event.get("runUrl") or "")
        if rec.expires_at != rec.expires_at:
            rec.expires_at = _num(event.get("expiresEpoch"), rec.expires_at)
    for event in events:
        key = str(event.get("reservation") or "")
        if event.get("event") in ("created", "started") and key and key not in rec.reservations:
            rec.reservations.append(key)
    rec.owner = rec.owners[0] if rec.owners else ""
    rec.reservation = rec.reservations[-1] if rec.reservations else ""
    return rec


def reaped_by_owner(book: Mapping[str, PodRecord], since: float) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for rec in book.values():
        for event in rec.events:
            if event.get("event") == "reaped" and _num(event.get("time")) >= since:
                counts[fold_owner(str(event.get("owner") or rec.owner or "(unattributed)"))] += 1
    return counts
