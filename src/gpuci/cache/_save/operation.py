"""A save, the operation: hash a tree, upload only what the store lacks, then manifest, then ref.

Order is the whole safety story: blobs and packs first, the manifest once every object it names
exists, the ref last and conditionally. A save killed at any point leaves, at worst, orphan
blobs (harmless, prunable), never a ref naming something missing. Small files are deduplicated
against the manifests this job already knows (the key's current one and any restored earlier in
the job), so re-saving after changing one file uploads that file plus metadata.

The phases: scan (:mod:`gpuci.cache._format.tree`); hash and upload, together
(:mod:`gpuci.cache._save.upload`: each large file read once, its upload started as soon as its
name is known; small files in packs); publish (:func:`_publish_tree`: the manifest, then the ref,
moved conditionally; a lost race leaves the other job's tree standing and says so); record (the
journal), over one :class:`gpuci.cache._save.state.Saver`. It returns a typed :class:`Save` and
knows nothing of action outputs: the command (:mod:`gpuci.cache._save.command`) renders it with
:mod:`gpuci.cache._save.report`, and the Python API (:mod:`gpuci.cache.api`) reads it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, NoReturn

from gpuci import journal
from gpuci.cache import _layout as layout
from gpuci.cache._common import Connections, plan_store, store_url
from gpuci.cache._format import hf, refs
from gpuci.cache._format import manifest as mf
from gpuci.cache._format.tree import Tree, resolve_path, scan
from gpuci.cache._save.state import Saver, SaveStats
from gpuci.cache._save.upload import BlobUploads, pack_small
from gpuci.cache._stores.base import Store
from gpuci.cache._stores.tier_open import open_tier
from gpuci.cache._stores.tier_policy import TierChoice, choose
from gpuci.cache.options import SaveInputs
from gpuci.errors import ConflictError, InputError, StoreError
from gpuci.retry import Interrupted
from gpuci.runtime import Runtime
from gpuci.units import human_bytes

if TYPE_CHECKING:
    from gpuci.background import Background

__all__ = ["OUTCOMES", "Save", "save"]

# The ``outcome`` output: one word per outcome, for `if:` conditions in a workflow.
OUTCOMES = {
    "saved": "saved",
    "updated": "updated",
    "unchanged": "unchanged",
    "saved by another job (same content)": "same-content",
    "lost race": "lost-race",
    "would save": "would-save",
    "would update": "would-update",
}

# How long a failed or interrupted save waits for the conditional-writes question once its
# requests are stopped: it ends at once, its retry waits too, whichever flag they began under
# (:class:`~gpuci.cache._stores.s3.pool.StopWait`); a bound, not a wait expected to run out.
QUESTION_GRACE_S = 5.0

Stage = Literal["missing-paths", "no-credentials", "done"]
Warnings = list[tuple[str, str]]


@dataclass
class Save:
    """What one save did (or, in a dry run, would do), typed; the outputs are rendered from it.

    ``stage`` says how far it went: ``missing-paths`` (a dry run before the tree exists),
    ``no-credentials`` (a dry run on S3 with no credentials here: the tree was measured, the
    store not asked) or ``done``. ``outcome`` is the sentence the headline uses ("lost race");
    :attr:`word` is the output's one word ("lost-race"). ``warnings`` are (message, title)
    pairs in the order they arose.
    """

    stage: Stage
    key: str
    store: str  # the store's URL, fit to print
    paths: list[str] | None
    outcome: str
    files: int
    size: int
    seconds: float
    dry_run: bool
    digest: str = ""  # the manifest the key names after this save
    stats: SaveStats = field(default_factory=SaveStats)
    connections: Connections | None = None  # None: nothing was sent
    tier_choice: TierChoice | None = None
    warnings: Warnings = field(default_factory=list)

    @property
    def word(self) -> str:
        """The outcome as the ``outcome`` output says it: saved, updated, lost-race..."""
        return OUTCOMES[self.outcome]

    @property
    def bytes_uploaded(self) -> int:
        """Blobs, packs, manifest and ref sent (a dry run: what would be sent)."""
        return self.stats.data_bytes + self.stats.meta_bytes


@dataclass
class _Planned:
    """What hashing and sending found: the manifest, whether the ref already names it, and the
    tier's copies of the saved files, going on beside the publish (None: no tier)."""

    manifest: mf.Manifest
    unchanged: bool
    fill: Background[int] | None = None


