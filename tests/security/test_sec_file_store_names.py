"""The names in a file store are input like its contents: a name record (the text of a path
component too long for a file name, kept beside it) that names another object or a file outside
the store, a file name that is not UTF-8, or a ref spelled otherwise than a save spells its key
must never make a listing give back a key that deletes, reads or shadows something else. Each
case plants the names behind gpu-ci's back, then runs ls, restore and prune in-process."""

from __future__ import annotations

import os
import time
from pathlib import Path

from hostile_store_kit import StoreCase, cache_cmd, save_from

from gpuci.cache import _layout as layout
from gpuci.cache._stores.file import LONG_MARK, NAME_SUFFIX, LocalStore

OLD = time.time() - 90 * 86400  # past any --older-than below


def _tree(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "w.bin").write_bytes(os.urandom(layout.PACK_THRESHOLD + 1))  # a blob
    return root


def _plant_record(folder: Path, mark: str, text: str) -> None:
    """An old object ``mark`` whose name record says ``text``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / mark).write_text("{}")
    (folder / (mark + NAME_SUFFIX)).write_text(text)
    for path in (folder / mark, folder / (mark + NAME_SUFFIX)):
        os.utime(path, (OLD, OLD))


def test_a_planted_name_record_cannot_make_prune_delete_another_object_or_a_file_outside(
    file_store: StoreCase, env: dict[str, str], tmp_path: Path
) -> None:
    saved = save_from(file_store, env, "live-key", _tree(tmp_path / "src"))
    assert saved.ok, saved.headline
    assert file_store.root is not None
    blob = next(k for k in file_store.object_keys() if k.startswith(layout.BLOBS))
    manifest = next(k for k in file_store.object_keys() if k.startswith(layout.MANIFESTS))
    victim = tmp_path / "outside" / "victim.txt"
    victim.parent.mkdir()
    victim.write_text("precious")
    refs = file_store.root / layout.refs_prefix("default")
    _plant_record(refs, f"{LONG_MARK}evil1", f"../../{blob}")
    _plant_record(refs, f"{LONG_MARK}evil2", "../../../outside/victim.txt")
    _plant_record(file_store.root / Path(blob).parent, f"{LONG_MARK}evil3", f"../../../{manifest}")
    listed, _ = cache_cmd("ls", file_store.flags(), env)
    assert listed.ok and [row["key"] for row in listed.report["keys"]] == ["live-key"]
    pruned, _ = cache_cmd("prune", {**file_store.flags(), "older-than": "30d", "grace": "0s"}, env)
    assert pruned.ok, pruned.headline
    assert victim.read_text() == "precious"
    assert (file_store.root / blob).is_file() and (file_store.root / manifest).is_file()
    back, _ = cache_cmd(
        "restore", {**file_store.flags(), "key": "live-key", "path": str(tmp_path / "back")}, env
    )
    assert back.ok and back.outputs["cache-hit"] is True, back.headline


def test_a_long_key_still_lists_through_its_own_record(tmp_path: Path) -> None:
    local = LocalStore(tmp_path / "store")
    key = "refs/default/" + "é" * 200  # 400 bytes: a record beside a hashed name
    local.put(key, b"{}")
    assert [info.key for info in local.list("refs/default/")] == [key]


def test_a_file_name_that_is_not_utf8_is_no_key(
    file_store: StoreCase, env: dict[str, str], tmp_path: Path
) -> None:
    saved = save_from(file_store, env, "w-1", _tree(tmp_path / "src"))
    assert saved.ok, saved.headline
    assert file_store.root is not None
    refs = os.fsencode(file_store.root / layout.refs_prefix("default"))
    with open(refs + b"w-\xff\xfe", "wb") as planted:
        planted.write(b"{}")
    restored, _ = cache_cmd(
        "restore",
        {**file_store.flags(), "key": "nope", "restore-keys": "w-", "path": str(tmp_path / "o")},
        env,
    )
    assert restored.ok and restored.outputs["matched-key"] == "w-1", restored.headline
    listed, _ = cache_cmd("ls", file_store.flags(), env)
    assert listed.ok and [row["key"] for row in listed.report["keys"]] == ["w-1"]
    pruned, _ = cache_cmd("prune", {**file_store.flags(), "older-than": "30d"}, env)
    assert pruned.ok, pruned.headline


def test_a_ref_spelled_otherwise_than_a_save_would_is_ignored_and_spares_the_use_it_spells(
    file_store: StoreCase, env: dict[str, str], tmp_path: Path
) -> None:
    saved = save_from(file_store, env, "é", _tree(tmp_path / "src"))  # as refs/default/%C3%A9
    assert saved.ok, saved.headline
    restored, _ = cache_cmd(
        "restore", {**file_store.flags(), "key": "é", "path": str(tmp_path / "o")}, env
    )
    assert restored.ok
    assert file_store.root is not None
    use = file_store.root / layout.use_key("default", "é")
    assert use.is_file()
    raw = file_store.root / layout.refs_prefix("default") / "é"  # the same key, not quoted: planted
    raw.write_bytes(file_store.get_raw(layout.ref_key("default", "é")))
    os.utime(raw, (OLD, OLD))
    pruned, _ = cache_cmd("prune", {**file_store.flags(), "older-than": "30d", "grace": "0s"}, env)
    assert pruned.ok, pruned.headline
    assert use.is_file(), "prune deleted the live key's use record through a planted spelling"
    said = [a.message for a in pruned.annotations]
    assert any("how a save spells a key" in line for line in said), said
