"""A hostile manifest that parse must refuse as malformed (exit 2), quickly and in one line:
links whose resolution would take hours (a target of megabytes, thousands of links through it),
a path deeper than placement can walk, a file with a path under it; and the one drive-letter
rule (``c:`` at the start) that save and restore share.
"""

from __future__ import annotations

import json

import pytest
from hostile_store_kit import cache_cmd, manifest_body, plant, put_ref, sha

from gpuci.cache._format import manifest as mf
from gpuci.errors import ExitCode, InputError


def test_a_link_target_over_path_max_is_refused_as_malformed():
    entries = [{"type": "symlink", "root": 0, "path": "F", "target": "./" * 3000 + "x"}]
    with pytest.raises(InputError, match="over 4096 bytes"):
        mf.parse(_manifest(entries), "m")


def test_each_link_is_resolved_once_and_the_walk_is_bounded(monkeypatch):
    links = {"F": "/".join(["."] * 400 + ["x"])}
    links.update({f"l{i}": "F" for i in range(2000)})
    resolver = mf.LinkResolver(links, budget=3000)  # F once, then two steps per link
    assert resolver.first_escape() is None and not resolver.exhausted
    monkeypatch.setattr(mf, "MAX_WALKED", 1000)
    entries = [{"type": "symlink", "root": 0, "path": p, "target": t} for p, t in links.items()]
    with pytest.raises(InputError, match="steps to resolve"):
        mf.parse(_manifest(entries), "m")


def test_only_a_drive_letter_reads_as_absolute():
    assert mf.path_problem("1:2.bin") is None and mf.path_problem("::x") is None
    assert mf.path_problem("c:x") == "is absolute" and mf.path_problem("Z:") == "is absolute"


def test_a_manifest_entry_deeper_than_the_cap_is_malformed():
    entries = [{"type": "dir", "root": 0, "path": "/".join(["a"] * 1500), "mode": 0o755}]
    with pytest.raises(InputError, match="folders deep"):
        mf.parse(_manifest(entries), "m")


@pytest.mark.parametrize("order", ["file-first", "child-first"])
def test_a_manifest_with_a_path_under_a_file_is_malformed(file_store, env, tmp_path, order):
    entries = [
        {"type": "file", "root": 0, "path": "a"},
        {"type": "file", "root": 0, "path": "a/b"},
    ]
    plant(file_store, "k", entries if order == "file-first" else entries[::-1], {"a/b": b"x"})
    result, _ = cache_cmd(
        "restore", {**file_store.flags(), "key": "k", "path": str(tmp_path / "t")}, env
    )
    assert result.exit_code == ExitCode.BAD_INPUT, result.headline
    assert "lies under a file" in result.headline


@pytest.mark.parametrize(
    "entry",
    [
        {"type": "file", "root": 0, "path": "a\ud800b", "size": 1, "mode": 0o644},
        {"type": "symlink", "root": 0, "path": "l", "target": "x\udfff"},
    ],
    ids=["path", "link-target"],
)
def test_a_lone_surrogate_in_a_path_or_link_target_is_malformed(file_store, env, tmp_path, entry):
    """JSON's "\\ud800" is valid JSON but no UTF-8 text: os.open and os.symlink refuse it, which
    was an internal error midway through the restore, not the bad manifest's one line."""
    entry = {**entry, "sha256": sha(b"x")} if entry["type"] == "file" else entry
    file_store.put_raw(f"blobs/sha256/{sha(b'x')[:2]}/{sha(b'x')}", b"x")
    body = json.dumps(manifest_body(entries=[entry]), sort_keys=True).encode()  # "\\ud800"
    file_store.put_raw(f"manifests/{sha(body)}.json", body)
    put_ref(file_store, "k", sha(body))
    result, _ = cache_cmd(
        "restore", {**file_store.flags(), "key": "k", "path": str(tmp_path / "t")}, env
    )
    assert result.exit_code == ExitCode.BAD_INPUT, result.headline
    assert "unsafe or malformed" in result.headline and "lone surrogate" in result.headline
    assert not (tmp_path / "t").exists() or not any((tmp_path / "t").iterdir())
    assert mf.path_problem("a\ud800b") and mf.target_problem("x\udfff")  # save skips them too


def _manifest(entries: list[dict]) -> bytes:
    return mf.canonical_json(manifest_body(entries=entries))
