"""The runner-local tier: warm restores link from disk, jobs can't corrupt it, LRU, sharing."""

from __future__ import annotations

import errno
import hashlib
import os
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cache_testing import CREDS, REPO_ROOT, cache_cmd, tmpfs
from cache_testing import store_flags as _flags
from treeutil import make_tree, snapshot, write_tree

from gpuci import files
from gpuci.background import Background
from gpuci.cache import _layout as layout
from gpuci.cache._format import refs
from gpuci.cache._save import state, upload
from gpuci.cache._stores import copying, tier_evict
from gpuci.cache._stores.tier import FROZEN_MTIME, LocalTier
from gpuci.cache._stores.tier_open import parse_size
from gpuci.errors import InputError, StoreError


def _content(root: Path) -> dict[str, tuple]:
    """A snapshot without write bits: tier-linked files are read-only by design."""
    out = {}
    for rel, item in snapshot(root).items():
        if item[0] == "file":
            out[rel] = ("file", item[1] & ~0o222, item[2])
        else:
            out[rel] = item
    return out


def _tier_blobs(tier: Path) -> dict[str, Path]:
    base = tier / layout.BLOBS
    return {p.name: p for p in base.rglob("*") if p.is_file()} if base.exists() else {}


def _tier_runs(tier: Path) -> dict[str, Path]:
    base = tier / layout.TIER_RUNS
    return {p.name: p for p in base.rglob("*") if p.is_file()} if base.exists() else {}


def _assert_tier_intact(tier: Path) -> None:
    for digest, path in _tier_blobs(tier).items():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, path
    for path in [*_tier_blobs(tier).values(), *_tier_runs(tier).values()]:
        st = path.stat()
        assert int(st.st_mtime) == FROZEN_MTIME
        assert not stat.S_IMODE(st.st_mode) & 0o222


def test_save_fills_the_tier_and_a_warm_restore_downloads_no_file_bytes(store, env, tmp_path):
    tier = tmp_path / "tier"
    src = make_tree(tmp_path / "src")
    saved, _ = cache_cmd("save", _flags(store, "w", src, **{"local-cache": str(tier)}), env)
    assert saved.ok, saved.headline
    assert saved.outputs["outcome"] == "saved" and "bytes-from-local" not in saved.outputs
    assert len(_tier_blobs(tier)) == 1  # big.bin; the 21 other files with bytes are packed,
    assert len(_tier_runs(tier)) == 1  # and their pack is one run (an empty file is in neither)
    _assert_tier_intact(tier)

    out = tmp_path / "out"
    got, _ = cache_cmd("restore", _flags(store, "w", out, **{"local-cache": str(tier)}), env)
    assert got.ok, got.headline
    total = sum(e[0] == "file" and 1 for e in snapshot(src).values())
    assert total == 23
    assert got.outputs["bytes-from-local"] > 2_500_000
    assert got.outputs["bytes-downloaded"] == got.report["bytes_downloaded"] == 0
    assert 0 < got.report["bytes_metadata"] < 20_000  # the manifest alone
    placed = got.report["placed"]
    linked = placed.get("hardlink", 0) + placed.get("reflink", 0)
    assert linked + placed.get("copy", 0) == 22  # every file with bytes (one is empty)
    assert placed.get("hardlink", 0) in (0, 1)  # only big.bin is large enough to link
    assert snapshot(out) == snapshot(src) if linked > 1 else _content(out) == _content(src)
    assert os.access(out / "sub" / "f01.txt", os.W_OK)  # small files are the job's own
    assert os.access(out / "run.sh", os.X_OK)
    assert "from the local tier" in got.headline


def test_cold_restore_fills_the_tier_by_linking_and_a_second_restore_is_local(store, env, tmp_path):
    tier = tmp_path / "tier"
    src = make_tree(tmp_path / "src", small=6)
    assert cache_cmd("save", _flags(store, "c", src), env)[0].ok  # tier off (env)
    link = {"local-cache": str(tier), "local-cache-mode": "link"}  # single-tenant runner
    first, _ = cache_cmd("restore", _flags(store, "c", tmp_path / "a", **link), env)
    assert first.ok and first.outputs["bytes-from-local"] == 0
    assert first.outputs["bytes-downloaded"] > 2_500_000
    _assert_tier_intact(tier)
    big = (tmp_path / "a" / "big.bin").stat()
    assert big.st_nlink == 2  # the restored file is the tier's blob: no second copy on disk
    second, _ = cache_cmd("restore", _flags(store, "c", tmp_path / "b", **link), env)
    assert second.ok
    assert second.outputs["bytes-from-local"] == first.outputs["bytes-downloaded"]
    assert first.report["bytes_metadata"] == _manifest_bytes(store, first)
    assert _content(tmp_path / "b") == _content(src)


