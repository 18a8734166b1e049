"""What a save runs beside itself ends with it: the conditional-writes question, asked on a
thread of its own beside the uploads, sends nothing after the save failed or was interrupted
(Ctrl-C), and its thread is over when the save returns (staged with the fault proxy holding
the question's first request, the GET of the store's record of an earlier probe); a hasher
ends its file's hash at the next block. Nothing is timed."""

from __future__ import annotations

import os
import threading

import pytest
from cache_testing import StoreCase, cache_cmd
from cache_testing import store_flags as _flags
from faultproxy import FaultProxy, Rule
from treeutil import write_tree

from gpuci import files
from gpuci.background import Background
from gpuci.cache import _layout as layout
from gpuci.cache._save import operation, sources, state, upload
from gpuci.cache._stores.base import SourceChanged
from gpuci.cache._stores.file import LocalStore
from gpuci.errors import StoreError
from gpuci_testing import wait_until

QUESTION = "gpuci-conditional"


def _question_requests(proxy: FaultProxy) -> list[tuple[str, str]]:
    return [
        (method, path)
        for method, path in list(proxy.seen)
        if layout.CONDITIONAL_WRITES in path or layout.CONDITIONAL_PROBES in path
    ]


@pytest.mark.parametrize(
    "when",
    ["ctrl-c-before-the-uploads", "failed-before-the-uploads", "ctrl-c-waiting-for-the-answer"],
)
def test_the_conditional_writes_question_ends_with_a_failed_or_interrupted_save(
    s3_store, proxy, env, tmp_path, monkeypatch, when
):
    """The question's first request is held by the store. The save is interrupted (or fails)
    while reading what the store has, before its uploads, or while it waits for the answer
    before the publish: when it raises, the question's thread is over, and no request of it
    is sent after (it sent its probe objects and the record after a Ctrl-C, from a thread the
    save had left running)."""
    held = Rule("GET", layout.CONDITIONAL_WRITES, "hold", seconds=60)
    proxy.rules.append(held)
    stop: type[BaseException] = StoreError if when.startswith("failed") else KeyboardInterrupt

    def interrupt() -> None:
        wait_until(lambda: held.fired, what="the question's first request")
        raise stop("stopped here")

    if when.endswith("before-the-uploads"):

        def reading(*_args, **_kwargs):
            interrupt()

        monkeypatch.setattr(state.Saver, "known_small_files", reading)
    else:
        wait, pressed = Background.wait, []

        def ctrl_c_in_the_wait(self, deadline=None):
            if self._thread.name == QUESTION and not pressed:
                pressed.append(True)
                interrupt()
            return wait(self, deadline)

        monkeypatch.setattr(Background, "wait", ctrl_c_in_the_wait)
    src = write_tree(tmp_path / "src", {"model.bin": os.urandom(2 << 20), "a.txt": b"a"})
    flags = _flags(StoreCase("s3", s3_store.url, proxy.url), "k", src)
    try:
        if stop is KeyboardInterrupt:
            with pytest.raises(KeyboardInterrupt):
                cache_cmd("save", flags, env)
        else:
            saved, _ = cache_cmd("save", flags, env)
            assert not saved.ok and "stopped here" in saved.headline, saved.headline
        left = [t for t in threading.enumerate() if t.name == QUESTION]
        asked = len(_question_requests(proxy))
    finally:
        held.release.set()
    for thread in left:  # a question left running goes on once its request is answered
        thread.join(30)
    assert not left, "the conditional-writes question outlived the save"
    assert _question_requests(proxy)[asked:] == [], "the question went on after the save"


