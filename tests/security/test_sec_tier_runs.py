"""Packed small files live in the runner-local tier as runs of their pack: one file per run
instead of one per small file (a create, a rename and often a folder each, several times the
write itself on ext4). A run is trusted for nothing but its name: every file cut from it is
hashed against the manifest first, in every mode (docs/cache-format.md, "The runner-local
tier"; docs/security.md)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from tier_runner import (
    Runner,
    plant,
    restored,
    saved_runner,
    small_files,
    tier_is_honest,
    tier_runs,
    warnings,
)

from gpuci.cache import _layout as layout
from gpuci.cache._stores import tier_evict
from gpuci.cache._stores.tier import LocalTier
from gpuci.cache._stores.tier_runs import Runs

MODES = ("copy", "verify", "link")


def _the_run(runner: Runner) -> Path:
    runs = tier_runs(runner.tier)
    assert len(runs) == 1, runs
    return next(iter(runs.values()))


def test_a_cold_restore_keeps_the_small_files_as_one_run_and_the_next_job_is_served_by_it(
    tmp_path: Path,
) -> None:
    runner, files = saved_runner(tmp_path, small_files, tier=False)
    cold = runner.restore("m", tmp_path / "job1")
    restored(tmp_path / "job1", files)
    assert cold.outputs["bytes-downloaded"] == sum(map(len, files.values()))
    assert not (runner.tier / layout.BLOBS).exists()  # not one blob per small file
    assert len(list((runner.tier / layout.TIER_RUNS).rglob("*"))) == 2  # a folder and the run
    tier_is_honest(runner.tier, runner.store)
    warm = runner.restore("m", tmp_path / "job2")
    restored(tmp_path / "job2", files)
    assert warm.outputs["bytes-downloaded"] == 0
    assert warm.outputs["bytes-from-local"] == sum(map(len, files.values()))
    assert warm.report["placed"] == {"copy": len(files)}


@pytest.mark.parametrize("mode", MODES)
def test_a_run_the_runner_user_rewrote_is_not_served(tmp_path: Path, mode: str) -> None:
    """Same size, frozen mtime, read-only: only the hash on the way out can tell."""
    runner, files = saved_runner(tmp_path, small_files)
    run = _the_run(runner)
    data = bytearray(run.read_bytes())
    data[len(data) // 2] ^= 0xFF
    os.chmod(run, 0o644)
    plant(run, bytes(data))
    got = runner.restore("m", tmp_path / "job", **{"local-cache-mode": mode})
    restored(tmp_path / "job", files)
    assert got.outputs["bytes-downloaded"] > 0
    assert any("do not hash to the manifest's" in w for w in warnings(got)), warnings(got)
    assert not run.exists()  # dropped on sight
    tier_is_honest(runner.tier, runner.store)


def test_a_run_planted_as_a_symlink_is_not_followed(tmp_path: Path) -> None:
    runner, files = saved_runner(tmp_path, small_files)
    run = _the_run(runner)
    decoy = tmp_path / "decoy.bin"
    plant(decoy, run.read_bytes())  # even the right bytes: the tier never follows a link
    run.unlink()
    run.symlink_to(decoy)
    got = runner.restore("m", tmp_path / "job")
    restored(tmp_path / "job", files)
    assert got.outputs["bytes-from-local"] == 0
    assert any("symlink" in w for w in warnings(got)), warnings(got)
    assert decoy.exists()


def test_a_run_shorter_than_its_name_says_is_not_served(tmp_path: Path) -> None:
    runner, files = saved_runner(tmp_path, small_files)
    run = _the_run(runner)
    os.chmod(run, 0o644)
    plant(run, run.read_bytes()[:-1])
    got = runner.restore("m", tmp_path / "job")
    restored(tmp_path / "job", files)
    assert got.outputs["bytes-from-local"] == 0
    assert any("bytes, not" in w for w in warnings(got)), warnings(got)
    tier_is_honest(runner.tier, runner.store)  # dropped, and filled again whole by the restore


def test_run_names_are_read_strictly() -> None:
    pack = "ab" * 32
    assert layout.run_span(f"{pack}.0-10", pack) == (0, 10)
    assert layout.run_span(layout.run_name(pack, 5, 9), pack) == (5, 9)
    for name in (
        f"{pack}.10-10",  # no bytes
        f"{pack}.9-3",
        f"{pack}.a-9",
        f"{pack}.0-\uff19",  # a fullwidth digit: isdigit() alone would take it
        f"{pack}.0-5-6",
        f"{pack}.0-{'9' * 30}",
        f"{pack}.0",
        f"{'cd' * 32}.0-10",  # another pack's
        f"{pack}0-10",
    ):
        assert layout.run_span(name, pack) is None, name


def test_eviction_counts_and_removes_runs(tmp_path: Path) -> None:
    runner, _ = saved_runner(tmp_path, small_files)
    run = _the_run(runner)
    size = run.stat().st_size
    tier = LocalTier(runner.tier, limit=1)
    assert tier_evict.usage(tier) == size
    assert tier_evict.evict(tier) == (1, size)
    assert not run.exists()


def test_a_partial_restore_keeps_what_it_fetched_and_a_full_one_fetches_only_the_rest(
    tmp_path: Path,
) -> None:
    runner = Runner(tmp_path)
    files = small_files(tmp_path / "src")
    for i in range(3):  # a second folder, packed after sub/
        (tmp_path / "src" / "zz").mkdir(exist_ok=True)
        files[f"zz/g{i}.json"] = os.urandom(3_000)
        (tmp_path / "src" / f"zz/g{i}.json").write_bytes(files[f"zz/g{i}.json"])
    runner.save("m", tmp_path / "src", tier=False)
    part = runner.restore("m", tmp_path / "part", include="zz/**")
    assert part.outputs["bytes-downloaded"] == 9_000
    assert len(tier_runs(runner.tier)) == 1
    full = runner.restore("m", tmp_path / "job")
    restored(tmp_path / "job", files)
    assert full.outputs["bytes-from-local"] == 9_000
    assert full.outputs["bytes-downloaded"] == sum(map(len, files.values())) - 9_000
    tier_is_honest(runner.tier, runner.store)


def test_a_large_file_in_a_run_is_cut_a_slice_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A manifest may call a file of any size packed (a hostile store's may): cutting it from a
    run holds one slice in memory, never the whole file, and a wrong digest leaves no file."""
    tier = LocalTier(tmp_path / "tier")
    data = os.urandom(2 * layout.IO_CHUNK + 5)
    pack = hashlib.sha256(b"the pack").hexdigest()
    assert tier.runs.keep(pack, data)
    reads: list[int] = []
    real_pread = os.pread

    def pread(fd: int, n: int, at: int) -> bytes:
        reads.append(n)
        return real_pread(fd, n, at)

    monkeypatch.setattr(os, "pread", pread)
    good, bad = tmp_path / "good.bin", tmp_path / "bad.bin"
    digest = hashlib.sha256(data).hexdigest()
    assert tier.runs.place(pack, [(0, len(data), digest, good, 0o644)]) == [True]
    assert good.read_bytes() == data and max(reads) <= layout.IO_CHUNK
    assert tier.runs.place(pack, [(0, len(data), "0" * 64, bad, 0o644)]) == [False]
    assert not bad.exists()