def save(inp: SaveInputs, rt: Runtime) -> Save:
    """Save the tree ``inp`` names: scan -> hash and upload (together) -> publish -> record.

    Args:
        inp: the checked inputs (:func:`gpuci.inputs.checked`).
        rt: the environment, dry-run flag, log and masks.

    Returns:
        What the save did; a lost race is an outcome with a warning, not an error.

    Raises:
        InputError: a bad key, no path, a path that is not there (a dry run plans instead), or
            a manifest over the cap.
        StoreError: the store cannot be read or written.
        ConflictError: the key changed under this save and could not be settled.
    """
    start = time.monotonic()
    key = refs.check_key(inp.key)
    paths = hf.paths(inp.hf_repo, inp.path, rt.environ) if inp.layout == "hf" else inp.path
    if not paths:
        raise InputError("no path to save", hint="list the folders or files to cache in path")
    store = plan_store(inp, rt)
    url = store.url if store is not None else store_url(inp, rt)
    try:
        tree = scan(paths, inp.follow_symlinks, linked_roots=not _computed_hf_folder(inp))
    except InputError:
        if rt.dry_run:
            seconds = time.monotonic() - start
            named = inp.path or None
            return Save("missing-paths", key, url, named, "would save", 0, 0, seconds, True)
        raise
    if store is None:
        files = [e for e in tree.entries if e.type == "file"]
        size, seconds = sum(e.size for e in files), time.monotonic() - start
        count = len(files)
        return Save("no-credentials", key, url, paths, "would save", count, size, seconds, True)
    if inp.layout == "hf" and inp.hf_revision.strip():
        _keep_revision(tree, inp.hf_revision.strip())
    saver = Saver(store, layout.namespace(rt.environ), key, rt)
    tier_notes, tier_choice = _open_tier(saver, inp)
    current = _current_ref(store, saver, rt)
    # The save's stop flag, made before the question starts: its waits and the uploads' end
    # together (a question asleep in a retry under an earlier flag outlived a failed save).
    stop = store.stop_flag()
    asked = _ask_conditional_writes(store, rt)
    try:
        planned = _hash_and_send(saver, tree, current, stop)
    except BaseException:
        _drop_question(store, stop, asked)
        raise
    warnings: Warnings = [(warning, "gpu-ci cache") for warning in tree.warnings]
    try:
        _answer(store, stop, asked)  # over by now, usually
        digest, outcome = _publish(saver, planned, current, warnings)
        if planned.fill is not None:
            planned.fill.wait()
    except BaseException:
        _settle(saver, planned.fill)
        raise
    for note in tier_notes + saver.tier_notes():
        warnings.append((note, "gpu-ci local cache"))
    done = _done(saver, paths, planned.manifest, digest, outcome, start)
    done.tier_choice, done.warnings = tier_choice, warnings
    if not rt.dry_run:
        _record(done, rt)
    return done


def _ask_conditional_writes(store: Store, rt: Runtime) -> Background[None] | None:
    """Whether the store honours conditional writes, asked on a thread while the tree hashes
    and uploads: on a store not probed yet that was 5 round trips (1 once recorded) between
    the manifest and the ref. The answer is kept in :mod:`~gpuci.cache._format.refs`' memory,
    where the publish finds it; a failure (an interrupted question too) is asked again there,
    and raised there, so the thread raises nothing: a wait for it raises only what lands in
    the waiting thread (a Ctrl-C)."""
    if rt.dry_run or getattr(store, "honours_conditional_writes", None) is not None:
        return None
    from gpuci.background import Background

    def ask() -> None:
        with contextlib.suppress(BaseException):
            refs.conditional_writes_honoured(store)

    return Background(ask, "gpuci-conditional")


