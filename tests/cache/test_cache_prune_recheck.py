"""Prune against a store that changes under it: what was saved, restored or pinned after the
plan stays; what it cannot read keeps its data; the report says what really went."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from cache_testing import cache_cmd

from gpuci.cache import _layout as layout
from gpuci.cache._format import refs
from gpuci.cache._stores.base import ObjectInfo
from gpuci.cache._stores.file import LocalStore
from gpuci.cache._upkeep import prune


def _local(tmp_path: Path) -> dict[str, str]:
    return {"store": (tmp_path / "store").as_uri()}


def test_a_far_future_time_is_reported_not_an_internal_error(env, tmp_path, monkeypatch):
    future = ObjectInfo("blobs/sha256/ab/" + "a" * 62 + "ab", 2, 253402300799.0)  # 9999-12-31

    def planned(*_args: object) -> prune.Plan:
        return prune.Plan(kept_young=1, held_data=[future])

    monkeypatch.setattr(prune, "plan", planned)
    (tmp_path / "store").mkdir()
    got, log = cache_cmd("prune", {**_local(tmp_path), "older-than": "1d"}, env, dry_run=True)
    assert got.ok, log
    assert "far future" in got.headline
    assert got.report["held_by_grace"]["deletable_after"] == "far future"


def _save(env, tmp_path: Path, key: str, data: bytes) -> str:
    tree = tmp_path / f"tree-{key}"
    tree.mkdir(exist_ok=True)
    (tree / "big.bin").write_bytes(data)
    (tree / "small.txt").write_text("small")
    got, log = cache_cmd("save", {**_local(tmp_path), "key": key, "path": str(tree)}, env)
    assert got.ok, log
    return got.outputs["manifest"]


def _age_everything(tmp_path: Path, days: float = 30) -> None:
    old = time.time() - days * 86400
    for path in (tmp_path / "store").rglob("*"):
        if path.is_file():
            os.utime(path, (old, old))


def _plan(tmp_path: Path) -> tuple[LocalStore, prune.Plan]:
    store = LocalStore(tmp_path / "store")
    return store, prune.plan(store, "default", "", 14 * 86400, 0, 6 * 3600)


def test_the_report_counts_what_was_deleted_not_what_was_planned(env, tmp_path, monkeypatch):
    _save(env, tmp_path, "old-1", b"\1" * 1_200_000)
    _age_everything(tmp_path)
    planned = prune.plan

    def plan_then_reuse(store, *args):  # a save reusing the blobs touches them meanwhile
        work = planned(store, *args)
        for item in work.data:
            store.touch(item.key)
        return work

    monkeypatch.setattr(prune, "plan", plan_then_reuse)
    got, log = cache_cmd("prune", {**_local(tmp_path), "older-than": "14d"}, env)
    assert got.ok, log
    assert got.report["data"] == [] and got.report["kept_changed"]
    assert got.report["bytes_freed"] < 10_000  # the ref, its use record and the manifest
    assert "0 blob(s)/pack(s)" in got.headline and "since the listing" in got.headline


def _restore(env, tmp_path: Path, key: str, out: str = "out") -> bool:
    flags = {**_local(tmp_path), "key": key, "path": str(tmp_path / out)}
    got, log = cache_cmd("restore", flags, env)
    assert got.ok, log
    return bool(got.outputs["cache-hit"])


def test_a_key_saved_or_restored_after_the_plan_is_kept_whole(env, tmp_path):
    data = os.urandom(1_200_000)
    first = _save(env, tmp_path, "saved-k", data)
    _save(env, tmp_path, "used-k", data)
    _age_everything(tmp_path)
    store, work = _plan(tmp_path)
    assert len(work.refs) == 2 and work.manifests and work.data
    _save(env, tmp_path, "saved-k", os.urandom(1_200_000))  # moved to a new tree meanwhile
    assert _restore(env, tmp_path, "used-k", "during")  # and this one restored meanwhile

    done = prune.execute(store, work, 6 * 3600, "default")
    assert _restore(env, tmp_path, "saved-k", "a") and _restore(env, tmp_path, "used-k", "b")
    assert done.refs == [] and done.data == []  # used-k's manifest names the same blobs
    assert [m.key for m in done.manifests] == [layout.manifest_key(first)]  # saved-k's old one
    assert {"refs/default/saved-k", "refs/default/used-k"} <= set(done.kept)


def test_a_ref_still_unused_at_the_delete_goes(env, tmp_path):
    _save(env, tmp_path, "idle", b"\1" * 1_200_000)
    _age_everything(tmp_path)
    store, work = _plan(tmp_path)
    done = prune.execute(store, work, 6 * 3600, "default")
    assert done.refs == ["refs/default/idle"] and len(done.manifests) == 1 and done.data
    assert not _restore(env, tmp_path, "idle")


def _restore_manifest(env, tmp_path: Path, digest: str) -> bool:
    flags = {**_local(tmp_path), "manifest": digest, "path": str(tmp_path / "by-digest")}
    got, _ = cache_cmd("restore", flags, env)
    return got.ok and bool(got.outputs["cache-hit"])


def test_a_pin_written_after_the_plan_keeps_its_tree(env, tmp_path):
    digest = _save(env, tmp_path, "dataset-v1", os.urandom(1_200_000))
    _age_everything(tmp_path)
    store, work = _plan(tmp_path)
    assert len(work.manifests) == 1 and work.data
    pinned, log = cache_cmd(
        "pin", {**_local(tmp_path), "manifest": digest, "reason": "model v3 data"}, env
    )
    assert pinned.ok, log

    done = prune.execute(store, work, 6 * 3600, "default")
    assert _restore_manifest(env, tmp_path, digest)
    assert done.refs == ["refs/default/dataset-v1"] and done.manifests == [] and done.data == []


def test_prune_reads_the_pins_again_before_deleting_manifests(env, tmp_path):
    digest = _save(env, tmp_path, "dataset-v1", os.urandom(1_200_000))
    _age_everything(tmp_path)
    store, work = _plan(tmp_path)
    store.put(layout.pin_key(digest), b"{}")  # a bare pin: nothing made young
    prune.execute(store, work, 6 * 3600, "default")
    assert _restore_manifest(env, tmp_path, digest)


def test_a_manifest_made_young_after_the_plan_stays_with_its_data(env, tmp_path):
    digest = _save(env, tmp_path, "dataset-v1", os.urandom(1_200_000))
    _age_everything(tmp_path)
    store, work = _plan(tmp_path)
    store.touch(layout.manifest_key(digest))  # only the manifest: its data is still old
    done = prune.execute(store, work, 6 * 3600, "default")
    assert _restore_manifest(env, tmp_path, digest)
    assert done.manifests == [] and done.data == []


def test_pinning_makes_an_old_tree_young(env, tmp_path):
    digest = _save(env, tmp_path, "dataset-v1", os.urandom(1_200_000))
    _age_everything(tmp_path)
    got, log = cache_cmd("pin", {**_local(tmp_path), "manifest": digest, "reason": "keep"}, env)
    assert got.ok, log
    root = tmp_path / "store"
    tree = [root / layout.manifest_key(digest)]
    tree += [p for p in root.rglob("*") if p.is_file() and p.parts[-4] in ("blobs", "packs")]
    assert len(tree) >= 2
    assert all(p.stat().st_mtime > time.time() - 3600 for p in tree)


def test_a_live_manifest_prune_cannot_read_keeps_all_data(env, tmp_path):
    old = _save(env, tmp_path, "w", os.urandom(1_200_000))
    store = LocalStore(tmp_path / "store")
    body = json.loads(store.get(layout.manifest_key(old))[0])
    body.update(format=2, new_field={"x": 1})  # as a newer gpu-ci sharing the store writes
    data = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    newer = hashlib.sha256(data).hexdigest()
    store.put(layout.manifest_key(newer), data)
    store.put(layout.ref_key("default", "w2"), refs.ref_body("w2", newer, 2, 1_200_000))
    store.delete(layout.ref_key("default", "w"))
    _age_everything(tmp_path)
    store.touch(layout.ref_key("default", "w2"))  # the newer key is in use
    blobs = {p for p in (tmp_path / "store" / "blobs").rglob("*") if p.is_file()}
    assert blobs

    got, log = cache_cmd("prune", {**_local(tmp_path), "older-than": "14d"}, env)
    assert got.ok, log
    assert all(p.exists() for p in blobs)
    assert got.report["data"] == [] and got.report["manifests"] == [layout.manifest_key(old)]
    assert any(newer[:12] in a.message and "none are deleted" in a.message for a in got.annotations)
