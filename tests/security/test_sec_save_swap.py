"""A file of the saved tree swapped after the scan (another job that can write the folder, a
shared Hugging Face cache): for a link to a secret of the same size, or for a FIFO. The save
reads only the very file the scan saw (device, inode, size): a swapped file changed while it
was being saved, one line, nothing of the secret uploaded, no wait on the FIFO.

The swap is done deterministically, right after the scan returns (the window a racing job
aims at), for each way a file is read: small (packed), held in memory, and hashed then copied
in whole (a file over the memory budget, to a store without parts)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from hostile_store_kit import cache_cmd
from tier_runner import warnings

from gpuci.cache._layout import PACK_THRESHOLD
from gpuci.cache._save import operation, upload

SECRET = b"SECRET-KEY-"

SIZES = {
    "small": 64,  # read once and packed
    "held": PACK_THRESHOLD + 4096,  # a blob read into memory once
    "streamed": (4 << 20) + 4096,  # over the (lowered) budget: hashed, then copied in whole
}


def _swap_after_scan(monkeypatch: pytest.MonkeyPatch, victim: Path, secret: Path, how: str):
    """The real scan, then ``victim`` replaced by a link to ``secret`` or by a FIFO."""
    real_scan = operation.scan

    def scan(*args, **kwargs):
        tree = real_scan(*args, **kwargs)
        victim.unlink()
        if how == "link":
            victim.symlink_to(secret)
        else:
            os.mkfifo(victim)
        return tree

    monkeypatch.setattr(operation, "scan", scan)


def _save_bounded(store, env, root: Path, **flags: str):
    """The save on a thread, waited for at most 60 s: a save blocked in a FIFO's open never
    returns (the FIFO is then opened for writing, so the blocked open ends and the thread with
    it)."""
    done: dict[str, object] = {}

    def save() -> None:
        done["result"] = cache_cmd(
            "save", {**store.flags(), "key": "k", "path": str(root), **flags}, env
        )[0]

    thread = threading.Thread(target=save, daemon=True)
    thread.start()
    thread.join(60)
    hung = thread.is_alive()
    if hung:
        fifo = root / "model.bin"
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        thread.join(20)
    return hung, done.get("result")


def _stored_bytes(store_root: Path) -> list[bytes]:
    return [p.read_bytes() for p in store_root.rglob("*") if p.is_file() and not p.is_symlink()]


@pytest.mark.parametrize("how", ["link", "fifo"])
@pytest.mark.parametrize("size", list(SIZES))
def test_a_file_swapped_after_the_scan_is_never_read(
    file_store, env, tmp_path, monkeypatch, how, size
):
    monkeypatch.setattr(upload, "HELD_BYTES", 4 << 20)
    secret = tmp_path / "home" / "id_rsa"
    secret.parent.mkdir(parents=True, exist_ok=True)
    secret.write_bytes(SECRET + b"x" * (SIZES[size] - len(SECRET)))
    root = tmp_path / "weights"
    root.mkdir()
    (root / "model.bin").write_bytes(b"w" * SIZES[size])  # the size of the secret
    _swap_after_scan(monkeypatch, root / "model.bin", secret, how)

    hung, result = _save_bounded(file_store, env, root)

    assert not hung, "the save waited on a FIFO swapped in after the scan"
    assert result is not None and not result.ok
    assert "model.bin changed while it was being saved" in result.headline
    assert "\n" not in result.headline
    assert not any(SECRET in data for data in _stored_bytes(file_store.root))


def test_a_followed_link_is_read_through_when_it_still_names_the_file_it_named(
    file_store, env, tmp_path
):
    """follow-symlinks: all: the file behind a link out of the tree is saved (the check is by
    the file the scan stat()ed through the link, not by the link)."""
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"o" * 100)
    root = tmp_path / "weights"
    root.mkdir()
    (root / "model.bin").symlink_to(outside)

    hung, result = _save_bounded(file_store, env, root, **{"follow-symlinks": "all"})

    assert not hung and result is not None and result.ok, result and result.headline
    assert any(data.endswith(b"o" * 100) for data in _stored_bytes(file_store.root))


def test_a_followed_link_pointed_elsewhere_after_the_scan_is_never_read(
    file_store, env, tmp_path, monkeypatch
):
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"o" * 64)
    secret = tmp_path / "id_rsa"
    secret.write_bytes(SECRET + b"x" * (64 - len(SECRET)))
    root = tmp_path / "weights"
    root.mkdir()
    (root / "model.bin").symlink_to(outside)
    _swap_after_scan(monkeypatch, root / "model.bin", secret, "link")

    hung, result = _save_bounded(file_store, env, root, **{"follow-symlinks": "all"})

    assert not hung and result is not None and not result.ok
    assert "model.bin changed while it was being saved" in result.headline
    assert not any(SECRET in data for data in _stored_bytes(file_store.root))


def test_a_link_swapped_for_a_file_as_the_scan_looks_at_it_is_skipped_with_a_warning(
    file_store, env, tmp_path, monkeypatch
):
    """The scan's lstat sees a link, its readlink then finds a file (EINVAL): skipped, said in
    a warning, never an internal error."""
    root = tmp_path / "weights"
    root.mkdir()
    (root / "a.bin").write_bytes(b"a" * 10)
    link = root / "model.bin"
    link.symlink_to("a.bin")
    real_lstat = Path.lstat

    def lstat(self: Path) -> os.stat_result:
        st = real_lstat(self)
        if self == link and os.path.islink(link):
            os.unlink(link)
            link.write_bytes(b"w" * 64)
        return st

    monkeypatch.setattr(Path, "lstat", lstat)
    hung, result = _save_bounded(file_store, env, root)

    assert not hung and result is not None and result.ok, result and result.headline
    said = warnings(result)
    assert any(f"skipped {link}: it changed while the scan looked at it" in w for w in said), said
