"""``hashFiles()`` at plan time: the checkout's files, found as the runner finds them.

The runner globs without following symbolic links (actions/runner ``hashFiles.ts``:
``followSymbolicLinks`` only with ``--follow-symbolic-links``), hashes only what lies under the
workspace, and skips folders. ``Path.glob`` would follow a committed ``sys -> /`` link and walk
the whole machine before any filter or limit; here the walk never leaves the checkout
(:func:`gpuci.files.open_below`, :func:`gpuci.files.walk`: by descriptors, iterative), stops as
soon as the matches pass :data:`MAX_HASHED_FILES`, and a file that vanishes or cannot be read,
or a tree too deep to walk, leaves the value to the run.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from gpuci import files
from gpuci.dryrun._expressions import Unknown, to_text

MAX_HASHED_FILES = 10_000  # hashFiles over more files than this is left to the run


class _TooMany(Exception):
    """More files match than a plan hashes."""


def hash_files(contexts: Mapping[str, Any], args: list[Any]) -> str | Unknown:
    """``hashFiles(patterns...)`` over the checkout, as the runner computes it: the sha256 of
    each matched file's sha256, in path order; files outside the workspace and folders are left
    out. What matches nothing here (a file an earlier step makes) is left to the run."""
    shown = f"hashFiles({', '.join(repr(to_text(a)) for a in args)})"
    github = contexts.get("github")
    workspace = github.get("workspace") if isinstance(github, Mapping) else None
    if any(isinstance(a, Unknown) for a in args) or not isinstance(workspace, str):
        return Unknown(shown, path=False)
    root = Path(workspace).resolve()
    patterns = [line.strip() for a in args for line in to_text(a).splitlines() if line.strip()]
    try:
        found = _matched(root, patterns)
        if found is None:
            return Unknown(shown, path=False)
        inside = sorted(p for p in found if root in p.resolve().parents)
        if not inside:
            return Unknown(f"{shown} (matches nothing in the checkout yet)", path=False)
        combined = hashlib.sha256()
        for path in inside:
            combined.update(files.hash_file(path)[0].digest())
    except (OSError, _TooMany):  # a file gone or unreadable mid-walk: the run will tell
        return Unknown(shown, path=False)
    return combined.hexdigest()


def _matched(root: Path, patterns: list[str]) -> set[Path] | None:
    """The files the patterns select (``!pattern`` takes away); None for a pattern that
    leaves the checkout."""
    found: set[Path] = set()
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern[1:] if negate else pattern
        parts = [p for p in pattern.split("/") if p not in ("", ".")]
        if pattern.startswith("/") or ".." in parts:
            return None
        if negate:
            found -= _files(root, parts, None)
        else:
            found |= _files(root, parts, MAX_HASHED_FILES - len(found))
    return found


def _files(root: Path, parts: list[str], room: int | None) -> set[Path]:
    """The files under ``root`` that ``parts`` match; no link is followed on the way (only a
    matched file's own link, as the runner reads it); _TooMany past ``room`` matches."""
    fixed = next((i for i, part in enumerate(parts) if _is_magic(part)), len(parts))
    above = parts[:-1] if fixed == len(parts) else parts[:fixed]
    try:
        folder = files.open_below(root, above)  # no link on the way: the runner follows none
    except (FileNotFoundError, files.Blocked):
        return set()
    start = root.joinpath(*above)
    found: set[Path] = set()
    try:
        if fixed == len(parts):  # no wildcard: one path
            target = start / parts[-1] if parts else root
            return {target} if parts and target.is_file() else set()
        for _, names, entries in files.walk(folder, strict=True):
            for entry in entries:
                relative = (*names, entry.name)
                if _matches(parts[fixed:], relative) and entry.is_file():
                    found.add(start.joinpath(*relative))
                    if room is not None and len(found) > room:
                        raise _TooMany
    finally:
        os.close(folder)
    return found


def _is_magic(part: str) -> bool:
    return any(c in part for c in "*?[")


def _matches(pattern: list[str], names: tuple[str, ...]) -> bool:
    """Whether a relative path's names match a glob's parts: ``**`` any number of folders,
    else one name each (``fnmatch``: ``*``, ``?``, ``[...]``; dot files match)."""
    states = _past_globstars({0}, pattern)
    for name in names:
        states = _past_globstars(
            {
                i if pattern[i] == "**" else i + 1
                for i in states
                if i < len(pattern) and (pattern[i] == "**" or fnmatchcase(name, pattern[i]))
            },
            pattern,
        )
        if not states:
            return False
    return len(pattern) in states


def _past_globstars(states: set[int], pattern: list[str]) -> set[int]:
    """``states`` and where each gets by letting its ``**`` parts match no folder."""
    found = set(states)
    for i in states:
        while i < len(pattern) and pattern[i] == "**":
            i += 1
            found.add(i)
    return found
