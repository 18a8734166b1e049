"""A job sharing the runner attacks the runner-local tier: it must never place bytes that do
not hash to their name (issue 11, item 2; trust model in docs/security.md)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from tier_runner import (
    BIG,
    Runner,
    model_tree,
    plant,
    sha,
    tier_is_honest,
    warnings,
)

import gpuci_testing
from gpuci import ownership
from gpuci.cache._save import state as save_module
from gpuci.cache._save import upload as upload_module
from gpuci.cache._stores.tier import LocalTier

WEIGHTS = "model.safetensors"


@pytest.fixture(scope="module")
def reflink_fs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An XFS with reflinks, where copy and verify modes clone instead of copying."""
    with gpuci_testing.reflink_fs(tmp_path_factory.mktemp("xfs")) as mount:
        yield mount


@pytest.fixture(params=["tmp", "xfs-reflink"])
def runner(request: pytest.FixtureRequest, tmp_path: Path) -> Runner:
    """Each attack on the test machine's own filesystem and on one with reflinks."""
    if request.param == "tmp":
        return Runner(tmp_path)
    base = request.getfixturevalue("reflink_fs") / tmp_path.name
    base.mkdir()
    return Runner(base, reflinks=True)


def _saved(runner: Runner, tier: bool = True) -> tuple[bytes, str]:
    files = model_tree(runner.base / "src")
    runner.save("m", runner.base / "src", tier=tier)
    return files[WEIGHTS], sha(files[WEIGHTS])


# ----- 2a: writing through a restored file ---------------------------------------------------
def test_writing_through_a_restored_file_and_resetting_its_mtime_never_reaches_the_next_job(
    runner: Runner,
) -> None:
    good, _ = _saved(runner)
    runner.restore("m", runner.base / "job1")
    victim = runner.base / "job1" / WEIGHTS
    before = victim.stat()
    os.chmod(victim, 0o644)  # the job owns the file it was given: read-only bits stop nobody
    with open(victim, "r+b") as handle:
        handle.write(b"BACKDOOR")
    os.utime(victim, ns=(before.st_atime_ns, before.st_mtime_ns))  # and covers its tracks
    os.chmod(victim, stat.S_IMODE(before.st_mode))
    runner.restore("m", runner.base / "job2")
    assert (runner.base / "job2" / WEIGHTS).read_bytes() == good
    tier_is_honest(runner.tier, runner.store)


def test_the_default_mode_gives_each_job_its_own_inode(runner: Runner) -> None:
    _saved(runner)
    got = runner.restore("m", runner.base / "job")
    placed = runner.base / "job" / WEIGHTS
    assert placed.stat().st_nlink == 1
    # the weights reflinked where the disk clones; config.json is cut from its pack's run
    assert got.report["placed"] == ({"reflink": 1, "copy": 1} if runner.reflinks else {"copy": 2})
    assert os.access(placed, os.W_OK)  # an independent file keeps its manifest mode


def test_link_mode_is_explicit_and_shares_the_inode(runner: Runner) -> None:
    _saved(runner)
    got = runner.restore("m", runner.base / "job", **{"local-cache-mode": "link"})
    assert got.report["local_cache_mode"] == "link"
    links = (runner.base / "job" / WEIGHTS).stat().st_nlink
    # config.json is cut from its pack's run (the save's mode keeps runs), then adopted
    if "reflink" in got.report["placed"]:  # btrfs, XFS: a clone is even cheaper, and private
        assert got.report["placed"] == {"reflink": 1, "copy": 1} and links == 1
    else:
        assert got.report["placed"] == {"hardlink": 1, "copy": 1} and links == 2


def test_a_cold_restore_in_copy_mode_fills_the_tier_without_sharing_an_inode(
    runner: Runner,
) -> None:
    good, digest = _saved(runner, tier=False)
    runner.restore("m", runner.base / "job1")  # fetched from the store, copied into the tier
    assert (runner.base / "job1" / WEIGHTS).stat().st_nlink == 1
    assert runner.blob(digest).read_bytes() == good
    with open(runner.base / "job1" / WEIGHTS, "r+b") as handle:
        handle.write(b"BACKDOOR")
    assert runner.blob(digest).read_bytes() == good