def _manifest_bytes(store, result) -> int:
    return len(store.get_raw(layout.manifest_key(result.outputs["manifest"])))


def test_link_mode_drops_a_blob_written_through_a_hardlink(store, env, tmp_path):
    """link mode's tripwire for accidents (a write moves the mtime); not a defence against a job
    that sets it back, which tests/security/test_sec_tier.py covers in the default mode."""
    tier = tmp_path / "tier"
    src = make_tree(tmp_path / "src", small=2)
    flags = {"local-cache": str(tier), "local-cache-mode": "link"}
    assert cache_cmd("save", _flags(store, "h", src, **flags), env)[0].ok
    out = tmp_path / "out"
    assert cache_cmd("restore", _flags(store, "h", out, **flags), env)[0].ok
    victim = out / "big.bin"
    assert not os.access(victim, os.W_OK) or os.geteuid() == 0  # read-only, unless root
    try:
        with open(victim, "r+b") as handle:  # root ignores the read-only bit: write anyway
            handle.write(b"JOB SCRIBBLED HERE")
    except PermissionError:
        pass
    again = tmp_path / "again"
    got, _ = cache_cmd("restore", _flags(store, "h", again, **flags), env)
    assert got.ok, got.headline
    assert _content(again)["big.bin"] == _content(src)["big.bin"]
    _assert_tier_intact(tier)  # the written blob was dropped and refilled from the store


def test_lru_eviction_keeps_the_tier_under_its_size(store, env, tmp_path):
    tier = tmp_path / "tier"
    trees = {}
    for n in range(3):
        trees[n] = tmp_path / f"t{n}"
        trees[n].mkdir()
        (trees[n] / "w.bin").write_bytes(bytes([n]) * 1_500_000)
        assert cache_cmd("save", _flags(store, f"k{n}", trees[n]), env)[0].ok
    flags = {"local-cache": str(tier), "local-cache-size": "3.5MB"}
    for n in (0, 1):
        assert cache_cmd("restore", _flags(store, f"k{n}", tmp_path / f"o{n}", **flags), env)[0].ok
    os.utime(_tier_blobs(tier)[_sha(trees[0] / "w.bin")], (1, FROZEN_MTIME))  # k0: long unused
    assert cache_cmd("restore", _flags(store, "k2", tmp_path / "o2", **flags), env)[0].ok
    left = set(_tier_blobs(tier))
    assert left == {_sha(trees[1] / "w.bin"), _sha(trees[2] / "w.bin")}
    assert tier_evict.usage(LocalTier(tier)) <= 3_500_000


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_two_processes_share_one_tier_at_once(store, env, tmp_path):
    tier = tmp_path / "tier"
    src = make_tree(tmp_path / "src", big=4_000_000, small=12)
    assert cache_cmd("save", _flags(store, "s", src), env)[0].ok
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "INPUT_"))}
    cli_env = {**base, **env, **CREDS, "PYTHONPATH": str(REPO_ROOT / "src")}
    cli_env["GPUCI_LOCAL_CACHE"] = str(tier)
    procs = []
    for n in range(2):
        args = ["cache-weights", "restore", "--key", "s", "--path", str(tmp_path / f"job{n}")]
        args += [f"--{k}={v}" for k, v in store.flags().items()]
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "gpuci", *args],
                env=cli_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        )
    for proc in procs:
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out.decode()
    for n in range(2):
        assert _content(tmp_path / f"job{n}") == _content(src)
    _assert_tier_intact(tier)
    assert len(_tier_blobs(tier)) == 1  # big.bin, once
    assert len(_tier_runs(tier)) == 1  # the small files (run.sh too): their pack's run, once
    assert not list(tier.glob("tmp/*"))  # no copy still under way


