"""``cache-weights save``: hash a tree, upload only what the store lacks, then manifest, then ref.

Order is the whole safety story: blobs and packs first, the manifest once every object it names
exists, the ref last and conditionally. A save killed at any point leaves, at worst, orphan
blobs (harmless, prunable), never a ref naming something missing. Small files are deduplicated
against the manifests this job already knows (the key's current one and any restored earlier in
the job), so re-saving after changing one file uploads that file plus metadata.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from gpuci import journal
from gpuci.cache import conditional, hf, layout, refs
from gpuci.cache import manifest as mf
from gpuci.cache.common import (
    CREDENTIAL_SOURCES,
    Connections,
    plan_store,
    store_url,
    summary_table,
    throttle_signals,
)
from gpuci.cache.options import SaveInputs
from gpuci.cache.packs import PackBuilder
from gpuci.cache.store import MultipartUpload, ObjectInfo, Store
from gpuci.cache.tier import LocalTier, open_tier
from gpuci.cache.transfer import WorkPool, laneless, parallel
from gpuci.cache.tree import Tree, resolve_path, scan
from gpuci.errors import ConflictError, InputError
from gpuci.runtime import Result, Runtime
from gpuci.units import human_bytes

# Packs are built in memory (up to PACK_TARGET each): this many may be in flight at once.
PACKS_IN_FLIGHT = 6


@dataclass
class SaveStats:
    data_bytes: int = 0  # blob and pack bytes sent
    meta_bytes: int = 0  # manifest and ref bytes sent
    blobs: int = 0
    packs: int = 0
    reused_files: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, **counts: int) -> None:
        with self.lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)


def _hash_file(path, size: int) -> str:
    hasher = hashlib.sha256()
    buf = memoryview(bytearray(layout.IO_CHUNK))
    done = 0
    with open(path, "rb", buffering=0) as handle:
        while True:
            n = handle.readinto(buf)
            if not n:
                break
            hasher.update(buf[:n])
            done += n
    if done != size:
        raise InputError(
            f"{path} changed size while it was being saved",
            hint="save after the step that writes the tree has finished",
        )
    return hasher.hexdigest()


class Saver:
    def __init__(self, store: Store, namespace: str, key: str, rt: Runtime) -> None:
        self.store = store
        self.namespace = namespace
        self.key = key
        self.rt = rt
        # HEADs and other small requests: the fixed count, else 8 at a time.
        self.workers = layout.workers(rt.environ)
        # Blobs, packs and multipart parts share one controller: what it learns sending packs
        # it keeps for the blobs.
        self.uploads = layout.concurrency(rt.environ, layout.UPLOAD_CONNECTIONS)
        self.threshold = layout.multipart_threshold(rt.environ)
        self.stats = SaveStats()
        self.tier: LocalTier | None = None

    # ----- what the store already has ---------------------------------------------------------
    def _load_manifest(self, digest: str) -> mf.Manifest | None:
        got = self.store.get(layout.manifest_key(digest), limit=mf.MAX_MANIFEST)
        if (
            got is None
            or len(got[0]) > mf.MAX_MANIFEST
            or hashlib.sha256(got[0]).hexdigest() != digest
        ):
            return None
        try:
            return mf.parse(got[0], digest[:12])
        except InputError:
            return None

    def known_small_files(
        self, current: refs.Ref | None
    ) -> tuple[dict[str, mf.Entry], mf.Manifest | None]:
        """sha256 -> a packed entry whose pack exists, from the manifests this job knows."""
        digests: list[str] = []
        if current is not None:
            digests.append(current.manifest)
        for record in journal.read("cache-restore", self.rt.environ):
            digest = str(record.get("manifest"))
            if record.get("store") == self.store.url and layout.is_sha256(digest):
                digests.append(digest)
        current_manifest = None
        known: dict[str, mf.Entry] = {}
        for digest in dict.fromkeys(digests):
            manifest = self._load_manifest(digest)
            if manifest is None:
                continue
            if current is not None and digest == current.manifest:
                current_manifest = manifest
            for entry in manifest.files:
                if entry.pack:
                    known.setdefault(entry.sha256, entry)
        packs = sorted({e.pack for e in known.values()})
        present: set[str] = set()

        def check(pack: str) -> None:
            info = self.store.head(layout.pack_key(pack))
            if info is not None:
                present.add(pack)
                if not self.rt.dry_run:
                    self.refresh(info)

        parallel(check, packs, self.workers)
        return {sha: e for sha, e in known.items() if e.pack in present}, current_manifest

    def refresh(self, info: ObjectInfo) -> None:
        """Reusing an old object: make it young, so a concurrent prune's grace period keeps it."""
        if time.time() - info.modified > layout.TOUCH_AFTER:
            self.store.touch(info.key)

    def fill_tier(self, tree: Tree, files: list[mf.Entry]) -> int:
        """Copy the saved files into the runner-local tier (reflinks where the disk can)."""
        if self.tier is None:
            return 0
        added = 0
        for entry in files:
            if entry.size and not self.tier.has(entry.sha256, entry.size):
                added += self.tier.copy_in(tree.source(entry), entry.sha256)
        self.tier.evict()
        return added

    # ----- hashing and uploading --------------------------------------------------------------
    def hash_large(self, tree: Tree, large: list[mf.Entry]) -> None:
        meter = self.rt.progress("hash", sum(e.size for e in large)) if large else None

        def one(entry: mf.Entry) -> None:
            entry.sha256 = _hash_file(tree.source(entry), entry.size)
            if meter:
                meter.advance(entry.size)

        parallel(one, large, min(self.workers, 4))
        if meter:
            meter.close()

    def upload_large(self, tree: Tree, large: list[mf.Entry], dry_run: bool) -> None:
        """Send the blobs the store lacks: big ones in parts, all under the controller."""
        unique = {e.sha256: e for e in large}
        missing: list[mf.Entry] = []
        lock = threading.Lock()

        def check(entry: mf.Entry) -> None:
            info = self.store.head(layout.blob_key(entry.sha256))
            if info is None:
                with lock:
                    missing.append(entry)
            elif not dry_run:
                self.refresh(info)

        parallel(check, list(unique.values()), self.workers)
        total = sum(e.size for e in missing)
        if dry_run or not missing:
            self.stats.add(data_bytes=total, blobs=len(missing))
            return
        meter = self.rt.progress("upload", total)
        try:
            with throttle_signals(self.store, self.uploads):
                _BlobUploads(self, tree, meter.advance).run(missing)
        finally:
            meter.close()

    def pack_small(
        self, tree: Tree, small: list[mf.Entry], known: dict[str, mf.Entry], dry_run: bool
    ) -> None:
        builder = PackBuilder()
        pool = ThreadPoolExecutor(max_workers=PACKS_IN_FLIGHT, thread_name_prefix="gpuci-pack")
        slots = threading.Semaphore(PACKS_IN_FLIGHT)  # packs held in memory at once
        futures: list[Future] = []

        def send(data: bytes, members: list[mf.Entry]) -> None:
            try:
                digest = hashlib.sha256(data).hexdigest()
                for entry in members:
                    entry.pack = digest
                key = layout.pack_key(digest)
                with self.uploads.slot():
                    if self.store.head(key) is None:
                        if not dry_run:
                            self.store.put(key, data)
                            self.uploads.record(len(data))
                        self.stats.add(data_bytes=len(data), packs=1)
            finally:
                slots.release()

        def flush() -> None:
            data, members = builder.take()
            slots.acquire()
            futures.append(pool.submit(send, data, members))

        with throttle_signals(self.store, self.uploads):
            try:
                for entry in small:
                    data = tree.source(entry).read_bytes()
                    if len(data) != entry.size:
                        raise InputError(
                            f"{tree.source(entry)} changed size while it was being saved",
                            hint="save after the step that writes the tree has finished",
                        )
                    entry.sha256 = hashlib.sha256(data).hexdigest()
                    reuse = known.get(entry.sha256)
                    if reuse is not None:
                        entry.pack, entry.offset = reuse.pack, reuse.offset
                        self.stats.add(reused_files=1)
                        continue
                    if builder.add(entry, data):
                        flush()
                if builder:
                    flush()
                for future in futures:
                    future.result()
            finally:
                pool.shutdown(wait=True, cancel_futures=True)


