"""A file store's key lock is waited for within a bound, never for ever.

Anyone who can open a lock file under ``locks/`` (a hung or stopped job; any job that can read
the store: the file is 0644, and ``flock`` needs no write access) could hold it, and a save
of that key then waited in ``flock`` for ever. Now the wait has a bound
(:data:`~gpuci.cache._stores.file.LOCK_WAIT_S`, set to 0 here so nothing waits), the write is
not made, and a save goes on: the key names what it named, with a warning.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from cache_testing import cache_cmd
from cache_testing import store_flags as _flags

from gpuci.cache._stores import file as file_store
from gpuci.cache._stores.file import LocalStore
from gpuci.errors import ConflictError

REF = "refs/default/k.json"


def _lock_path(root: Path, key: str) -> Path:
    return root / "locks" / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.lock"


@pytest.fixture
def held(tmp_path: Path) -> Iterator[int]:
    """The store's lock on :data:`REF`, held by another open file (read-only is enough)."""
    lock = _lock_path(tmp_path / "store", REF)
    lock.parent.mkdir(parents=True)
    lock.touch(0o644)
    fd = os.open(lock, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield fd
    finally:
        os.close(fd)


def test_a_held_lock_refuses_the_write_naming_the_lock_file(tmp_path, held, monkeypatch):
    monkeypatch.setattr(file_store, "LOCK_WAIT_S", 0.0)
    store = LocalStore(tmp_path / "store")
    with pytest.raises(ConflictError) as absent:
        store.put_if_absent(REF, b"new")
    assert str(_lock_path(store.root, REF)) in absent.value.one_line()
    etag = store.put(REF, b"old")
    with pytest.raises(file_store.LockBusy):
        store.put_if_match(REF, b"new", etag)
    assert store.get(REF) == (b"old", etag)  # the write was not made
    assert store.leftovers(older_than=-1) == []  # nor its temp file left behind


def test_a_lock_released_while_waiting_is_taken(tmp_path, held, monkeypatch):
    released: list[float] = []

    def release(seconds: float) -> None:  # the holder lets go while the writer waits
        fcntl.flock(held, fcntl.LOCK_UN)
        released.append(seconds)

    monkeypatch.setattr(file_store, "LOCK_WAIT_S", 3600.0)
    monkeypatch.setattr(file_store, "_pause", release)
    store = LocalStore(tmp_path / "store")
    etag = store.put_if_absent(REF, b"new")
    assert store.get(REF) == (b"new", etag)
    assert len(released) == 1


def test_a_save_whose_ref_lock_is_held_goes_on_and_keeps_the_key(tmp_path, env, monkeypatch):
    root = tmp_path / "store"
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("first")
    first, _ = cache_cmd("save", _flags(root.as_uri(), "k", tree), env)
    assert first.ok, first.headline
    (ref,) = [path for path in (root / "refs").rglob("*") if path.is_file()]
    named = json.loads(ref.read_bytes())["manifest"]
    (tree / "a.txt").write_text("second")  # a changed tree: the save moves the ref
    lock = _lock_path(root, ref.relative_to(root).as_posix())
    fd = os.open(lock, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    monkeypatch.setattr(file_store, "LOCK_WAIT_S", 0.0)
    try:
        second, _ = cache_cmd("save", _flags(root.as_uri(), "k", tree), env)
    finally:
        os.close(fd)
    assert second.ok and second.exit_code == 0, second.headline  # a cache reason fails no job
    assert second.outputs["outcome"] == "lost-race"
    said = " ".join(a.message for a in second.annotations)  # said in a warning, as it was
    assert "was not updated" in said and lock.name in said, said
    assert "another job saved" not in said, said  # no other job did
    assert json.loads(ref.read_bytes())["manifest"] == named  # the key still names its tree