def _answer(store: Store, stop: threading.Event, asked: Background[None] | None) -> None:
    """Wait for the question before the publish needs its answer; a Ctrl-C in this wait
    ends the question first (:func:`_drop_question`)."""
    if asked is None:
        return
    try:
        asked.wait()
    except BaseException:
        _drop_question(store, stop, asked)
        raise


def _drop_question(store: Store, stop: threading.Event, asked: Background[None] | None) -> None:
    """A save failing or interrupted while the question is asked: end its requests and wait
    for its thread, :data:`QUESTION_GRACE_S` at most. ``stop``, the save's flag, ends a retry's
    wait begun under it; a fresh flag of the store's, set, ends those in flight, refuses new
    ones and ends the retry waits begun under the fresh, unset flag a failed save's multipart
    aborts made the store's current one.
    A question left running went on sending probe objects and the store's record after a
    Ctrl-C, from a save that had returned."""
    if asked is None:
        return
    stop.set()
    store.stop_flag().set()
    asked.wait(time.monotonic() + QUESTION_GRACE_S)


def _settle(saver: Saver, fill: Background[int] | None) -> None:
    """A save failing or interrupted while the tier's copies go on: stop them, a chunk from
    where they are (their temp files removed, nothing of them published), and wait for them
    to end. Left to finish, a failed save's copy of a model's shard held its failure back by
    the whole copy, for files no manifest of this save names; left running after an interrupt,
    it was killed with the process, leaving its temp file (a model's size) until a sweep an
    hour later. The save's own failure (or the Ctrl-C) is the one raised."""
    if fill is None:
        return
    saver.stop_fill.set()
    try:
        with contextlib.suppress(Exception):
            fill.wait()
    except BaseException:  # a Ctrl-C in that wait: the copy still ends at its next chunk
        with contextlib.suppress(Exception):
            fill.wait()
        raise


def _computed_hf_folder(inp: SaveInputs) -> bool:
    """Whether the path is an hf repo folder gpu-ci named itself (layout hf, or the save of an
    hf restore's populate-on-miss, which passes that folder with an empty layout): one a job
    could have planted as a link to anywhere, so never saved through a link."""
    return inp.layout == "hf" or (not inp.layout and bool(inp.hf_repo.strip()))


def _open_tier(saver: Saver, inp: SaveInputs) -> tuple[list[str], TierChoice]:
    """Open the runner-local tier the saved files are copied into: its notes and the choice
    (a plan fills nothing: it only says whether a run would)."""
    environ = saver.rt.environ
    if saver.rt.dry_run:
        return [], choose(environ, inp.local_cache)
    saver.tier, notes, choice = open_tier(
        environ,
        local_cache=inp.local_cache,
        local_cache_size=inp.local_cache_size,
        local_cache_mode=inp.local_cache_mode,
    )
    return notes, choice


def _done(
    saver: Saver, paths: list[str], manifest: mf.Manifest, digest: str, outcome: str, start: float
) -> Save:
    """The outcome of a save that ran (or a dry run's plan), with the connections it used."""
    dry_run = saver.rt.dry_run
    sent = saver.stats.data_bytes > 0 and not dry_run  # connections only mean something then
    return Save(
        "done",
        saver.key,
        saver.store.url,
        paths,
        outcome,
        len(manifest.files),
        manifest.total_bytes,
        time.monotonic() - start,
        dry_run,
        digest,
        saver.stats,
        connections=Connections.of(saver.uploads) if sent else None,
    )


def _record(done: Save, rt: Runtime) -> None:
    """The journal entry of a save (a dry run's is not recorded)."""
    journal.record(
        "cache-save",
        {
            "key": done.key,
            "manifest": done.digest,
            "store": done.store,
            "paths": done.paths,
            "files": done.files,
            "bytes": done.size,
            "bytes_uploaded": done.bytes_uploaded,
            "outcome": done.outcome,
        },
        rt.environ,
    )


def _current_ref(store: Store, saver: Saver, rt: Runtime) -> refs.Ref | None:
    """The ref as it stands (a dry run on a store that does not exist yet has none)."""
    if not rt.dry_run or store.exists():
        started = time.monotonic()
        current = refs.read(store, saver.namespace, saver.key)
        saver.uploads.first_byte(time.monotonic() - started)  # one GET: a distance sample
        return current
    return None