class _BlobUploads:
    """The blobs a save sends, one task per small blob and per part of a big one, all in one
    pool under the save's controller; a multipart upload completes when its last part lands,
    and every upload still open when the save fails is aborted."""

    def __init__(self, saver: Saver, tree: Tree, on_bytes: Callable[[int], None]) -> None:
        self.saver = saver
        self.store = saver.store
        self.tree = tree
        self.on_bytes = on_bytes
        self.pool = WorkPool(saver.uploads)
        self.open: dict[str, MultipartUpload] = {}  # blob key -> upload not yet complete
        self.left: dict[str, int] = {}  # blob key -> parts still to send
        self.lock = threading.Lock()

    def run(self, missing: list[mf.Entry]) -> None:
        for entry in missing:
            task = self._start if entry.size >= self.saver.threshold else self._whole
            self.pool.submit(laneless(task, entry))
        try:
            self.pool.run()
        finally:
            for upload in self.open.values():
                upload.abort()

    def _sent(self, n: int) -> None:
        self.saver.uploads.record(n)
        self.on_bytes(n)

    def _whole(self, entry: mf.Entry) -> None:
        key = layout.blob_key(entry.sha256)
        self.store.upload_file(key, self.tree.source(entry), entry.size, self._sent)
        self.saver.stats.add(data_bytes=entry.size, blobs=1)

    def _start(self, entry: mf.Entry) -> None:
        key = layout.blob_key(entry.sha256)
        upload = self.store.multipart(key)
        if upload is None:
            return self._whole(entry)
        parts = layout.upload_parts(entry.size, self.saver.uploads.ceiling, self.saver.threshold)
        with self.lock:
            self.open[key], self.left[key] = upload, len(parts)
        for number, offset, length in parts:
            self.pool.submit(laneless(self._part, entry, key, number, offset, length))
        return None

    def _part(self, entry: mf.Entry, key: str, number: int, offset: int, length: int) -> None:
        upload = self.open[key]
        upload.send(number, self.tree.source(entry), offset, length, self.saver.uploads.record)
        self.on_bytes(length)
        with self.lock:
            self.left[key] -= 1
            last = self.left[key] == 0
        if last:
            upload.complete()
            with self.lock:
                del self.open[key]
            self.saver.stats.add(data_bytes=entry.size, blobs=1)


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


