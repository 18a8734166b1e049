"""What a user reads: outputs that agree with the report, plans in the conditional, named stores.

Each test here pins one reviewer finding; all run on the embedded file:// store (or need no
server at all), so they stay fast.
"""

from __future__ import annotations

import io
import os
import time
from datetime import UTC, datetime
from pathlib import Path

from cache_testing import REPO_ROOT, SUBCOMMANDS, cache_cmd
from cache_testing import store_flags as _flags

from gpuci.cli import run_command
from gpuci.runtime import Runtime


def _tree(root: Path, big: int = 40_000) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text('{"a": 1}\n')
    (root / "weights.bin").write_bytes(bytes(range(256)) * (big // 256))
    return root


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


def test_a_prune_plan_says_the_grace_period_holds_the_blobs_and_until_when(env, tmp_path):
    root = tmp_path / "store"
    src = _tree(tmp_path / "src")
    assert cache_cmd("save", _flags(root.as_uri(), "k1", src), env)[0].ok
    two_hours_ago = time.time() - 7200
    for path in root.rglob("*"):
        if path.is_file():
            os.utime(path, (two_hours_ago, two_hours_ago))

    plan, _ = cache_cmd("prune", {"store": root.as_uri(), "older-than": "0s"}, env, dry_run=True)
    assert plan.ok, plan.headline
    assert "would delete 1 key(s), 0 manifest(s), 0 blob(s)/pack(s), freeing 0 B" in plan.headline
    held = plan.report["held_by_grace"]
    assert len(held["manifests"]) == 1 and len(held["data"]) == 1  # both files share a pack
    objects = held["manifests"] + held["data"]
    assert held["bytes"] == sum((root / key).stat().st_size for key in objects) > 40_000
    assert "6h grace period would keep 1 manifest(s) and 1 blob(s)/pack(s)" in plan.headline
    assert "(in 4h" in plan.headline  # saved 2 h ago, the grace period is 6 h
    when = datetime.strptime(held["deletable_after"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert abs(when.timestamp() - (two_hours_ago + 6 * 3600)) < 2
    assert held["deletable_after"] in plan.headline
    assert any("grace period would keep" in block for block in plan.summary)

    done, _ = cache_cmd("prune", {"store": root.as_uri(), "older-than": "0s", "grace": "1h"}, env)
    assert done.ok and done.report["data"] == held["data"] and "grace" not in done.headline


def test_a_miss_names_the_store_it_looked_in(env, tmp_path):
    default = {**env, "RUNNER_TOOL_CACHE": str(tmp_path / "tool-cache")}
    miss, _ = cache_cmd("restore", {"key": "k1", "path": str(tmp_path / "out")}, default)
    assert miss.ok and miss.outputs["cache-hit"] is False
    store = (tmp_path / "tool-cache" / "gpuci" / "store").as_uri()
    assert miss.headline == f"miss: no cache for k1 in {store} (no cache saved there yet)"

    root = tmp_path / "store"
    assert cache_cmd("save", _flags(root.as_uri(), "k1", _tree(tmp_path / "src")), env)[0].ok
    flags = _flags(root.as_uri(), "k2", tmp_path / "out", **{"fail-on-miss": "true"})
    failed, _ = cache_cmd("restore", flags, env)
    assert failed.exit_code == 1
    assert failed.headline == f"miss: no cache for k2 in {root.as_uri()}"
    assert root.as_uri() in failed.annotations[0].message


def test_an_s3_miss_names_bucket_and_endpoint(s3_store, env, tmp_path):
    miss, _ = cache_cmd("restore", {**s3_store.flags(), "key": "k", "path": str(tmp_path)}, env)
    assert miss.ok, miss.headline
    assert miss.headline.endswith(f"in {s3_store.url} at {s3_store.endpoint}")


def test_credentials_in_an_s3_store_url_are_masked_and_refused(env, tmp_path):
    url = "s3://AKIAEXAMPLE:wJalr%2FSECRET@bucket/prefix?X-Amz-Security-Token=TOKEN123"
    out = io.StringIO()
    rt = Runtime(environ={**env, "GITHUB_ACTIONS": "true"}, stdout=out, stderr=out)
    result = run_command(
        SUBCOMMANDS["restore"], "cache-weights restore", _flags(url, "k", tmp_path), rt
    )
    assert result.exit_code == 2
    assert "s3://***@bucket/prefix?***" in result.headline
    text = result.headline + out.getvalue()
    for secret in ("AKIAEXAMPLE", "wJalr", "TOKEN123"):
        assert secret not in result.headline and secret not in result.annotations[0].message
    for secret in (
        "AKIAEXAMPLE",
        "wJalr%252FSECRET",
        "wJalr/SECRET",
        "X-Amz-Security-Token=TOKEN123",
    ):
        assert f"::add-mask::{secret}" in text


def test_save_has_its_own_outputs_and_each_one_means_something(env, tmp_path):
    spec = {o.name for o in SUBCOMMANDS["save"].outputs}
    assert spec == {"outcome", "manifest", "bytes-uploaded", "files", "seconds", "connections"}
    readme = (REPO_ROOT / "actions" / "cache-weights" / "save" / "README.md").read_text()
    assert "`outcome`" in readme and "cache-hit" not in readme and "matched-key" not in readme
    store = (tmp_path / "store").as_uri()
    src = _tree(tmp_path / "src")
    first, _ = cache_cmd("save", _flags(store, "k1", src), env)
    assert set(first.outputs) == spec
    assert first.outputs["outcome"] == "saved" and first.outputs["bytes-uploaded"] > 40_000
    assert first.outputs["connections"] == 8  # GPUCI_CACHE_WORKERS=8 in env: a fixed count
    again, _ = cache_cmd("save", _flags(store, "k1", src), env)
    assert again.outputs["outcome"] == "unchanged" and again.outputs["bytes-uploaded"] == 0
    assert again.outputs["connections"] == 0  # nothing sent: no connection to speak of
    assert again.outputs["manifest"] == first.outputs["manifest"]
    (src / "config.json").write_text('{"a": 2}\n')
    plan, _ = cache_cmd("save", _flags(store, "k1", src), env, dry_run=True)
    assert plan.outputs["outcome"] == "would-update"
    changed, _ = cache_cmd("save", _flags(store, "k1", src), env)
    assert changed.outputs["outcome"] == "updated"
    assert changed.outputs["manifest"] not in ("", first.outputs["manifest"])
    restored, _ = cache_cmd("restore", _flags(store, "k1", tmp_path / "out"), env)
    assert restored.outputs["manifest"] == changed.outputs["manifest"]
    assert set(restored.outputs) == {o.name for o in SUBCOMMANDS["restore"].outputs}


def test_a_dry_run_without_aws_credentials_plans_and_a_real_run_still_fails(
    env, tmp_path, monkeypatch
):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)  # botocore's chain reads the process env
    bare = {k: v for k, v in env.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    flags = _flags("s3://team-bucket/cache", "k1", tmp_path / "out")
    plan, _ = cache_cmd("restore", flags, bare, dry_run=True)
    assert plan.exit_code == 0, plan.headline
    assert plan.headline.startswith("would need credentials: lookup of k1 in s3://team-bucket")
    assert "no AWS credentials on this machine" in plan.headline
    assert "AWS_ACCESS_KEY_ID" in plan.headline  # what a real run needs
    assert plan.report["lookup"] == "skipped" and plan.outputs["cache-hit"] is False

    real, _ = cache_cmd("restore", flags, bare)
    assert real.exit_code == 3 and "no AWS credentials" in real.headline

    src = _tree(tmp_path / "src")
    save, _ = cache_cmd("save", _flags("s3://team-bucket/cache", "k1", src), bare, dry_run=True)
    assert save.exit_code == 0, save.headline
    assert save.headline.startswith("would need credentials: would save k1 (2 files, ")
    assert save.report["files"] == 2 and save.report["lookup"] == "skipped"
    assert save.outputs["outcome"] == "would-save"
    prune_flags = {"store": "s3://team-bucket/cache", "older-than": "14d"}
    prune, _ = cache_cmd("prune", prune_flags, bare, dry_run=True)
    assert prune.exit_code == 0 and "no AWS credentials on this machine" in prune.headline
    assert cache_cmd("save", _flags("s3://team-bucket/cache", "k1", src), bare)[0].exit_code == 3
    assert cache_cmd("prune", prune_flags, bare)[0].exit_code == 3


def test_a_save_path_the_system_cannot_stat_is_one_bad_input_line(env, tmp_path):
    """A path too long for the filesystem (ENAMETOOLONG) or one it may not look into (a link
    into /proc/1/cwd, EACCES for a runner that is not root) is the path input's error, exit 2,
    not an internal error from the root's stat."""
    root = tmp_path / "store"
    too_long = str(tmp_path / ("x" * 300))
    unreadable = tmp_path / "pid1"
    unreadable.mkdir()
    unreadable.chmod(0)
    paths = [too_long] + ([] if os.geteuid() == 0 else [str(unreadable / "model")])
    try:
        for path in paths:
            saved, _ = cache_cmd("save", _flags(root.as_uri(), "k1", path), env)
            assert saved.exit_code == 2, saved.headline
            assert "cannot be read" in saved.headline and path[-40:] in saved.headline
    finally:
        unreadable.chmod(0o700)
