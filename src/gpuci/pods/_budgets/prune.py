"""Pruning the pods ledger (``pods reap`` runs it): the objects no budget period can count.

Every ``up`` with a budget adds a reservation and a release, and every pod a few events; none
were ever deleted, so a heavy owner's reservation folder reached the 100,000 objects one
command lists (``up`` exits 3) and ``down``'s read of every event its 200,000. A budget is
counted over its period, at most :data:`~gpuci.pods._budgets.policy.MAX_ADMITTED_PERIOD_S`
(366 days), so an object that can fall into no such period is dead weight; :data:`HORIZON_S`
adds a margin for billing's midnight snap and two runners' clocks. The horizon is fixed, not
the budgets file's period: reap reads no budgets file, each workflow may name its own (or
``budget-period``), and ``pods cost --period`` may look further back than any of them.

What goes, and only then (each judged by its own object, so a listing cut at the cap deletes
a subset of what may go, never anything else):

- a reservation whose ``until`` and ``createdEpoch`` are both before the horizon, listed as
  written before it (the others are never read: each prune reads only what may go), and that
  no pod RunPod lists (any status) was made for, with its release deleted first (a release
  left behind would release the next reservation written at that free number);
- a release of no reservation (an ``up``'s sweep released one a prune deleted meanwhile), of
  gpu-ci's shape, listed as written before the horizon (its name holds no time): it took its
  number for ever, and no reservation is written at a number one takes;
- the events of a pod RunPod does not list, that billed nothing since the horizon, and whose
  every event is from before it (by its name and its ``time``); and events of no pod
  (``budget-refused``, under ``_``) from before it.

An object whose name or content is not gpu-ci's shape is kept and named in one warning; each
run lists at most :data:`MAX_PLANNED` objects per folder tree, reads at most :data:`MAX_READS`
and deletes at most :data:`MAX_DELETES`: the next run goes on. ``pods reap`` prunes once a
day (:func:`due`).
"""

from __future__ import annotations

import json
import math
import re
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuci.cache._stores.base import UNKNOWN_MODIFIED, ObjectInfo
from gpuci.errors import ConflictError, GpuciError
from gpuci.pods._budgets import listing
from gpuci.pods._budgets.holds import made_for
from gpuci.pods._budgets.ledger import (
    _KEY,
    _POD_ID,
    _RESERVATION,
    EVENT_KINDS,
    EVENTS,
    RELEASES,
    RESERVATIONS,
    ROOT,
    Ledger,
    _release_bytes,
    owner_key,
)
from gpuci.pods._budgets.policy import MAX_ADMITTED_PERIOD_S
from gpuci.pods._budgets.records import MAX_OBJECT, _decode
from gpuci.units import parse_iso, utc_iso

#: How far back the ledger can be asked about: the longest budget period and two days
#: (billing starts at the midnight before the period; runners' clocks differ).
HORIZON_S = MAX_ADMITTED_PERIOD_S + 2 * 86400
#: Objects one prune lists under each of reservations/ and events/ (as the cache's prune plans).
MAX_PLANNED = 200_000
#: Objects (and release heads) one prune reads, and objects it deletes.
MAX_READS = 20_000
MAX_DELETES = 20_000
#: Seconds one prune spends deleting (each a round trip, serial): a scheduled reap stays short,
#: and a prune cut by this or a cap lets the day's next reap go on (:func:`rearm`).
PRUNE_SECONDS = 120.0
#: One marker a day (``<YYYY-MM-DD>.json``): the day's first reap prunes, the others do not.
PRUNED = f"{ROOT}/pruned"
_MARKER = re.compile(r"^" + PRUNED + r"/(\d{4}-\d{2}-\d{2})\.json$")


@dataclass
class Pruned:
    """What one prune deleted (or, in a dry run, would delete) and what it looked at and kept."""

    deleted: list[str] = field(default_factory=list)
    kept: int = 0
    notes: list[str] = field(default_factory=list)  # caps reached, billing unread
    reads: int = 0
    planned: dict[str, Mapping[str, Any]] = field(default_factory=dict)  # reservations as read
    cut: bool = False  # stopped by the time budget or the delete cap: more may be due

    def take(self, keys: list[str], most: int | None = None) -> list[str]:
        """As many of ``keys`` as the read cap (or ``most`` reads in all) leaves, counted."""
        most = MAX_READS if most is None else min(most, MAX_READS)
        if self.reads + len(keys) > most:
            self._note(f"read cap ({most}) reached; the next run goes on")
        keys = keys[: max(0, most - self.reads)]
        self.reads += len(keys)
        return keys

    def _note(self, line: str) -> None:
        if line not in self.notes:
            self.notes.append(line)


