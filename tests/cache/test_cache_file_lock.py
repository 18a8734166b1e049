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


def test_a_lock_file_another_user_made_is_taken_read_only(tmp_path):
    """A store shared by users of one group (its folders group-writable): the first user's
    lock file is 0644, and another user opened it for writing to lock it, EACCES: every
    conditional write of that key failed ("cannot use the cache store"). flock needs only a
    read-only open."""
    import sys

    if os.geteuid() != 0:
        pytest.skip("needs root to act as a second user")
    root = tmp_path / "store"
    LocalStore(root).put_if_absent(REF, b"first")  # root's lock file, 0644
    assert _lock_path(root, REF).exists()
    for path in [tmp_path, *tmp_path.parents]:
        if path == Path("/"):
            break
        path.chmod(path.stat().st_mode | 0o055)  # the second user reaches the store
    for path in [root, *root.rglob("*")]:
        if path.is_dir():
            path.chmod(0o777)  # folders writable by the group (all, here)
    pid = os.fork()
    if pid == 0:  # the second user: the modules are loaded, only the store is reached
        code = 1
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            store = LocalStore(root)
            got = store.get(REF)
            assert got is not None
            store.put_if_match(REF, b"second", got[1])
            code = 0
        except BaseException as exc:  # said on stderr, the exit code tells the test
            sys.stderr.write(f"second user: {exc!r}\n")
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the second user's write failed"
    assert LocalStore(root).get(REF)[0] == b"second"


def test_a_fifo_planted_as_a_lock_file_does_not_hold_the_write(tmp_path):
    """The lock file is opened read-only, which waits on a FIFO for a writer: never, here."""
    import threading

    lock = _lock_path(tmp_path / "store", REF)
    lock.parent.mkdir(parents=True)
    os.mkfifo(lock)
    store = LocalStore(tmp_path / "store")
    done: list[object] = []
    worker = threading.Thread(target=lambda: done.append(store.put_if_absent(REF, b"new")))
    worker.daemon = True
    worker.start()
    worker.join(60)
    hung = worker.is_alive()
    if hung:  # let the blocked open go
        os.close(os.open(lock, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(60)
    assert not hung, "the write waited on a FIFO planted as its lock file"
    assert store.get(REF) is not None and store.get(REF)[0] == b"new"  # type: ignore[index]
