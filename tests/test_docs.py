"""The docs' command examples name real commands and real flags (a renamed flag breaks here)."""

from __future__ import annotations

import re
import shlex

import pytest

from gpuci.commands import command_named
from gpuci_testing import REPO

DOCS = sorted(
    [REPO / "README.md", *(REPO / "docs").glob("*.md"), *(REPO / "actions").rglob("README.md")]
)
# `python -m gpuci ...` up to the end of the line, a closing backtick, or a comment.
_CALL = re.compile(r"python -m gpuci ([^`#\n]*)")


def _examples() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8").replace("\\\n", " ")  # join continued lines
        for match in _CALL.finditer(text):
            found.append((doc.relative_to(REPO).as_posix(), match.group(1).strip()))
    return found


def _flags_of(words: list[str]) -> tuple[str, set[str]]:
    """The command a call names and the flags it accepts."""
    cmd = command_named(words[0]) if words else None  # an action's name is one too (aliases)
    if cmd is None:
        return "", set()
    name = cmd.name
    if cmd.subcommands:
        subs = {s.name: s for s in cmd.subcommands}
        first = words[1].split("|")[0] if len(words) > 1 else ""
        if first not in subs:
            return name, set()
        cmd, name = subs[first], f"{name} {first}"
    return name, {spec.flag for spec in cmd.inputs} | {"--dry-run", "--json", "--help"}


@pytest.mark.parametrize(("doc", "call"), _examples())
def test_every_documented_call_names_a_real_command_and_flags(doc: str, call: str) -> None:
    words = shlex.split(call.replace("[", " ").replace("]", " ").replace("<", "").replace(">", ""))
    if words[:1] in (["--help"], ["--version"]):
        return
    name, flags = _flags_of(words)
    assert name, f"{doc}: 'python -m gpuci {call}' names no command"
    unknown = [w for w in words if w.startswith("--") and w not in flags]
    assert not unknown, f"{doc}: 'python -m gpuci {call}': no such flag(s) {unknown} on {name}"


def test_examples_were_found() -> None:
    assert len(_examples()) > 15


# Variables gpu-ci reads, by their conventional prefixes: each must be declared in settings.py.
_SETTING = re.compile(r"\bGPUCI_[A-Z0-9_]*[A-Z0-9]\b(?!_?\*)")
_FOREIGN = re.compile(r"[\"'](?:AWS|GITHUB|GITLAB|CI|RUNNER|RUNPOD|DISCOURSE|HF)_[A-Z0-9_]+[\"']")


def test_settings_doc_is_generated_from_settings_py() -> None:
    from gpuci import settings

    doc = (REPO / "docs" / "settings.md").read_text(encoding="utf-8")
    assert doc == settings.markdown(), (
        "docs/settings.md is out of date (fix: python -m gpuci.settings > docs/settings.md)"
    )


def test_every_variable_in_src_is_declared_once_in_settings() -> None:
    """A GPUCI_* name anywhere in src/ (code, shell templates, docs strings) and a quoted AWS_,
    GITHUB_, CI_, GITLAB_, RUNNER_, RUNPOD_ name is declared in gpuci.settings, once. Names
    gpu-ci writes, not reads, are exempt: GitLab's dotenv GPUCI_<OUTPUT> of each output."""
    from gpuci import settings
    from gpuci.commands import all_commands

    names = [s.name for s in settings.ALL]
    assert len(names) == len(set(names)), "a variable is declared twice"
    written = {
        "GPUCI_" + out.name.upper().replace("-", "_")
        for cmd in all_commands()
        for leaf in (cmd.subcommands or (cmd,))
        for out in leaf.outputs
    }
    missing: dict[str, str] = {}
    for path in sorted((REPO / "src").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        found = set(_SETTING.findall(text)) - written
        found |= {m.strip("\"'") for m in _FOREIGN.findall(text)}
        for name in found - set(names):
            missing.setdefault(name, path.relative_to(REPO).as_posix())
    assert not missing, f"declare these in src/gpuci/settings.py: {missing}"


def test_api_doc_names_every_parameter_and_result_field_of_the_public_functions() -> None:
    """docs/api.md documents gpuci.cache.api.restore/save and gpuci.fetch.fetch_file: each
    parameter (Args) and each field of what they return (Returns), so a new one is documented
    or this fails."""
    import dataclasses
    import inspect

    from gpuci.cache import api
    from gpuci.fetch import fetch_file

    doc = (REPO / "docs" / "api.md").read_text(encoding="utf-8")
    for func, result in ((api.restore, api.RestoreResult), (api.save, api.SaveResult)):
        assert f"## `gpuci.cache.api.{func.__name__}`" in doc
        names = [*inspect.signature(func).parameters, *(f.name for f in dataclasses.fields(result))]
        missing = [n for n in names if f"`{n}`" not in doc]
        assert not missing, f"docs/api.md lacks {func.__name__}'s {missing}"
    assert "## `gpuci.fetch.fetch_file`" in doc
    fields = [f.name for f in dataclasses.fields(api.FetchResult)]
    missing = [
        n for n in [*inspect.signature(fetch_file).parameters, *fields] if f"`{n}`" not in doc
    ]
    assert not missing, f"docs/api.md lacks fetch_file's {missing}"
    for needed in ("~/.cache/gpuci/local", "100 GiB", 'local_cache="off"', "GPUCI_LOCAL_CACHE=off"):
        assert needed in doc, needed
