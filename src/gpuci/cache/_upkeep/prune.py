"""``cache-weights prune``: keys unused for a while go, then whatever no remaining key reaches.

Three passes, in the order that keeps every surviving ref whole:
1. refs (this namespace) neither saved nor restored within ``older-than``, except the ``keep``
   newest of each prefix;
2. manifests no ref in any namespace names and no pin (``pins/<sha256>.json``) keeps, once
   older than ``grace``;
3. blobs and packs no surviving manifest names, once older than ``grace``.

An object whose age the store does not say (a HEAD without a readable Last-Modified) is never
old enough: it stays. One run plans at most ``MAX_PLANNED`` objects; a later run goes on.
What killed saves left behind (a file store's temp files, an S3 store's open multipart uploads:
``Store.leftovers``) goes too, once older than ``grace``.

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

import functools
import time
from dataclasses import replace

from gpuci.cache import _layout as layout
from gpuci.cache._common import plan_store, store_url
from gpuci.cache._format import manifest as mf
from gpuci.cache._format import refs
from gpuci.cache._stores.base import UNKNOWN_MODIFIED, ObjectInfo, Store
from gpuci.cache._stores.file import LocalStore
from gpuci.cache._upkeep import pins
from gpuci.cache._upkeep.options import PruneInputs
from gpuci.cache._upkeep.prune_plan import Outcome, Plan, StaleRef
from gpuci.cache._upkeep.prune_report import report, without_credentials
from gpuci.errors import InputError, StoreError
from gpuci.ranged._pool import parallel
from gpuci.redact import excerpt
from gpuci.runtime import Result, Runtime
from gpuci.units import human_age

__all__ = ["MAX_PLANNED", "Outcome", "Plan", "StaleRef", "execute", "group_of", "plan", "run"]

# The most manifests, blobs and packs one prune holds in its plan (to delete, or held back by the
# grace period): a listing inside the client's caps (1,000,000 keys) held whole took ~440 MiB.
# Past it the plan stops listing and the run deletes what it planned; a later prune goes on
# (a subset of what nothing reaches is as safe to delete as all of it).
MAX_PLANNED = 200_000


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
    planned = {r.object_key: r for r in dropping}
    kept: list[str] = []
    etags: dict[str, str] = {}
    for item in store.list(f"{layout.REFS}/"):
        stale = planned.get(item.key)
        if stale is None:
            kept.append(item.key)
        elif item.modified == stale.modified:
            etags[item.key] = item.etag
    named = parallel(functools.partial(_manifest_named, store), kept, 8)
    names = {digest for digest in named if digest is not None}
    with_etags = [replace(r, etag=etags.get(r.object_key, "")) for r in dropping]
    return names, with_etags


def _reached(store: Store, manifests: list[str]) -> tuple[set[str], list[str]]:
    """Blob and pack keys the given manifests name, and a warning for each of them that is
    there but cannot be read (a newer format, damage): what it names is then unknown, so the
    caller deletes no blob or pack at all. A manifest that is gone names nothing."""
    keys: set[str] = set()
    unreadable: list[str] = []

    def read(digest: str) -> set[str] | str:
        """The keys the manifest names (none when gone), or why it cannot be read."""
        got = store.get(layout.manifest_key(digest), limit=mf.MAX_MANIFEST)
        try:
            return pins.data_keys(refs.parse_checked(got[0], digest)) if got is not None else set()
        except InputError as exc:
            return _unreadable(digest, exc.message)

    for found in parallel(read, manifests, 8):
        if isinstance(found, str):
            unreadable.append(found)
        else:
            keys.update(found)
    return keys, sorted(unreadable)


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
        elif _full(out):
            out.cut = MAX_PLANNED  # live manifests not listed yet: no data is planned this run
            break
        elif now - item.modified <= grace:
            young.append(digest)  # a save may be about to write its ref
            out.kept_young += 1
            out.held_manifests.append(item)
        else:
            out.manifests.append(item)
    if not out.cut:
        _plan_data(store, out, live, young, now, grace)
    if out.unreadable:
        out.data = []  # a kept manifest may name any of them
    out.leftovers = _leftovers(store, grace, out.notes)
    return out


def _leftovers(store: Store, grace: float, notes: list[str]) -> list[ObjectInfo]:
    """Temp files (a file store) and open multipart uploads (S3) killed saves left, older than
    ``grace``; a store that refuses to list its uploads (no s3:ListBucketMultipartUploads) is
    a note, never the prune's failure."""
    try:
        return store.leftovers(grace)
    except StoreError as exc:
        if store.local_disk:
            raise
        notes.append(f"open multipart uploads were not looked for: {exc.message}")
        return []