def save_outputs(
    outcome: str,
    manifest: str,
    uploaded: int,
    files: int,
    seconds: float,
    connections: Connections | None = None,
) -> dict[str, Any]:
    """Save's own outputs: no cache-hit or matched-key, which only a restore can mean."""
    return {
        "outcome": OUTCOMES[outcome],
        "manifest": manifest,
        "bytes-uploaded": uploaded,
        "files": files,
        "seconds": round(seconds, 3),
        "connections": connections.used if connections else 0,
    }


def _plan_missing_paths(paths: list[str] | None, key: str, url: str, start: float) -> Result:
    result = Result(command="cache-weights save", headline=f"would save {key}: path not there yet")
    result.outputs = save_outputs("would save", "", 0, 0, time.monotonic() - start)
    result.report = {"plan": {"key": key, "store": url, "paths": paths}}
    return result


def run(inp: SaveInputs, rt: Runtime) -> Result:
    """Save: scan -> plan (hash, pack, manifest) -> publish (blobs, manifest, ref) -> report."""
    start = time.monotonic()
    key = refs.check_key(inp.key)
    paths = hf.paths(inp.hf_repo, inp.path, rt.environ) if inp.layout == "hf" else inp.path
    if not paths:
        raise InputError("no path to save", hint="list the folders or files to cache in path")
    store = plan_store(inp, rt)
    url = store.url if store is not None else store_url(inp, rt)
    namespace = layout.namespace(rt.environ)
    try:
        tree = scan(paths)
    except InputError:
        if rt.dry_run:
            return _plan_missing_paths(inp.path or None, key, url, start)
        raise
    if store is None:
        return _plan_without_credentials(key, url, tree, start)
    if inp.layout == "hf" and inp.hf_revision.strip():
        _keep_revision(tree, inp.hf_revision.strip())
    saver = Saver(store, namespace, key, rt)
    tier_notes: list[str] = []
    if not rt.dry_run:
        saver.tier, tier_notes = open_tier(
            rt.environ,
            local_cache=inp.local_cache,
            local_cache_size=inp.local_cache_size,
            local_cache_mode=inp.local_cache_mode,
        )
    current = refs.read(store, namespace, key) if (not rt.dry_run or store.exists()) else None
    manifest, large, unchanged = _plan(saver, tree, current)
    result = Result(command="cache-weights save")
    for warning in tree.warnings:
        result.warning(warning, "gpu-ci cache")
    if unchanged and current:
        digest, outcome = current.manifest, "unchanged"
    elif unchanged:
        digest, outcome = manifest.digest(), "unchanged"
    else:
        digest, outcome = _publish(saver, tree, large, manifest, current, result)
    if not rt.dry_run:
        saver.fill_tier(tree, manifest.files)
    for note in tier_notes + (saver.tier.warnings() if saver.tier else []):
        result.warning(note, "gpu-ci local cache")
    return _report(saver, paths, manifest, digest, outcome, start, result)