def test_a_full_tier_disk_under_a_run_costs_no_second_download(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's temp file, and any blob a fill might start instead, on a disk with no room
    left: the tier's part is dropped, each packed file is still fetched once."""
    runner = Runner(tmp_path)
    files = small_files(tmp_path / "src", count=40)
    runner.save("m", tmp_path / "src", tier=False)

    def on_a_full_disk(start):  # the temp file is made; its writes find no room
        def start_on_full(self, *args):
            fill = start(self, *args)
            if fill is not None:
                os.close(fill.fd)
                fill.fd = os.open("/dev/full", os.O_RDWR)
            return fill

        return start_on_full

    monkeypatch.setattr(Runs, "start", on_a_full_disk(Runs.start))
    monkeypatch.setattr(LocalTier, "start_fill", on_a_full_disk(LocalTier.start_fill))
    got = runner.restore("m", tmp_path / "job")
    restored(tmp_path / "job", files)
    assert got.outputs["bytes-downloaded"] == sum(map(len, files.values()))
    assert any("a disk filled up" in w for w in warnings(got)), warnings(got)
    assert not tier_runs(runner.tier) and not (runner.tier / layout.BLOBS).exists()


def test_a_packed_file_of_any_size_is_served_from_its_run_and_the_dry_run_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer may pack files our saver would not (here 9 MiB, past the placing
    threads' 8 MiB): the warm restore cuts them from the run as it does small ones, and the
    dry run counts what the restore then serves."""
    monkeypatch.setattr(layout, "PACK_THRESHOLD", 64 << 20)
    runner = Runner(tmp_path)
    (tmp_path / "src").mkdir()
    files = {"big.bin": os.urandom(9 << 20), "small.txt": os.urandom(5_000)}
    for name, data in files.items():
        (tmp_path / "src" / name).write_bytes(data)
    runner.save("m", tmp_path / "src", tier=False)
    total = sum(map(len, files.values()))
    assert runner.restore("m", tmp_path / "job1").outputs["bytes-downloaded"] == total
    dry = runner.run("restore", "m", tmp_path / "job2", **{"local-cache": str(runner.tier)})
    dry_run = runner.run(
        "restore", "m", tmp_path / "job3", dry_run=True, **{"local-cache": str(runner.tier)}
    )
    assert dry.outputs["bytes-downloaded"] == 0 and dry.outputs["bytes-from-local"] == total
    assert dry_run.report["bytes_local"] == total
    restored(tmp_path / "job2", files)