def test_include_and_exclude_restore_part_of_the_tree(store, env, tmp_path):
    src = tmp_path / "model"
    (src / "tok").mkdir(parents=True)
    for name in ("a.safetensors", "b.safetensors", "config.json", "pytorch_model.bin"):
        (src / name).write_bytes(name.encode() * 100)
    (src / "tok" / "tokenizer.json").write_text("{}")
    os.symlink("a.safetensors", src / "latest.safetensors")
    assert cache_cmd("save", _flags(store, "p", src), env)[0].ok
    out = tmp_path / "out"
    flags = {"include": "*.safetensors\nconfig.json", "exclude": "b.*"}
    got, _ = cache_cmd("restore", _flags(store, "p", out, **flags), env)
    assert got.ok, got.headline
    assert sorted(snapshot(out)) == ["a.safetensors", "config.json", "latest.safetensors"]
    assert got.outputs["files"] == 2
    assert got.outputs["cache-hit"] is True
    only_tok, _ = cache_cmd("restore", _flags(store, "p", tmp_path / "t", include="tok/*"), env)
    assert only_tok.ok and only_tok.outputs["files"] == 1
    assert sorted(snapshot(tmp_path / "t")) == ["tok", "tok/tokenizer.json"]
    plan, _ = cache_cmd("restore", _flags(store, "p", tmp_path / "d", **flags), env, dry_run=True)
    assert plan.report["files"] == 2 and not (tmp_path / "d").exists()


def test_dry_run_reports_bytes_from_the_tier_and_writes_nothing(store, env, tmp_path):
    tier = tmp_path / "tier"
    src = make_tree(tmp_path / "src", small=2)
    flags = {"local-cache": str(tier)}
    assert cache_cmd("save", _flags(store, "d", src, **flags), env)[0].ok
    before = sorted(p.name for p in tier.rglob("*"))
    got, _ = cache_cmd("restore", _flags(store, "d", tmp_path / "o", **flags), env, dry_run=True)
    assert got.ok
    assert got.report["bytes_local"] == got.report["bytes"] > 2_500_000
    assert got.report["bytes_remote"] == 0
    assert "from the local tier" in got.headline
    assert not (tmp_path / "o").exists()
    assert sorted(p.name for p in tier.rglob("*")) == before


def test_sizes_parse():
    assert parse_size("0") == 0
    assert parse_size("500MB") == 500_000_000
    assert parse_size("100GiB") == 100 << 30
    assert parse_size("none") == 0
    # one meaning for every size input: a bare unit letter is binary, as in du and Docker
    assert parse_size("1.5k") == 1536
    assert parse_size("2T") == 2 << 40
    with pytest.raises(InputError, match="local-cache-size"):
        parse_size("lots")


def test_a_warm_restore_needs_no_disk_for_what_it_links(store, env, tmp_path, monkeypatch):
    with tmpfs(tmp_path / "small-disk", "8m") as mount:
        from gpuci.cache._restore import place as restore

        monkeypatch.setattr(restore, "DISK_MARGIN", 0)
        src = write_tree(tmp_path / "src", {"w.bin": os.urandom(5_000_000)})
        assert cache_cmd("save", _flags(store, "disk", src), env)[0].ok
        flags = {"local-cache": str(mount / "tier"), "local-cache-mode": "link"}
        first, _ = cache_cmd("restore", _flags(store, "disk", mount / "a", **flags), env)
        assert first.ok, first.headline  # 5 MB on an 8 MB disk, shared with the tier by a link
        second, _ = cache_cmd("restore", _flags(store, "disk", mount / "b", **flags), env)
        assert second.ok, second.headline  # a copy would not fit; a link does
        assert second.outputs["bytes-from-local"] == 5_000_000