def prune(
    book: Ledger,
    pods: Sequence[Mapping[str, Any]],
    billed: Collection[str] | None,
    now: float,
    dry_run: bool = False,
    seconds: float = PRUNE_SECONDS,
) -> Pruned:
    """Delete (``dry_run``: only list) what :data:`HORIZON_S` puts out of every period.
    ``pods``: every pod RunPod lists, any status, listed before this call; ``billed``: the
    pods billed since the horizon (None: unknown, and no event is deleted); ``seconds``: the
    time the deletes may take (the reads are capped by count)."""
    out = Pruned()
    horizon = now - HORIZON_S
    names = [str(p.get("name") or "") for p in pods]
    plan = _reservations(book, horizon, names, out)
    if billed is None:
        out._note("pod billing unread: no events pruned")
    else:
        listed = {str(p.get("id") or "") for p in pods}
        plan += _events(book, horizon, listed | set(billed), out)
    # from here, not from the start: reads of planted objects (kept, read again each day)
    # spending the budget would leave every day's prune deleting nothing
    ends = time.monotonic() + seconds
    for key in plan[:MAX_DELETES]:
        if not dry_run and time.monotonic() > ends:
            out._note(f"time budget ({seconds:g} s) spent; the next reap goes on")
            out.cut = True
            break
        res = key.replace(f"{RELEASES}/", f"{RESERVATIONS}/", 1)  # a release: its reservation's
        if not dry_run and res in out.planned and _changed(book, res, out.planned[res]):
            out._note(f"{res} changed since it was read (another prune ran): kept")
            continue
        if not dry_run:
            try:
                _delete(book, key, out.planned)
            except (OSError, GpuciError):
                out._note(f"could not delete {key}; stopped there")
                break  # a release not deleted keeps its reservation: stop here
        out.deleted.append(key)
    if len(plan) > MAX_DELETES:
        out._note(f"delete cap ({MAX_DELETES}) reached; the next run goes on")
        out.cut = True
    out.kept = max(0, out.kept - len(out.deleted))
    return out


def _delete(book: Ledger, key: str, planned: Collection[str]) -> None:
    """Delete ``key``; after a reservation, its release again: an ``up`` that read the
    reservation before it went may have released it since (its sweep), and a release left at
    a free number would release the next reservation written there."""
    book.store.delete(key)
    if key in planned:
        book.store.delete(key.replace(f"{RESERVATIONS}/", f"{RELEASES}/", 1))


def _listed(book: Ledger, root: str, out: Pruned) -> tuple[list[ObjectInfo], bool]:
    """The first :data:`MAX_PLANNED` objects under ``root`` and whether there were more."""
    found, more = listing.listed(book.store, f"{root}/", MAX_PLANNED)
    book._sizes.update((i.key, i.size) for i in found)
    out.kept += len(found)
    if more:
        out._note(f"over {MAX_PLANNED} objects under {root}/: the rest are looked at next run")
    return found, more


def due(book: Ledger, now: float, warn: Callable[[str], None]) -> float | None:
    """The time to prune at if this is the day's first prune (a scheduled reap runs every few
    minutes; one prune a day keeps the ledger bounded), else None: it writes the day's marker,
    create-if-absent. The time is the earlier of ``now`` and the store's time of the marker: a
    runner whose clock runs years ahead would otherwise put the horizon past every live
    reservation and every event still counted; and such a runner's day is the store's, or
    it would prune at every reap. The store is untrusted: a marker written (store time)
    before its day began was planted, and is named in ``warn``, deleted, and the prune goes
    on; markers planted for days to come would otherwise stop every prune until then."""
    day = _day(now)  # a clock past year 9999 names no day of its own
    if not _claim(book, day, now, warn):
        return None
    written = book.store.head(f"{PRUNED}/{day}.json")
    if written is None:
        return None  # deleted at once: another reap judged it planted, and prunes itself
    # UNKNOWN_MODIFIED (inf) and a NaN say nothing: ``now`` then
    store = written.modified if math.isfinite(written.modified) else now
    at = min(now, store)
    if _day(at) != day:  # the runner's clock is ahead of the store's: its day decides
        book.store.delete(f"{PRUNED}/{day}.json")
        if not _claim(book, _day(at), now, warn):
            return None
    found, _ = listing.listed(book.store, f"{PRUNED}/", 1_000)
    for info in found:
        match = _MARKER.match(info.key)
        # over a week old, or dated past tomorrow by the store's time (never written so)
        if match and not _day(at - 7 * 86400) <= match.group(1) <= _day(store + 86400):
            book.store.delete(info.key)
    return at


