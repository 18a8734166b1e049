"""What another job can plant in a file store's folder (the store is untrusted, whatever its
kind): a FIFO where an object goes must not hang a restore, a link where the store keeps a
folder must not make a save write (or prune delete) outside the store, and a tree a thousand
levels deep must not break a listing. Each case plants behind gpu-ci's back, then runs the
command in-process."""

from __future__ import annotations

import os
import sys
from functools import partial
from pathlib import Path

import pytest
from hostile_store_kit import StoreCase, cache_cmd, deep_folder, remove_deep, save_from

from gpuci.cache import _layout as layout
from gpuci.cache._stores.file import LocalStore
from gpuci.errors import StoreError
from gpuci_testing import outcome_in_thread


def _tree(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "w.bin").write_bytes(os.urandom(layout.PACK_THRESHOLD + 1))  # a blob
    (root / "s.txt").write_text("small")  # packed
    return root


@pytest.mark.parametrize("what", ["ref", "manifest"])
def test_a_fifo_planted_as_an_object_is_refused_in_one_line_not_waited_on(
    file_store: StoreCase, env: dict[str, str], tmp_path: Path, what: str
) -> None:
    assert save_from(file_store, env, "k", _tree(tmp_path / "src")).ok
    assert file_store.root is not None
    key = {
        "ref": f"{layout.refs_prefix('default')}k",
        "manifest": next(k for k in file_store.object_keys() if k.startswith(layout.MANIFESTS)),
    }[what]
    fifo = file_store.root / key
    fifo.unlink()
    os.mkfifo(fifo)
    try:
        got = outcome_in_thread(partial(LocalStore(file_store.root).get, key))
    finally:  # release a reader still blocked in open(), whatever the outcome
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
    assert got, "still waiting on the FIFO after 60 s"
    (error,) = got
    assert isinstance(error, StoreError)
    assert "not a regular file" in error.one_line() and "another job" in error.one_line()


def test_a_blob_planted_as_a_link_is_refused_not_followed(
    file_store: StoreCase, env: dict[str, str], tmp_path: Path
) -> None:
    assert save_from(file_store, env, "k", _tree(tmp_path / "src")).ok
    assert file_store.root is not None
    blob = next(k for k in file_store.object_keys() if k.startswith(layout.BLOBS))
    path = file_store.root / blob
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(path.read_bytes())  # the right bytes, even: still not an object
    path.unlink()
    path.symlink_to(elsewhere)
    got, _ = cache_cmd(
        "restore", {**file_store.flags(), "key": "k", "path": str(tmp_path / "o")}, env
    )
    assert not got.ok and got.exit_code == 3
    assert "a link, which the file store never writes" in got.headline


def test_a_folder_of_the_store_planted_as_a_link_makes_save_write_nothing_outside(
    file_store: StoreCase, env: dict[str, str], tmp_path: Path
) -> None:
    assert file_store.root is not None
    outside = tmp_path / "outside"
    file_store.root.mkdir(parents=True, exist_ok=True)
    for folder in {
        key.split("/")[0] for key in (layout.REFS, layout.MANIFESTS, layout.BLOBS, layout.PACKS)
    }:
        (outside / folder).mkdir(parents=True)
        (file_store.root / folder).symlink_to(outside / folder)
    saved = save_from(file_store, env, "k", _tree(tmp_path / "src"))
    assert not saved.ok and saved.exit_code == 3
    assert "a link where the store keeps a folder" in saved.headline
    assert [p for p in outside.rglob("*") if p.is_file()] == []


def test_prune_never_deletes_through_a_folder_planted_as_a_link(
    file_store: StoreCase, env: dict[str, str], tmp_path: Path
) -> None:
    assert save_from(file_store, env, "k", _tree(tmp_path / "src")).ok
    assert file_store.root is not None
    blob = next(k for k in file_store.object_keys() if k.startswith(layout.BLOBS))
    store = LocalStore(file_store.root)
    first = file_store.root / blob.split("/")[0]
    outside = tmp_path / "outside-blobs"
    first.rename(outside)
    first.symlink_to(outside)
    with pytest.raises(StoreError, match="a link where the store keeps a folder"):
        store.delete(blob)
    assert (outside / Path(blob).relative_to(first.name)).exists()
    with pytest.raises(StoreError, match="a link where the store keeps a folder"):
        list(store.list(layout.BLOBS + "/"))  # nothing listed through the link either


