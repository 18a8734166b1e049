"""The shared pods ledger: who owned which pod, what it cost, and live budget reservations.

RunPod's billing names only the pod id, and terminated pods vanish from ``listPods``, so the
ledger is what attributes spend to owners after a pod is gone. It lives in a store (the same
``s3://bucket/prefix`` or ``file:///dir`` forms as the weights cache, through the cache's
store abstraction), so every runner reads the same history: a fresh runner sees every past pod.

Everything is an immutable object written with ``If-None-Match`` (create-if-absent), so
concurrent jobs never overwrite each other:

- ``pods-ledger/events/<pod>/<time>-<event>-<nonce>.json``: one per pod event (created,
  started, stopped, terminated, reaped, budget-refused): pod id, owner, GPU type, price per
  hour, CI run URL, time.
- ``pods-ledger/reservations/<owner>/<seq>.json``: a budget reservation made before a create.
  Sequence numbers are the serialisation point: two ``up``\\ s of one owner that read the same
  state both try to create the same next (lowest free) number; one wins, the other re-reads and
  decides again.
- ``pods-ledger/releases/<owner>/<seq>.json``: the reservation of a pod that has ended.

Objects are inputs like any other from a store: sizes and counts are capped, malformed ones
skipped, and what an event says can only add to an owner's spend (see :func:`_merge`).
"""

from __future__ import annotations

import json
import re
import secrets
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gpuci import settings, untrusted_json
from gpuci.cache._stores import open_store
from gpuci.cache._stores.base import Store, redact_url
from gpuci.cache._stores.file import LockBusy
from gpuci.errors import CheckFailed, ConflictError, GpuciError, InfraError, InputError
from gpuci.pods._budgets import listing
from gpuci.pods._budgets.holds import Hold, Reservation, check_hold, made_for
from gpuci.pods._budgets.records import MAX_OBJECT, PodRecord, _decode, _merge, _num
from gpuci.pods._budgets.records import reaped_by_owner as reaped_by_owner
from gpuci.pods._runpod.naming import fold_owner, tag_of
from gpuci.units import utc_iso

ROOT = "pods-ledger"
EVENTS = f"{ROOT}/events"
RESERVATIONS = f"{ROOT}/reservations"
RELEASES = f"{ROOT}/releases"
#: Event objects one read of the ledger fetches at most (each is a GET): more are refused in
#: one line, never fetched, whoever wrote them.
MAX_EVENT_READS = 20_000
#: Events of one pod one read fetches at most (its ``created`` events first, then the oldest):
#: a pod has a handful, so a folder holding more was flooded; the rest are skipped, said once.
MAX_POD_EVENTS = 100
#: Reservation objects of one owner one read fetches at most: more are refused in one line
#: (skipping some would hide spend), and only keys named as :meth:`Ledger.reserve` names them.
MAX_RESERVATION_READS = 2_000
#: Writes of a reservation that another ``up`` of the owner won first. A key's lock held past
#: the file store's wait (LockBusy) is no such race: it ends the reserve at once (see
#: :func:`_lock_held`).
RESERVE_ATTEMPTS = 20
#: A reservation holds nothing once its ``until`` passed, or once no pod made for it is on
#: RunPod (any status) in a list read this long after its ``placeByEpoch``, the time after
#: which its writer creates no pod under it: the margin covers a create sent just before
#: then and two runners' clocks. The owner's next reserve then releases it (:meth:`_sweep`),
#: so it is never read again: a pod that ended itself frees its budget without a release.
PLACE_MARGIN_S = 15 * 60
#: Releases one reserve writes at most; the next writes the rest.
MAX_SWEEP = 100
EVENT_KINDS = ("created", "started", "stopped", "terminated", "reaped", "budget-refused")
_POD_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_RESERVATION = re.compile(r"^" + RESERVATIONS + r"/[^/]+/\d{10}\.json$")  # reserve()'s keys
_TAKEN = re.compile(r"/(\d{10})\.json(?:/|$)")  # a folder of that name takes the number too


def default_url() -> str:
    return (Path.home() / ".cache" / "gpuci" / "pods-ledger").as_uri()


