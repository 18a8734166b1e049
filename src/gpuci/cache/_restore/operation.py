"""A restore, the operation: lookup -> plan -> place -> record, returning a typed outcome.

Look up the ref (by manifest digest, exact key, then restore-keys prefixes, newest first) and
fetch its manifest; plan what to place (include, layout, the number of roots); place it with
:func:`gpuci.cache._restore.place.restore_tree`; record the use and the journal entry. A miss, a
dry run and lookup-only stop early. This knows nothing of action outputs: the command
(:mod:`gpuci.cache._restore.command`) and the Python API (:mod:`gpuci.cache.api`) both call
:func:`restore` and read its :class:`Restore`; :mod:`gpuci.cache._restore.report` renders it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

from gpuci import journal
from gpuci.cache import _layout as layout
from gpuci.cache._common import plan_store, store_url
from gpuci.cache._format import manifest as mf
from gpuci.cache._format import refs
from gpuci.cache._format.refs import fetch_by_digest, fetch_manifest
from gpuci.cache._format.select import select, unmatched
from gpuci.cache._restore.place import Moved, read_entry, restore_tree
from gpuci.cache._stores.base import Store
from gpuci.cache._stores.file import LocalStore
from gpuci.cache._stores.tier import LocalTier
from gpuci.cache._stores.tier_open import open_tier
from gpuci.cache._stores.tier_policy import TierChoice
from gpuci.cache.options import RestoreInputs
from gpuci.errors import InputError, StoreError
from gpuci.runtime import Runtime

__all__ = ["Match", "Request", "Restore", "restore"]

Stage = Literal["no-credentials", "miss", "plan", "restored"]


@dataclass
class Request:
    """A restore's inputs, checked: what to look up, where, and what to do on a miss."""

    inp: RestoreInputs
    start: float
    key: str
    by_manifest: str
    paths: list[str]
    restore_keys: list[str]
    store: Store
    empty_local: bool  # a local store with nothing saved yet
    tier: LocalTier | None
    tier_choice: TierChoice
    namespace: str
    populate: str  # the command to run on a miss, stripped


@dataclass
class Match:
    """What the lookup found and the plan picked from it."""

    ref: refs.Ref
    exact: bool
    whole: mf.Manifest
    manifest_bytes: int
    manifest: mf.Manifest
    partial: bool
    matched_key: str  # "" for a restore by digest: it matched no key (the digest is `manifest`)
    outcome: str
    described: dict[str, Any]  # what the report says of the match, planned or done

    @property
    def files(self) -> int:
        return len(self.manifest.files)

    @property
    def size(self) -> int:
        return self.manifest.total_bytes


@dataclass
class Restore:
    """What one restore found and did, typed; the outputs and the report are rendered from it.

    ``stage`` says how far it went: ``no-credentials`` (a dry run on S3 with no credentials
    here: nothing was asked), ``miss``, ``plan`` (a dry run or lookup-only found a match) or
    ``restored``. ``warnings`` are (message, title) pairs in the order they arose.
    """

    stage: Stage
    key: str  # the key asked for, or "manifest <digest>" for a restore by digest
    store: str  # the store's URL, fit to print
    seconds: float
    request: Request | None = None  # None only at stage no-credentials
    match: Match | None = None  # None on a miss
    moved: Moved | None = None  # set once restored
    local: int = 0  # at stage plan: bytes of the tree the local tier holds already
    warnings: list[tuple[str, str]] = field(default_factory=list)


