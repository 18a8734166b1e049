"""Typed inputs: each typed command's dataclass matches its Input specs, and is built from them."""

from __future__ import annotations

import pytest

from gpuci.cache.options import RestoreInputs, SaveInputs
from gpuci.commands import iter_leaf_commands
from gpuci.inputs import Input, resolve
from gpuci.typed import as_values, check_fields, typed

TYPED = [(name, cmd) for name, cmd in iter_leaf_commands() if cmd.typed]


def test_restore_and_save_are_typed() -> None:
    assert {name for name, _ in TYPED} >= {"cache-weights restore", "cache-weights save"}


@pytest.mark.parametrize(("name", "cmd"), TYPED, ids=[n for n, _ in TYPED])
def test_the_dataclass_matches_the_specs(name: str, cmd) -> None:  # type: ignore[no-untyped-def]
    cls = cmd.load_typed()
    assert check_fields(cls, cmd.inputs) == []
    given = {"key": "k"} if any(i.name == "key" for i in cmd.inputs) else {}
    defaults = typed(cls, resolve(cmd.inputs, given, {}))
    assert defaults == cls(**given)  # the dataclass's defaults are the specs'


def test_a_mismatch_is_reported() -> None:
    specs = (Input("key", "k"), Input("path", "p", "lines"), Input("extra", "x", "bool"))
    problems = check_fields(SaveInputs, specs)
    assert any("extra" in p for p in problems)
    assert any("SaveInputs.store is no input" in p for p in problems)


def test_values_are_parsed_once_into_fields() -> None:
    from gpuci.commands.cache_weights import RESTORE

    flags = {"key": "k", "restore-keys": "a-\nb-", "lookup-only": "yes"}
    inp = typed(RestoreInputs, resolve(RESTORE.inputs, flags, {}))
    assert inp.restore_keys == ["a-", "b-"] and inp.lookup_only is True and inp.store == ""
    assert as_values(inp)["store"] is None and as_values(inp)["restore-keys"] == ["a-", "b-"]
