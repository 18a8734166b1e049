# ruff: noqa: F811  (the fixtures imported from hostile_store_kit are used as arguments)
"""A hostile manifest that parse must refuse as malformed (exit 2), quickly and in one line:
links whose resolution would take hours (a target of megabytes, thousands of links through it),
a path deeper than placement can walk, a file with a path under it; and the one drive-letter
rule (``c:`` at the start) that save and restore share.
"""

from __future__ import annotations

import pytest
from hostile_store_kit import (  # noqa: F401  (fixtures are used by name)
    cache_cmd,
    env,
    file_store,
    manifest_body,
    plant,
)

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


def _manifest(entries: list[dict]) -> bytes:
    return mf.canonical_json(manifest_body(entries=entries))