def restore(inp: RestoreInputs, rt: Runtime) -> Restore:
    """Restore the tree ``inp`` names (a miss, a dry run or lookup-only stop early).

    Args:
        inp: the checked inputs (:func:`gpuci.inputs.checked`); ``populate`` and
            ``fail-on-miss`` are the caller's to act on (see ``Restore.request``).
        rt: the environment, dry-run flag, log and masks.

    Returns:
        What was found and placed; a miss is ``stage="miss"``, not an error.

    Raises:
        InputError: a bad key, manifest, path or path count, or another repo's tree.
        StoreError: the store cannot be read.
        IntegrityError: restored bytes that do not match their digests.
    """
    done = _begin(inp, rt)
    req = done.request
    if req is None:  # a plan without credentials: nothing to look up
        return done
    match = _lookup(req, done.warnings)
    if match is None:
        done.seconds = time.monotonic() - req.start
        return done
    _plan(req, match, done.warnings)
    done.match = match
    if rt.dry_run or req.inp.lookup_only:
        done.stage = "plan"
        done.seconds = time.monotonic() - req.start
        done.local = _local_bytes(req.tier, match.manifest)
        _tier_warnings(done)
        return done
    # No key was used by a restore by digest: nothing to record.
    recording = (
        None if req.by_manifest else refs.UseRecording(req.store, req.namespace, match.ref.key)
    )
    done.moved = restore_tree(
        req.store, match.manifest, req.paths, rt, f"restore {match.ref.key}", req.tier
    )
    done.stage = "restored"
    done.seconds = time.monotonic() - req.start
    _record_restore(done, rt, recording)
    _tier_warnings(done)
    return done


def _begin(inp: RestoreInputs, rt: Runtime) -> Restore:
    """The inputs checked and the store and tier opened: a restore that has missed so far (or
    a plan without credentials, which goes no further)."""
    start = time.monotonic()
    by_manifest = _manifest_input(inp)
    key = refs.check_key(inp.key) if inp.key else f"manifest {by_manifest[:12]}"
    paths = _target_paths(inp, rt)
    restore_keys = [refs.check_key(p, "restore-keys") for p in inp.restore_keys]
    store = plan_store(inp, rt)
    if store is None:
        seconds = time.monotonic() - start
        return Restore("no-credentials", key, store_url(inp, rt), seconds)
    tier, tier_notes, tier_choice = open_tier(
        rt.environ,
        local_cache=inp.local_cache,
        local_cache_size=inp.local_cache_size,
        local_cache_mode=inp.local_cache_mode,
    )
    req = Request(
        inp=inp,
        start=start,
        key=key,
        by_manifest=by_manifest,
        paths=paths,
        restore_keys=restore_keys,
        store=store,
        empty_local=isinstance(store, LocalStore) and not store.exists(),
        tier=tier,
        tier_choice=tier_choice,
        namespace=layout.namespace(rt.environ),
        populate=inp.populate.strip(),
    )
    done = Restore("miss", key, store.url, 0.0, req)
    done.warnings.extend((note, "gpu-ci local cache") for note in tier_notes)
    return done


def _manifest_input(inp: RestoreInputs) -> str:
    """The manifest digest to restore by ('' when restoring by key), checked against the rest."""
    by_manifest = inp.manifest.strip()
    if by_manifest:
        by_manifest = layout.manifest_digest(by_manifest)
        if inp.populate.strip() or inp.restore_keys:
            raise InputError(
                "manifest restores one exact tree: populate and restore-keys do not apply",
                hint="drop populate and restore-keys, or restore by key instead",
            )
    elif not inp.key.strip():
        raise InputError(
            "restore needs a key or manifest",
            hint="give key (a cache key) or manifest (a sha256 from provenance.json)",
        )
    return by_manifest


def _lookup(req: Request, warnings: list[tuple[str, str]]) -> Match | None:
    """Find the ref (by manifest, key or restore-keys prefix) and fetch its manifest."""
    store, inp = req.store, req.inp
    whole: mf.Manifest | None = None
    manifest_bytes = 0
    found: tuple[refs.Ref, bool] | None = None
    if req.by_manifest:  # one exact tree, whatever the keys name now
        found = (
            refs.Ref(key=f"manifest {req.by_manifest[:12]}", manifest=req.by_manifest),
            True,
        )
        whole, manifest_bytes = fetch_by_digest(store, req.by_manifest)
    elif not req.empty_local:
        by_key = _find_by_key(req, warnings)
        if by_key is not None:
            found, whole, manifest_bytes = by_key
    if whole is not None and inp.layout == "hf":
        from gpuci.cache._format import hf  # for layout: hf only; a plain restore skips it

        if other := hf.foreign_folder(whole, inp.hf_repo):
            _foreign_repo(warnings, found, other, inp)
            found = None
    if found is None:
        return None
    assert whole is not None
    ref, exact = found
    return Match(ref, exact, whole, manifest_bytes, whole, False, "", "", {})


