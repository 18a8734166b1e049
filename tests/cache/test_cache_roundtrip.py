"""Save and restore through both stores: the tree comes back exactly, and only new bytes move."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cache_testing import cache_cmd, next_store_second
from treeutil import make_tree, snapshot, write_tree

from gpuci.cache import _layout as layout
from gpuci.errors import ExitCode


def _save(store, env, key: str, *paths: Path, dry_run: bool = False):
    flags = {**store.flags(), "key": key, "path": "\n".join(str(p) for p in paths)}
    return cache_cmd("save", flags, env, dry_run=dry_run)


def _restore(store, env, key: str, *paths: Path, dry_run: bool = False, **extra: str):
    flags = {**store.flags(), "key": key, "path": "\n".join(str(p) for p in paths), **extra}
    return cache_cmd("restore", flags, env, dry_run=dry_run)


def test_round_trip_keeps_content_modes_symlinks_and_empty_things(store, env, tmp_path):
    src = make_tree(tmp_path / "src")
    saved, log = _save(store, env, "weights-v1", src)
    assert saved.exit_code == ExitCode.OK, saved.headline
    assert saved.outputs["files"] == 23
    assert saved.outputs["bytes-uploaded"] > 2_500_000
    assert saved.outputs["outcome"] == "saved"
    assert "cache-hit" not in saved.outputs and "matched-key" not in saved.outputs
    keys = store.object_keys()
    assert any(k.startswith("blobs/sha256/") for k in keys)
    assert any(k.startswith("packs/sha256/") for k in keys)
    assert "refs/default/weights-v1" in keys
    assert "upload" in log and "hash" in log  # progress lines

    out = tmp_path / "restored" / "models"
    got, log = _restore(store, env, "weights-v1", out)
    assert got.exit_code == ExitCode.OK, got.headline
    assert got.outputs["cache-hit"] is True
    assert got.outputs["matched-key"] == "weights-v1"
    assert got.outputs["manifest"] == saved.outputs["manifest"]
    assert got.outputs["bytes-downloaded"] >= 2_500_000
    assert snapshot(out) == snapshot(src)
    assert (out / "link-to-f01").is_symlink()
    assert "| weights-v1 | hit |" in got.summary[0]
    assert "restore weights-v1" in log
    records = [json.loads(line) for line in Path(env["GPUCI_JOURNAL"]).read_text().splitlines()]
    kinds = [r["kind"] for r in records]
    assert kinds == ["cache-save", "cache-restore"]
    assert records[1]["manifest"] == saved.outputs["manifest"]
    assert records[1]["files"] == 23


def test_multi_part_files_hash_in_order_across_workers(store, env, tmp_path, monkeypatch):
    monkeypatch.setattr(layout, "MIN_PART", 64 << 10)
    monkeypatch.setattr(layout, "PART_SIZE", 128 << 10)
    monkeypatch.setattr(layout, "PACK_RUN", 16 << 10)
    src = make_tree(tmp_path / "src", big=3_000_000)
    assert _save(store, env, "parts", src)[0].ok
    out = tmp_path / "out"
    got, _ = _restore(store, env, "parts", out)
    assert got.ok, got.headline
    assert snapshot(out) == snapshot(src)


def test_several_paths_including_a_single_file(store, env, tmp_path):
    src = make_tree(tmp_path / "a", small=3)
    single = tmp_path / "config.json"
    single.write_text('{"x": 1}')
    assert _save(store, env, "multi", src, single)[0].ok
    out_dir, out_file = tmp_path / "o" / "a", tmp_path / "o" / "config.json"
    got, _ = _restore(store, env, "multi", out_dir, out_file)
    assert got.ok, got.headline
    assert snapshot(out_dir) == snapshot(src)
    assert out_file.read_text() == '{"x": 1}'
    bad, _ = _restore(store, env, "multi", tmp_path / "only-one")
    assert bad.exit_code == ExitCode.BAD_INPUT
    assert "2 path(s)" in bad.headline


def test_identical_tree_uploads_nothing_and_one_changed_file_uploads_only_it(store, env, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(20):
        (src / f"shard-{i:02d}.bin").write_bytes(bytes([i]) * (300_000 if i % 2 else 1_200_000))
    first, _ = _save(store, env, "data", src)
    assert first.ok
    again, _ = _save(store, env, "data", src)
    assert again.ok and again.outputs["bytes-uploaded"] == 0
    assert again.outputs["outcome"] == "unchanged"
    assert again.outputs["manifest"] == first.outputs["manifest"]
    for name in ("shard-03.bin", "shard-04.bin"):  # one small (packed), one large (blob)
        (src / name).write_bytes((name * 1000).encode()[:7000])
        changed, _ = _save(store, env, "data", src)
        assert changed.ok and changed.outputs["outcome"] == "updated"
        meta = changed.report["bytes_metadata"]
        assert changed.report["bytes_data"] == 7000
        assert changed.outputs["bytes-uploaded"] == 7000 + meta
        assert meta < 20_000
    out = tmp_path / "out"
    assert _restore(store, env, "data", out)[0].ok
    assert snapshot(out) == snapshot(src)


def test_restore_keys_pick_newest_prefix_match_and_hit_is_exact_only(store, env, tmp_path):
    trees = {}
    for n, key in enumerate(["model-a-1", "model-a-2", "model-b-1"]):
        trees[key] = make_tree(tmp_path / key, seed=n, big=10, small=2)
        assert _save(store, env, key, trees[key])[0].ok
        if key == "model-a-1":
            next_store_second(store)  # S3 LastModified has one-second resolution
    out = tmp_path / "out1"
    got, _ = _restore(store, env, "model-a-9", out, **{"restore-keys": "nope-\nmodel-a-"})
    assert got.ok, got.headline
    assert got.outputs["cache-hit"] is False
    assert got.outputs["matched-key"] == "model-a-2"
    assert snapshot(out) == snapshot(trees["model-a-2"])
    got, _ = _restore(store, env, "model-b-1", tmp_path / "out2", **{"restore-keys": "model-a-"})
    assert got.outputs["cache-hit"] is True and got.outputs["matched-key"] == "model-b-1"


def test_miss_lookup_only_and_fail_on_miss(store, env, tmp_path):
    out = tmp_path / "out"
    miss, _ = _restore(store, env, "nothing", out)
    assert miss.ok
    assert miss.outputs["cache-hit"] is False and miss.outputs["matched-key"] == ""
    assert not out.exists()
    failed, _ = _restore(store, env, "nothing", out, **{"fail-on-miss": "true"})
    assert failed.exit_code == ExitCode.CHECK_FAILED
    assert failed.outputs["cache-hit"] is False
    src = make_tree(tmp_path / "src", small=2)
    assert _save(store, env, "there", src)[0].ok
    found, _ = _restore(store, env, "there", out, **{"lookup-only": "true"})
    assert found.ok and found.outputs["cache-hit"] is True
    assert found.outputs["files"] == 5 and found.outputs["bytes-downloaded"] == 0
    assert not out.exists()


def test_dry_run_plans_without_writing(store, env, tmp_path):
    out = tmp_path / "out"
    plan, _ = _restore(store, env, "k", out, dry_run=True)
    assert plan.ok and "would miss" in plan.headline
    src = make_tree(tmp_path / "src", small=2)
    plan, _ = _save(store, env, "k", src, dry_run=True)
    assert plan.ok and plan.report["dry_run"] is True
    assert plan.report["bytes_data"] >= 2_500_000
    assert store.object_keys() == []
    assert not Path(env["GPUCI_JOURNAL"]).exists()
    assert _save(store, env, "k", src)[0].ok
    plan, _ = _restore(store, env, "k", out, dry_run=True)
    assert plan.ok and "would restore" in plan.headline
    assert plan.outputs["cache-hit"] is True and plan.outputs["files"] == 5
    assert not out.exists()
    missing, _ = _save(store, env, "k2", tmp_path / "not-yet", dry_run=True)
    assert missing.ok and "not there yet" in missing.headline


def test_restore_merges_into_an_existing_folder(store, env, tmp_path):
    src = make_tree(tmp_path / "src", small=2)
    assert _save(store, env, "k", src)[0].ok
    out = write_tree(tmp_path / "out", {"keep.txt": "mine", "big.bin": "stale"})
    got, _ = _restore(store, env, "k", out)
    assert got.ok, got.headline
    assert (out / "keep.txt").read_text() == "mine"
    assert (out / "big.bin").read_bytes() == (src / "big.bin").read_bytes()


def test_ls_lists_keys_newest_first(store, env, tmp_path):
    src = make_tree(tmp_path / "src", small=1, big=10)
    for key in ("a-1", "a-2", "b-1"):
        assert _save(store, env, key, src)[0].ok
    result, _ = cache_cmd("ls", {**store.flags(), "prefix": "a-"}, env)
    assert result.ok
    assert sorted(k["key"] for k in result.report["keys"]) == ["a-1", "a-2"]
    assert "| a-1 | 4 |" in result.summary[0] or "| a-2 | 4 |" in result.summary[0]


def test_keys_with_slashes_and_spaces_round_trip(store, env, tmp_path):
    src = make_tree(tmp_path / "src", small=1, big=10)
    key = "org/model v1:sha=abc"
    assert _save(store, env, key, src)[0].ok
    got, _ = _restore(store, env, "other", tmp_path / "o", **{"restore-keys": "org/model v"})
    assert got.ok and got.outputs["matched-key"] == key


@pytest.mark.parametrize("bad", ["", "x" * 600, "tab\there"])
def test_bad_keys_are_input_errors(store, env, tmp_path, bad):
    got, _ = _restore(store, env, bad, tmp_path / "o")
    assert got.exit_code == ExitCode.BAD_INPUT
