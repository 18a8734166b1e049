"""A save reads each large file once and sends the bytes it hashed (gpuci.cache._save.upload).

The store's promise (docs/cache-format.md): a blob is visible under ``blobs/sha256/<hex>`` only
once its bytes hash to ``<hex>``. A save that hashed a file and then read it again to send it
broke that promise when the file changed in between (a job still writing its checkpoint).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from cache_testing import CREDS, REPO_ROOT, StoreCase, cache_cmd
from cache_testing import store_flags as _flags
from treeutil import write_tree

from gpuci.cache import _layout as layout
from gpuci.cache._save import sources, upload

BIG = 12 << 20  # above the lowered multipart threshold: three parts of 5, 5 and 2 MiB


def _small_parts(monkeypatch) -> None:
    monkeypatch.setattr(layout, "MULTIPART_THRESHOLD", 8 << 20)
    monkeypatch.setattr(layout, "MIN_UPLOAD_PART", 5 << 20)  # S3's smallest part


def _blobs_hash_to_their_names(store: StoreCase) -> int:
    blobs = [k for k in store.object_keys() if k.startswith("blobs/sha256/")]
    for key in blobs:
        assert hashlib.sha256(store.get_raw(key)).hexdigest() == key.rsplit("/", 1)[1], key
    return len(blobs)


class _Rewriter:
    """Rewrites a file in place, 1 MiB at a time, alternating two contents (same size)."""

    def __init__(self, path: Path) -> None:
        self.path, self.stop, self.passes = path, threading.Event(), 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        fd = os.open(self.path, os.O_WRONLY)
        try:
            while not self.stop.is_set():
                fill = bytes([self.passes % 251]) * (1 << 20)
                for offset in range(0, os.fstat(fd).st_size, 1 << 20):
                    os.pwrite(fd, fill, offset)
                self.passes += 1
        finally:
            os.close(fd)

    def __enter__(self) -> _Rewriter:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(30)


@pytest.mark.parametrize("held", [True, False], ids=["read-once", "over-the-memory-budget"])
def test_a_file_rewritten_during_the_save_never_gets_a_blob_under_another_name(
    s3_store, env, tmp_path, monkeypatch, held
):
    _small_parts(monkeypatch)
    if not held:  # hashed first, read again to send: the second read must hash to the name
        monkeypatch.setattr(upload, "HELD_BYTES", 1 << 20)
    src = write_tree(
        tmp_path / "src", {"model.bin": os.urandom(BIG), "config.json": '{"layers": 2}\n'}
    )
    with _Rewriter(src / "model.bin") as writer:
        saved, _ = cache_cmd("save", _flags(s3_store, "k", src), env)
    assert writer.passes >= 1
    _blobs_hash_to_their_names(s3_store)
    if not saved.ok:  # caught: one line, and nothing names the torn file
        assert "changed while it was being saved" in saved.headline, saved.headline
        assert not [k for k in s3_store.object_keys() if k.startswith(("refs/", "manifests/"))]


def test_a_file_rewritten_during_a_file_store_save_never_gets_a_blob_under_another_name(
    file_store, env, tmp_path
):
    src = write_tree(tmp_path / "src", {"model.bin": os.urandom(BIG)})
    with _Rewriter(src / "model.bin") as writer:
        cache_cmd("save", _flags(file_store, "k", src), env)
    assert writer.passes >= 1
    assert _blobs_hash_to_their_names(file_store) >= 1


def test_a_blob_the_store_has_is_not_sent_again(s3_store, proxy, env, tmp_path, monkeypatch):
    _small_parts(monkeypatch)
    src = write_tree(
        tmp_path / "src", {"model.bin": os.urandom(BIG), "shard.bin": os.urandom(3 << 20)}
    )
    assert cache_cmd("save", _flags(s3_store, "first", src), env)[0].ok
    (src / "new.bin").write_bytes(os.urandom(2 << 20))
    via = StoreCase("s3", s3_store.url, proxy.url)
    saved, _ = cache_cmd("save", _flags(via, "second", src), env)
    assert saved.ok, saved.headline
    blob_puts = [p for m, p in proxy.seen if m in ("PUT", "POST") and "/blobs/" in p]
    new = hashlib.sha256((src / "new.bin").read_bytes()).hexdigest()
    assert blob_puts and all(new in p for p in blob_puts), blob_puts
    assert saved.report["blobs_uploaded"] == 1


def test_uploads_start_before_the_whole_tree_is_hashed(file_store, env, tmp_path, monkeypatch):
    """The second file is not read until the first one's blob is stored: a save that hashes
    the whole tree before sending anything never gets there."""
    first, second = os.urandom(2 << 20), os.urandom(3 << 20)
    src = write_tree(tmp_path / "src", {"a.bin": first, "b.bin": second})
    stored = file_store.root / layout.blob_key(hashlib.sha256(first).hexdigest())
    seen_first: list[bool] = []
    real_open = sources.open_source

    def gated(tree, entry):
        if entry.path == "b.bin":
            deadline = time.monotonic() + 30
            while not stored.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            seen_first.append(stored.exists())
        return real_open(tree, entry)

    monkeypatch.setattr(sources, "open_source", gated)
    saved, _ = cache_cmd("save", _flags(file_store, "k", src), env)
    assert saved.ok, saved.headline
    assert seen_first and all(seen_first), "b.bin was read before a.bin's blob was stored"


def test_an_s3_save_with_credentials_in_the_environment_never_imports_boto3(s3_store, tmp_path):
    """Blobs, parts, packs, the manifest, the conditional-write probe and the ref all go
    through the fast path: boto3 (0.3-0.6 s to import and set up) is not loaded."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.bin").write_bytes(os.urandom(6 << 20))  # two parts above 5 MiB
    (src / "shard.bin").write_bytes(os.urandom(2 << 20))
    (src / "config.json").write_text("{}")
    args = ["cache-weights", "save", "--key", "k", "--path", str(src), "--store", s3_store.url]
    args += ["--endpoint-url", str(s3_store.endpoint)]
    code = (
        "import sys; from gpuci.cli import main; "
        f"rc = main({args!r}); "
        "print('BOTO3' if 'boto3' in sys.modules else 'NO-BOTO3', rc)"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GPUCI_JOURNAL": str(tmp_path / "j")}
    env |= {**CREDS, "GPUCI_MULTIPART_THRESHOLD": "5MiB", "GPUCI_LOCAL_CACHE": "off"}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=env,
        timeout=120,
    )
    assert proc.stdout.strip().endswith("NO-BOTO3 0"), proc.stdout + proc.stderr
    assert any(k.startswith("refs/") for k in s3_store.object_keys())
    _blobs_hash_to_their_names(s3_store)


