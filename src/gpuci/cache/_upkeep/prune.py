"""``cache-weights prune``: keys unused for a while go, then whatever no remaining key reaches.

Three passes, in the order that keeps every surviving ref whole:
1. refs (this namespace) neither saved nor restored within ``older-than``, except the ``keep``
   newest of each prefix;
2. manifests no ref in any namespace names and no pin (``pins/<sha256>.json``) keeps, once
   older than ``grace``;
3. blobs and packs no surviving manifest names, once older than ``grace``.

Why a save running meanwhile is safe: it uploads blobs first, then its manifest, then its ref,
so everything it wrote is younger than the grace period; a young manifest also protects every
blob it names; a blob the save *reuses* it touches first when old (``Store.touch``), and each
blob is re-checked just before it is deleted, so one made young meanwhile stays.

Why a save or restore of a stale key meanwhile is safe: each ref and its use record are looked
at again just before the delete; one saved or restored since the listing stays, and so do the
manifest it names and that manifest's data. Likewise a pin written meanwhile: the pins are
read again before the manifest pass, pinning touches an old manifest and its data, and each
manifest's age is re-read before its delete.
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

from gpuci.cache import _layout as layout
from gpuci.cache._common import CREDENTIAL_SOURCES, plan_store, store_url
from gpuci.cache._format import manifest as mf
from gpuci.cache._format import refs
from gpuci.cache._stores.base import UNKNOWN_MODIFIED, ObjectInfo, Store
from gpuci.cache._stores.file import LocalStore
from gpuci.cache._upkeep import pins
from gpuci.cache._upkeep.options import PruneInputs
from gpuci.errors import InputError
from gpuci.ranged._pool import parallel
from gpuci.redact import excerpt
from gpuci.runtime import Result, Runtime, markdown_table
from gpuci.units import human_age, human_bytes

__all__ = ["Outcome", "Plan", "StaleRef", "execute", "group_of", "plan", "run"]


@dataclass(frozen=True)
class StaleRef:
    """A ref the plan found unused, as the listing saw it: execute deletes it only if it is
    still so (a save or a restore since then keeps it)."""

    object_key: str
    modified: float  # the ref's last save
    used: float  # its use record's last restore; 0.0 when none
    etag: str = ""  # where the store's listing gives one


@dataclass
class Plan:
    refs: list[StaleRef] = field(default_factory=list)
    older_than: float = 0.0  # a ref saved or restored this recently since the plan stays
    manifests: list[ObjectInfo] = field(default_factory=list)
    data: list[ObjectInfo] = field(default_factory=list)  # blobs and packs
    kept_young: int = 0  # unnamed manifests, blobs and packs younger than the grace period
    # Everything the grace period holds back: those young objects, plus the blobs and packs
    # only a young unnamed manifest still reaches (they go with it).
    held_manifests: list[ObjectInfo] = field(default_factory=list)
    held_data: list[ObjectInfo] = field(default_factory=list)
    # Temp files (``*.incomplete-*``) killed saves left in a file store, older than the grace.
    leftovers: list[ObjectInfo] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # refs whose names no save could write
    pinned: int = 0  # manifests kept by a pin (pins/<sha256>.json) whatever the refs say
    # Kept manifests this gpu-ci cannot read (warnings): no blob or pack is deleted then.
    unreadable: list[str] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(o.size for o in self.manifests + self.data + self.leftovers)

    @property
    def held_bytes(self) -> int:
        return sum(o.size for o in self.held_manifests) + sum(o.size for o in self.held_data)

    def held_until(self, grace: float) -> float | None:
        """When the last held object is older than the grace period (a later prune frees all)."""
        held = self.held_manifests + self.held_data
        return max(o.modified for o in held) + grace if held else None


@dataclass
class Outcome:
    """What a prune deleted (planning: would delete), and what its re-checks just before each
    delete kept: the store may change between the listing and the deletes."""

    refs: list[str] = field(default_factory=list)  # object keys
    manifests: list[ObjectInfo] = field(default_factory=list)
    data: list[ObjectInfo] = field(default_factory=list)
    leftovers: list[ObjectInfo] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # saved, restored, pinned or reused meanwhile
    warnings: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def planned(cls, work: Plan) -> Outcome:
        """A dry run's outcome: everything the plan lists."""
        refs = [r.object_key for r in work.refs]
        return cls(refs, list(work.manifests), list(work.data), list(work.leftovers))

    @property
    def bytes(self) -> int:
        return sum(o.size for o in self.manifests + self.data + self.leftovers)

    def deleted(self, into: list[ObjectInfo], item: ObjectInfo) -> None:
        with self.lock:
            into.append(item)

    def deleted_ref(self, key: str) -> None:
        with self.lock:
            self.refs.append(key)

    def keep(self, key: str) -> None:
        with self.lock:
            self.kept.append(key)