def test_a_store_tree_deeper_than_the_interpreter_recurses_is_listed(
    file_store: StoreCase, env: dict[str, str], tmp_path: Path
) -> None:
    assert save_from(file_store, env, "w-1", _tree(tmp_path / "src")).ok
    assert file_store.root is not None
    refs = file_store.root / layout.refs_prefix("default")
    deep_folder(refs, "d", sys.getrecursionlimit() + 100)
    try:
        flags = {**file_store.flags(), "key": "w-2", "restore-keys": "w-"}
        got, _ = cache_cmd("restore", {**flags, "path": str(tmp_path / "o")}, env)
    finally:
        remove_deep(refs, "d")
    assert got.ok, got.headline
    assert got.outputs["matched-key"] == "w-1"


def test_reads_never_go_through_a_folder_of_the_store_planted_as_a_link(
    file_store: StoreCase, env: dict[str, str], tmp_path: Path
) -> None:
    """head, get, open_range and a restore walk down to an object as saves and prunes do: a
    folder of the store swapped for a link (to the very same bytes, even) is refused, in one
    line, never read through."""
    assert save_from(file_store, env, "k", _tree(tmp_path / "src")).ok
    assert file_store.root is not None
    blob = next(k for k in file_store.object_keys() if k.startswith(layout.BLOBS))
    folder = (file_store.root / blob).parent
    outside = tmp_path / "outside"
    folder.rename(outside)
    folder.symlink_to(outside)
    store = LocalStore(file_store.root)
    for read in (store.head, store.get, lambda key: store.open_range(key, 0, 1)):
        with pytest.raises(StoreError, match="a link where the store keeps a folder"):
            read(blob)
    got, _ = cache_cmd(
        "restore", {**file_store.flags(), "key": "k", "path": str(tmp_path / "o")}, env
    )
    assert not got.ok and got.exit_code == 3
    assert "a link where the store keeps a folder" in got.headline
    assert not (tmp_path / "o").exists()


def test_a_long_name_record_planted_as_a_fifo_is_not_waited_on_by_a_listing(
    file_store: StoreCase, tmp_path: Path
) -> None:
    """A listing reads the record beside a long name (``%%<sha256>.name``) to give the key back:
    a FIFO planted there would hold the listing (every ``ls``, every restore-keys lookup)."""
    from gpuci.cache._stores import file as file_store_module

    assert file_store.root is not None
    folder = file_store.root / layout.refs_prefix("default")
    folder.mkdir(parents=True)
    name = file_store_module._component("k" * (file_store_module.LONG_NAME + 1))
    (folder / name).write_bytes(b"{}")
    record = folder / (name + file_store_module.NAME_SUFFIX)
    os.mkfifo(record)
    store = LocalStore(file_store.root)
    listed = outcome_in_thread(lambda: list(store.list(layout.REFS + "/")))
    if not listed:  # release the reader blocked in open()
        os.close(os.open(record, os.O_WRONLY | os.O_NONBLOCK))
    assert listed == [[]], "the listing waited on the FIFO (or listed the planted name)"


def test_a_huge_file_at_a_ref_is_not_read_whole_by_a_conditional_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ref is moved under its lock once its etag there matches the one the save read: a
    planted sparse file of any size (swapped in after the save read the ref) must not be read
    into memory whole to hash it; the write is a lost race, as for any other change."""
    from gpuci.cache._stores import file as file_store_module
    from gpuci.errors import ConflictError

    store = LocalStore(tmp_path / "store")
    key = f"{layout.refs_prefix('default')}k"
    etag = store.put(key, b"{}")
    os.truncate(tmp_path / "store" / key, 64 << 20)  # a sparse 64 MiB: stands for a terabyte
    hashed: list[int] = []
    real_etag = file_store_module._etag
    monkeypatch.setattr(
        file_store_module, "_etag", lambda data: hashed.append(len(data)) or real_etag(data)
    )
    with pytest.raises(ConflictError, match="changed by someone else"):
        store.put_if_match(key, b'{"new": 1}', etag)
    assert all(n <= 1 << 20 for n in hashed), f"hashed {hashed} bytes of the planted ref"