def test_a_tree_larger_than_the_memory_budget_saves_and_restores_whole(
    s3_store, env, tmp_path, monkeypatch
):
    """Files wait for room in the budget (one PUT each) or, in parts, go the verified way."""
    _small_parts(monkeypatch)
    monkeypatch.setattr(upload, "HELD_BYTES", 3 << 20)
    src = tmp_path / "src"
    src.mkdir()
    for i in range(4):
        (src / f"shard-{i}.bin").write_bytes(os.urandom(2 << 20))
    (src / "model.bin").write_bytes(os.urandom(BIG))
    saved, _ = cache_cmd("save", _flags(s3_store, "k", src), env)
    assert saved.ok, saved.headline
    assert saved.report["blobs_uploaded"] == 5
    assert _blobs_hash_to_their_names(s3_store) == 5
    out = tmp_path / "out"
    assert cache_cmd("restore", _flags(s3_store, "k", out), env)[0].ok
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in src.iterdir())
    for path in src.iterdir():
        assert (out / path.name).read_bytes() == path.read_bytes()


def _rewritten_after_hashing(monkeypatch) -> list[Path]:
    """Every file hashed by the over-the-budget path is rewritten (same size, other bytes)
    right after its hash is taken: the job still writing its checkpoint, at the worst time."""
    hashed: list[Path] = []
    original = sources.hash_source

    def hash_then_rewrite(tree, entry, each) -> str:
        digest = original(tree, entry, each)
        path = tree.source(entry)
        path.write_bytes(os.urandom(entry.size))  # in place: the same file, other bytes
        hashed.append(path)
        return digest

    monkeypatch.setattr(sources, "hash_source", hash_then_rewrite)
    monkeypatch.setattr(upload, "HELD_BYTES", 1 << 20)
    return hashed