def group_of(key: str) -> str:
    """The prefix ``--keep`` counts within: the key up to and including its last ``-``."""
    head, dash, _ = key.rpartition("-")
    return head + dash if dash else key


def _stale_refs(
    store: Store,
    namespace: str,
    prefix: str,
    older_than: float,
    keep: int,
    now: float,
    ignored: list[str],
) -> list[StaleRef]:
    infos = refs.listing(store, namespace, prefix, ignored)  # newest first
    used = refs.last_uses(store, namespace)
    seen: dict[str, int] = {}
    stale: list[StaleRef] = []
    for info in infos:
        group = group_of(info.key)
        seen[group] = seen.get(group, 0) + 1
        if keep and seen[group] <= keep:
            continue
        last_use = used.get(info.key, 0.0)
        if now - max(info.modified, last_use) > older_than:
            stale.append(StaleRef(info.object_key, info.modified, last_use))
    return stale


def _named_manifests(store: Store, dropping: list[StaleRef]) -> tuple[set[str], list[StaleRef]]:
    """Manifests named by every ref in every namespace, except the refs being dropped; and
    those refs with the etag this listing gives them where it saw the same version."""
    names: set[str] = set()
    lock = threading.Lock()
    planned = {r.object_key: r for r in dropping}
    items: list[ObjectInfo] = []
    etags: dict[str, str] = {}
    for item in store.list(f"{layout.REFS}/"):
        stale = planned.get(item.key)
        if stale is None:
            items.append(item)
        elif item.modified == stale.modified:
            etags[item.key] = item.etag

    def read(item: ObjectInfo) -> None:
        got = store.get(item.key, limit=refs.MAX_REF)
        digest = None if got is None else refs.manifest_of(got[0])
        if digest is not None:
            with lock:
                names.add(digest)

    parallel(read, items, 8)
    with_etags = [replace(r, etag=etags.get(r.object_key, "")) for r in dropping]
    return names, with_etags


def _reached(store: Store, manifests: list[str]) -> tuple[set[str], list[str]]:
    """Blob and pack keys the given manifests name, and a warning for each of them that is
    there but cannot be read (a newer format, damage): what it names is then unknown, so the
    caller deletes no blob or pack at all. A manifest that is gone names nothing."""
    keys: set[str] = set()
    unreadable: list[str] = []
    lock = threading.Lock()

    def read(digest: str) -> None:
        got = store.get(layout.manifest_key(digest), limit=mf.MAX_MANIFEST)
        if got is None:
            return
        try:
            found = pins.data_keys(_parse_checked(got[0], digest))
        except InputError as exc:
            with lock:
                unreadable.append(_unreadable(digest, exc.message))
            return
        with lock:
            keys.update(found)

    parallel(read, manifests, 8)
    return keys, sorted(unreadable)


def _parse_checked(data: bytes, digest: str) -> mf.Manifest:
    """A manifest read back, checked against its name; InputError when unusable."""
    if len(data) > mf.MAX_MANIFEST:
        raise InputError(f"over {human_bytes(mf.MAX_MANIFEST)}")
    actual = hashlib.sha256(data).hexdigest()
    if actual != digest:
        raise InputError(f"it hashes to {actual[:12]}")
    return mf.parse(data, digest[:12])


def _unreadable(digest: str, why: str) -> str:
    return (
        f"manifest {digest[:12]} is kept (a key, a pin or the grace period keeps it) but this "
        f"gpu-ci cannot read it ({excerpt(why, 160)}), so which blobs and packs it names is "
        "unknown: none are deleted this run (fix: prune with the gpu-ci version that wrote it, "
        "or delete that manifest and the keys naming it if it is damaged)"
    )


