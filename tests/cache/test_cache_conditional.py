"""Conditional writes, checked against what the server really does.

moto and SeaweedFS refuse a second ``If-None-Match: *`` create and a stale ``If-Match`` (412);
npm s3rver accepts both and ignores them, as fauxqs and some gateways do. The probe tells them
apart once per store; on s3rver two saves of one key racing end one ``saved`` and one
``lost-race`` naming the winner, where both used to end ``saved``.
"""

from __future__ import annotations

import io
import json
import os
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
import pytest
from s3rver_server import BUCKET, CREDENTIALS, s3rver
from treeutil import make_tree, snapshot

from gpuci.cache import _layout as layout
from gpuci.cache._format import refs
from gpuci.cache._stores import open_store
from gpuci.cache._stores.file import LocalStore
from gpuci.cache._stores.s3 import store as s3
from gpuci.cli import run_command
from gpuci.commands import _cache_weights as cache_weights
from gpuci.runtime import Result, Runtime
from moto_s3 import FAKE_S3_CREDENTIALS

SUBCOMMANDS = {sub.name: sub for sub in cache_weights.COMMAND.subcommands}


def _env(tmp_path: Path, creds: dict[str, str]) -> dict[str, str]:
    return {
        "GPUCI_JOURNAL": str(tmp_path / "journal.jsonl"),
        "AWS_MAX_ATTEMPTS": "2",
        "GPUCI_CACHE_WORKERS": "4",
        "HOME": str(tmp_path / "home"),
        "GPUCI_LOCAL_CACHE": "off",
        **creds,
    }


def _cache(sub: str, flags: dict[str, str], env: dict[str, str]) -> Result:
    out = io.StringIO()
    rt = Runtime(environ=env, stdout=out, stderr=out)
    return run_command(SUBCOMMANDS[sub], f"cache-weights {sub}", dict(flags), rt)


def _flags(url: str, endpoint: str, key: str, path: Path) -> dict[str, str]:
    return {"store": url, "endpoint-url": endpoint, "key": key, "path": str(path)}


@pytest.fixture(scope="module")
def s3rver_endpoint():
    with s3rver() as endpoint:
        yield endpoint


@pytest.fixture
def s3rver_url(monkeypatch) -> str:
    """A fresh prefix in s3rver's bucket; boto3 reads the process's environment too, so the
    key pair s3rver checks is set there for the test."""
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"


def _unsafe(result: Result) -> list[str]:
    return [a.message for a in result.annotations if "ignores conditional writes" in a.message]


def test_a_file_store_honours_its_own_conditions(tmp_path):
    store = LocalStore(tmp_path / "store")
    assert refs.probe_conditional_writes(store) is True
    assert refs.conditional_writes_honoured(store) is True
    assert not (tmp_path / "store" / layout.CONDITIONAL_WRITES).exists()  # known, not probed
    assert not list((tmp_path / "store").rglob("probes/*"))


def test_servers_that_honour_them_are_told_apart(store, tmp_path):
    """The file store, moto and SeaweedFS (the ``store`` fixture's three) all refuse."""
    opened = open_store(store.url, endpoint_url=store.endpoint, environ=os.environ)
    assert refs.probe_conditional_writes(opened) is True
    assert not [k for k in store.object_keys() if k.startswith(layout.CONDITIONAL_PROBES)]


def test_moto_honours_them_once_probed_and_saves_read_nothing_back(
    tmp_path, moto_endpoint, monkeypatch
):
    bucket = f"gpuci-{uuid.uuid4().hex[:12]}"
    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    client.create_bucket(Bucket=bucket)
    url, env = f"s3://{bucket}/cache", _env(tmp_path, FAKE_S3_CREDENTIALS)
    ref_reads: list[str] = []
    original = s3.S3Store.get

    def counting_get(self, key, limit=None):
        if key.startswith("refs/"):
            ref_reads.append(key)
        return original(self, key, limit)

    monkeypatch.setattr(s3.S3Store, "get", counting_get)
    saved = _cache("save", _flags(url, moto_endpoint, "k", make_tree(tmp_path / "a", small=2)), env)
    assert saved.ok and saved.outputs["outcome"] == "saved", saved.headline
    assert ref_reads == ["refs/default/k"]  # the lookup before saving; no read-back
    assert _unsafe(saved) == []
    record = client.get_object(Bucket=bucket, Key=f"cache/{layout.CONDITIONAL_WRITES}")
    assert json.loads(record["Body"].read())["honoured"] is True
    listed = client.list_objects_v2(Bucket=bucket, Prefix=f"cache/{layout.CONDITIONAL_PROBES}")
    assert listed.get("KeyCount", 0) == 0  # the probe object is gone


