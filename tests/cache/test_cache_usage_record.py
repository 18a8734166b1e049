"""The last-use record on a file store: renamed into place like every object, but not fsynced
(a lost date costs nothing; the fsync cost ~0.1 s of every warm restore)."""

from __future__ import annotations

import os

from gpuci.cache import _layout as layout
from gpuci.cache._format import refs
from gpuci.cache._stores.file import LocalStore


def test_a_last_use_record_skips_the_fsync_that_refs_keep(tmp_path, monkeypatch):
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    store = LocalStore(tmp_path / "store")

    assert refs.touch_use(store, "ns", "weights-v1") is None
    assert synced == []  # the date is not worth a disk flush
    assert set(refs.last_uses(store, "ns")) == {"weights-v1"}

    store.put(layout.ref_key("ns", "weights-v1"), b'{"manifest": "x"}')
    assert len(synced) == 1  # a ref is still durable before it is renamed into place
    leftovers = [p.name for p in (tmp_path / "store").rglob("*") if layout.INCOMPLETE in p.name]
    assert leftovers == []