def _plan(
    saver: Saver, tree: Tree, current: refs.Ref | None
) -> tuple[mf.Manifest, list[mf.Entry], bool]:
    """Hash the large files, pack the small ones (reusing the current packs where they still
    match) and build the manifest; also whether it is the tree the ref already names."""
    rt = saver.rt
    known, current_manifest = saver.known_small_files(current)
    files = [e for e in tree.entries if e.type == "file"]
    large = [e for e in files if e.size >= layout.PACK_THRESHOLD]
    small = [e for e in files if e.size < layout.PACK_THRESHOLD]
    saver.hash_large(tree, large)
    saver.pack_small(tree, small, known, rt.dry_run)
    manifest = mf.Manifest(
        key=saver.key,
        roots=tree.roots,
        entries=tree.entries,
        created=mf.now_iso(),
        producer=mf.producer(rt.environ),
    )
    unchanged = current_manifest is not None and manifest.same_tree(current_manifest)
    return manifest, large, unchanged


def _publish(
    saver: Saver,
    tree: Tree,
    large: list[mf.Entry],
    manifest: mf.Manifest,
    current: refs.Ref | None,
    result: Result,
) -> tuple[str, str]:
    """Upload what the store lacks, then the manifest, then move the ref (or say what a dry run
    would): the manifest's digest and the outcome."""
    store, namespace, key, rt = saver.store, saver.namespace, saver.key, saver.rt
    digest = manifest.digest()
    saver.upload_large(tree, large, rt.dry_run)
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
    if not conditional.honoured(store):
        result.warning(conditional.UNSAFE.format(url=store.url), "gpu-ci cache")
    try:
        refs.write(store, namespace, key, ref_body, current)
        saver.stats.add(meta_bytes=len(ref_body))
        return digest, "saved" if current is None else "updated"
    except ConflictError:
        outcome = _lost_race(store, namespace, key, manifest, saver, result)
        winner = refs.read(store, namespace, key)
        return (winner.manifest if winner else digest), outcome


def _report(
    saver: Saver,
    paths: list[str],
    manifest: mf.Manifest,
    digest: str,
    outcome: str,
    start: float,
    result: Result,
) -> Result:
    """Journal the save (not a dry run's), then the headline, outputs, summary and report."""
    key, store, rt, stats = saver.key, saver.store, saver.rt, saver.stats
    files, size = len(manifest.files), manifest.total_bytes
    seconds = time.monotonic() - start
    uploaded = stats.data_bytes + stats.meta_bytes
    if not rt.dry_run:
        journal.record(
            "cache-save",
            {
                "key": key,
                "manifest": digest,
                "store": store.url,
                "paths": paths,
                "files": files,
                "bytes": size,
                "bytes_uploaded": uploaded,
                "outcome": outcome,
            },
            rt.environ,
        )
    sent = stats.data_bytes > 0 and not rt.dry_run  # connections only mean something then
    connections = Connections.of(saver.uploads) if sent else None
    result.headline = _headline(outcome, key, files, size, stats, seconds, rt.dry_run)
    if connections is not None:
        result.headline += f" (connections: {connections.text()})"
    result.outputs = save_outputs(outcome, digest, uploaded, files, seconds, connections)
    result.summary.append(summary_table(key, outcome, files, size, uploaded, seconds, connections))
    result.report = {
        "key": key,
        "store": store.url,
        "outcome": outcome,
        "manifest": digest,
        "files": files,
        "bytes": size,
        "dry_run": rt.dry_run,
        "bytes_data": stats.data_bytes,
        "bytes_metadata": stats.meta_bytes,
        "blobs_uploaded": stats.blobs,
        "packs_uploaded": stats.packs,
        "small_files_reused": stats.reused_files,
        "connections": connections.report() if connections else None,
    }
    return result


