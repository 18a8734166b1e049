"""A hostile or broken store against the cache's own objects: names from listings, oversized
manifests and refs, packs that end early, lying HTTP headers, full disks, odd keys, and the
temp files killed saves leave. Every case ends in one line and a documented exit code.
"""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hostile_s3 import run_measured
from hostile_store_kit import (
    aws_env,  # noqa: F401  (autouse: fake credentials)
    cache_cmd,
    next_store_second,
    plant,
    put_ref,
    record_retries,
    restore_to,
    save_from,
    sha,
)

from gpuci.cache._format import manifest as mf
from gpuci.cache._format import refs
from gpuci.cache._save import upload
from gpuci.runtime import Runtime
from gpuci_testing import REPO, clean_env, run_cli


def _tree(root: Path, big: int = 0) -> Path:
    root.mkdir(parents=True)
    (root / "small.txt").write_bytes(b"small file")
    if big:
        (root / "big.bin").write_bytes(os.urandom(big))
    return root


# ----- item 5: names read from a listing are input ------------------------------------------


def test_keys_from_a_listing_are_validated_and_printed_escaped(store, env, tmp_path):
    """A ref whose name decodes to a newline and workflow commands is never matched or echoed."""
    good = plant(store, "pre-good", [{"type": "file", "root": 0, "path": "f"}], {"f": b"ok"})
    next_store_second(store)  # the hostile ref is the newest: restore-keys would pick it first
    put_ref(store, "pre-%0A%3A%3Aerror%3A%3Apwned%0A%3A%3Aadd-mask%3A%3Ax", good)
    put_ref(store, "pre-%0D%1B%5B31m", good)
    gh = {
        **env,
        "GITHUB_ACTIONS": "true",
        "GITHUB_OUTPUT": str(tmp_path / "out"),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary"),
    }
    result = restore_to(store, gh, "none", tmp_path / "t", **{"restore-keys": "pre-"})
    assert result.exit_code == 0, result.headline
    assert result.outputs["matched-key"] == "pre-good"
    log = _rendered(result, gh)
    assert not any(
        line.startswith(("::error::pwned", "::add-mask::x", "\x1b")) for line in log.splitlines()
    )
    assert "\x1b" not in log and "\r" not in log
    warned = [a.message for a in result.annotations if "ignored the ref" in a.message]
    assert len(warned) == 2  # the warnings name each object, escaped
    assert "pre-%0A%3A%3Aerror" in warned[0] + warned[1]
    assert "\\n::error::pwned" in warned[0] + warned[1]
    listed, _ = cache_cmd("ls", store.flags(), gh)
    assert [k["key"] for k in listed.report["keys"]] == ["pre-good"]
    assert not any(line.startswith("::error::pwned") for line in _rendered(listed, gh).splitlines())


def _rendered(result, environ: dict[str, str]) -> str:
    """What the CLI prints for ``result`` on a GitHub runner."""
    out = io.StringIO()
    Runtime(environ=environ, stdout=out, stderr=out).render(result)
    return out.getvalue()


# ----- item 6: caps on manifests and refs ---------------------------------------------------


def test_manifests_and_refs_over_the_cap_are_refused(store, env, tmp_path, monkeypatch):
    monkeypatch.setattr(mf, "MAX_MANIFEST", 4096)
    monkeypatch.setattr(refs, "MAX_REF", 512)
    entries = [{"type": "dir", "root": 0, "path": f"d{i:05d}", "mode": 0o755} for i in range(100)]
    plant(store, "fat-manifest", entries)
    result = restore_to(store, env, "fat-manifest", tmp_path / "t")
    assert result.exit_code == 2
    assert "over the 0 MiB cap for a manifest" in result.headline
    plant(store, "fat-ref", [{"type": "dir", "root": 0, "path": "d", "mode": 0o755}])
    body = json.loads(store.get_raw("refs/default/fat-ref"))
    store.put_raw("refs/default/fat-ref", json.dumps({**body, "pad": "x" * 1000}).encode())
    result = restore_to(store, env, "fat-ref", tmp_path / "t")
    assert result.exit_code == 3
    assert "over the 0 KiB cap for a ref" in result.headline
    assert not (tmp_path / "t").exists()