def plan(
    store: Store, namespace: str, prefix: str, older_than: float, keep: int, grace: float
) -> Plan:
    """What a prune deletes: stale refs, then what nothing live or pinned names, minus what is
    younger than ``grace``. Reads only; StoreError when the store fails."""
    now = time.time()
    out = Plan(older_than=older_than)
    stale = _stale_refs(store, namespace, prefix, older_than, keep, now, out.ignored)
    named, out.refs = _named_manifests(store, stale)
    pinned = pins.pinned(store)
    named |= pinned
    live: list[str] = []
    young: list[str] = []
    for item in store.list(f"{layout.MANIFESTS}/"):
        digest = item.key.rsplit("/", 1)[-1].removesuffix(".json")
        if digest in named:
            live.append(digest)
            out.pinned += digest in pinned
        elif now - item.modified <= grace:
            young.append(digest)  # a save may be about to write its ref
            out.kept_young += 1
            out.held_manifests.append(item)
        else:
            out.manifests.append(item)
    reached, unreadable = _reached(store, live)
    young_reached, young_unreadable = _reached(store, young)
    reached_young = young_reached - reached
    out.unreadable = unreadable + young_unreadable
    for base in (layout.BLOBS, layout.PACKS):
        for item in store.list(f"{base}/"):
            if item.key in reached:
                continue
            if item.key in reached_young:
                out.held_data.append(item)  # kept with the young manifest that names it
            elif now - item.modified <= grace:
                out.kept_young += 1
                out.held_data.append(item)
            else:
                out.data.append(item)
    if out.unreadable:
        out.data = []  # a kept manifest may name any of them
    if isinstance(store, LocalStore):  # S3 keeps no temp objects (multipart is all or nothing)
        out.leftovers = store.leftovers(grace)
    return out


def execute(store: Store, work: Plan, grace: float, namespace: str) -> Outcome:
    """Delete what ``work`` lists, each looked at again first: refs still unused, manifests
    still unnamed, unpinned and older than ``grace``, then data still unreached and older than
    ``grace`` (a save, restore or pin may have come since the plan). Returns what went and what
    the re-checks kept, for the report. StoreError when the store fails."""
    done = Outcome()
    rescued = _drop_refs(store, work, namespace, done)
    rescued |= pins.pinned(store)  # read again: a pin written since the plan keeps its tree
    kept = _drop_manifests(store, work, grace, rescued, done)
    protected, unreadable = _reached(store, sorted(kept))
    if unreadable:
        done.warnings += unreadable
    else:
        _drop_data(store, work, grace, protected, done)
    if isinstance(store, LocalStore):
        for item in work.leftovers:
            store.remove_leftover(item.key)
            done.leftovers.append(item)
    return done


def _drop_manifests(
    store: Store, work: Plan, grace: float, rescued: set[str], done: Outcome
) -> set[str]:
    """Delete the planned manifests no kept ref or pin names and still older than ``grace``
    (a pin or a save makes its manifest young); returns the digests of those kept."""
    kept: set[str] = set()

    def drop(item: ObjectInfo) -> None:
        digest = _digest_of(item.key)
        fresh = None if digest in rescued else store.head(item.key)
        if digest not in rescued and fresh is None:
            return  # gone already (another prune): not ours to count
        if fresh is not None and _older(fresh, grace):
            store.delete(item.key)
            done.deleted(done.manifests, item)
            return
        done.keep(item.key)
        with done.lock:
            kept.add(digest)

    parallel(drop, work.manifests, 8)
    gone = {item.key for item in done.manifests}
    done.manifests = [item for item in work.manifests if item.key in gone]  # the plan's order
    return kept


def _drop_data(store: Store, work: Plan, grace: float, protected: set[str], done: Outcome) -> None:
    """Delete the planned blobs and packs no kept manifest names and still older than
    ``grace`` when looked at again (a save reusing one touches it)."""

    def drop(item: ObjectInfo) -> None:
        if item.key in protected:
            done.keep(item.key)
            return
        fresh = store.head(item.key)
        if fresh is None:
            return  # gone already (another prune): not ours to count
        if _older(fresh, grace):
            store.delete(item.key)
            done.deleted(done.data, item)
        else:
            done.keep(item.key)

    parallel(drop, work.data, 8)
    gone = {item.key for item in done.data}
    done.data = [item for item in work.data if item.key in gone]  # the plan's order, as listed