def test_a_ctrl_c_while_a_file_over_the_budget_is_hashed_ends_the_hash_at_its_next_block(
    file_store, env, tmp_path, monkeypatch
):
    """A file too large to hold in memory (every model shard over 128 MiB) is hashed on a
    hasher thread before it is sent. A Ctrl-C then waited for the whole hash (seconds to a
    minute a shard), the save's stop flag unheard, and a file store was then sent the file
    after the Ctrl-C. The hash ends at its next block, and nothing is sent."""
    monkeypatch.setattr(upload, "HELD_BYTES", 0)
    monkeypatch.setattr(layout, "IO_CHUNK", 64 << 10)
    src = write_tree(tmp_path / "src", {"shard.bin": os.urandom(4 << 20), "a.txt": b"a"})
    stop, started = threading.Event(), threading.Event()
    monkeypatch.setattr(LocalStore, "stop_flag", lambda _self: stop)  # the save's stop flag
    hashed_after: list[int] = []
    hash_fd = files.hash_fd

    def watched(fd, *args, each=None, **kwargs):
        if not threading.current_thread().name.startswith("gpuci-hash-"):
            return hash_fd(fd, *args, each=each, **kwargs)

        def seen(block, offset):
            if offset and not started.is_set():  # a block in: the Ctrl-C comes now
                started.set()
                assert stop.wait(30), "the Ctrl-C did not set the save's stop flag"
            if stop.is_set():
                hashed_after.append(offset)
            if each is not None:
                each(block, offset)

        return hash_fd(fd, *args, each=seen, **kwargs)

    def ctrl_c(*_args, **_kwargs):
        assert started.wait(30)
        raise KeyboardInterrupt

    monkeypatch.setattr(files, "hash_fd", watched)
    monkeypatch.setattr(operation, "pack_small", ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        cache_cmd("save", _flags(file_store, "w", src), env)
    assert len(hashed_after) <= 1, f"hashed on for {len(hashed_after)} blocks after the Ctrl-C"
    assert not [k for k in file_store.object_keys() if k.startswith("blobs/")]


def test_a_pack_on_its_way_when_the_save_fails_sends_nothing_after(
    s3_store, env, tmp_path, monkeypatch
):
    """A small file refused while the first pack is on its way fails the save. The pack's
    thread was left running while the uploads' abort made a fresh, unset stop flag the
    store's current one (to abort their multipart uploads, requests that take their time)
    until the question's drop set another: a pack between its checks then sent its PUT after
    the save had failed. Here the pack goes on once the flag it saw was set and either the
    save waits for it or an unset flag stands (held there until the pack is over)."""
    pack_in, pack_done, waiting = threading.Event(), threading.Event(), threading.Event()
    sent: list[str] = []
    put, read_small, drop = upload.put_content, sources.read_small, operation._drop_question
    wait = getattr(upload, "wait", None)  # the packs' bounded wait (none before: the leak)

    def held_pack(store, key: str, data: bytes) -> None:
        if not key.startswith("packs/"):
            put(store, key, data)
            return
        try:
            flag = store.pool.stop
            pack_in.set()
            assert flag.wait(30), "the refused file did not stop the store's requests"
            wait_until(lambda: waiting.is_set() or not store.pool.stop.is_set(), what="the save")
            put(store, key, data)
            sent.append(key)
        finally:
            pack_done.set()

    def refused_once_a_pack_is_on_its_way(tree, entry):
        if entry.path.startswith("z"):
            assert pack_in.wait(30), "no pack was sent"
            raise SourceChanged(tree.source(entry))
        return read_small(tree, entry)

    def waited(*args, **kwargs):
        waiting.set()
        assert wait is not None
        return wait(*args, **kwargs)

    def dropped_once_the_pack_is_over(*args) -> None:
        assert pack_done.wait(30), "the pack's thread did not end"
        drop(*args)

    monkeypatch.setattr(upload, "put_content", held_pack)
    monkeypatch.setattr(sources, "read_small", refused_once_a_pack_is_on_its_way)
    monkeypatch.setattr(upload, "wait", waited, raising=False)
    monkeypatch.setattr(operation, "_drop_question", dropped_once_the_pack_is_over)
    small = {f"a{i:02}.bin": os.urandom(1_000_000) for i in range(18)}  # a pack fills: sent
    src = write_tree(tmp_path / "src", {**small, "model.bin": os.urandom(2 << 20), "z.json": "{}"})
    saved, _ = cache_cmd("save", _flags(s3_store, "k", src), env)
    assert not saved.ok and "changed while it was being saved" in saved.headline, saved.headline
    assert sent == [], "a pack was sent after the save failed"
    assert not [k for k in s3_store.object_keys() if k.startswith(("packs/", "refs/"))]


def _asleep_in_a_retry(name: str) -> bool:
    """Whether the thread ``name`` waits out a retry's backoff (gpuci.retry's cancellable wait)."""
    import sys

    for thread in threading.enumerate():
        if thread.name != name or thread.ident is None:
            continue
        frame = sys._current_frames().get(thread.ident)
        while frame is not None:
            code = frame.f_code
            if code.co_name == "wait" and code.co_filename.endswith("gpuci/retry.py"):
                return True
            frame = frame.f_back
    return False


def test_a_question_asleep_in_a_retry_ends_with_the_failed_save(
    s3_store, proxy, env, tmp_path, monkeypatch
):
    """The question's first request is answered 503 and it sleeps out a long backoff; the save
    fails meanwhile. The question's wait was on the store's flag of before the save, which
    nothing set: it outlived the failed save, asleep, and would ask again after it. The
    save's own flag, made before the question starts, ends that wait with the save."""
    from dataclasses import replace

    from gpuci.cache._stores.s3 import client

    proxy.rules.append(Rule("GET", layout.CONDITIONAL_WRITES, "503"))
    long = replace(client.BOTOCORE_STANDARD, initial=600.0, max_wait=600.0, jitter="none")
    monkeypatch.setattr(client, "BOTOCORE_STANDARD", long)

    def fail_once_the_question_sleeps(*_args, **_kwargs):
        wait_until(lambda: _asleep_in_a_retry(QUESTION), what="the question's backoff")
        raise StoreError("stopped here")

    monkeypatch.setattr(state.Saver, "known_small_files", fail_once_the_question_sleeps)
    src = write_tree(tmp_path / "src", {"model.bin": os.urandom(2 << 20), "a.txt": b"a"})
    saved, _ = cache_cmd("save", _flags(StoreCase("s3", s3_store.url, proxy.url), "k", src), env)
    assert not saved.ok and "stopped here" in saved.headline, saved.headline
    left = [t for t in threading.enumerate() if t.name == QUESTION and t.is_alive()]
    assert not left, "the conditional-writes question outlived the failed save, asleep"