def test_unusable_refs_from_a_listing_are_ignored_and_a_usable_match_restores(store, env, tmp_path):
    """Refs over the cap or naming no manifest, newer than a good match: restore-keys skips
    them (one warning each) and restores the good one; ls lists the good key and warns. The
    exact key's own ref stays an error (the test above)."""
    plant(store, "w-1", [{"type": "file", "root": 0, "path": "f"}], {"f": b"ok"})
    next_store_second(store)  # the unusable refs are the newest: restore-keys tries them first
    store.put_raw("refs/default/w-2", b"[" * 100_000)
    store.put_raw("refs/default/w-3", b'{"manifest": 5}')
    result = restore_to(store, env, "w-9", tmp_path / "t", **{"restore-keys": "w-"})
    assert result.exit_code == 0, result.headline
    assert result.outputs["matched-key"] == "w-1"
    assert (tmp_path / "t" / "f").read_bytes() == b"ok"
    warned = [a.message for a in result.annotations if "ignored a ref" in a.message]
    assert len(warned) == 2 and all("\n" not in w for w in warned)
    assert any("w-2 is not usable" in w for w in warned)
    assert any("w-3 names an invalid manifest" in w for w in warned)
    listed, _ = cache_cmd("ls", store.flags(), env)
    assert listed.exit_code == 0, listed.headline
    assert [k["key"] for k in listed.report["keys"]] == ["w-1"]
    assert len([a for a in listed.annotations if "ignored a ref" in a.message]) == 2


def test_restore_keys_look_past_a_full_batch_of_unusable_refs(tmp_path):
    """More unusable refs than one batch of newest matches: the lookup lists once more and
    finds the older usable one; each unusable ref is warned about once."""
    from gpuci.cache._stores import open_store

    store = open_store((tmp_path / "store").as_uri(), environ={})
    digest = "a" * 64
    store.put("refs/default/w-0", json.dumps({"manifest": digest}).encode())
    os.utime(tmp_path / "store/refs/default/w-0", (1000, 1000))
    bad = refs.NEWEST + 4
    for i in range(1, bad + 1):
        store.put(f"refs/default/w-{i}", b"not json")
        os.utime(tmp_path / f"store/refs/default/w-{i}", (1000 + i, 1000 + i))
    ignored: list[str] = []
    found = refs.lookup(store, "default", "absent", ["w-"], ignored)
    assert found is not None and found[0].key == "w-0" and found[0].manifest == digest
    assert found[1] is False
    assert len(ignored) == bad == len(set(ignored))


def test_save_refuses_a_manifest_restore_would_refuse(store, env, tmp_path, monkeypatch):
    monkeypatch.setattr(mf, "MAX_MANIFEST", 200)
    result = save_from(store, env, "k", _tree(tmp_path / "src"))
    assert result.exit_code == 2
    assert "cap restore accepts" in result.headline
    assert not any(k.startswith("refs/") for k in store.object_keys())


@pytest.mark.parametrize("what", ["manifest", "ref"])
def test_a_gigabyte_manifest_or_ref_is_refused_without_reading_it(tmp_path, what):
    """The real caps, a real process: a 1 GiB (sparse) object never enters memory."""
    root = tmp_path / "store"
    digest = "ab" * 32
    big = root / (f"manifests/{digest}.json" if what == "manifest" else "refs/default/k")
    big.parent.mkdir(parents=True)
    with open(big, "wb") as handle:
        handle.truncate(1 << 30)
    if what == "manifest":
        (root / "refs/default").mkdir(parents=True)
        (root / "refs/default/k").write_text(json.dumps({"manifest": digest}))
    args = ["cache-weights", "restore", "--store", root.as_uri(), "--key", "k"]
    args += ["--path", str(tmp_path / "t")]
    run = run_measured(args, _without_tier(tmp_path), REPO, timeout=120)
    assert run.code == (2 if what == "manifest" else 3), run.output
    assert f"cap for a {what}" in run.output
    assert 0 < run.peak_kib < 400 * 1024, f"{run.peak_kib} KiB resident"


# ----- item 8: one line, exit 2 or 3, never an internal error -------------------------------