def _drop_refs(store: Store, work: Plan, namespace: str, done: Outcome) -> set[str]:
    """Delete each stale ref (and its use record) that is still unused and unchanged; returns
    the manifests the refs kept name (saved or restored since the plan)."""
    rescued: set[str] = set()

    def check(stale: StaleRef) -> None:
        use_key = layout.use_key(namespace, layout.key_from_ref(namespace, stale.object_key))
        ref, use = store.head(stale.object_key), store.head(use_key)
        if _still_stale(stale, ref, use, work.older_than):
            if ref is not None:
                store.delete(stale.object_key)
                done.deleted_ref(stale.object_key)
            store.delete(use_key)
            return
        done.keep(stale.object_key)
        digest = _manifest_named(store, stale.object_key)
        if digest is not None:
            with done.lock:
                rescued.add(digest)

    parallel(check, work.refs, 8)
    gone = set(done.refs)
    done.refs = [r.object_key for r in work.refs if r.object_key in gone]  # the plan's order
    return rescued


def _older(info: ObjectInfo, seconds: float) -> bool:
    """Whether a HEAD says the object is older than ``seconds``: never when it did not say
    (UNKNOWN_MODIFIED), so an unreadable Last-Modified keeps the object."""
    return info.modified != UNKNOWN_MODIFIED and time.time() - info.modified > seconds


def _still_stale(
    stale: StaleRef, ref: ObjectInfo | None, use: ObjectInfo | None, older_than: float
) -> bool:
    """Whether neither a save (the ref) nor a restore (its use record) came since the plan."""
    now = time.time()
    if ref is not None and (
        ref.modified > stale.modified  # a listing may keep milliseconds a HEAD drops: never >
        or _etag_changed(stale.etag, ref.etag)
        or now - ref.modified <= older_than
    ):
        return False
    # an unknown time (UNKNOWN_MODIFIED, the newest) reads as a save or restore since the plan
    return use is None or (use.modified <= stale.used and now - use.modified > older_than)


def _etag_changed(planned: str, fresh: str) -> bool:
    """Whether two etags, both known, differ (quotes and a weak ``W/`` aside)."""
    a, b = (e.strip().removeprefix("W/").strip('"') for e in (planned, fresh))
    return bool(a and b) and a != b


def _manifest_named(store: Store, object_key: str) -> str | None:
    """The manifest a ref names now; None when it is gone or unusable."""
    got = store.get(object_key, limit=refs.MAX_REF)
    return None if got is None else refs.manifest_of(got[0])


def _digest_of(key: str) -> str:
    return key.rsplit("/", 1)[-1].removesuffix(".json")


def run(inp: PruneInputs, rt: Runtime) -> Result:
    """``cache-weights prune``: plan what nothing recent names, then delete it (not in a dry run).

    Raises InputError for a bad store URL and StoreError when the store fails.
    """
    store = plan_store(inp, rt)
    if store is None:
        return _plan_without_credentials(store_url(inp, rt))
    namespace = layout.namespace(rt.environ)
    older_than, keep, grace, prefix = inp.older_than, inp.keep, inp.grace, inp.prefix
    result = Result(command="cache-weights prune")
    if grace < 2 * layout.TOUCH_AFTER:
        result.warning(
            f"grace {human_age(grace)} is under {human_age(2 * layout.TOUCH_AFTER)}: a save "
            "running now may lose a blob it reuses",
            "gpu-ci cache prune",
        )
    if isinstance(store, LocalStore) and not store.exists():
        result.headline = f"nothing to prune: {store.url} does not exist"
        return result
    work = plan(store, namespace, prefix, older_than, keep, grace)
    done = Outcome.planned(work) if rt.dry_run else execute(store, work, grace, namespace)
    _report_prune(result, store.url, namespace, (work, done), grace, rt.dry_run)
    return result


