"""``hashFiles()`` at plan time: the checkout's files, found and ordered as the runner finds them.

The runner (actions/runner ``hashFiles.ts`` over ``@actions/glob``'s ``DefaultGlobber``) reads
its patterns one a line (blank lines and ``#`` comments skipped, each ``!`` flipping a pattern
into an exclusion), adds ``<pattern>/**`` to every pattern that does not end in ``**``
("implicit descendants": ``a`` or ``a/*`` also hash every file below), and hashes the files it
meets search path by search path (each pattern's literal folders before its first wildcard, in
the patterns' order, less any below another), each walked depth first in byte order of the
names (libuv's ``scandir`` sorts with ``strcmp``): the sha256 of each file's sha256, in that
order. It follows no symbolic link (``followSymbolicLinks`` only with
``--follow-symbolic-links``), hashes only what lies under the workspace, and skips folders.

Here the walk never leaves the checkout (:func:`gpuci.files.open_below`, :func:`gpuci.files.walk`:
by descriptors, iterative); what the runner would read that this plan will not (a link on the
way or out of the checkout, a link followed on request, a pattern this matcher does not read
exactly) leaves the value to the run, never a key that differs from the runner's. A pull request
writes the patterns and the checkout, and one ``env:`` block may call ``hashFiles`` 20,000
times: within one plan each call's value and each file's digest are kept
(:class:`PlanHashes`), and the plan walks at most :data:`MAX_WALKED` entries, compares at most
:data:`MAX_COMPARED` names to pattern parts (compiling a pattern counted as
:data:`COMPILE_COST` names a character) and hashes at most :data:`MAX_HASHED_BYTES`; past any
of them, or past :data:`MAX_HASHED_FILES` matches in one call, the value is left to the run, and
so is a pattern line longer than :data:`MAX_PATTERN` characters. A matched file is opened
without waiting and only when regular (:func:`gpuci.files.open_regular`): a link to a FIFO
would hold a plain ``open`` for ever.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuci import files, globs
from gpuci.dryrun._expressions import Unknown, to_text
from gpuci.redact import clip

MAX_HASHED_FILES = 10_000  # files one hashFiles() may match; more is left to the run
MAX_HASHED_BYTES = 1 << 30  # bytes one plan hashes (about a second or two of sha256)
MAX_WALKED = 250_000  # folder entries one plan lists (a large monorepo's checkout, twice)
MAX_COMPARED = 5_000_000  # names compared to pattern parts in one plan (a few seconds)
MAX_PARTS = 64  # parts of one pattern, '**' runs counted once: a real one has a handful
MAX_PATTERN = 1_000  # characters of one pattern line (a real one has tens)
COMPILE_COST = 10  # names compared per character compiled (fnmatch: microseconds a character)
_SHOWN = 40  # characters of each pattern a plan line shows

Names = tuple[str, ...]  # a path below the workspace, one name a part


class _LeftToRun(Exception):
    """What the runner reads here differs from what a plan may read: the run will tell."""


class _OverBudget(_LeftToRun):
    """The plan has walked, compared or hashed all it may."""


@dataclass(frozen=True)
class _Glob:
    """One pattern line as the runner's glob reads it."""

    parts: Names  # folders and names below the workspace; '**' runs collapsed to one
    negate: bool = False
    dirs_only: bool = False  # written with a trailing '/': matches folders, never a file

    def search(self) -> Names:
        """The literal folders before the first wildcard (the whole path when it has none)."""
        found: list[str] = []
        for part in self.parts:
            literal = _literal(part)
            if literal is None:
                break
            found.append(literal)
        return tuple(found)


@dataclass
class PlanHashes:
    """What one plan has hashed: each call's value, each file's digest, and the work spent."""

    values: dict[bytes, str | Unknown] = field(default_factory=dict)  # sha256 of the call
    digests: dict[Names, bytes] = field(default_factory=dict)
    listings: dict[Names, list[tuple[Names, str]]] = field(default_factory=dict)
    walked: int = 0
    compared: int = 0
    hashed: int = 0  # bytes

    def spend(self, walked: int = 0, compared: int = 0, hashed: int = 0) -> None:
        """Count work; _OverBudget once the plan has done all it may."""
        self.walked += walked
        self.compared += compared
        self.hashed += hashed
        if (
            self.walked > MAX_WALKED
            or self.compared > MAX_COMPARED
            or self.hashed > MAX_HASHED_BYTES
        ):
            raise _OverBudget

    def spent(self) -> bool:
        """Whether the plan has done all it may: a new call is left to the run unwalked."""
        return (
            self.walked >= MAX_WALKED
            or self.compared >= MAX_COMPARED
            or self.hashed >= MAX_HASHED_BYTES
        )