def ledger_url(value: str | None, environ: Mapping[str, str]) -> str:
    """The ledger's store URL: the input, then ``GPUCI_PODS_LEDGER``, then a local folder."""
    text = (value or "").strip() or settings.PODS_LEDGER.value(environ)
    if not text:
        return default_url()
    if text.startswith("/"):
        path = Path(text)
        if path.is_file():
            raise InputError(
                f"ledger {text} is a file (an older gpu-ci's local ledger); the ledger is now a "
                "store",
                hint="point ledger at a folder (file:///dir) or at the cache's bucket "
                "(s3://bucket/prefix), and move the old file away",
            )
        return path.as_uri()
    return text


def owner_key(owner: str) -> str:
    """A store-safe, collision-free path component for an owner (never ``..`` or ``/``), the
    same for every case of the name."""
    return listing.folder_of(fold_owner(owner))


class Ledger:
    """Events and reservations in one store; every write is create-if-absent."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._cache: dict[str, dict[str, Any] | None] = {}  # immutable objects, read once
        self._sizes: dict[str, int] = {}  # as listed: an object over MAX_OBJECT is never read
        self.skipped: dict[str, str] = {}  # key -> why it was not used (said once, by skipped_line)
        self._pods: list[dict[str, Any]] | None = None  # as RunPod listed them: seen_pods
        self._listed_at: float | None = None  # when: only a whole list, read after then
        self._unusable: dict[str, list[str]] = {}  # owner key -> unreleased keys not theirs
        self._records: dict[str, PodRecord] = {}  # what book() last made of each pod

    @classmethod
    def open(
        cls,
        value: str | None,
        environ: Mapping[str, str],
        mask: Callable[[str], None] | None = None,
    ) -> Ledger:
        url = ledger_url(value, environ)
        endpoint = (
            settings.PODS_LEDGER_ENDPOINT_URL.value(environ)
            or settings.AWS_ENDPOINT_URL_S3.value(environ)
            or settings.AWS_ENDPOINT_URL.value(environ)
        )
        return cls(open_store(url, endpoint_url=endpoint, environ=environ, mask=mask))

    @property
    def where(self) -> str:
        return redact_url(self.store.url)

    # ----- reading -------------------------------------------------------------------------
    def _get_many(self, keys: Iterable[str]) -> dict[str, dict[str, Any] | None]:
        """The objects at ``keys`` (None: absent or not ours). Each is an input: its listed
        size is checked before it is read, at most MAX_OBJECT + 1 bytes are read, then its
        nesting and the types of the fields the ledger reads."""
        keys = list(keys)
        wanted = []
        for key in keys:
            if key in self._cache:
                continue
            if self._sizes.get(key, 0) > MAX_OBJECT:
                self._skip(key, f"{self._sizes[key]} bytes, over {MAX_OBJECT >> 10} KiB")
            else:
                wanted.append(key)
        if wanted:

            def get(key: str) -> tuple[bytes, str] | None:
                return self.store.get(key, limit=MAX_OBJECT)

            with ThreadPoolExecutor(max_workers=8) as pool:
                for key, got in zip(wanted, pool.map(get, wanted), strict=True):
                    item, why = _decode(got[0]) if got else (None, "")
                    self._cache[key] = item
                    if why:
                        self._skip(key, why)
        return {k: self._cache.get(k) for k in keys}

    def _skip(self, key: str, why: str) -> None:
        self._cache[key] = None
        self.skipped[key] = why

    def skipped_line(self) -> str:
        """One warning naming the objects skipped as not the ledger's, or empty."""
        return untrusted_json.skipped_warning(
            f"pods ledger {self.where}", self.skipped, "ledger records"
        )

    def _list(self, prefix: str, cap: int) -> tuple[list[str], bool]:
        """The keys of one folder (``prefix`` ends in ``/``), at most ``cap`` of them, and
        whether it holds more (see :mod:`gpuci.pods._budgets.listing`)."""
        try:
            found, more = listing.listed(self.store, prefix, cap)
        except OSError as exc:
            raise InfraError(
                f"cannot list the pods ledger {self.where}: {exc}",
                hint="check the ledger URL and its permissions",
            ) from None
        self._sizes.update((i.key, i.size) for i in found)
        return [i.key for i in found], more

    def _pod_keys(self, pod_id: str) -> list[str]:
        """The event keys of one pod's folder: at most :data:`listing.MAX_POD_LISTED` listed
        (more: named in :meth:`skipped_line`), at most :data:`MAX_POD_EVENTS` kept."""
        keys, more = self._list(f"{EVENTS}/{pod_id}/", listing.MAX_POD_LISTED)
        kept = self._capped([k for k in keys if _KEY.match(k)])  # only record()'s names
        if more:
            self.skipped[f"{EVENTS}/{pod_id}/"] = (
                f"over {listing.MAX_POD_LISTED} objects listed, the rest not looked at"
            )
        return kept

    def events(
        self, pod_id: str = "", pods: Collection[str] | None = None, since: float | None = None
    ) -> list[dict[str, Any]]:
        """Events oldest first (malformed objects skipped): of one pod; of ``pods`` (each
        pod's folder listed on its own, never the others); or, with ``since``, every event
        of ``pods`` plus every event written since then (one listing of every event, filtered
        on key names). At most :data:`MAX_POD_EVENTS` of a pod are read, and with ``since``
        at most :data:`MAX_EVENT_READS` (more is refused in one line, none read)."""
        if pod_id:
            keys = self._pod_keys(pod_id) if _POD_ID.match(pod_id) else []
        elif pods is not None and since is None:  # each pod's own folder, never the others
            wanted = sorted({p for p in pods if p != "_" and _POD_ID.match(p)})
            with ThreadPoolExecutor(max_workers=8) as pool:
                keys = [k for got in pool.map(self._pod_keys, wanted) for k in got]
        else:
            keys = self._all_events(pods, since)
        out = []
        for key, item in self._get_many(keys).items():
            if item is None or item.get("event") not in EVENT_KINDS:
                continue
            pid = key[len(EVENTS) + 1 :].partition("/")[0]
            if (item.get("podId") or None) != (None if pid == "_" else pid):
                continue  # filed under another pod's folder, or a pod's event under "_"
            out.append(item)
        return sorted(out, key=lambda e: _num(e.get("time")))

    def _all_events(self, pods: Collection[str] | None, since: float | None) -> list[str]:
        """The keys of every pod's events (of ``pods`` and since ``since``, if given): at
        most :data:`listing.MAX_EVENTS_LISTED` listed and :data:`MAX_EVENT_READS` kept, more
        refused in one line, none read."""
        prefix = f"{EVENTS}/"
        keys, more = self._list(prefix, listing.MAX_EVENTS_LISTED)
        if pods is not None or since is not None:
            keys = [k for k in keys if _wanted(k, pods or (), since)]
        keys = self._capped(keys)  # a pod's folder, flooded, costs at most its cap
        if more or len(keys) > MAX_EVENT_READS:
            held, most = (listing.MAX_EVENTS_LISTED, "lists") if more else (len(keys), "reads")
            raise InfraError(
                f"the pods ledger {self.where} holds {'over ' if more else ''}{held} event "
                f"objects to read here (under {prefix}), over what one command {most}; none "
                "were read",
                hint="look for objects gpu-ci did not write under pods-ledger/events/ and remove "
                "them, or shorten the budgets file's period",
            )
        return keys

    def _capped(self, keys: list[str]) -> list[str]:
        """At most :data:`MAX_POD_EVENTS` of each pod folder's ``keys`` (see
        :func:`listing.capped`); a folder cut short is named in :meth:`skipped_line`."""
        kept, cut = listing.capped(keys, EVENTS, MAX_POD_EVENTS)
        self.skipped.update(cut)
        return kept

    def book(
        self, pods: Collection[str] | None = None, since: float | None = None
    ) -> dict[str, PodRecord]:
        """podId -> what the ledger knows of it (of ``pods`` and pods active ``since``)."""
        by_pod: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for event in self.events(pods=pods, since=since):
            if event.get("podId"):
                by_pod[str(event["podId"])].append(event)
        out = {pid: _merge(pid, events) for pid, events in by_pod.items()}
        self._records.update(out)
        return out

    def pod(self, pod_id: str) -> PodRecord | None:
        """What the ledger knows of one pod (one listing of its folder), or None."""
        if not _POD_ID.match(pod_id or ""):
            return None
        events = self.events(pod_id)
        if not events:
            return None
        return _merge(pod_id, events)

    def reservations(self, owner: str) -> tuple[list[Reservation], set[str], int]:
        """(live reservations, keys of released ones, the lowest free sequence number) of one
        owner, whatever the case their name was written in. The lowest free number, not the
        highest plus one: a planted ``9999999999.json`` then leaves the next one as it was.

        A release object is anyone's to plant, so it counts only when it is gpu-ci's own
        (its listed size is that of ``{"released": <key>}``) and, once :meth:`seen_pods` has
        the pods RunPod lists, only for a reservation whose pod is not among them (any
        status: a stopped pod is held by its reservation alone)."""
        own = owner_key(owner)
        listed = self._owner_keys(RESERVATIONS, owner)
        keys = [k for k in listed if _RESERVATION.match(k)]  # only what reserve() names
        mine, rel = f"{RESERVATIONS}/{own}/", self._owner_keys(RELEASES, owner)
        ours = (mine, f"{RELEASES}/{own}/")  # a lone release (a sweep's, late) takes its number
        taken = {
            int(m[1]) for k in [*listed, *rel] if k.startswith(ours) and (m := _TAKEN.search(k))
        }
        released = {
            k.replace(f"{RELEASES}/", f"{RESERVATIONS}/", 1)
            for k in rel
            if self._sizes.get(k) == len(_release_bytes(k))
        }
        released &= set(keys)
        unreleased = [k for k in keys if k not in released]
        live = self._read_reservations(owner, unreleased)
        usable = {r.key for r in live}
        # only in its own folder (one of another name read alike is listed here too), and
        # only one there to read: one gone since it was listed (pruned) needs no release
        there = {k for k in unreleased if k in self.skipped or self._cache.get(k)}
        self._unusable[own] = [k for k in sorted(there - usable) if k.startswith(mine)]
        orphans = self._unheld(owner, live)
        if orphans:  # a pod still on RunPod: its reservation holds, whatever says released
            named = self._named_by(orphans)
            wanted = sorted(released if named is None else released & named, reverse=True)
            names = [str(p.get("name") or "") for p in orphans]
            for res in self._read_reservations(owner, wanted[:MAX_RESERVATION_READS]):
                if any(made_for(res.name, name) for name in names):
                    live.append(res)
                    released.discard(res.key)
        return live, released, _lowest_free(taken)

    def reservation_names(self, keys: Iterable[str]) -> dict[str, str]:
        """Reservation key -> the pod name it was made for, of those of ``keys`` that are
        reservation objects (at most :data:`MAX_RESERVATION_READS` read)."""
        wanted = [k for k in keys if _RESERVATION.match(k)]
        got = self._get_many(wanted[:MAX_RESERVATION_READS])
        return {k: str(item.get("podName") or "") for k, item in got.items() if item}

    def seen_pods(self, pods: Iterable[Mapping[str, Any]], at: float | None = None) -> None:
        """The pods RunPod lists now (any status): a release of a reservation made for one of
        them is not believed (see :meth:`reservations`). ``at``: the list is all of them,
        read after that time, so a reservation none of them was made for may be swept."""
        self._pods = [dict(p) for p in pods]
        self._listed_at = at

    def _sweep(
        self, owner: str, live: list[Reservation], released: set[str], now: float
    ) -> set[str]:
        """Release ``owner``'s reservations that hold nothing (see :data:`PLACE_MARGIN_S`) and
        the unreleased objects at their keys that are not theirs: the keys released (at most
        :data:`MAX_SWEEP`). Only a reservation's own fields (its writer's), RunPod's list
        and the clock decide, never another object; a release that fails leaves it counted,
        and the next reserve tries again."""
        names = [str(p.get("name") or "") for p in self._pods or []]
        listed_at = self._listed_at

        def done(r: Reservation) -> bool:
            if r.end(now) <= now:
                return True
            return (
                r.place_by is not None
                and listed_at is not None
                and r.place_by + PLACE_MARGIN_S <= listed_at
                and not any(made_for(r.name, name) for name in names)
            )

        keys = [r.key for r in live if r.key not in released and done(r)]
        keys += self._unusable.get(owner_key(owner), [])

        def one(key: str) -> str:
            try:
                self.release(key)
            except (OSError, GpuciError):
                return ""
            return key

        with ThreadPoolExecutor(max_workers=8) as pool:
            return {k for k in pool.map(one, keys[:MAX_SWEEP]) if k}

    def _unheld(self, owner: str, live: list[Reservation]) -> list[dict[str, Any]]:
        """``owner``'s pods on RunPod that none of ``live`` was made for."""
        out = []
        for pod in self._pods or []:
            tag, name = tag_of(pod), str(pod.get("name") or "")
            if tag is None or fold_owner(tag.owner) != fold_owner(owner):
                continue
            if not any(made_for(r.name, name) for r in live):
                out.append(pod)
        return out

    def _named_by(self, pods: list[dict[str, Any]]) -> set[str] | None:
        """The reservation keys ``pods``' own events name (``up`` names the one it placed a
        pod under in its ``created`` event): a planted event can add keys, never take
        gpu-ci's away. None when a pod's events cannot say: no ``created`` event read, its
        folder cut short by a flood, or an expiry no ``created`` event gave it (``start
        --ttl`` moved it, and its ``started`` event, written last, may be missing); then every
        released reservation is looked at."""
        out: set[str] = set()
        for pod in pods:
            pid, tag = str(pod.get("id") or ""), tag_of(pod)
            rec = self._records[pid] if pid in self._records else self.pod(pid)
            if rec is None or tag is None or f"{EVENTS}/{pid}/" in self.skipped:
                return None
            made = [e for e in rec.events if e.get("event") == "created"]
            if not any(abs(_num(e.get("expiresEpoch")) - tag.expires_at) < 1 for e in made):
                return None
            out.update(rec.reservations)
        return out

    def _read_reservations(self, owner: str, keys: list[str]) -> list[Reservation]:
        """The reservations of ``owner`` at ``keys`` (others' and malformed ones skipped);
        over :data:`MAX_RESERVATION_READS` of them is refused in one line, none read."""
        if len(keys) > MAX_RESERVATION_READS:
            raise InfraError(
                f"the pods ledger {self.where} holds {len(keys)} reservations of {owner} to "
                f"read, over the {MAX_RESERVATION_READS} one command reads; none were read",
                hint=f"look for objects gpu-ci did not write under {RESERVATIONS}/"
                f"{owner_key(owner)}/ and remove them",
            )
        out = []
        for key, item in self._get_many(keys).items():
            if item is None or fold_owner(str(item.get("owner") or "")) != fold_owner(owner):
                continue
            out.append(Reservation.of(key, owner, item))
        return out

    def _owner_keys(self, root: str, owner: str) -> list[str]:
        """The keys under ``root`` in ``owner``'s folder (:func:`owner_key`) and in those an
        older gpu-ci filed under another case of the name (:func:`listing.case_folders`),
        each listed as one folder; one holding over :data:`listing.MAX_OWNER_LISTED` objects
        is refused in one line (exit 3), none read."""
        found = []
        for folder in [owner_key(owner), *listing.case_folders(owner, self._pods or [])]:
            keys, more = self._list(f"{root}/{folder}/", listing.MAX_OWNER_LISTED)
            if more:
                raise InfraError(
                    f"the pods ledger {self.where} holds over {listing.MAX_OWNER_LISTED} "
                    f"objects under {root}/{folder}/, over what one command lists; none were read",
                    hint="look for objects gpu-ci did not write there and remove them; a "
                    "scheduled pods reap prunes reservations past every budget period",
                )
            found.extend(keys)
        return found

    # ----- writing -------------------------------------------------------------------------
    def _put_new(self, key: str, item: Mapping[str, Any]) -> None:
        data = json.dumps(item, sort_keys=True, separators=(",", ":")).encode()
        self.store.put_if_absent(key, data)
        self._cache[key] = dict(item)

    def record(self, event: str, pod_id: str, at: float, **fields: Any) -> str:
        """Write one immutable event object; returns its key."""
        if event not in EVENT_KINDS:
            raise ValueError(event)
        folder = pod_id if _POD_ID.match(pod_id or "") else "_"
        item = {"event": event, "podId": pod_id or None, "time": at, "at": utc_iso(at), **fields}
        key = f"{EVENTS}/{folder}/{int(at * 1000):015d}-{event}-{secrets.token_hex(4)}.json"
        self._put_new(key, item)
        return key

    def reserve(
        self,
        owner: str,
        now: float,
        until: float,
        decide: Callable[[float], float],
        hold: Hold | None = None,
    ) -> Reservation:
        """Reserve budget for a pod; ``decide(reserved_usd)`` returns the USD/h to reserve or
        raises CheckFailed when nothing fits beside what ``owner``'s live reservations hold
        (those made for ``hold.replaces``, a pod name, are not counted: this one replaces
        them, and releases them once it is written).

        The write is create-if-absent on the owner's next sequence number, so of two
        concurrent ``up``\\ s that both saw the same reservations, one wins and the other
        decides again with the winner's reservation counted.
        """
        hold = hold or Hold()
        check_hold(now, until)
        for _ in range(RESERVE_ATTEMPTS):
            live, released, seq = self.reservations(owner)
            swept = self._sweep(owner, live, released, now)
            live = [r for r in live if r.key not in swept]
            mine = {r.key for r in live if hold.replaces and r.name == hold.replaces}
            rate = decide(sum(r.remaining(now) for r in live if r.key not in mine))
            key = f"{RESERVATIONS}/{owner_key(owner)}/{seq:010d}.json"
            item = {
                "owner": owner,
                "costPerHr": rate,
                "untilEpoch": until,
                "until": utc_iso(until),
                "createdEpoch": now,
                "runUrl": hold.run_url,
                "podName": hold.name,
                **({} if hold.budget is None else {"budgetUsd": hold.budget}),
                **({} if hold.period_s is None else {"periodS": hold.period_s}),
                **({} if hold.place_by is None else {"placeByEpoch": hold.place_by}),
            }
            try:
                self._put_new(key, item)
            except LockBusy as exc:
                raise _lock_held(exc, f"no budget was reserved for {owner}") from None
            except ConflictError:
                continue  # someone reserved first: decide again with theirs counted
            for old in sorted(mine):
                try:
                    self.release(old)
                except InfraError:  # a held lock: counted until a later reserve sweeps it
                    pass
            return Reservation.of(key, owner, item)
        raise CheckFailed(
            f"could not reserve budget for {owner}: {RESERVE_ATTEMPTS} concurrent reservations "
            "won first",
            hint="retry the job; many jobs of one owner are starting at once",
        )

    def release_named(self, owner: str, name: str) -> list[str]:
        """Release ``owner``'s live reservations made for pod ``name`` (a cancelled ``up`` whose
        reservation was written but never returned to it); the keys released."""
        live, _, _ = self.reservations(owner)
        return [r.key for r in live if name and r.name == name and self.release(r.key)]

    def release(self, reservation_key: str) -> bool:
        """Mark a reservation released (the pod ended); True if this call released it."""
        if not reservation_key.startswith(f"{RESERVATIONS}/"):
            return False
        key = reservation_key.replace(f"{RESERVATIONS}/", f"{RELEASES}/", 1)
        try:
            self._put_new(key, _release_item(key))
        except LockBusy as exc:  # not written: never "released already"
            raise _lock_held(exc, f"{reservation_key} was not released") from None
        except ConflictError:
            return False
        return True