def _report_prune(
    result: Result,
    url: str,
    namespace: str,
    what: tuple[Plan, Outcome],
    grace: float,
    dry_run: bool,
) -> None:
    """What was (or would be) deleted, what the re-checks kept, and what the grace period held
    back."""
    work, done = what
    verb = "would delete" if dry_run else "deleted"
    for warning in work.ignored:
        result.warning(warning, "gpu-ci cache prune: ref ignored")
    for warning in work.unreadable + done.warnings:
        result.warning(warning, "gpu-ci cache prune: data kept")
    keys = [layout.key_from_ref(namespace, k) for k in done.refs]
    swept = f", {len(done.leftovers)} temp file(s) left by killed saves" if done.leftovers else ""
    kept = f"; {work.pinned} pinned manifest(s) kept" if work.pinned else ""
    if done.kept:
        kept += (
            f"; kept {len(done.kept)} object(s) saved, restored, pinned or reused since the listing"
        )
    result.headline = (
        f"{verb} {len(keys)} key(s), {len(done.manifests)} manifest(s), "
        f"{len(done.data)} blob(s)/pack(s){swept}, freeing {human_bytes(done.bytes)}{kept}"
    ) + _held_note(work, grace, dry_run)
    rows = [["key", k, ""] for k in keys]
    rows += [["manifest", o.key, human_bytes(o.size)] for o in done.manifests]
    rows += [["data", o.key, human_bytes(o.size)] for o in done.data]
    rows += [["temp file", o.key, human_bytes(o.size)] for o in done.leftovers]
    if rows:
        result.summary.append(markdown_table(["kind", "object", "size"], rows[:200]))
    if work.held_manifests or work.held_data:
        note = _held_note(work, grace, dry_run).removeprefix("; ")
        result.summary.append(f"{note[0].upper()}{note[1:]}.")
    result.report = {
        "store": url,
        "namespace": namespace,
        "dry_run": dry_run,
        "keys": keys,
        "manifests": [o.key for o in done.manifests],
        "data": [o.key for o in done.data],
        "leftovers": [o.key for o in done.leftovers],
        "bytes_freed": done.bytes,
        "kept_changed": done.kept,
        "kept_young": work.kept_young,
        "kept_pinned": work.pinned,
        "held_by_grace": {
            "grace_seconds": grace,
            "manifests": [o.key for o in work.held_manifests],
            "data": [o.key for o in work.held_data],
            "bytes": work.held_bytes,
            "deletable_after": _iso(work.held_until(grace)),
        },
    }


def _plan_without_credentials(url: str) -> Result:
    """A dry run with no AWS credentials here: nothing to list, so say what a run needs."""
    result = Result(command="cache-weights prune")
    result.headline = (
        f"would need credentials: listing {url} skipped, no AWS credentials on this machine; "
        f"a real run needs list, read and delete access to the bucket ({CREDENTIAL_SOURCES})"
    )
    result.report = {
        "store": url,
        "dry_run": True,
        "lookup": "skipped",
        "reason": "no AWS credentials on this machine",
        "needs": f"list, read and delete access to the bucket: {CREDENTIAL_SOURCES}",
    }
    return result


def _iso(when: float | None) -> str | None:
    """A time for the report; "far future" for one no date can show (a store's clock or a
    hostile object's time past year 9999 must not fail a prune that already deleted)."""
    if when is None:
        return None
    try:
        return datetime.fromtimestamp(when, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, ValueError, OSError):
        return "far future"


def _held_note(work: Plan, grace: float, plan: bool) -> str:
    """Why unnamed data stays: the grace period (a save may be writing it), and until when."""
    until = work.held_until(grace)
    if until is None:
        return ""
    keeps = "would keep" if plan else "kept"
    return (
        f"; the {human_age(grace)} grace period {keeps} {len(work.held_manifests)} manifest(s) and "
        f"{len(work.held_data)} blob(s)/pack(s) ({human_bytes(work.held_bytes)}) that no "
        f"remaining key names, since a save may still be writing them: a prune after "
        f"{_iso(until)} (in {_wait(until - time.time())}) deletes them"
    )


def _wait(seconds: float) -> str:
    minutes = max(1, int(seconds + 59) // 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    parts = [f"{n}{unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "m")) if n]
    return "".join(parts)