def plan_hashes(github: Any) -> PlanHashes:
    """The hashing work of the plan whose ``github`` context this is: a plan makes that context
    once, so what it holds lasts the plan. A plain mapping (a caller's own) gets a fresh one."""
    work = getattr(github, "hash_work", None)
    if isinstance(work, PlanHashes):
        return work
    work = PlanHashes()
    try:
        github.hash_work = work
    except AttributeError:  # a plain dict: nothing to keep it on
        pass
    return work


def hash_files(contexts: Mapping[str, Any], args: list[Any]) -> str | Unknown:
    """``hashFiles(patterns...)`` over the checkout, as the runner computes it: the sha256 of
    each matched file's sha256, in the runner's order; files outside the workspace and folders
    are left out. What matches nothing here (a file an earlier step makes) is left to the run,
    and so is a call past the plan's budget (see the module docstring)."""
    texts = [None if isinstance(a, Unknown) else to_text(a) for a in args]
    shown = clip("hashFiles({})".format(", ".join(_shown(t) for t in texts)), 4 * _SHOWN)
    github = contexts.get("github")
    workspace = github.get("workspace") if isinstance(github, Mapping) else None
    if None in texts or not isinstance(workspace, str):
        return Unknown(shown, path=False)
    if any("\0" in str(t) for t in texts):  # no path holds one, nor the runner's environment
        return Unknown(shown, path=False)
    work = plan_hashes(github)
    call = json.dumps([workspace, *texts]).encode()  # one text per call, never two alike
    key = hashlib.sha256(call).digest()  # a pattern may be 21,000 characters: kept as 32 bytes
    if key in work.values:
        return work.values[key]
    if work.spent():
        return Unknown(f"{shown} (past what a plan hashes)", path=False)
    value = _value(Path(workspace), [str(t) for t in texts], work, shown)
    work.values[key] = value
    return value


def _shown(text: str | None) -> str:
    if text is None:
        return "?"
    return repr(clip(text, _SHOWN))


def _value(root: Path, texts: list[str], work: PlanHashes, shown: str) -> str | Unknown:
    """The hash of what ``texts`` select under ``root``, or why it is left to the run."""
    globs = _parse(texts)
    if globs is None:
        return Unknown(shown, path=False)
    try:
        work.spend(compared=COMPILE_COST * sum(len(part) for g in globs for part in g.parts))
        found = _matched(root, globs, work)
        digests = [d for d in (_digest(root, names, work) for names in found) if d is not None]
        if not digests:  # only folders (links to them): the runner hashes nothing
            return Unknown(f"{shown} (matches nothing in the checkout yet)", path=False)
    except _OverBudget:
        return Unknown(f"{shown} (past what a plan hashes)", path=False)
    except (OSError, _LeftToRun):  # a file gone or unreadable, a link the run follows
        return Unknown(shown, path=False)
    return hashlib.sha256(b"".join(digests)).hexdigest()


def _parse(texts: list[str]) -> list[_Glob] | None:
    """The runner's patterns (each with its implicit descendants); None for one leaving the
    checkout, one the run refuses or follows links for, or one this matcher can't read as
    minimatch does (a ``\\`` escape, a ``[[:class:]]``), or one longer than
    :data:`MAX_PATTERN` (a 400,000-character line was compiled anew on every call)."""
    if texts and texts[0].startswith("--"):  # --follow-symbolic-links, or an option it refuses
        return None
    globs: list[_Glob] = []
    for line in (line.strip() for text in texts for line in text.split("\n")):
        if not line or line.startswith("#"):
            continue
        negate = False
        while line.startswith("!"):
            negate, line = not negate, line[1:].strip()
        if not line or line.startswith(("/", "~")) or any(c in line for c in ("\\", "[[:")):
            return None
        if len(line) > MAX_PATTERN:
            return None
        names = [part for part in line.split("/") if part]
        if "." in names[1:] or ".." in names or len(names) > MAX_PARTS:
            return None
        parts = _collapsed(names[1:] if names[:1] == ["."] else names)
        explicit = _Glob(parts, negate, dirs_only=line.endswith("/"))
        globs.append(explicit)
        if explicit.dirs_only or parts[-1:] != ("**",):
            globs.append(_Glob((*parts, "*", "**"), negate))  # the runner's implicit '/**'
    return globs


def _collapsed(names: list[str]) -> Names:
    """The parts, ``[^`` read as ``[!`` (as minimatch does) and each run of ``**`` one."""
    parts: list[str] = []
    for name in names:
        if name != "**" or parts[-1:] != ["**"]:
            parts.append(name.replace("[^", "[!"))
    return tuple(parts)


def _literal(part: str) -> str | None:
    """A part as the literal name the runner's glob reads it as (``[x]`` is ``x``); None for
    a wildcard (``*``, ``?``, a class of more than one character)."""
    literal, i = "", 0
    while i < len(part):
        c = part[i]
        if c in "*?":
            return None
        closed = part.find("]", i + 1) if c == "[" else -1
        if closed > i + 1:
            if closed > i + 2:
                return None
            literal, i = literal + part[i + 1], closed + 1
            continue
        literal, i = literal + c, i + 1
    return literal