def _hash_and_send(
    saver: Saver, tree: Tree, current: refs.Ref | None, stop: threading.Event
) -> _Planned:
    """Hash each large file as it is read and send the blobs the store lacks, meanwhile pack
    the small ones (reusing the current packs where they still match); then the manifest,
    and whether it is the tree the ref already names."""
    rt = saver.rt
    known, current_manifest = saver.known_small_files(current)
    files = [e for e in tree.entries if e.type == "file"]
    large = [e for e in files if e.size >= layout.PACK_THRESHOLD]
    small = [e for e in files if e.size < layout.PACK_THRESHOLD]
    blobs = BlobUploads(saver, tree, large, rt.dry_run, stop)
    blobs.start()  # large files hash and upload on their own threads while small ones pack
    try:
        pack_small(saver, tree, small, known, rt.dry_run, blobs.pool.cancelled)
        read = blobs.read()
    except BaseException as exc:
        _packs_failed(saver, blobs, exc)
    # Every file is read and named: the tier's copies start now, beside the last parts, the
    # uploads' completion and the publish, instead of after the ref (0.5 s of a 5 s save).
    fill = saver.fill_tier_beside(tree, files) if read and not rt.dry_run else None
    try:
        blobs.finish()
    except BaseException as exc:
        failed = _no_cause(saver) if isinstance(exc, Interrupted) else exc
        _settle(saver, fill)
        if failed is exc:
            raise
        raise failed from exc
    manifest = mf.Manifest(
        key=saver.key,
        roots=tree.roots,
        entries=tree.entries,
        created=mf.now_iso(),
        producer=mf.producer(rt.environ),
    )
    unchanged = current_manifest is not None and manifest.same_tree(current_manifest)
    return _Planned(manifest, unchanged, fill)


def _packs_failed(saver: Saver, blobs: BlobUploads, exc: BaseException) -> NoReturn:
    """The packs failed or were interrupted: stop the uploads (the store's requests in flight
    end now; a Ctrl-C waits on none) and raise the save's failure. The packs' own failure, or
    a Ctrl-C, stays the one raised. A pack refused by the store's stop flag (Interrupted, a
    BaseException, not a Ctrl-C) was stopped by a blob's failure: that is the one raised, the
    uploads then waited for as a failed save's are. Taken for a Ctrl-C, it ended the save as
    the pack's "requests were stopped", a traceback, the changed file unsaid."""
    blobs.cancel()
    stopped = isinstance(exc, Interrupted)
    failed: BaseException | None = None
    try:
        blobs.finish(interrupted=not (stopped or isinstance(exc, Exception)))
    except BaseException as caught:
        failed = caught
    if not stopped:
        raise exc
    if failed is not None and not isinstance(failed, Interrupted):
        raise failed from None
    raise _no_cause(saver) from exc


def _no_cause(saver: Saver) -> StoreError:
    """The save's requests were stopped, yet no failure was recorded as the cause and no
    Ctrl-C came (a bug): one line that says the save did not finish and the key was not
    moved, never an Interrupted's traceback, which no ``except Exception`` catches."""
    return StoreError(
        f"the save of {refs.escape(saver.key)} did not finish: its requests to "
        f"{saver.store.url} were stopped, with no failure recorded as the cause; "
        "the key was not moved",
        hint="run the save again; if it recurs, rerun with GPUCI_DEBUG=1 and report it",
    )


def _publish(
    saver: Saver, planned: _Planned, current: refs.Ref | None, warnings: Warnings
) -> tuple[str, str]:
    """Nothing to do when the ref already names this tree; else the manifest (every blob and
    pack it names is stored by now) and the ref: the manifest's digest and the outcome."""
    if planned.unchanged:
        digest = current.manifest if current else planned.manifest.digest()
        _record_use(saver, warnings)
        return digest, "unchanged"
    return _publish_tree(saver, planned.manifest, current, warnings)