# A prune may delete a ref and its manifest between this restore's read of the one and of the
# other: the lookup is made again up to this many times before a missing manifest is a miss.
LOOKUP_RETRIES = 2


def _find_by_key(
    req: Request, warnings: list[tuple[str, str]]
) -> tuple[tuple[refs.Ref, bool], mf.Manifest, int] | None:
    """The ref (exact key, else restore-keys) and its manifest, fetched; None on a miss.

    A manifest missing when its ref was just read is a race with prune (or a save moving the
    ref): the lookup is made again while the ref turns out deleted or moved. A ref that still
    names a missing manifest is a miss with a warning, as is a lookup that keeps racing: the
    job goes on (populate, or builds without the cache) instead of failing.
    """
    store = req.store
    for _ in range(LOOKUP_RETRIES + 1):
        ignored: list[str] = []
        found = refs.lookup(store, req.namespace, req.key, req.restore_keys, ignored)
        fetched = None if found is None else _fetch_named(store, req.namespace, found[0])
        if fetched != "moved":
            break
    warnings.extend((warning, "gpu-ci cache: ref ignored") for warning in ignored)
    if found is None:
        return None
    if isinstance(fetched, tuple):
        return found, *fetched
    ref = found[0]
    warnings.append(
        (
            f"the ref {refs.escape(ref.key)} names manifest {ref.manifest[:12]}, which is missing "
            f"from {store.url}: treated as a miss (a prune may have deleted it; save the key "
            "again)",
            "gpu-ci cache: manifest missing",
        )
    )
    return None


def _fetch_named(
    store: Store, namespace: str, ref: refs.Ref
) -> tuple[mf.Manifest, int] | Literal["moved", "missing"]:
    """The manifest ``ref`` names (and its size); when it is missing, ``moved`` if the ref was
    deleted or names another manifest since it was read, else ``missing``. StoreError when the
    store fails to serve a manifest it holds."""
    try:
        return fetch_manifest(store, ref.manifest)
    except StoreError:
        if store.head(layout.manifest_key(ref.manifest)) is not None:
            raise  # the manifest is there: the store failed to serve it
    now = refs.read(store, namespace, ref.key)
    return "missing" if now is not None and now.manifest == ref.manifest else "moved"


def _plan(req: Request, match: Match, warnings: list[tuple[str, str]]) -> None:
    """Pick the files to place (include/layout) and describe the match for the report."""
    ref, whole, paths, inp = match.ref, match.whole, req.paths, req.inp
    if len(whole.roots) != len(paths):
        raise InputError(
            f"{ref.key} was saved from {len(whole.roots)} path(s), this restore lists {len(paths)}",
            hint="list as many paths, in the same order, as the save did",
        )
    match.manifest = _pick(req.store, whole, inp)
    nothing = unmatched(whole, inp.include)
    if nothing:
        warnings.append(
            (
                f"include {', '.join(repr(p) for p in nothing)} matches nothing in {ref.key} "
                f"({len(whole.files)} files); check the pattern (no '/' matches a file name "
                "anywhere, with '/' the whole path)",
                "gpu-ci cache: include matched nothing",
            )
        )
    match.partial = len(match.manifest.files) != len(whole.files)
    match.matched_key = "" if req.by_manifest else ref.key
    match.outcome = "hit" if match.exact else f"partial hit ({ref.key})"
    tier = req.tier
    match.described = {
        "key": req.key,
        "matched_key": ref.key,
        "hit": match.exact,
        "manifest": ref.manifest,
        "store": req.store.url,
        "local_cache": str(tier.root) if tier else None,
        "local_cache_mode": tier.mode if tier else None,
        "local_cache_policy": req.tier_choice.text,
        "files": match.files,
        "bytes": match.size,
    }