def _claim(book: Ledger, day: str, now: float, warn: Callable[[str], None]) -> bool:
    """Whether this reap wrote ``day``'s marker (create-if-absent) after deleting a planted
    one: False if that day's marker was written in its day (or at an unknown time)."""
    marker = f"{PRUNED}/{day}.json"
    found = book.store.head(marker)
    if found is not None:  # the day's other reaps: one look, no write
        if not found.modified < parse_iso(f"{day}T00:00:00Z"):
            return False
        warn(
            f"pods ledger {book.where}: {marker} was written before its day began (store "
            f"time {_when(found.modified)}): planted; deleted, and the day's prune goes on"
        )
        book.store.delete(marker)
    try:
        book.store.put_if_absent(marker, json.dumps({"time": now}).encode())
    except ConflictError:
        return False
    return True


def rearm(book: Ledger, at: float) -> None:
    """Remove the marker :func:`due` returned ``at`` for, so the next reap prunes again: one
    cut short with progress made (a first prune of a long-kept ledger takes several reaps,
    never one long one)."""
    book.store.delete(f"{PRUNED}/{_day(at)}.json")


def _reservations(book: Ledger, horizon: float, names: list[str], out: Pruned) -> list[str]:
    """Release then reservation keys of the reservations past the horizon (see the module)."""
    infos, more = _listed(book, RESERVATIONS, out)
    listed, cut = _listed(book, RELEASES, out)
    releases = {i.key for i in listed}
    for info in infos:
        if not _RESERVATION.match(info.key):
            book.skipped[info.key] = "not a name gpu-ci writes"
    # one the store says was written since the horizon is kept unread: gpu-ci writes each at
    # its createdEpoch, so only an odd one (or a copied bucket) says otherwise
    old = [i.key for i in infos if _RESERVATION.match(i.key) and not _since(i, horizon)]
    plan = []
    # half the reads at most: planted ones kept (so read) every day never starve the events'
    for key, item in book._get_many(out.take(_rotated(old, horizon), MAX_READS // 2)).items():
        if item is None or not _ours(key, item):
            if item is not None:
                book.skipped[key] = "not a reservation gpu-ci wrote"
            continue
        ends = (item["untilEpoch"], item["createdEpoch"])
        if max(ends) >= horizon or any(made_for(str(item.get("podName") or ""), n) for n in names):
            continue
        release = key.replace(f"{RESERVATIONS}/", f"{RELEASES}/", 1)
        size = book._sizes.get(release) if release in releases else None
        if cut and release not in releases:  # the listing may have missed it: asked for
            if not out.take([release], MAX_READS // 2):
                break
            found = book.store.head(release)
            size = None if found is None else found.size
        if size is not None and size != len(_release_bytes(release)):
            book.skipped[release] = "not a release gpu-ci wrote (its reservation is kept)"
            continue
        plan += ([release] if size is not None else []) + [key]
        out.planned[key] = item
    return plan + _lone(book, horizon, {i.key for i in infos}, listed, more, out)


def _lone(
    book: Ledger,
    horizon: float,
    reservations: set[str],
    releases: list[ObjectInfo],
    more: bool,
    out: Pruned,
) -> list[str]:
    """Releases of no reservation (a sweep's, written after a prune deleted its reservation)
    that the store says were written before the horizon (one it states no time for is kept):
    each would take its number for ever.
    No ``up`` writes at a number a release takes, so none of those is written meanwhile;
    with ``reservations`` cut short, each one's reservation is asked for (a read)."""
    plan = []
    for info in releases:
        res = info.key.replace(f"{RELEASES}/", f"{RESERVATIONS}/", 1)
        # only on the store's word: no time (UNKNOWN_MODIFIED, NaN) may be a sweep's release
        # of a reservation written after the listing, which its delete would leave counted
        if res in reservations or not _RESERVATION.match(res) or not info.modified < horizon:
            continue
        if info.size != len(_release_bytes(info.key)):
            book.skipped[info.key] = "not a release gpu-ci wrote"
            continue
        if more:  # its reservation may be past the listing's cap
            if not out.take([res], MAX_READS // 2):
                break
            if book.store.head(res) is not None:
                continue
        plan.append(info.key)
    return plan


def _changed(book: Ledger, key: str, item: Mapping[str, Any]) -> bool:
    """Whether the reservation at ``key`` is no longer the one planned: a concurrent prune
    deleted it and an ``up`` wrote a new one at the freed number (read again just before the
    delete: a store has no delete-if-unchanged)."""
    got = book.store.get(key, limit=MAX_OBJECT)
    return got is None or _decode(got[0])[0] != item


def _ours(key: str, item: Mapping[str, Any]) -> bool:
    """Whether a reservation object has the shape ``reserve`` writes: its owner's folder
    (folded, or as an older gpu-ci named it) and both times as numbers."""
    owner, folder = str(item.get("owner") or ""), key.split("/")[-2]
    times = [item.get("untilEpoch"), item.get("createdEpoch")]
    return (
        bool(owner)
        and folder in (owner_key(owner), listing.folder_of(owner))
        and all(_number(t) for t in times)
    )


def _events(book: Ledger, horizon: float, keep: set[str], out: Pruned) -> list[str]:
    """Event keys of pods out of every period, and of no pod, before the horizon."""
    listed, more = _listed(book, EVENTS, out)
    by_pod: dict[str, list[str]] = defaultdict(list)
    for key in (i.key for i in listed):
        match = _KEY.match(key)
        pid = match.group(1) if match else ""
        if match is None:
            book.skipped[key] = "not a name gpu-ci writes"
        elif pid not in keep and (pid == "_" or _POD_ID.match(pid)):
            by_pod[pid].append(key)
    plan = []
    for pid in _rotated(list(by_pod), horizon):
        keys = by_pod[pid]
        if pid != "_" and any(_time(k) >= horizon for k in keys):
            continue  # a recent event: the pod may be counted (its folder never listed again)
        if more:  # a cut listing may hold part of a folder: each is listed again, on its own
            if not out.take([f"{EVENTS}/{pid}/"]):  # a request, counted as a read: 200,000
                break  # planted folders would be 200,000 listings
            found, cut = listing.listed(book.store, f"{EVENTS}/{pid}/", listing.MAX_POD_LISTED)
            book._sizes.update((i.key, i.size) for i in found)
            keys = [] if cut else [i.key for i in found if _KEY.match(i.key)]
        if pid == "_":  # events of no pod, each on its own: the recent ones never read
            keys = [k for k in keys if _time(k) < horizon]
        elif any(_time(k) >= horizon for k in keys):
            continue  # a recent event: the pod may be counted
        wanted = out.take(keys)
        if len(wanted) < len(keys):
            break  # a folder read in part could hide a recent event
        plan += _old_events(book, pid, wanted, horizon)
    return plan


def _old_events(book: Ledger, pid: str, keys: list[str], horizon: float) -> list[str]:
    """Those of ``keys`` (one folder's) that are gpu-ci's events of ``pid`` (of no pod under
    ``_``) from before ``horizon``; none of a pod with a later one. Others are kept, named."""
    old = []
    for key, item in book._get_many(keys).items():
        if item is None:
            continue  # gone, or not JSON gpu-ci writes (named by the ledger's read)
        of = (item.get("podId") or None) == (None if pid == "_" else pid)
        if not of or item.get("event") not in EVENT_KINDS or not _number(item.get("time")):
            book.skipped[key] = f"not an event gpu-ci wrote under {pid}/"
        elif item["time"] < horizon:  # not float(): a 400-digit int is an OverflowError
            old.append(key)
        elif pid != "_":
            return []  # a recent event: the pod may be counted
    return old


def _rotated(items: list[str], horizon: float) -> list[str]:
    """``items`` from a place that jumps each day (the day times Knuth's multiplicative hash
    constant): objects kept every day (planted, not gpu-ci's shape) and read first would take
    every day's read cap from those that may go, whatever the caps and the folders' sizes."""
    start = int(horizon // 86400) * 2654435761 % max(1, len(items))
    return items[start:] + items[:start]


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _since(info: ObjectInfo, horizon: float) -> bool:
    return info.modified != UNKNOWN_MODIFIED and info.modified >= horizon


def _day(when: float) -> str:
    """The UTC day of ``when``; a time past year 9999 is after every day's name."""
    try:
        return utc_iso(when)[:10]
    except (ValueError, OverflowError, OSError):
        return "9999-12-31" if when > 0 else "0001-01-01"


def _when(when: float) -> str:
    try:
        return utc_iso(when)
    except (ValueError, OverflowError, OSError):
        return f"{when:g}"


def _time(key: str) -> float:
    match = _KEY.match(key)
    return int(match.group(2)) / 1000 if match else float("inf")