# ----- 2b: planted entries -------------------------------------------------------------------
def test_a_planted_symlink_in_the_tier_is_not_followed(runner: Runner) -> None:
    good, digest = _saved(runner, tier=False)
    runner.tier.mkdir(mode=0o700)
    evil = runner.base / "evil.bin"
    plant(evil, b"E" * BIG)
    runner.blob(digest).parent.mkdir(parents=True)
    runner.blob(digest).symlink_to(evil)
    got = runner.restore("m", runner.base / "job")
    assert (runner.base / "job" / WEIGHTS).read_bytes() == good
    assert got.outputs["bytes-from-local"] == 0
    assert any("symlink" in w for w in warnings(got)), warnings(got)
    assert evil.read_bytes() == b"E" * BIG  # never written through either
    tier_is_honest(runner.tier, runner.store)


@pytest.mark.skipif(os.geteuid() != 0, reason="planting a file owned by another uid needs root")
def test_a_planted_blob_owned_by_another_user_is_not_served(runner: Runner) -> None:
    good, digest = _saved(runner, tier=False)
    runner.tier.mkdir(mode=0o700)
    plant(runner.blob(digest), b"E" * BIG)
    os.chown(runner.blob(digest), 4242, 4242)
    os.utime(runner.blob(digest), (1, 946684800))
    got = runner.restore("m", runner.base / "job")
    assert (runner.base / "job" / WEIGHTS).read_bytes() == good
    assert any("owned by uid 4242" in w for w in warnings(got)), warnings(got)
    tier_is_honest(runner.tier, runner.store)


def test_a_planted_blob_writable_by_others_is_not_served(runner: Runner) -> None:
    good, digest = _saved(runner, tier=False)
    runner.tier.mkdir(mode=0o700)
    plant(runner.blob(digest), b"E" * BIG, mode=0o666)
    got = runner.restore("m", runner.base / "job")
    assert (runner.base / "job" / WEIGHTS).read_bytes() == good
    assert any("writable by group or others" in w for w in warnings(got)), warnings(got)
    tier_is_honest(runner.tier, runner.store)


def test_a_tier_folder_other_users_can_write_is_not_used_at_all(runner: Runner) -> None:
    good, digest = _saved(runner, tier=False)
    runner.tier.mkdir()
    os.chmod(runner.tier, 0o777)  # e.g. local-cache: /tmp/shared-tier
    plant(runner.blob(digest), b"E" * BIG)  # ours, read-only, right size and mtime
    got = runner.restore("m", runner.base / "job")
    assert (runner.base / "job" / WEIGHTS).read_bytes() == good
    assert got.outputs["bytes-from-local"] == 0
    (line,) = [w for w in warnings(got) if "local cache not used" in w]
    assert "can be written by other users" in line and "(fix: " in line


def test_a_tier_folder_owned_by_another_user_is_not_used(runner: Runner, monkeypatch) -> None:
    good, _ = _saved(runner)  # the tier now holds the true blob, owned by us (root here)
    monkeypatch.setattr(ownership, "current_uid", lambda: 4242)  # now run as someone else
    got = runner.restore("m", runner.base / "job")
    assert (runner.base / "job" / WEIGHTS).read_bytes() == good
    assert got.outputs["bytes-from-local"] == 0
    assert any(f"owned by uid {os.geteuid()}, not 4242" in w for w in warnings(got))