def test_a_cold_restore_in_copy_mode_fills_the_tier_with_exactly_the_hashed_bytes(
    store, env, tmp_path
):
    """The default mode: over S3 each large file's tier copy is mirrored from the bytes its hash
    reads (spliced bodies read back included); from a folder store it lands in the tier first.
    Either way every blob hashes to its name and the next restore is served from the tier."""
    tier = tmp_path / "tier"
    src = make_tree(tmp_path / "src", small=6)
    assert cache_cmd("save", _flags(store, "c", src), env)[0].ok  # tier off (env)
    first, _ = cache_cmd(
        "restore", _flags(store, "c", tmp_path / "a", **{"local-cache": str(tier)}), env
    )
    assert first.ok and first.outputs["bytes-from-local"] == 0
    assert _content(tmp_path / "a") == _content(src)
    _assert_tier_intact(tier)
    files = [p for p in src.rglob("*") if p.is_file() and not p.is_symlink()]
    big = max(files, key=lambda p: p.stat().st_size)
    assert hashlib.sha256(big.read_bytes()).hexdigest() in _tier_blobs(tier)
    assert (tmp_path / "a" / big.relative_to(src)).stat().st_ino not in {
        p.stat().st_ino for p in _tier_blobs(tier).values()
    }
    second, _ = cache_cmd(
        "restore", _flags(store, "c", tmp_path / "b", **{"local-cache": str(tier)}), env
    )
    assert second.ok
    assert second.outputs["bytes-from-local"] == first.outputs["bytes-downloaded"]
    assert _content(tmp_path / "b") == _content(src)


def _fill_marked(monkeypatch) -> threading.Event:
    """Every large file left to the tier's copies after its upload (none held in memory), and
    an event set as those copies start."""
    monkeypatch.setattr(upload, "HELD_BYTES", 0)
    started = threading.Event()
    fill = state.Saver.fill_tier

    def marked(self, tree, files):
        started.set()
        return fill(self, tree, files)

    monkeypatch.setattr(state.Saver, "fill_tier", marked)
    return started


def test_the_tiers_copies_go_on_beside_the_publish(file_store, env, tmp_path, monkeypatch):
    """The copies start once every file is hashed, not after the ref: the manifest and the ref
    are written meanwhile (a save to a remote store waited for both, one after the other)."""
    started = _fill_marked(monkeypatch)
    write = refs.write
    seen: list[bool] = []

    def ref_written(*args, **kwargs):
        seen.append(started.wait(30))  # the old order: the copies only after this returns
        return write(*args, **kwargs)

    monkeypatch.setattr(refs, "write", ref_written)
    tier, src = tmp_path / "tier", make_tree(tmp_path / "src")
    saved, _ = cache_cmd("save", _flags(file_store, "w", src, **{"local-cache": str(tier)}), env)
    assert saved.ok, saved.headline
    assert seen == [True], "the ref was written before the tier's copies started"
    big = hashlib.sha256((src / "big.bin").read_bytes()).hexdigest()
    assert big in _tier_blobs(tier)
    _assert_tier_intact(tier)


def _copy_held(monkeypatch) -> tuple[threading.Event, threading.Event, list[str]]:
    """The tier's copy of big.bin (too large to hold) waits, its temp file open, until the
    save stops it or the test releases it: (copying now, release, how each held copy ended:
    ``stopped`` by the save's flag or ``released``)."""
    monkeypatch.setattr(upload, "HELD_BYTES", 0)
    monkeypatch.setattr(copying, "reflink", lambda _src, _dst: False)
    copying_now, release, ended = threading.Event(), threading.Event(), []
    copy = copying.copy_hashing

    def held(src, dst, *stop):
        copying_now.set()
        stopped = stop and stop[0] is not None and stop[0].is_set
        while not (release.is_set() or (stopped and stopped())):
            release.wait(0.01)
        ended.append("stopped" if stopped and stopped() else "released")
        return copy(src, dst, *stop)

    monkeypatch.setattr(copying, "copy_hashing", held)
    return copying_now, release, ended