def _lock_held(exc: LockBusy, what: str) -> InfraError:
    """A key's lock held past the file store's wait: a hung or stopped writer, never a race
    another reservation won (a write holds it for milliseconds), so no retry: each would wait
    the same again on the same key. One line, exit 3, naming the lock."""
    return InfraError(f"pods ledger: {what}: {exc.message}", hint=exc.hint)


_KEY = re.compile(r"^" + EVENTS + r"/([^/]+)/(\d{15})-[a-z-]+-[0-9a-f]+\.json$")


def _wanted(key: str, pods: Collection[str], since: float | None) -> bool:
    match = _KEY.match(key)
    if not match:
        return False
    if match.group(1) in pods:
        return True
    # "_" holds only events of no pod (budget-refused): no book needs them
    return since is not None and match.group(1) != "_" and int(match.group(2)) / 1000 >= since


def _release_item(release_key: str) -> dict[str, str]:
    """The release object gpu-ci writes at ``release_key``: it names its reservation."""
    return {"released": release_key.replace(f"{RELEASES}/", f"{RESERVATIONS}/", 1)}


def _release_bytes(release_key: str) -> bytes:
    return json.dumps(_release_item(release_key), sort_keys=True, separators=(",", ":")).encode()


def _lowest_free(taken: set[int]) -> int:
    return min(set(range(len(taken) + 1)) - taken)  # one of 0..len(taken) is free
