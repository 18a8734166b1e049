"""Glob patterns matched against names found by a walk that follows no link.

``glob.glob(recursive=True)`` follows folder links while it expands ``**``: two links planted in
a folder (``a -> .``, ``b -> .``) make it walk 2**40 paths. So a pattern is matched here, name
by name, against what :func:`gpuci.files.walk` lists (which never goes down a link): the
pattern's folders up to its first wildcard name where the walk starts (:func:`split`), the rest
matched by :func:`matches`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fnmatch import fnmatchcase

__all__ = ["has_wildcard", "matches", "split"]


def has_wildcard(part: str) -> bool:
    """Whether a pattern's name holds ``*``, ``?`` or ``[``."""
    return any(c in part for c in "*?[")


def split(pattern: str) -> tuple[str, list[str]]:
    """``pattern`` as the folder to walk (its names before the first wildcard, ``.`` when
    none, ``/`` for an absolute pattern) and the names to match below it; no wildcard at all
    is ``(pattern, [])``."""
    parts = pattern.split("/")
    fixed = next((i for i, part in enumerate(parts) if has_wildcard(part)), len(parts))
    if fixed == len(parts):
        return pattern, []
    base = "/".join(parts[:fixed]) or ("/" if pattern.startswith("/") else ".")
    return base, [part for part in parts[fixed:] if part not in ("", ".")]


def matches(
    pattern: Sequence[str],
    names: Sequence[str],
    *,
    dot_files: bool = True,
    spend: Callable[[int], None] | None = None,
) -> bool:
    """Whether a relative path's names match a glob's parts: ``**`` any number of folders,
    else one name each (``fnmatch``: ``*``, ``?``, ``[...]``), run as a set of states, so the
    work is names times parts. Without ``dot_files`` a name starting with ``.`` is matched only
    by a part that starts with one, as ``glob`` does. ``spend`` hears each name's comparisons
    (a caller with a budget: the dry run's hashFiles)."""
    states = _past_globstars({0}, pattern)
    for name in names:
        if spend is not None:
            spend(len(states))
        hidden = not dot_files and name.startswith(".")
        states = _past_globstars(
            {
                i if pattern[i] == "**" else i + 1
                for i in states
                if i < len(pattern) and _name_matches(pattern[i], name, hidden)
            },
            pattern,
        )
        if not states:
            return False
    return len(pattern) in states


def _name_matches(part: str, name: str, hidden: bool) -> bool:
    if hidden and not part.startswith("."):
        return False
    return part == "**" or fnmatchcase(name, part)


def _past_globstars(states: set[int], pattern: Sequence[str]) -> set[int]:
    """``states`` and where each gets by letting its ``**`` parts match no folder."""
    found = set(states)
    for i in states:
        while i < len(pattern) and pattern[i] == "**":
            i += 1
            found.add(i)
    return found