def test_s3rver_is_found_out_and_the_answer_kept(tmp_path, s3rver_endpoint, s3rver_url):
    env = _env(tmp_path, CREDENTIALS)
    store = open_store(s3rver_url, endpoint_url=s3rver_endpoint, environ=env)
    assert refs.probe_conditional_writes(store) is False
    assert refs.conditional_writes_honoured(store) is False
    again = open_store(s3rver_url, endpoint_url=s3rver_endpoint, environ=env)
    got = again.get(layout.CONDITIONAL_WRITES)
    assert got is not None and json.loads(got[0])["honoured"] is False


def test_s3rver_saves_one_after_another_are_not_races(tmp_path, s3rver_endpoint, s3rver_url):
    env = _env(tmp_path, CREDENTIALS)
    first = _cache("save", _flags(s3rver_url, s3rver_endpoint, "k", make_tree(tmp_path / "a")), env)
    assert first.ok and first.outputs["outcome"] == "saved", first.headline
    assert len(_unsafe(first)) == 1
    tree = make_tree(tmp_path / "b", seed=2, small=2)
    second = _cache("save", _flags(s3rver_url, s3rver_endpoint, "k", tree), env)
    assert second.ok and second.outputs["outcome"] == "updated", second.headline
    out = tmp_path / "out"
    assert _cache("restore", _flags(s3rver_url, s3rver_endpoint, "k", out), env).ok
    assert snapshot(out) == snapshot(tree)


def test_s3rver_race_one_saved_one_lost_naming_the_winner(
    tmp_path, s3rver_endpoint, s3rver_url, monkeypatch
):
    """Two jobs write the ref at the same moment: the server takes both, the last one stands.
    (The barrier only makes "the same moment" certain; the writes are s3rver's own. Each PUT
    is whole, as S3's are: s3rver writes an object in place, so two PUTs of one key that
    overlap in time interleave their bytes there, a "ref" no S3 would ever hold.)"""
    env = _env(tmp_path, CREDENTIALS)
    trees = [make_tree(tmp_path / "one", seed=1, small=2), make_tree(tmp_path / "two", seed=2)]
    # The store's answer recorded first, as any earlier save leaves it: two first saves that
    # probe at once PUT one record together, and s3rver, writing objects in place, crashes on
    # that (ENOENT on its temp file, an unhandled 'error' event), which no S3 does.
    first = _cache("save", _flags(s3rver_url, s3rver_endpoint, "first", trees[0]), env)
    assert first.ok and len(_unsafe(first)) == 1, first.headline
    both_writing = threading.Barrier(2, timeout=120)
    both_written = threading.Barrier(2, timeout=120)
    one_put_at_a_time = threading.Lock()
    original = s3.S3Store.put_if_absent

    def together(self, key, data):
        if not key.startswith("refs/"):
            return original(self, key, data)
        both_writing.wait()  # both decided to write, neither has
        try:
            with one_put_at_a_time:
                return original(self, key, data)
        finally:
            both_written.wait()

    monkeypatch.setattr(s3.S3Store, "put_if_absent", together)
    with ThreadPoolExecutor(2) as pool:
        results = list(
            pool.map(
                lambda tree: _cache("save", _flags(s3rver_url, s3rver_endpoint, "k", tree), env),
                trees,
            )
        )
    outcomes = sorted(r.outputs.get("outcome", f"failed: {r.headline}") for r in results)
    assert outcomes == ["lost-race", "saved"], [r.headline for r in results]
    winner = next(r for r in results if r.outputs["outcome"] == "saved")
    loser = next(r for r in results if r.outputs["outcome"] == "lost-race")
    assert loser.ok and loser.outputs["manifest"] == winner.outputs["manifest"]
    won = winner.outputs["manifest"]
    assert any(f"its tree won (manifest {won})" in a.message for a in loser.annotations)
    assert all(len(_unsafe(r)) == 1 for r in results)
    out = tmp_path / "out"
    assert _cache("restore", _flags(s3rver_url, s3rver_endpoint, "k", out), env).ok
    assert snapshot(out) == snapshot(trees[results.index(winner)])