def _search_paths(globs: list[_Glob]) -> list[Names]:
    """Where the runner starts walking: each including pattern's search path, in the patterns'
    order, once, less any below another's (``getSearchPaths``)."""
    paths = [g.search() for g in globs if not g.negate]
    every = set(paths)
    found: dict[Names, None] = {}
    for path in paths:
        if not any(path[:i] in every for i in range(len(path))):
            found[path] = None
    return list(found)


def _matched(root: Path, globs: list[_Glob], work: PlanHashes) -> list[Names]:
    """The entries the runner hashes, in its order: search path by search path, each depth
    first in byte order of the names; _LeftToRun as soon as they pass the cap."""
    found: list[Names] = []
    for start in _search_paths(globs):
        here: list[Names] = []
        for names, kind in _listing(root, start, work):
            if _selected(globs, names, kind, work):
                here.append(names)
                if len(found) + len(here) > MAX_HASHED_FILES:
                    raise _LeftToRun
        found += sorted(here, key=lambda names: [os.fsencode(n) for n in names])
    return found


def _selected(globs: list[_Glob], names: Names, kind: str, work: PlanHashes) -> bool:
    """Whether the runner hashes this entry: the last pattern that decides it includes it."""
    work.spend(compared=len(globs))
    chosen = False
    for glob in globs:
        if glob.dirs_only or glob.negate != chosen:
            continue  # a folder pattern never picks a file; a pattern that changes nothing
        if _matches(glob, names, work):
            chosen = not glob.negate
    if chosen and kind == "other":  # a FIFO or device: the runner would block or fail on it
        raise _LeftToRun
    return chosen


def _matches(glob: _Glob, names: Names, work: PlanHashes) -> bool:
    """Whether a path's names match a glob's parts (dot files match, as the runner's glob
    does), each name's comparisons counted against the plan's budget."""
    return globs.matches(glob.parts, names, spend=lambda compared: work.spend(compared=compared))


def _listing(root: Path, start: Names, work: PlanHashes) -> Iterator[tuple[Names, str]]:
    """Every entry that is no folder at or below ``start`` (its names below the root, and
    ``file``, ``link`` or ``other``), walked once per plan; none when it does not exist."""
    kept = work.listings.get(start)
    if kept is not None:
        yield from kept
        return
    listed: list[tuple[Names, str]] = []
    for entry in _walked(root, start, work):
        listed.append(entry)
        yield entry
    work.listings[start] = listed  # kept only once walked to the end


def _walked(root: Path, start: Names, work: PlanHashes) -> Iterator[tuple[Names, str]]:
    """:func:`_listing`'s walk: no link followed on the way (one is left to the run)."""
    try:
        above = files.open_below(root, start[:-1])
    except FileNotFoundError:
        return
    except files.Blocked as exc:  # a link on the way, which the runner would follow
        raise _LeftToRun from exc
    try:
        if start:
            try:
                seen = os.stat(start[-1], dir_fd=above, follow_symlinks=False)
            except FileNotFoundError:
                return
            if not stat.S_ISDIR(seen.st_mode):
                yield start, _kind(seen.st_mode)
                return
        folder = files.open_below(above, start[-1:])
    finally:
        os.close(above)
    try:  # a folder's names counted as they are listed: one of millions is never read whole
        for _, names, entries in files.walk(folder, strict=True, limit=MAX_WALKED - work.walked):
            work.spend(walked=len(entries) + 1)
            for entry in entries:
                yield (*start, *names, entry.name), _kind(entry.stat(follow_symlinks=False).st_mode)
    except files.TooMany:
        work.walked = MAX_WALKED  # spent: a later call is left to the run unwalked
        raise _OverBudget from None
    finally:
        os.close(folder)


def _kind(mode: int) -> str:
    return "file" if stat.S_ISREG(mode) else "link" if stat.S_ISLNK(mode) else "other"


def _digest(root: Path, names: Names, work: PlanHashes) -> bytes | None:
    """A matched file's sha256 (kept for the plan); None for a link to a folder (the runner
    skips folders). A link is read as the runner reads it, when it stays in the checkout."""
    if names in work.digests:
        return work.digests[names]
    real = root.joinpath(*names).resolve()
    if real.is_dir():
        return None
    if root.resolve() not in real.parents:
        raise _LeftToRun  # the runner reads a link out of the checkout: a plan does not
    work.spend(hashed=real.stat().st_size)  # before opening: past the budget, nothing is read
    # A link to a FIFO would hold a plain open() for ever: NotRegular (an OSError) leaves it to
    # the run, and so does a link put where ``real`` was resolved (not followed now).
    fd = files.open_regular(real, follow=False)
    try:
        digest = files.hash_fd(fd)[0].digest()
    finally:
        os.close(fd)
    work.digests[names] = digest
    return digest