@pytest.mark.parametrize("refused", ["a-blob", "the-ref"])
def test_a_failed_save_stops_the_tiers_copy_under_way_and_leaves_the_tier_as_it_was(
    file_store, env, tmp_path, monkeypatch, refused
):
    """A save that fails while the tier copies a file too large to hold (the store refuses a
    held file's blob, still on its way up, or the ref) ends that copy at its next chunk rather
    than waiting it out: a model's shard held the failure back by the whole copy, for bytes
    no manifest of the save names. Its temp file goes, nothing of it is published, no copy goes
    on after the save returned, and the store's refusal is the failure raised."""
    copying_now, release, ended = _copy_held(monkeypatch)
    monkeypatch.setattr(upload, "HELD_BYTES", 2_000_000)  # held.bin held, big.bin copied after
    put_content = upload.put_content

    def refused_once_copying(store, key, data):
        if key.startswith(layout.BLOBS):
            assert copying_now.wait(30)
            raise StoreError("the blob was refused")
        return put_content(store, key, data)

    def ref_refused(*_args, **_kwargs):
        assert copying_now.wait(30)
        raise StoreError("the ref was refused")

    if refused == "a-blob":
        monkeypatch.setattr(upload, "put_content", refused_once_copying)
    else:
        monkeypatch.setattr(refs, "write", ref_refused)
    tier, src = tmp_path / "tier", make_tree(tmp_path / "src")
    (src / "held.bin").write_bytes(os.urandom(1_500_000))
    unstuck = threading.Timer(60, release.set)  # before the fix: the save waited for this
    unstuck.start()
    try:
        flags = _flags(file_store, "w", src, **{"local-cache": str(tier)})
        saved, _ = cache_cmd("save", flags, env)
        temps = list(tier.glob("tmp/*"))
        copies = [t.name for t in threading.enumerate() if t.name == "gpuci-tier-fill"]
    finally:
        unstuck.cancel()
        release.set()
    assert not saved.ok and f"{refused.split('-')[1]} was refused" in saved.headline, saved.headline
    assert ended == ["stopped"], "the failed save waited for the tier's copy to finish"
    assert not temps, "the stopped copy left its temp file"
    assert not copies, "a tier copy went on after the save returned"
    big = hashlib.sha256((src / "big.bin").read_bytes()).hexdigest()
    assert big not in _tier_blobs(tier)
    _assert_tier_intact(tier)


@pytest.mark.parametrize("when", ["publishing", "waiting-for-the-copies-of-a-failed-save"])
def test_a_ctrl_c_beside_the_tiers_copies_ends_them_and_leaves_no_temp_file(
    file_store, env, tmp_path, monkeypatch, when
):
    """Ctrl-C (a GitHub cancel starts with SIGINT) while the tier's copies go on beside the
    publish, or while a save whose publish failed waits for them to end: the copy under way
    ends at its next chunk and its temp file goes with it, before the save raises. None goes on
    writing into the tier, nor leaves a partial file of a model's size there for the hour until
    a sweep, once the process has exited under it."""
    copying_now, release, _ended = _copy_held(monkeypatch)

    def interrupted(*_args, **_kwargs):
        assert copying_now.wait(30)
        if when == "publishing":
            raise KeyboardInterrupt
        raise StoreError("the ref was refused")

    wait, pressed = Background.wait, []

    def ctrl_c_in_the_wait(self, deadline=None):
        if self._thread.name == "gpuci-tier-fill" and not pressed:
            pressed.append(True)
            signal.raise_signal(signal.SIGINT)  # its handler runs in here, or in the join
        return wait(self, deadline)

    monkeypatch.setattr(refs, "write", interrupted)
    if when != "publishing":
        monkeypatch.setattr(Background, "wait", ctrl_c_in_the_wait)
    tier, src = tmp_path / "tier", make_tree(tmp_path / "src")
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)  # as the CLI has it
    try:
        with pytest.raises(KeyboardInterrupt):
            cache_cmd("save", _flags(file_store, "w", src, **{"local-cache": str(tier)}), env)
        temps = list(tier.glob("tmp/*"))
        copies = [t.name for t in threading.enumerate() if t.name == "gpuci-tier-fill"]
    finally:
        release.set()
        signal.signal(signal.SIGINT, handler)
    assert not temps, "a tier copy was left half written by an interrupted save"
    assert not copies, "a tier copy went on after the save was interrupted"
    _assert_tier_intact(tier)