@pytest.mark.skipif(os.geteuid() != 0, reason="a folder owned by another uid needs root")
def test_folders_of_the_runner_user_are_trusted_only_in_its_own_job(runner: Runner) -> None:
    """A container job runs as root under /__w and /__t, which the runner's user owns."""
    good, _ = _saved(runner, tier=False)
    mounted = runner.base / "__t"
    mounted.mkdir()
    os.chown(mounted, 4242, 4242)  # the runner's uid on the host
    runner.restore("m", runner.base / "job0", **{"local-cache": str(mounted / "tier")})
    got = runner.restore("m", runner.base / "job1", **{"local-cache": str(mounted / "tier")})
    assert got.outputs["bytes-from-local"] == 0  # not a GitHub job: uid 4242 is a stranger
    assert any(f"{mounted} is owned by uid 4242" in w for w in warnings(got)), warnings(got)
    temp = runner.base / "__w_temp"
    temp.mkdir()
    os.chown(temp, 4242, 4242)
    runner.environ.update(GITHUB_ACTIONS="true", RUNNER_TEMP=str(temp))
    runner.restore("m", runner.base / "job2", **{"local-cache": str(mounted / "tier")})
    got = runner.restore("m", runner.base / "job3", **{"local-cache": str(mounted / "tier")})
    assert got.outputs["bytes-from-local"] == BIG + len(b'{"layers": 2}\n')
    assert (runner.base / "job3" / WEIGHTS).read_bytes() == good
    assert not warnings(got)


def test_the_tier_folder_is_created_private_and_an_existing_one_is_tightened(
    runner: Runner, tmp_path: Path
) -> None:
    _saved(runner)
    assert stat.S_IMODE(runner.tier.stat().st_mode) == 0o700
    other = Runner(tmp_path / "second")
    other.tier.mkdir(parents=True, mode=0o755)
    os.chmod(other.tier, 0o755)  # a tier made by an older gpu-ci: readable by everyone
    model_tree(other.base / "src")
    other.save("m", other.base / "src")
    assert stat.S_IMODE(other.tier.stat().st_mode) == 0o700


def test_verify_mode_does_not_serve_a_blob_the_runner_user_rewrote(runner: Runner) -> None:
    good, digest = _saved(runner)
    blob = runner.blob(digest)
    os.chmod(blob, 0o644)
    blob.write_bytes(b"E" * BIG)  # a process running as the runner's own user
    os.chmod(blob, 0o444)
    os.utime(blob, (1, 946684800))
    got = runner.restore("m", runner.base / "job", **{"local-cache-mode": "verify"})
    assert (runner.base / "job" / WEIGHTS).read_bytes() == good
    assert got.outputs["bytes-downloaded"] == BIG
    assert any("do not hash to its name" in w for w in warnings(got)), warnings(got)
    tier_is_honest(runner.tier, runner.store)  # dropped, refilled from the store


def test_eviction_never_follows_a_planted_folder_link(runner: Runner) -> None:
    _saved(runner)
    outside = runner.base / "precious"
    outside.mkdir()
    (outside / "keep.txt").write_bytes(b"x" * 4096)
    (runner.tier / "blobs" / "sha256" / "zz").symlink_to(outside)
    runner.restore("m", runner.base / "job", **{"local-cache-size": "1"})
    assert (outside / "keep.txt").exists()


# ----- 2c: a source that changes between hashing and copying in -----------------------------
def test_a_file_changed_after_save_hashed_it_is_not_stored_under_the_old_hash(
    runner: Runner, monkeypatch
) -> None:
    """A file too large to hold in memory is copied into the tier after the save hashed it."""
    monkeypatch.setattr(upload_module, "HELD_BYTES", 0)
    files = model_tree(runner.base / "src")
    fill = save_module.Saver.fill_tier

    def change_then_fill(self, tree, entries):  # the window between hashing and the copy
        (runner.base / "src" / WEIGHTS).write_bytes(b"E" * BIG)
        return fill(self, tree, entries)

    monkeypatch.setattr(save_module.Saver, "fill_tier", change_then_fill)
    got = runner.save("m", runner.base / "src")
    tier_is_honest(runner.tier, runner.store)
    assert not runner.blob(sha(files[WEIGHTS])).exists()
    assert any("changed after it was hashed" in w for w in warnings(got)), warnings(got)


def test_a_file_changed_after_save_read_it_leaves_the_tier_with_what_was_hashed(
    runner: Runner, monkeypatch
) -> None:
    """A file the save holds in memory goes into the tier from the bytes it hashed: changing
    the file afterwards changes nothing in the tier."""
    files = model_tree(runner.base / "src")
    fill = save_module.Saver.fill_tier

    def change_then_fill(self, tree, entries):
        (runner.base / "src" / WEIGHTS).write_bytes(b"E" * BIG)
        return fill(self, tree, entries)

    monkeypatch.setattr(save_module.Saver, "fill_tier", change_then_fill)
    runner.save("m", runner.base / "src")
    tier_is_honest(runner.tier, runner.store)
    assert runner.blob(sha(files[WEIGHTS])).read_bytes() == files[WEIGHTS]
    assert not runner.blob(sha(b"E" * BIG)).exists()