def _plan_without_credentials(key: str, url: str, tree: Tree, start: float) -> Result:
    """A dry run with no AWS credentials here: the tree is measured, the store is not asked."""
    files = [e for e in tree.entries if e.type == "file"]
    size = sum(e.size for e in files)
    seconds = time.monotonic() - start
    result = Result(command="cache-weights save")
    result.headline = (
        f"would need credentials: would save {key} ({len(files)} files, {human_bytes(size)}) "
        f"to {url}, but no AWS credentials on this machine to ask what it lacks (at most "
        f"{human_bytes(size)} to upload); a real run needs read and write access to the "
        f"bucket ({CREDENTIAL_SOURCES})"
    )
    result.outputs = save_outputs("would save", "", 0, len(files), seconds)
    result.summary.append(
        summary_table(key, "would save: store not asked (no credentials)", len(files), size, 0, 0)
    )
    result.report = {
        "key": key,
        "store": url,
        "dry_run": True,
        "files": len(files),
        "bytes": size,
        "lookup": "skipped",
        "reason": "no AWS credentials on this machine",
        "needs": f"read and write access to the bucket: {CREDENTIAL_SOURCES}",
    }
    return result


def _headline(
    outcome: str, key: str, files: int, size: int, stats: SaveStats, seconds: float, plan: bool
) -> str:
    """What happened, or in a dry run what would: a plan never speaks in the past tense."""
    tree = f"{files} files, {human_bytes(size)}"
    uploaded = stats.data_bytes + stats.meta_bytes
    if not plan:
        return f"{outcome} {key}: {tree}, uploaded {human_bytes(uploaded)} in {seconds:.1f}s"
    if outcome == "unchanged":
        return f"unchanged {key}: {tree}; the key already names this tree, nothing would upload"
    return (
        f"{outcome} {key}: {tree}; would upload {human_bytes(uploaded)} "
        f"({stats.blobs} new blob(s), {stats.packs} new pack(s), "
        f"{human_bytes(stats.meta_bytes)} of manifest and ref)"
    )


def _keep_revision(tree: Tree, revision: str) -> None:
    """hf-revision on save: keep only that revision's ref, snapshot and the blobs it links."""
    root = resolve_path(tree.roots[0]["path"])
    commit = hf.commit_of(root, revision)
    probe = mf.Manifest(key="", roots=tree.roots, entries=tree.entries)
    picked = hf.pick_revision(probe, revision, commit)
    keep = {(e.root, e.path) for e in picked.entries}
    tree.entries = [e for e in tree.entries if (e.root, e.path) in keep]


def _lost_race(
    store: Store, namespace: str, key: str, ours: mf.Manifest, saver: Saver, result: Result
) -> str:
    """Another job moved the ref between our read and our write: theirs stands, say so."""
    winner = refs.read(store, namespace, key)
    if winner is not None:
        theirs = saver._load_manifest(winner.manifest)
        if theirs is not None and theirs.same_tree(ours):
            return "saved by another job (same content)"
    won = f" (manifest {winner.manifest})" if winner is not None else ""
    result.warning(
        f"another job saved {key} at the same time and its tree won{won}; this job's blobs "
        "are stored but the key names the other tree",
        "gpu-ci cache: concurrent save",
    )
    return "lost race"