def _record_restore(done: Restore, rt: Runtime, recording: refs.UseRecording | None) -> None:
    """The key's last use in the store (prune reads it; written while the tree came) and the
    journal entry."""
    req, match, moved = done.request, done.match, done.moved
    assert req is not None and match is not None and moved is not None
    ref, store = match.ref, req.store
    if recording is not None:
        unrecorded = recording.result()
        if unrecorded:
            done.warnings.append(
                (
                    f"restored, but the last use of {ref.key} was not recorded ({unrecorded}): "
                    "prune --older-than will judge the key by when it was saved; to record uses, "
                    "let these credentials write uses/ in the store",
                    "gpu-ci cache: last use not recorded",
                )
            )
    journal.record(
        "cache-restore",
        {
            "key": req.key,
            "matched_key": ref.key,
            "manifest": ref.manifest,
            "store": store.url,
            "endpoint_url": _endpoint(store),
            "path": req.paths,
            "files": match.files,
            "bytes": match.size,
            "bytes_local": moved.from_local,
            "producer": match.manifest.producer,
        },
        rt.environ,
    )


def _foreign_repo(
    warnings: list[tuple[str, str]], found: Any, other: str, inp: RestoreInputs
) -> None:
    """A match saved for another Hugging Face repo: exit 2 for the key itself, a miss for a
    restore-keys prefix (another repo's weights are never a start for this one)."""
    from gpuci.cache._format import hf

    ref, exact = found
    wanted = hf.repo_folder(inp.hf_repo)
    if exact:
        raise InputError(
            f"key {ref.key} holds {other}, not {wanted}: restoring it would load another model",
            hint="give each hf-repo its own key (e.g. put the repo id in the key)",
        )
    warnings.append(
        (
            f"restore-keys matched {ref.key}, saved for {other}, not {wanted}: skipped",
            "gpu-ci cache: another repo",
        )
    )


def _target_paths(inp: RestoreInputs, rt: Runtime) -> list[str]:
    """The folders to restore into: ``path``, or the hub cache folder for ``layout: hf``."""
    if inp.layout == "hf":
        from gpuci.cache._format import hf

        return hf.paths(inp.hf_repo, inp.path, rt.environ)
    paths = inp.path
    if not paths:
        raise InputError("no path to restore into", hint="list the target folders in path")
    return paths


def _pick(store: Store, manifest: mf.Manifest, inp: RestoreInputs) -> mf.Manifest:
    """Apply hf-revision, then include/exclude: the part of the tree this restore wants."""
    revision = inp.hf_revision.strip()
    if inp.layout == "hf" and revision:
        from gpuci.cache._format import hf

        commit = revision
        for entry in manifest.files:
            if entry.path == f"refs/{revision}" and 0 < entry.size <= 4096:
                commit = read_entry(store, entry).decode(errors="replace").strip()
        manifest = hf.pick_revision(manifest, revision, commit)
    return select(manifest, inp.include, inp.exclude)


def _endpoint(store: Store) -> str:
    """The S3 endpoint when not AWS's, fit to record and print (provenance replays it)."""
    from gpuci.cache._stores.base import redact_url

    endpoint = getattr(store, "endpoint_url", None)
    return redact_url(str(endpoint)) if endpoint else ""


def _local_bytes(tier: LocalTier | None, manifest: mf.Manifest) -> int:
    """Bytes of the tree the tier holds: as runs of their packs, or as blobs."""
    if tier is None:
        return 0
    files = manifest.files
    return sum(e.size for e, h in zip(files, tier.holds(files, repair=False), strict=True) if h)


def _tier_warnings(done: Restore) -> None:
    tier = done.request.tier if done.request else None
    done.warnings.extend((note, "gpu-ci local cache") for note in (tier.warnings() if tier else []))