def test_a_file_swapped_after_save_read_it_is_not_copied_into_the_tier(
    runner: Runner, monkeypatch
) -> None:
    """A file too large to hold is copied into the tier after its upload: from the very file
    the save read and sent (device, inode, size), never from whatever the name holds by then.
    A regular file swapped in since (another job's, larger than the tier made room for) is not
    copied at all: under the save's hash or under its own."""
    monkeypatch.setattr(upload_module, "HELD_BYTES", 0)
    files = model_tree(runner.base / "src")
    swapped = b"S" * (2 * BIG)
    fill = save_module.Saver.fill_tier

    def swap_then_fill(self, tree, entries):  # the window between the upload and the copy
        victim = runner.base / "src" / WEIGHTS
        (runner.base / "src" / "other").write_bytes(swapped)
        os.replace(runner.base / "src" / "other", victim)  # a new inode under the name
        return fill(self, tree, entries)

    monkeypatch.setattr(save_module.Saver, "fill_tier", swap_then_fill)
    got = runner.save("m", runner.base / "src")
    tier_is_honest(runner.tier, runner.store)
    assert not runner.blob(sha(files[WEIGHTS])).exists()  # never the swapped bytes under it
    assert not runner.blob(sha(swapped)).exists()  # nor a copy of a file the save never read
    assert any("replaced after the save read it" in w for w in warnings(got)), warnings(got)


def test_a_file_that_grows_while_save_copies_it_into_the_tier_is_not_copied_on(
    runner: Runner, monkeypatch
) -> None:
    """A file too large to hold is copied into the tier from the very file the save read, for
    which the tier made room: a job still appending to it (a checkpoint being written, a log)
    made the copy read on to wherever the writer was, past that room and for as long as the
    writer went on, into a blob no manifest names. A file that reads on past the size the
    save read is not copied in, with the warning of a file changed after it was hashed."""
    monkeypatch.setattr(upload_module, "HELD_BYTES", 0)
    files = model_tree(runner.base / "src")
    grown = b"G" * (2 * BIG)
    copy_in = LocalTier.copy_in

    def appended_then_copied(self, path, digest, *args, **kwargs):
        if path.name == WEIGHTS:  # after the save opened it and checked its size
            with open(path, "ab") as out:
                out.write(grown)
        return copy_in(self, path, digest, *args, **kwargs)

    monkeypatch.setattr(LocalTier, "copy_in", appended_then_copied)
    got = runner.save("m", runner.base / "src")
    tier_is_honest(runner.tier, runner.store)
    sizes = [p.lstat().st_size for p in (runner.tier / "blobs").rglob("*") if p.is_file()]
    assert max(sizes, default=0) <= BIG, f"the copy read on past the size saved: {sizes}"
    assert not runner.blob(sha(files[WEIGHTS] + grown)).exists()
    assert any("changed after it was hashed" in w for w in warnings(got)), warnings(got)


@pytest.mark.parametrize("where", ["below-a-file", "name-too-long"])
def test_a_tier_path_the_system_cannot_look_at_is_a_warning_not_an_internal_error(
    tmp_path: Path, where: str
) -> None:
    """local-cache under a file, or with a name over 255 bytes: lstat fails with ENOTDIR or
    ENAMETOOLONG, which was an internal error (exit 3, a gpu-ci bug); a tier that cannot be
    used is a warning, and the job goes on with the store alone."""
    from gpuci.cache._stores.tier_open import open_tier

    (tmp_path / "a-file").write_text("x")
    root = {
        "below-a-file": tmp_path / "a-file" / "tier",
        "name-too-long": tmp_path / ("t" * 300) / "tier",
    }[where]
    tier, notes, choice = open_tier({}, local_cache=str(root))
    assert tier is None and not choice.on
    (note,) = notes
    assert "local cache not used" in note and "cannot be looked at" in note, note
