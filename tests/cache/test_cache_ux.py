"""What a user reads: outputs that agree with the report, plans in the conditional, named stores.

Each test here pins one reviewer finding; all run on the embedded file:// store (or need no
server at all), so they stay fast.
"""

from __future__ import annotations

from pathlib import Path

from conftest import cache_cmd


def _tree(root: Path, big: int = 40_000) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text('{"a": 1}\n')
    (root / "weights.bin").write_bytes(bytes(range(256)) * (big // 256))
    return root


def _flags(store: str, key: str, path: Path, **extra: str) -> dict[str, str]:
    return {"store": store, "key": key, "path": str(path), **extra}


def test_a_warm_restore_reports_the_same_bytes_in_outputs_and_report(env, tmp_path):
    store = (tmp_path / "store").as_uri()
    tier = str(tmp_path / "tier")
    src = _tree(tmp_path / "src")
    size = sum(p.stat().st_size for p in src.iterdir())
    assert cache_cmd("save", _flags(store, "k1", src, **{"local-cache": tier}), env)[0].ok

    warm, _ = cache_cmd(
        "restore", _flags(store, "k1", tmp_path / "a", **{"local-cache": tier}), env
    )
    assert warm.ok, warm.headline
    assert warm.outputs["bytes-downloaded"] == warm.report["bytes_downloaded"] == 0
    assert warm.outputs["bytes-from-local"] == warm.report["bytes_from_local"] == size
    assert warm.report["bytes_metadata"] > 0  # the manifest, reported apart from the tree
    assert "0 B from the store" in warm.headline

    cold, _ = cache_cmd("restore", _flags(store, "k1", tmp_path / "b"), env)  # tier off (env)
    assert cold.ok, cold.headline
    assert cold.outputs["bytes-downloaded"] == cold.report["bytes_downloaded"] == size
    assert cold.outputs["bytes-from-local"] == cold.report["bytes_from_local"] == 0


def test_a_save_dry_run_says_what_would_upload_and_writes_nothing(env, tmp_path):
    root = tmp_path / "store"
    src = _tree(tmp_path / "src")
    plan, _ = cache_cmd("save", _flags(root.as_uri(), "k1", src), env, dry_run=True)
    assert plan.ok, plan.headline
    assert plan.headline.startswith("would save k1: 2 files")
    assert "uploaded" not in plan.headline and "would upload" in plan.headline
    assert "| would save |" in plan.summary[0]
    assert not root.exists()  # a plan writes nothing

    assert cache_cmd("save", _flags(root.as_uri(), "k1", src), env)[0].ok
    same, _ = cache_cmd("save", _flags(root.as_uri(), "k1", src), env, dry_run=True)
    assert "nothing would upload" in same.headline and "uploaded" not in same.headline
    (src / "config.json").write_text('{"a": 2}\n')
    changed, _ = cache_cmd("save", _flags(root.as_uri(), "k1", src), env, dry_run=True)
    assert changed.headline.startswith("would update k1:")
    assert "1 new pack(s)" in changed.headline and "uploaded" not in changed.headline
