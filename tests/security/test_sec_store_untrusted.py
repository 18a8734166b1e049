"""Everything read back from a store is untrusted: a ref, a manifest or a pin that is nested
deeper than any gpu-ci writes, holds numbers no parser should build, or has the wrong types ends
restore, prune and ``ls --pins`` in one line (or a skip), never an internal error
(RecursionError, OverflowError, ValueError, AttributeError escaping the command).

Each case plants the object in a file store behind gpu-ci's back and runs the command in-process
(an exception that is not gpu-ci's own escapes ``cache_cmd`` and fails the test: that is what the
CLI turns into "internal error")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hostile_store_kit import (
    StoreCase,
    cache_cmd,
    canonical,
    manifest_body,
    plant,
    put_ref,
    sha,
)

from gpuci.cache._format import refs

DEEP = "[" * 10_000 + "]" * 10_000  # RecursionError in json.loads, under every size cap
LONG_INT = "1" * 5_000  # ValueError: over Python's integer-string limit


@pytest.fixture
def store(tmp_path: Path) -> StoreCase:
    root = tmp_path / "store"
    return StoreCase("local", root.as_uri(), None, root=root)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        "GPUCI_JOURNAL": str(tmp_path / "journal.jsonl"),
        "HOME": str(tmp_path / "home"),
        "GPUCI_LOCAL_CACHE": "off",
    }


def _restore(store: StoreCase, env: dict[str, str], key: str, dest: Path, **extra: str):
    return cache_cmd("restore", {**store.flags(), "key": key, "path": str(dest), **extra}, env)


def _one_line(result) -> str:
    errors = [a.message for a in result.annotations if a.level == "error"]
    assert len(errors) == 1 and "\n" not in errors[0], errors
    return errors[0]


def _put_manifest(store: StoreCase, body: bytes, key: str) -> str:
    """A manifest stored under its own digest (so it passes the hash check) and a ref to it."""
    digest = sha(body)
    store.put_raw(f"manifests/{digest}.json", body)
    put_ref(store, key, digest)
    return digest


# ----- refs -----------------------------------------------------------------------------------
def test_a_deeply_nested_ref_ends_the_restore_in_one_line(store, env, tmp_path):
    store.put_raw("refs/default/deep", DEEP.encode())
    result, log = _restore(store, env, "deep", tmp_path / "t")
    assert int(result.exit_code) == 3, log
    line = _one_line(result)
    assert "refs/default/deep" in line and "nested" in line


@pytest.mark.parametrize("files", ['"many"', "-1", "[1]", "true"])
def test_a_ref_with_a_count_of_the_wrong_type_still_restores(store, env, tmp_path, files):
    """``files`` and ``bytes`` are what ls shows, not what restore trusts: a wrong one is 0."""
    good = plant(store, "k", [{"type": "file", "root": 0, "path": "f"}], {"f": b"ok"})
    body = f'{{"bytes":{files},"files":{files},"format":1,"key":"k","manifest":"{good}"}}'
    store.put_raw("refs/default/k", body.encode())
    result, log = _restore(store, env, "k", tmp_path / "t")
    assert result.ok, log
    assert (tmp_path / "t" / "f").read_bytes() == b"ok"
    ref = refs.read(_open(store, env), "default", "k")
    assert ref is not None and (ref.files, ref.bytes) == (0, 0)


@pytest.mark.parametrize(
    ("number", "why"), [(LONG_INT, "5000 digits"), ("1e400", "too large for a float")]
)
def test_a_ref_with_an_endless_number_ends_the_restore_in_one_line(
    store, env, tmp_path, number, why
):
    """A number no int or float holds (``1e400`` would read as Infinity, past every limit)."""
    good = plant(store, "k", [{"type": "file", "root": 0, "path": "f"}], {"f": b"ok"})
    body = f'{{"files":{number},"format":1,"key":"k","manifest":"{good}"}}'
    store.put_raw("refs/default/k", body.encode())
    result, log = _restore(store, env, "k", tmp_path / "t")
    assert int(result.exit_code) == 3, log
    assert why in _one_line(result)


def test_a_ref_that_is_not_an_object_ends_in_one_line(store, env, tmp_path):
    store.put_raw("refs/default/list", b'["manifest"]')
    result, log = _restore(store, env, "list", tmp_path / "t")
    assert int(result.exit_code) == 3, log
    assert "refs/default/list" in _one_line(result)


# ----- manifests ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        pytest.param('"entries": []', f'"entries": [{DEEP}]', "nested", id="deeply-nested"),
        pytest.param('"files": 0', f'"files": {LONG_INT}', "digits", id="endless-number"),
    ],
)
def test_a_manifest_json_cannot_parse_ends_the_restore_in_one_line(
    store, env, tmp_path, field, value, says
):
    _put_manifest(store, json.dumps(manifest_body()).replace(field, value).encode(), "m")
    result, log = _restore(store, env, "m", tmp_path / "t")
    assert int(result.exit_code) == 2, log
    assert says in _one_line(result)


@pytest.mark.parametrize(
    "over",
    [{"producer": ["not", "an", "object"]}, {"producer": "text"}, {"roots": {"0": "dir"}}],
)
def test_a_manifest_with_wrong_types_ends_the_restore_in_one_line(store, env, tmp_path, over):
    _put_manifest(store, canonical(manifest_body(**over)), "typed")
    result, log = _restore(store, env, "typed", tmp_path / "t")
    assert int(result.exit_code) == 2, log
    assert "manifest" in _one_line(result)


# ----- pins -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "body",
    [DEEP, f'{{"reason": {LONG_INT}}}', '{"reason": "r", "producer": ["x"]}', '"text"'],
)
def test_ls_pins_lists_an_unusable_pin_by_its_name(store, env, tmp_path, body):
    good = plant(store, "k", [{"type": "file", "root": 0, "path": "f"}], {"f": b"ok"})
    store.put_raw(f"pins/{good}.json", body.encode())
    listed, log = cache_cmd("ls", {**store.flags(), "pins": "true"}, env)
    assert listed.ok, log
    (pin,) = listed.report["pins"]
    assert pin["manifest"] == good and pin["producer"] == {}


# ----- prune ----------------------------------------------------------------------------------
def test_prune_skips_a_deeply_nested_ref_and_keeps_going(store, env, tmp_path):
    plant(store, "old", [{"type": "file", "root": 0, "path": "f"}], {"f": b"ok"})
    store.put_raw("refs/other/deep", DEEP.encode())
    store.put_raw("refs/other/long", f'{{"manifest": {LONG_INT}}}'.encode())
    pruned, log = cache_cmd("prune", {**store.flags(), "older-than": "1d", "grace": "1h"}, env)
    assert pruned.ok, log


def _open(store: StoreCase, env: dict[str, str]):
    from gpuci.cache._stores import open_store

    return open_store(store.url, environ=env)
