"""Bad input and faults: each one ends in a clean one-line error or a clean recovery."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from cache_testing import (
    CREDS,
    REPO_ROOT,
    StoreCase,
    cache_cmd,
    next_store_second,
    record_retries,
    s3_client,
    tmpfs,
)
from cache_testing import store_flags as _flags
from treeutil import leftovers, make_tree, snapshot, write_tree

from gpuci.cache import _layout as layout
from gpuci.cache._format import refs
from gpuci.cache._format.manifest import canonical_json
from gpuci.cache._restore import place as restore
from gpuci.cache._stores import open_store
from gpuci.errors import ConflictError, ExitCode
from gpuci_testing import refused_url, wait_until
from moto_s3 import moto_process, put_in_process


def _one_line(result) -> str:
    assert "\n" not in result.headline
    return result.headline


# ----- the store is wrong or unreachable -------------------------------------------------------


def test_missing_bucket_is_infra_error(moto_endpoint, env, tmp_path):
    case = StoreCase("s3", "s3://no-such-bucket-gpuci/c", moto_endpoint)
    got, _ = cache_cmd("restore", _flags(case, "k", tmp_path / "o"), env)
    assert got.exit_code == ExitCode.INFRA
    assert "bucket 'no-such-bucket-gpuci' does not exist" in _one_line(got)
    src = make_tree(tmp_path / "src", small=1, big=10)
    got, _ = cache_cmd("save", _flags(case, "k", src), env)
    assert got.exit_code == ExitCode.INFRA and "does not exist" in got.headline


@pytest.mark.timeout(60)  # a hang guard: a refused connection ends it in about a second
def test_unreachable_endpoint_is_infra_error(env, tmp_path):
    with refused_url() as dead:
        case = StoreCase("s3", "s3://bucket/c", dead)
        got, _ = cache_cmd(
            "restore", _flags(case, "k", tmp_path / "o"), {**env, "AWS_MAX_ATTEMPTS": "1"}
        )
    assert got.exit_code == ExitCode.INFRA
    assert "cannot reach the S3 endpoint" in _one_line(got)
    assert "fix:" in got.annotations[0].message


@pytest.fixture(scope="module")
def auth_moto() -> Iterator[str]:
    """A second moto server that checks credentials (unknown keys are refused): its own process,
    since moto reads INITIAL_NO_AUTH_ACTION_COUNT once, at import."""
    with moto_process(INITIAL_NO_AUTH_ACTION_COUNT="0") as endpoint:
        yield endpoint


def test_wrong_credentials_are_infra_error_and_masked(auth_moto, env, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGWRONGWRONG1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-value-123")
    case = StoreCase("s3", "s3://some-bucket/c", auth_moto)
    got, log = cache_cmd("restore", _flags(case, "k", tmp_path / "o"), env)
    assert got.exit_code == ExitCode.INFRA
    assert "refused the credentials" in _one_line(got)
    assert "wrong-secret-value-123" not in got.headline + log


# ----- hostile or damaged content --------------------------------------------------------------


def _plant(store: StoreCase, key: str, manifest: dict) -> str:
    data = canonical_json(manifest)
    digest = hashlib.sha256(data).hexdigest()
    store.put_raw(layout.manifest_key(digest), data)
    store.put_raw(layout.ref_key("default", key), refs.ref_body(key, digest, 1, 5))
    return digest


HOSTILE = {
    "dotdot": {"type": "file", "root": 0, "path": "../evil", "size": 5, "mode": 420},
    "absolute": {"type": "file", "root": 0, "path": "/tmp/evil", "size": 5, "mode": 420},
    "inner-dotdot": {"type": "file", "root": 0, "path": "a/../../evil", "size": 5, "mode": 420},
    "escaping-link": {"type": "symlink", "root": 0, "path": "a/link", "target": "../../etc"},
    "absolute-link": {"type": "symlink", "root": 0, "path": "link", "target": "/etc/passwd"},
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_manifest_is_refused_before_any_write(store, env, tmp_path, case):
    entry = dict(HOSTILE[case])
    if entry["type"] == "file":
        entry["sha256"] = hashlib.sha256(b"evil\n").hexdigest()
    good = {
        "type": "file",
        "root": 0,
        "path": "ok.txt",
        "size": 0,
        "mode": 420,
        "sha256": hashlib.sha256(b"").hexdigest(),
    }
    _plant(
        store,
        "bad",
        {
            "format": 1,
            "key": "bad",
            "roots": [{"path": "x", "kind": "dir"}],
            "entries": [good, entry],
        },
    )
    target = tmp_path / "area" / "target"
    got, _ = cache_cmd("restore", _flags(store, "bad", target), env)
    assert got.exit_code == ExitCode.BAD_INPUT, got.headline
    assert "unsafe" in _one_line(got)
    assert not target.exists()
    assert not (tmp_path / "evil").exists() and not (tmp_path / "area" / "evil").exists()
    assert leftovers(tmp_path / "area") == []


def test_corrupt_blob_and_pack_are_never_written(store, env, tmp_path):
    src = make_tree(tmp_path / "src", small=3)
    saved, _ = cache_cmd("save", _flags(store, "k", src), env)
    assert saved.ok
    for prefix in ("blobs/", "packs/"):
        victim = next(k for k in store.object_keys() if k.startswith(prefix))
        original = store.get_raw(victim)
        store.put_raw(victim, b"\x00" * len(original))
        target = tmp_path / f"out-{prefix[:-1]}"
        got, _ = cache_cmd("restore", _flags(store, "k", target), env)
        assert got.exit_code == ExitCode.INFRA, got.headline
        assert "fetched twice" in _one_line(got)
        assert got.report["error"]["type"] == "IntegrityError"
        assert not target.exists()
        assert leftovers(tmp_path) == []
        store.put_raw(victim, original)


def test_corrupt_manifest_is_integrity_error(store, env, tmp_path):
    src = make_tree(tmp_path / "src", small=1, big=10)
    saved, _ = cache_cmd("save", _flags(store, "k", src), env)
    store.put_raw(layout.manifest_key(saved.outputs["manifest"]), b'{"format":1}')
    got, _ = cache_cmd("restore", _flags(store, "k", tmp_path / "o"), env)
    assert got.exit_code == ExitCode.INFRA and got.report["error"]["type"] == "IntegrityError"


# ----- concurrency ----------------------------------------------------------------------------


def test_conditional_writes_refuse_stale_writers(store, env):
    s = open_store(store.url, endpoint_url=store.endpoint, environ=env)
    etag = s.put_if_absent("refs/default/x", b"one")
    with pytest.raises(ConflictError):
        s.put_if_absent("refs/default/x", b"two")
    moved = s.put_if_match("refs/default/x", b"three", etag)
    with pytest.raises(ConflictError):
        s.put_if_match("refs/default/x", b"four", etag)
    assert s.get("refs/default/x") == (b"three", moved)


def test_two_saves_of_one_key_one_wins_cleanly(store, env, tmp_path, monkeypatch):
    mine = make_tree(tmp_path / "mine", seed=1, small=2)
    theirs = make_tree(tmp_path / "theirs", seed=2, small=2)
    original = refs.write
    raced: dict = {}

    def racing_write(*args, **kwargs):
        if not raced:  # the other job saves between our read of the ref and our write
            raced["started"] = True
            raced["result"] = cache_cmd("save", _flags(store, "k", theirs), env)[0]
        return original(*args, **kwargs)

    monkeypatch.setattr(refs, "write", racing_write)
    got, _ = cache_cmd("save", _flags(store, "k", mine), env)
    assert raced["result"].ok
    assert got.ok and got.report["outcome"] == "lost race"
    assert any("another job saved k" in a.message for a in got.annotations)
    assert got.outputs["manifest"] == raced["result"].outputs["manifest"]
    monkeypatch.setattr(refs, "write", original)
    out = tmp_path / "out"
    assert cache_cmd("restore", _flags(store, "k", out), env)[0].ok
    assert snapshot(out) == snapshot(theirs)


# ----- transient S3 faults through a fault-injecting proxy --------------------------------------


def test_5xx_slowdown_and_dropped_connections_are_retried(
    s3_store, proxy, env, tmp_path, monkeypatch
):
    monkeypatch.setattr(layout, "MIN_PART", 256 << 10)
    via = StoreCase("s3", s3_store.url, proxy.url)
    src = make_tree(tmp_path / "src", small=4)
    proxy.add("PUT", "/blobs/", "503")
    proxy.add("PUT", "/packs/", "drop")
    proxy.add("PUT", "/refs/", "500")
    saved, _ = cache_cmd("save", _flags(via, "k", src), env)
    assert saved.ok, saved.headline
    proxy.add("GET", "/refs/", "503")
    proxy.add("GET", "list-type=2", "503")
    proxy.add("GET", "/blobs/", "503", times=2)
    proxy.add("GET", "/blobs/", "drop")
    proxy.add("GET", "/blobs/", "truncate")
    proxy.add("GET", "/packs/", "500")
    proxy.add("GET", "/packs/", "truncate")
    out = tmp_path / "out"
    retried = record_retries(monkeypatch)
    got, _ = cache_cmd("restore", _flags(via, "k-new", out, **{"restore-keys": "k"}), env)
    assert got.ok, got.headline
    assert got.outputs["matched-key"] == "k"
    assert snapshot(out) == snapshot(src)
    assert all(rule.fired == rule.times for rule in proxy.rules), proxy.rules
    assert retried  # the data path's own retries (truncated bodies), as record_retries sees them


def test_bytes_corrupted_in_flight_are_refetched_once(s3_store, proxy, env, tmp_path):
    via = StoreCase("s3", s3_store.url, proxy.url)
    src = make_tree(tmp_path / "src", small=2)
    assert cache_cmd("save", _flags(via, "k", src), env)[0].ok
    proxy.add("GET", "/blobs/", "corrupt")
    proxy.add("GET", "/packs/", "corrupt")
    out = tmp_path / "out"
    got, _ = cache_cmd("restore", _flags(via, "k", out), env)
    assert got.ok, got.headline
    assert snapshot(out) == snapshot(src)
    assert all(rule.fired == 1 for rule in proxy.rules)


def test_restore_keys_paginate_past_1000_refs(s3_store, env, tmp_path):
    client = s3_client(s3_store.endpoint)
    src = make_tree(tmp_path / "src", small=1, big=10)
    saved, _ = cache_cmd("save", _flags(s3_store, "seed", src), env)
    body = refs.ref_body("x", saved.outputs["manifest"], 4, 10)

    def put(key: str) -> None:
        client.put_object(Bucket=s3_store.bucket, Key=full(key), Body=body)

    def full(key: str) -> str:
        return f"{s3_store.prefix}/{layout.ref_key('default', key)}"

    many = [f"p-{i:04d}" for i in range(1004)] + ["p-9999"]
    if s3_store.kind == "moto":  # served from this process: its backend takes them at once
        put_in_process(s3_store.bucket, [full(key) for key in many], body)
    else:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(put, many))
    next_store_second()
    put("p-1500")  # the newest sorts on the second page and is not the largest name
    pages = client.get_paginator("list_objects_v2").paginate(
        Bucket=s3_store.bucket, Prefix=full("p-")
    )
    assert sum(len(page.get("Contents", [])) for page in pages) == 1006  # two pages and more
    got, _ = cache_cmd(
        "restore", _flags(s3_store, "p-none", tmp_path / "o", **{"restore-keys": "p-"}), env
    )
    assert got.ok and got.outputs["matched-key"] == "p-1500"


# ----- killed midway ---------------------------------------------------------------------------


def _cli_env(env: dict[str, str]) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "INPUT_"))}
    return {**base, **env, **CREDS, "PYTHONPATH": str(REPO_ROOT / "src")}


def test_save_killed_midway_leaves_no_ref_and_a_rerun_completes(s3_store, proxy, env, tmp_path):
    src = make_tree(tmp_path / "src", small=30)
    proxy.add("PUT", "/blobs/", "delay", seconds=30)
    via = StoreCase("s3", s3_store.url, proxy.url)
    _kill_cli_once("save", via, src, env, lambda: proxy.count("PUT", "/blobs/") >= 1)
    assert not [k for k in s3_store.object_keys() if k.startswith(("refs/", "manifests/"))]
    assert cache_cmd("save", _flags(s3_store, "k", src), env)[0].ok
    out = tmp_path / "out"
    assert cache_cmd("restore", _flags(s3_store, "k", out), env)[0].ok
    assert snapshot(out) == snapshot(src)


def test_save_killed_with_parts_in_flight_leaves_no_ref_and_no_blob(s3_store, proxy, env, tmp_path):
    """Killed while a large file's parts are on the wire: the multipart upload never completes,
    so no blob, manifest or ref appears; a rerun saves the tree."""
    # model.bin: parts of 8, 8 and 4 MiB
    src = write_tree(
        tmp_path / "src", {"model.bin": os.urandom(20 << 20), "config.json": '{"layers": 2}\n'}
    )
    proxy.add("PUT", "partNumber=", "delay", times=3, seconds=30)
    via = StoreCase("s3", s3_store.url, proxy.url)
    killed_env = {**env, "GPUCI_MULTIPART_THRESHOLD": "8MiB"}
    _kill_cli_once("save", via, src, killed_env, lambda: proxy.count("PUT", "partNumber=") >= 1)
    left = s3_store.object_keys()
    assert not [k for k in left if k.startswith(("refs/", "manifests/", "blobs/"))], left
    assert cache_cmd("save", _flags(s3_store, "k", src), env)[0].ok
    out = tmp_path / "out"
    assert cache_cmd("restore", _flags(s3_store, "k", out), env)[0].ok
    assert snapshot(out) == snapshot(src)


def _kill_cli_once(sub: str, via: StoreCase, path: Path, env, ready, settle: float = 0.0) -> None:
    """Run ``cache-weights SUB --key k --path PATH`` on ``via``'s store in the CLI, SIGKILL it
    once ``ready()`` holds (plus ``settle`` seconds): a dead job."""
    args = ["cache-weights", sub, "--key", "k", "--path", str(path), "--store", via.url]
    args += ["--endpoint-url", via.endpoint]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuci", *args],
        env=_cli_env(env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(ready, 60, "the CLI to get as far as the kill needs")
        time.sleep(settle)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)


def test_restore_killed_midway_leaves_no_final_name_and_a_rerun_completes(
    s3_store, proxy, env, tmp_path
):
    src = make_tree(tmp_path / "src", small=4, big=6_000_000)
    assert cache_cmd("save", _flags(s3_store, "k", src), env)[0].ok
    proxy.add("GET", "/blobs/", "throttle", times=10, seconds=0.05)
    via = StoreCase("s3", s3_store.url, proxy.url)
    target = tmp_path / "area" / "models"
    _kill_cli_once(
        "restore", via, target, env, lambda: proxy.count("GET", "/blobs/") >= 1, settle=0.5
    )
    assert not target.exists()
    assert leftovers(target.parent), "the killed restore should have been mid-way in staging"
    got, _ = cache_cmd("restore", _flags(s3_store, "k", target), env)
    assert got.ok, got.headline
    assert snapshot(target) == snapshot(src)
    assert leftovers(target.parent) == []


# ----- disk full -------------------------------------------------------------------------------


@pytest.fixture
def tiny_disk(tmp_path: Path):
    with tmpfs(tmp_path / "tiny", "2m") as mount:
        yield mount


def test_disk_full_is_a_clean_error_and_staging_is_removed(
    store, env, tmp_path, tiny_disk, monkeypatch
):
    src = make_tree(tmp_path / "src", small=3, big=3_000_000)
    assert cache_cmd("save", _flags(store, "k", src), env)[0].ok
    target = tiny_disk / "models"
    got, _ = cache_cmd("restore", _flags(store, "k", target), env)  # refused up front
    assert got.exit_code == ExitCode.INFRA and "not enough disk" in _one_line(got)
    assert list(tiny_disk.iterdir()) == []
    monkeypatch.setattr(restore, "DISK_MARGIN", -(1 << 30))  # skip the check: hit ENOSPC
    got, _ = cache_cmd("restore", _flags(store, "k", target), env)
    assert got.exit_code == ExitCode.INFRA and "disk full" in _one_line(got)
    assert list(tiny_disk.iterdir()) == []
