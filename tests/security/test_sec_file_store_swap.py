"""A file store's folder swapped for a link between the moment gpu-ci reaches it and the write
(another job that can write the store, ``renameat2(RENAME_EXCHANGE)`` in a loop): the write,
rename, link or delete happens in the folder that was reached, never through the link, so
nothing is written or deleted outside the store.

Deterministic: the swap is done from inside the store's own write step (the temp file's write,
the in-kernel copy, the unlink), right after the folder was reached, where a check by path
followed by a use by path would go through the link."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuci.cache._stores import copying
from gpuci.cache._stores.file import LocalStore
from gpuci.errors import StoreError

KEYS = {
    "put": "manifests/m.json",
    "put_if_absent": "refs/default/k",
    "put_if_match": "refs/default/k",
    "upload_file": "manifests/u.json",
    "delete": "manifests/d.json",
}


class _Swap:
    """Swap the store's top folder of ``key`` for a link to ``victim``, once, when fired."""

    def __init__(self, root: Path, key: str, victim: Path) -> None:
        self.top = root / key.split("/")[0]
        self.victim = victim
        self.done = False
        (victim / Path(key).parent.relative_to(self.top.name)).mkdir(parents=True, exist_ok=True)

    def fire(self) -> None:
        if not self.done and self.top.is_dir() and not self.top.is_symlink():
            self.done = True
            self.top.rename(self.top.with_name(self.top.name + ".away"))
            self.top.symlink_to(self.victim)


def _hooked(monkeypatch, owner: object, name: str, swap: _Swap) -> None:
    real: Callable = getattr(owner, name)

    def hooked(*args, **kwargs):
        swap.fire()
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, hooked)


def _files_in(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize("call", list(KEYS))
def test_a_folder_swapped_for_a_link_after_it_was_reached_takes_no_write_outside(
    tmp_path, monkeypatch, call
):
    root, victim = tmp_path / "store", tmp_path / "victim"
    store = LocalStore(root)
    key = KEYS[call]
    etag = store.put(key, b"old")  # the folders exist, as in a store already used
    planted = victim / Path(key).relative_to(key.split("/")[0])
    swap = _Swap(root, key, victim)
    if call in ("delete", "put_if_match"):  # the victim's own file, at the object's place
        planted.write_bytes(b"old")
    if call == "delete":
        _hooked(monkeypatch, os, "unlink", swap)
    elif call == "upload_file":
        _hooked(monkeypatch, copying, "copy_fd", swap)
    else:
        if call == "put_if_absent":
            store.delete(key)
        _hooked(monkeypatch, LocalStore, "_write_temp", swap)
    source = tmp_path / "source.bin"
    source.write_bytes(b"new")

    def run() -> None:
        if call == "put":
            store.put(key, b"new")
        elif call == "put_if_absent":
            store.put_if_absent(key, b"new")
        elif call == "put_if_match":
            store.put_if_match(key, b"new", etag)
        elif call == "upload_file":
            digest = hashlib.sha256(b"new").hexdigest()
            store.upload_file(key, source, 3, lambda n: None, digest)
        else:
            store.delete(key)

    try:
        run()
    except StoreError:
        pass  # refusing is fine; writing through the link is not
    monkeypatch.undo()
    assert swap.done, "the hook never ran: the test does not stage the swap"
    expected = [planted] if call in ("delete", "put_if_match") else []
    assert _files_in(victim) == expected
    assert all(p.read_bytes() == b"old" for p in expected)