@pytest.mark.parametrize("meanwhile", ["another-process-fills-it", "another-save-copies-it"])
def test_a_tier_disk_that_fills_during_a_saves_copies_is_a_warning_and_ends_them(
    file_store, env, tmp_path, monkeypatch, meanwhile
):
    """The tier's disk had room for the copies of the files too large to hold, then another
    process filled it: the copy meets ENOSPC. The save succeeds and says so (a restore does
    too), copies nothing more into the full disk, and leaves no temp file. A disk as full
    because another save copied the same file in meanwhile is no failure: it is in the tier."""
    monkeypatch.setattr(upload, "HELD_BYTES", 0)
    count = 3 if meanwhile == "another-process-fills-it" else 1
    src = write_tree(tmp_path / "src", {f"w{i}.bin": os.urandom(4 << 20) for i in range(count)})
    copy_in = state.Saver._copy_in
    tried: list[str] = []

    def filled_first(self, tier, tree, entry):
        if not tried:
            if meanwhile == "another-save-copies-it":
                assert copy_in(self, tier, tree, entry)
            free = os.statvfs(tier.root)  # another process takes all but 1 MiB of the disk
            with open(tier.root.parent / "other-job", "wb") as other:
                other.write(b"\0" * (free.f_bavail * free.f_frsize - (1 << 20)))
        tried.append(entry.path)
        return copy_in(self, tier, tree, entry)

    monkeypatch.setattr(state.Saver, "_copy_in", filled_first)
    with tmpfs(tmp_path / "disk", "80m") as disk:
        flags = _flags(file_store, "w", src, **{"local-cache": str(disk / "tier")})
        saved, _ = cache_cmd("save", flags, env)
        blobs, temps = _tier_blobs(disk / "tier"), list(disk.glob("tier/tmp/*"))
    assert saved.ok, saved.headline
    notes = [a.message for a in saved.annotations if a.level == "warning"]
    filled = any("disk filled up" in note for note in notes)
    assert filled == (meanwhile == "another-process-fills-it"), notes
    assert len(tried) == 1, f"copied on into a full disk: {tried}"
    assert len(blobs) == (0 if filled else 1) and not temps


def test_a_ctrl_c_while_a_save_keeps_runs_of_packs_it_reused_leaves_no_temp_file(
    file_store, env, tmp_path, monkeypatch
):
    """A save that finds its small files in packs already stored keeps them in the tier as runs
    of those packs, written on the save's own thread (up to 128 MiB at once): a Ctrl-C landing
    in that write removes the run's temp file before it is raised, as it does for the copies
    of the large files, instead of leaving it in the tier's tmp/ until an hourly sweep."""
    src = write_tree(tmp_path / "src", {f"s{i}.txt": os.urandom(50_000) for i in range(4)})
    first, _ = cache_cmd("save", _flags(file_store, "w", src), env)  # packs stored, no tier
    assert first.ok, first.headline
    tier = tmp_path / "tier"
    write_all = files.write_all

    def ctrl_c_in_a_tier_write(fd, data):
        if str(tier / "tmp") in os.readlink(f"/proc/self/fd/{fd}"):
            write_all(fd, memoryview(data)[: len(data) // 2])
            raise KeyboardInterrupt
        write_all(fd, data)

    monkeypatch.setattr(files, "write_all", ctrl_c_in_a_tier_write)
    with pytest.raises(KeyboardInterrupt):
        cache_cmd("save", _flags(file_store, "w", src, **{"local-cache": str(tier)}), env)
    assert tier.exists() and not list(tier.glob("tmp/*")), "a run was left half written"
    _assert_tier_intact(tier)


def test_a_tier_quota_reached_during_a_saves_copies_is_a_warning_and_ends_them(
    file_store, env, tmp_path, monkeypatch
):
    """A quota on the tier's disk (EDQUOT) ends the save's copies as a full disk (ENOSPC)
    does, with the same warning, though the disk's free space (statvfs, which a restore's
    writes and the room check read) does not show it: each of the remaining files was tried
    in turn, each writing up to the quota, and the save said nothing."""
    monkeypatch.setattr(upload, "HELD_BYTES", 0)
    monkeypatch.setattr(copying, "reflink", lambda _src, _dst: False)
    src = write_tree(tmp_path / "src", {f"w{i}.bin": os.urandom(2 << 20) for i in range(3)})
    tried: list[int] = []

    def over_quota(_src, dst, *_args):
        tried.append(dst)
        raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))

    monkeypatch.setattr(copying, "copy_hashing", over_quota)
    tier = tmp_path / "tier"
    saved, _ = cache_cmd("save", _flags(file_store, "w", src, **{"local-cache": str(tier)}), env)
    assert saved.ok, saved.headline
    notes = [a.message for a in saved.annotations if a.level == "warning"]
    assert any("disk filled up" in note for note in notes), notes
    assert len(tried) == 1, f"copied on over the quota: {len(tried)} copies"
    assert not _tier_blobs(tier) and not list(tier.glob("tmp/*"))