def _without_tier(tmp_path: Path) -> dict[str, str]:
    """A clean environment for a CLI run here: the local cache tier off, HOME in ``tmp_path``."""
    return clean_env(GPUCI_LOCAL_CACHE="off", HOME=str(tmp_path))


def _run_without_tier(argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` from the repository in :func:`_without_tier`'s environment, output captured."""
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env=_without_tier(tmp_path),
        cwd=REPO,
        timeout=120,
        check=False,
    )


def _one_line_error(done: subprocess.CompletedProcess[str], code: int, text: str) -> None:
    out = done.stdout + done.stderr
    assert done.returncode == code, out
    assert text in out, out
    assert "internal error" not in out and "Traceback" not in out, out


def test_a_store_folder_that_cannot_be_created_is_one_line(tmp_path):
    src = _tree(tmp_path / "src")
    done = run_cli(
        "cache-weights", "save", "--store", "file:///proc/x", "--key", "k", "--path", str(src),
        env=_without_tier(tmp_path),
    )  # fmt: skip
    _one_line_error(done, 3, "cannot use the cache store file:///proc/x")


@pytest.mark.parametrize("seam", ["copy_file_range", "fsync"])
def test_a_full_disk_under_a_file_store_is_one_line(env, tmp_path, monkeypatch, seam):
    """ENOSPC where the kernel reports it: the in-kernel copy of a blob, or fsync of a pack."""
    src = _tree(tmp_path / "src", big=2 << 20)
    root = tmp_path / "store"
    real = getattr(os, seam)

    def full(*args, **kwargs):
        if seam == "fsync" or str(root) in os.readlink(f"/proc/self/fd/{args[1]}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(*args, **kwargs)

    # A blob the save holds in memory is written from the bytes it hashed; a larger one is
    # copied in by the kernel: make this one larger than the save holds.
    monkeypatch.setattr(upload, "HELD_BYTES", 1 << 20)
    monkeypatch.setattr(os, seam, full)
    result, _ = cache_cmd("save", {"store": root.as_uri(), "key": "k", "path": str(src)}, env)
    monkeypatch.setattr(os, seam, real)
    assert result.exit_code == 3
    assert "disk full while writing to the cache store" in result.headline
    assert not [p for p in root.rglob("*") if ".incomplete" in p.name]


def test_a_really_full_tmpfs_is_one_line(tmp_path):
    """The same on a 1 MiB tmpfs, where a user namespace allows mounting one."""
    if not shutil.which("unshare"):
        pytest.skip("no unshare(1) here to mount a small tmpfs without root")
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=1m none {tmp_path}"],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip("user namespaces cannot mount a tmpfs on this machine")
    src = _tree(tmp_path / "src", big=3 << 20)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    cli = f"{sys.executable} -m gpuci cache-weights save --store file://{mnt}/s --key k"
    mount = f"mount -t tmpfs -o size=1m none {mnt} && {cli} --path {src}"
    done = _run_without_tier(["unshare", "-rm", "sh", "-c", mount], tmp_path)
    _one_line_error(done, 3, "disk full while writing to the cache store")


@pytest.mark.parametrize("key", ["a" * 300, "é" * 200, "🙂" * 512])
def test_long_keys_work_on_a_file_store(env, tmp_path, key):
    """The documented limit is 512 characters; a file name holds 255 bytes."""
    root = tmp_path / "store"
    flags = {"store": root.as_uri()}
    src = _tree(tmp_path / "src")
    saved, _ = cache_cmd("save", {**flags, "key": key, "path": str(src)}, env)
    assert saved.exit_code == 0, saved.headline
    back, _ = cache_cmd(
        "restore",
        {**flags, "key": "other", "restore-keys": key[:250], "path": str(tmp_path / "t")},
        env,
    )
    assert back.exit_code == 0, back.headline
    assert back.outputs["matched-key"] == key
    assert (tmp_path / "t" / "small.txt").read_bytes() == b"small file"
    listed, _ = cache_cmd("ls", flags, env)
    assert [k["key"] for k in listed.report["keys"]] == [key]
    again, _ = cache_cmd("save", {**flags, "key": key, "path": str(src)}, env)
    assert again.outputs["outcome"] == "unchanged"


def test_keys_too_long_for_s3_are_refused_up_front(s3_case, env, tmp_path):
    result = save_from(s3_case, env, "é" * 200, _tree(tmp_path / "src"))
    assert result.exit_code == 2
    assert "over the" in result.headline and "bytes that store allows" in result.headline


@pytest.fixture
def s3_case(moto_endpoint):
    from hostile_store_kit import StoreCase, new_bucket

    bucket = new_bucket(moto_endpoint)
    return StoreCase("s3", f"s3://{bucket}/cache", moto_endpoint, bucket=bucket, prefix="cache")


@pytest.mark.parametrize("key", [".", ".."])
def test_dot_keys_are_refused(store, env, tmp_path, key):
    for sub in ("save", "restore"):
        flags = {**store.flags(), "key": key, "path": str(_tree(tmp_path / sub))}
        result, _ = cache_cmd(sub, flags, env)
        assert result.exit_code == 2, (sub, result.headline)
        assert "names a folder, not a key" in result.headline


def test_a_dot_dot_namespace_is_refused(store, env, tmp_path):
    result = save_from(store, {**env, "GPUCI_CACHE_NAMESPACE": ".."}, "k", _tree(tmp_path / "s"))
    assert result.exit_code == 2
    assert "GPUCI_CACHE_NAMESPACE" in result.headline
    assert not any(k.startswith("refs/") or "/k" in k for k in store.object_keys())


def test_content_length_abc_on_the_data_path_is_one_line(s3_case, proxy, env, tmp_path):
    """An endpoint (or a proxy in front of it) answering a ranged GET with a non-number."""
    src = _tree(tmp_path / "src", big=2 << 20)
    assert save_from(s3_case, env, "k", src).exit_code == 0
    proxy.add("GET", "/blobs/", "badlength", times=100)
    flags = {"store": s3_case.url, "endpoint-url": proxy.url, "key": "k"}
    result, _ = cache_cmd("restore", {**flags, "path": str(tmp_path / "t")}, env)
    assert result.exit_code == 3
    assert "invalid response" in result.headline and "'abc'" in result.headline
    assert not (tmp_path / "t").exists()


# ----- item 9: leftovers and wrong labels ---------------------------------------------------


def test_prune_sweeps_temp_files_killed_saves_left(env, tmp_path):
    root = tmp_path / "store"
    flags = {"store": root.as_uri()}
    assert cache_cmd("save", {**flags, "key": "k", "path": str(_tree(tmp_path / "s"))}, env)[0]
    old = root / "blobs/sha256/ab" / f"{'ab' * 32}.incomplete-0123456789ab"
    young = root / "packs/sha256/cd" / f"{'cd' * 32}.incomplete-ba9876543210"
    for path in (old, young):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * 1000)
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    plan, _ = cache_cmd("prune", {**flags, "older-than": "30d", "grace": "3600"}, env, dry_run=True)
    assert plan.report["leftovers"] == [old.relative_to(root).as_posix()]
    assert "1 temp file(s) left by killed saves" in plan.headline and old.exists()
    done, _ = cache_cmd("prune", {**flags, "older-than": "30d", "grace": "3600"}, env)
    assert done.exit_code == 0, done.headline
    assert not old.exists() and young.exists()
    assert "freeing 1000 B" in done.headline


@pytest.mark.parametrize(("offset", "size"), [(1000, 10), (95, 10)])
def test_a_pack_offset_beyond_the_pack_is_an_integrity_error_at_once(
    store, env, tmp_path, offset, size, monkeypatch
):
    pack = os.urandom(100)
    store.put_raw(f"packs/sha256/{sha(pack)[:2]}/{sha(pack)}", pack)
    entry = {"type": "file", "root": 0, "path": "f", "size": size, "mode": 0o644}
    plant(store, "k", [{**entry, "sha256": "0" * 64, "pack": sha(pack), "offset": offset}])
    retried = record_retries(monkeypatch)
    result = restore_to(store, {**env, "AWS_MAX_ATTEMPTS": "8"}, "k", tmp_path / "t")
    assert result.exit_code == 3
    assert "attempts" not in result.headline
    assert "the manifest names" in result.headline or "ends before" in result.headline
    assert retried == []  # no retries, so no back-off between them
    assert not (tmp_path / "t").exists()