def _refused_as_changed(store: StoreCase, src: Path, env, hashed: list[Path]) -> None:
    """The save of ``src`` fails naming the changed file, and leaves no blob, manifest or ref."""
    saved, _ = cache_cmd("save", _flags(store, "k", src), env)
    assert hashed == [src / "model.bin"]
    assert not saved.ok
    assert "changed while it was being saved" in saved.headline, saved.headline
    assert _blobs_hash_to_their_names(store) == 0
    assert not [k for k in store.object_keys() if k.startswith(("refs/", "manifests/"))]


def test_a_file_store_never_publishes_bytes_changed_after_their_hash(
    file_store, env, tmp_path, monkeypatch
):
    """The file store copies a file over the budget in by the kernel: what it copied is
    hashed before the rename, so a file changed since its hash is refused, not misnamed."""
    hashed = _rewritten_after_hashing(monkeypatch)
    src = write_tree(tmp_path / "src", {"model.bin": os.urandom(3 << 20)})
    _refused_as_changed(file_store, src, env, hashed)


def test_an_s3_whole_size_file_over_the_budget_is_sent_verified(
    s3_store, env, tmp_path, monkeypatch
):
    """Below the multipart threshold but over the memory budget: not one PUT of bytes read
    again (visible before they could be checked) but parts, completed only if they hash to
    the name."""
    hashed = _rewritten_after_hashing(monkeypatch)
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.bin").write_bytes(os.urandom(3 << 20))  # far below the 64 MiB threshold
    _refused_as_changed(s3_store, src, env, hashed)


def test_a_pack_on_its_way_when_a_file_is_refused_as_changed_reports_the_file(
    s3_store, env, tmp_path, monkeypatch
):
    """The refusal stops the store's requests, a pack's PUT on its way with them. The save
    raised that PUT's Interrupted ("the store's requests were stopped": a traceback, the
    save's failure unsaid) in place of the file that changed (once in a loaded rerun)."""
    hashed = _rewritten_after_hashing(monkeypatch)
    put = upload.put_content

    def pack_once_the_file_is_refused(store, key: str, data: bytes) -> None:
        if key.startswith("packs/"):
            assert store.pool.stop.wait(30), "the refused file did not stop the store's requests"
        put(store, key, data)

    monkeypatch.setattr(upload, "put_content", pack_once_the_file_is_refused)
    src = write_tree(tmp_path / "src", {"model.bin": os.urandom(3 << 20), "a.json": "{}\n"})
    _refused_as_changed(s3_store, src, env, hashed)


@pytest.mark.parametrize("stopped", ["blobs/", "packs/"])
def test_requests_stopped_with_no_cause_recorded_end_the_save_in_one_line(
    s3_store, env, tmp_path, monkeypatch, stopped
):
    """What stops a save's requests records why (a file refused, a part failed for good) or is
    a Ctrl-C. Stopped with no cause (a bug), a blob's or a pack's PUT is refused: the save
    fails in one line saying the key was not moved, not with an Interrupted's traceback."""
    put = upload.put_content

    def stop_first(store, key: str, data: bytes) -> None:
        if key.startswith(stopped):
            store.pool.stop.set()
        put(store, key, data)

    monkeypatch.setattr(upload, "put_content", stop_first)
    src = write_tree(tmp_path / "src", {"model.bin": os.urandom(3 << 20), "a.json": "{}\n"})
    saved, _ = cache_cmd("save", _flags(s3_store, "k", src), env)
    assert not saved.ok
    assert "were stopped" in saved.headline and "\n" not in saved.headline, saved.headline
    assert not [k for k in s3_store.object_keys() if k.startswith(("refs/", "manifests/"))]


def _one_file_saved_and_restored(store: StoreCase, tmp_path: Path, env, size: int) -> None:
    """A tree of one file of ``size`` random bytes is saved as one blob and restored whole."""
    src = tmp_path / "src"
    src.mkdir()
    data = os.urandom(size)
    (src / "model.bin").write_bytes(data)
    saved, _ = cache_cmd("save", _flags(store, "k", src), env)
    assert saved.ok, saved.headline
    assert _blobs_hash_to_their_names(store) == 1
    out = tmp_path / "out"
    restored, _ = cache_cmd("restore", _flags(store, "k", out), env)
    assert restored.ok, restored.headline
    assert (out / "model.bin").read_bytes() == data


def test_a_file_over_the_budget_that_holds_still_is_saved_and_restored(
    s3_store, env, tmp_path, monkeypatch
):
    monkeypatch.setattr(upload, "HELD_BYTES", 1 << 20)
    _one_file_saved_and_restored(s3_store, tmp_path, env, 3 << 20)