def _full(out: Plan) -> bool:
    """Whether the plan holds :data:`MAX_PLANNED` objects (it then stops listing)."""
    held = len(out.held_manifests) + len(out.held_data)
    return len(out.manifests) + len(out.data) + held >= MAX_PLANNED


def _plan_data(
    store: Store, out: Plan, live: list[str], young: list[str], now: float, grace: float
) -> None:
    """The blobs and packs no live manifest reaches, minus what the grace period holds (young,
    or reached only by a young manifest); listing stops once the plan is full."""
    reached, unreadable = _reached(store, live)
    young_reached, young_unreadable = _reached(store, young)
    reached_young = young_reached - reached
    out.unreadable = unreadable + young_unreadable
    for base in (layout.BLOBS, layout.PACKS):
        for item in store.list(f"{base}/"):
            if item.key in reached:
                continue
            if _full(out):
                out.cut = MAX_PLANNED
                return
            if item.key in reached_young:
                out.held_data.append(item)  # kept with the young manifest that names it
            elif now - item.modified <= grace:
                out.kept_young += 1
                out.held_data.append(item)
            else:
                out.data.append(item)


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
    for index, item in enumerate(work.leftovers):
        try:
            store.remove_leftover(item.key)
        except StoreError as exc:  # never the prune's failure: the rest is done
            # ... and the end of the leftovers: a store that stalls each abort for its time
            # limit would hold the prune that long for each of 10,000 (a later prune goes on).
            left = len(work.leftovers) - index - 1
            more = f"; {left} more were not tried" if left else ""
            done.warnings.append(f"{item.key} was left as it is: {exc.message}{more}")
            break
        done.leftovers.append(item)
    return done


def _drop_manifests(
    store: Store, work: Plan, grace: float, rescued: set[str], done: Outcome
) -> set[str]:
    """Delete the planned manifests no kept ref or pin names and still older than ``grace``
    (a pin or a save makes its manifest young); returns the digests of those kept."""

    def drop(item: ObjectInfo) -> str | None:
        """The manifest deleted when still old; its digest when kept."""
        digest = _digest_of(item.key)
        fresh = None if digest in rescued else store.head(item.key)
        if digest not in rescued and fresh is None:
            return None  # gone already (another prune): not ours to count
        if fresh is not None and _older(fresh, grace):
            store.delete(item.key)
            done.deleted(done.manifests, item)
            return None
        done.keep(item.key)
        return digest

    kept = {digest for digest in parallel(drop, work.manifests, 8) if digest is not None}
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

    def check(stale: StaleRef) -> str | None:
        """The ref deleted when still stale; else the manifest it names now."""
        use_key = layout.use_key(namespace, layout.key_from_ref(namespace, stale.object_key))
        ref, use = store.head(stale.object_key), store.head(use_key)
        if _still_stale(stale, ref, use, work.older_than):
            if ref is not None:
                store.delete(stale.object_key)
                done.deleted_ref(stale.object_key)
            store.delete(use_key)
            return None
        done.keep(stale.object_key)
        return _manifest_named(store, stale.object_key)

    rescued = {digest for digest in parallel(check, work.refs, 8) if digest is not None}
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
        return without_credentials(store_url(inp, rt))
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
    report(result, store.url, namespace, (work, done), grace, rt.dry_run)
    return result