def _record_use(saver: Saver, warnings: Warnings) -> None:
    """A save that writes no ref (the key already names this tree) still says the key is
    wanted: without a record, prune would judge the key by its last save with changes and
    delete a key saved every day. Recorded as a restore records a use, best effort."""
    if saver.rt.dry_run:
        return
    unrecorded = refs.touch_use(saver.store, saver.namespace, saver.key)
    if unrecorded:
        warnings.append(
            (
                f"the key {refs.escape(saver.key)} already names this tree, but this save was not "
                f"recorded as a use ({unrecorded}): prune --older-than will judge the key by "
                "when its ref was written; to record uses, let these credentials write uses/ "
                "in the store",
                "gpu-ci cache: last use not recorded",
            )
        )


def _keep_revision(tree: Tree, revision: str) -> None:
    """hf-revision on save: keep only that revision's ref, snapshot and the blobs it links."""
    root = resolve_path(tree.roots[0]["path"])
    commit = hf.commit_of(root, revision, tree.warnings)
    probe = mf.Manifest(key="", roots=tree.roots, entries=tree.entries)
    picked = hf.pick_revision(probe, revision, commit)
    keep = {(e.root, e.path) for e in picked.entries}
    tree.entries = [e for e in tree.entries if (e.root, e.path) in keep]


def _publish_tree(
    saver: Saver,
    manifest: mf.Manifest,
    current: refs.Ref | None,
    warnings: Warnings,
) -> tuple[str, str]:
    """The manifest (every object it names is stored by now), then move the ref (or say what a
    dry run would): the manifest's digest and the outcome."""
    store, namespace, key, rt = saver.store, saver.namespace, saver.key, saver.rt
    digest = manifest.digest()
    body = manifest.canonical()
    if len(body) > mf.MAX_MANIFEST:
        raise InputError(
            f"the manifest of {key} would be {human_bytes(len(body))}, over the "
            f"{mf.MAX_MANIFEST >> 20} MiB cap restore accepts ({len(manifest.entries)} "
            "entries)",
            hint="save the tree under several keys, or exclude what the job does not need",
        )
    ref_body = refs.ref_body(key, digest, len(manifest.files), manifest.total_bytes)
    if rt.dry_run:
        saver.stats.add(meta_bytes=len(body) + len(ref_body))
        return digest, "would save" if current is None else "would update"
    store.put(layout.manifest_key(digest), body)
    saver.stats.add(meta_bytes=len(body))
    if not refs.conditional_writes_honoured(store):
        warnings.append((refs.CONDITIONAL_WRITES_UNSAFE.format(url=store.url), "gpu-ci cache"))
    try:
        refs.write(store, namespace, key, ref_body, current)
        saver.stats.add(meta_bytes=len(ref_body))
        return digest, "saved" if current is None else "updated"
    except ConflictError as exc:
        outcome = _lost_race(store, namespace, key, manifest, saver, warnings, current, exc)
        winner = refs.read(store, namespace, key)
        return (winner.manifest if winner else digest), outcome


def _lost_race(
    store: Store,
    namespace: str,
    key: str,
    ours: mf.Manifest,
    saver: Saver,
    warnings: Warnings,
    read: refs.Ref | None,
    refused: ConflictError,
) -> str:
    """The ref was not moved: another job moved it between our read and our write (theirs
    stands), or, when it still names what we ``read``, the store refused the write (a lock
    another process holds): say which."""
    winner = refs.read(store, namespace, key)
    if winner is not None:
        theirs = saver.load_manifest(winner.manifest)
        if theirs is not None and theirs.same_tree(ours):
            _record_use(saver, warnings)
            return "saved by another job (same content)"
    unmoved = (winner.manifest if winner else None) == (read.manifest if read else None)
    if unmoved:
        warnings.append(
            (
                f"{key} was not updated: {refused.one_line()}; this job's blobs are stored "
                "but the key still names its old tree",
                "gpu-ci cache: ref not moved",
            )
        )
        return "lost race"
    won = f" (manifest {winner.manifest})" if winner is not None else ""
    warnings.append(
        (
            f"another job saved {key} at the same time and its tree won{won}; this job's blobs "
            "are stored but the key names the other tree",
            "gpu-ci cache: concurrent save",
        )
    )
    return "lost race"