def test_a_file_store_copying_without_the_kernel_publishes_an_unchanged_file(
    file_store, env, tmp_path, monkeypatch
):
    """Across filesystems (EXDEV) the file store copies by read/write: every byte it wrote is
    what it hashes before the rename (a buffered last chunk once read as a changed file)."""
    import errno

    def refused(*_args):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", refused)
    monkeypatch.setattr(os, "sendfile", refused)
    monkeypatch.setattr(upload, "HELD_BYTES", 1 << 20)
    # a 4 MiB read, then 100 bytes: under any buffer
    _one_file_saved_and_restored(file_store, tmp_path, env, (4 << 20) + 100)


class _PartsStore:
    """Stands for a store that takes multipart uploads; only its type is looked at here."""

    def multipart(self, key: str) -> None:
        return None

    def stop_flag(self) -> threading.Event:
        return threading.Event()


def test_a_file_is_cut_for_the_connections_the_controller_may_reach_not_the_few_it_starts_with():
    """A file read while the controller still allows its start (8 connections) outlives the
    climb: were its parts cut for 8, they would be 16 MiB each and the held-bytes budget would
    keep only 8 of them in flight after the limit had grown (issue 28: the save stopped at
    17-18 connections on a remote-like link)."""
    from gpuci.adaptive import Concurrency

    control = Concurrency(ceiling=layout.UPLOAD_CONNECTIONS)
    assert control.limit < 16
    saver = SimpleNamespace(
        store=_PartsStore(), uploads=control, threshold=layout.MULTIPART_THRESHOLD, rt=None
    )
    blobs = upload.BlobUploads(saver, tree=None, large=[], dry_run=False)
    parts = blobs._parts(128 << 20)
    largest = max(length for _number, _offset, length in parts)
    assert upload.HELD_BYTES // largest >= 16, [p[2] >> 20 for p in parts]
    assert sum(length for _n, _o, length in parts) == 128 << 20
    # A count the user fixed is the ceiling: parts cut for it, as before.
    blobs = upload.BlobUploads(
        SimpleNamespace(**{**vars(saver), "uploads": Concurrency.fixed(4)}), None, [], False
    )
    assert len(blobs._parts(128 << 20)) == 4


def test_the_store_is_asked_about_conditional_writes_while_the_tree_uploads(
    s3_store, proxy, env, tmp_path
):
    """Whether the store honours conditional writes is asked beside the uploads, before the
    manifest, no longer between the manifest and the ref, where it cost a first save 5 round
    trips (1 once the answer is recorded) after its last byte."""
    src = write_tree(tmp_path / "src", {"model.bin": os.urandom(2 << 20)})
    saved, _ = cache_cmd("save", _flags(StoreCase("s3", s3_store.url, proxy.url), "k", src), env)
    assert saved.ok, saved.headline
    seen = [(method, path.partition("?")[0]) for method, path in proxy.seen]
    asked = next(i for i, (m, p) in enumerate(seen) if p.endswith(layout.CONDITIONAL_WRITES))
    manifest = next(i for i, (m, p) in enumerate(seen) if m == "PUT" and "/manifests/" in p)
    assert asked < manifest, seen


def test_a_file_a_job_still_appends_to_is_hashed_no_further_than_the_scan_saw(tmp_path):
    """A log or checkpoint a job appends to while it is saved: the hash read on to wherever
    the writer was (for ever, if it never stops). It reads the size the scan saw, and the
    file is refused as changed."""
    from gpuci.cache._format import tree as scanned
    from gpuci.cache._stores.base import SourceChanged

    path = write_tree(tmp_path / "src", {"log.bin": os.urandom(1 << 20)}) / "log.bin"
    tree = scanned.scan([str(path)])
    entry = next(e for e in tree.entries if e.size)
    read: list[int] = []

    def append_while_hashed(block, offset) -> None:
        read.append(len(block))
        if len(read) < 64:  # the writer goes on: a block more for every block read
            with path.open("ab") as f:
                f.write(os.urandom(len(block)))

    with pytest.raises(SourceChanged):
        sources.hash_source(tree, entry, append_while_hashed)
    assert sum(read) == entry.size, f"read {sum(read):,} bytes of a {entry.size:,}-byte scan"
