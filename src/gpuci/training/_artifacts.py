"""The trained artifacts a provenance record names: found without going down a link, hashed
through the one hash loop.

The PR's training writes the folders these are found in, so what is there is input. A folder
link (``ckpt/a -> .``) would send ``glob``'s ``**`` round a loop, so the folders are walked by
:func:`gpuci.files.walk` (no link followed) and the pattern matched name by name
(:mod:`gpuci.globs`). A file link counts only when it points at a regular file inside the
folder walked; one that leaves it (``shard -> /proc/self/mem``, a secret) is named in a warning
and not hashed. What a pattern names itself (the folder it starts at, a file named as given) is
resolved once and must stay in its workspace (the current folder, or for a path outside it the
folder that holds it): the training may have made ``ckpt`` a link to ``~`` or ``model.pt`` one
to ``/proc/self/pagemap``; the same warning then, and for a link that cannot be
resolved (``/proc/1/cwd``: EACCES). Each file is opened by its resolved path going down from
``/`` by descriptors (:func:`open_resolved`: a file or folder swapped for a link since it was
found is not followed) and hashed by :func:`gpuci.files.hash_fd` up to its size (a file that
reads on past it is refused); one that cannot be read is one line naming it (InputError).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from gpuci import files, globs, untrusted_json
from gpuci.errors import CheckFailed, InputError

__all__ = [
    "MAX_ARTIFACT_FILES",
    "MAX_ARTIFACT_WALKED",
    "Artifact",
    "digest",
    "find_artifacts",
    "in_workspace",
    "open_resolved",
]

MAX_ARTIFACT_FILES = 100_000  # far more files than a model is saved as; a walk stops past it
# Names (files, folders, links) one pattern's walk lists: the training may leave millions of
# empty folders, or of files the pattern does not match, that no count of files would see.
MAX_ARTIFACT_WALKED = 1_000_000
_LINK_OUT_FIX = "(save the file itself there, or name its real path in artifacts)"


@dataclass(frozen=True)
class Artifact:
    path: str
    size: int
    sha256: str = ""


@dataclass(frozen=True)
class _Found:
    """What is opened to read an artifact: the resolved path of a file found where it is, or
    of the target of a link that stays inside; opened by :func:`open_resolved`, so never
    through a link swapped in since it was found."""

    opened: Path


def find_artifacts(
    patterns: list[str], *, hash_files: bool = True
) -> tuple[list[Artifact], list[str]]:
    """Expand paths, folders and globs to files, sorted by path, each hashed (sized only
    without ``hash_files``).

    Returns:
        The artifacts, and a warning for each link that leaves its folder or workspace (not
        hashed).

    Raises:
        CheckFailed: a pattern matches no file and no link out (exit 1: training did not
            write it).
        InputError: more than :data:`MAX_ARTIFACT_FILES` files, a walk that lists more than
            :data:`MAX_ARTIFACT_WALKED` names, or a file that cannot be read.
    """
    found: dict[str, _Found] = {}
    skipped: list[str] = []
    for pattern in patterns:
        warned = len(skipped)
        matched = _matching(pattern, MAX_ARTIFACT_FILES - len(found), skipped)
        matched = {k: v for k, v in matched.items() if not k.endswith(files.INCOMPLETE)}
        if not matched and len(skipped) == warned:  # a link out is named in its warning
            raise CheckFailed(
                f"artifact '{pattern}' matches no file",
                hint="run this after training wrote the model, or fix the artifacts path",
            )
        for name, item in matched.items():
            found.setdefault(name, item)
    artifacts = [_artifact(name, item, hash_files) for name, item in sorted(found.items())]
    return artifacts, skipped


def _matching(pattern: str, room: int, skipped: list[str]) -> dict[str, _Found]:
    """The files one pattern names: a file as given, every file below a folder, or what a
    glob matches below the folder its fixed names lead to."""
    base, rest = globs.split(pattern)
    if rest:
        return _walk(Path(base), rest, room, skipped)
    path = Path(pattern)
    if _is_dir(path):
        return _walk(path, None, room, skipped)
    target = _inside_workspace(path, skipped)
    if target is None or not os.path.isfile(target):
        return {}
    return {path.as_posix(): _Found(Path(target))}


def _inside_workspace(named: Path, skipped: list[str]) -> str | None:
    """``named`` resolved once, when it stays in its workspace (:func:`in_workspace`); a link
    out is a warning and None: training wrote it."""
    target, why = in_workspace(named)
    if why:
        skipped.append(f"artifact {named.as_posix()} {why}: not hashed {_LINK_OUT_FIX}")
    return target


def in_workspace(named: Path) -> tuple[str | None, str]:
    """``(target, "")``: ``named`` resolved once, inside its workspace: the current folder (the
    checkout) for a path inside it, else the folder that holds it (a path the workflow chose,
    e.g. in ``RUNNER_TEMP``, whose own links the workflow chose too). Else ``(None, why)``: a
    link out of it (training may have made ``metrics.json`` a link to a secret of the
    runner's), or one that cannot be resolved (``/proc/1/cwd``: EACCES)."""
    here = os.getcwd()
    absolute = os.path.abspath(named)
    inside_here = os.path.commonpath([here, absolute]) == here
    try:
        workspace = os.path.realpath(here if inside_here else os.path.dirname(absolute))
        target = os.path.realpath(absolute)
    except OSError as exc:
        return None, f"is a link that cannot be resolved ({exc.strerror or type(exc).__name__})"
    if os.path.commonpath([workspace, target]) == workspace:
        return target, ""
    return None, f"is a link out of {workspace}"


def open_resolved(target: Path) -> BinaryIO:
    """``target``, a path resolved inside its workspace, opened going down from ``/`` never
    through a link: one swapped in since (for the file or a folder of it) by a process the
    training left behind was followed, to a secret of the runner's. The one way training/
    opens what the PR's training wrote: metrics, baseline, their hash, the artifacts."""
    try:
        folder = files.open_below(Path(target.anchor), target.parts[1:-1])
    except files.Blocked as exc:
        if exc.link:
            raise untrusted_json.Unusable("a link was swapped in on its path") from None
        raise
    except PermissionError:  # a folder on the way only searchable (0711): by path, as before
        return untrusted_json.open_regular(target, follow=False)
    try:
        return untrusted_json.open_regular(Path(target.name), follow=False, dir_fd=folder)
    finally:
        os.close(folder)


def _walk(base: Path, rest: list[str] | None, room: int, skipped: list[str]) -> dict[str, _Found]:
    """The files below ``base`` that ``rest`` matches (a file, or a folder above it, as
    ``glob`` matches folders too), every file when ``rest`` is None; no link followed down,
    not even ``base`` itself once resolved."""
    root = _inside_workspace(base, skipped)
    if root is None:
        return {}
    try:
        top = os.open(root, files.FOLDER | os.O_NOFOLLOW)
    except OSError:
        return {}
    found: dict[str, _Found] = {}
    # A folder matched takes every file below it (``ckpt/**`` matches ``ckpt/`` itself).
    taken: dict[tuple[str, ...], bool] = {(): rest is None or globs.matches(rest, ())}
    try:
        for _, names, entries in files.walk(top, limit=MAX_ARTIFACT_WALKED):
            here = tuple(names)
            if here not in taken:  # a folder comes after the one above it
                taken[here] = taken[here[:-1]] or globs.matches(rest or [], here, dot_files=False)
            for entry in entries:
                relative = (*here, entry.name)
                if taken[here] or globs.matches(rest or [], relative, dot_files=False):
                    path = base.joinpath(*relative)
                    item = _file(entry, path, Path(root, *relative), root, skipped)
                    if item is not None:
                        found[path.as_posix()] = item
                if len(found) > room:
                    raise InputError(
                        f"artifacts match more than {MAX_ARTIFACT_FILES:,} files",
                        hint="name the model's files, or the folder that holds only them",
                    )
    except files.TooMany:
        raise InputError(
            f"artifacts '{base.as_posix()}' holds more than {MAX_ARTIFACT_WALKED:,} files "
            "and folders to walk",
            hint="name the model's files, or the folder that holds only them",
        ) from None
    finally:
        os.close(top)
    return found


def _file(
    entry: os.DirEntry[str], path: Path, resolved: Path, root: str, skipped: list[str]
) -> _Found | None:
    """A regular file (at ``resolved``: ``path`` below ``root``, the walk's resolved top), or a
    link to one inside ``root``; else None (a FIFO, a device, a folder link: its files are
    walked where they are), with a warning for a link out."""
    if entry.is_file(follow_symlinks=False):
        return _Found(resolved)
    if not entry.is_symlink():
        return None
    target = _resolved(path, path, skipped)
    if target is None:
        return None
    if os.path.commonpath([root, target]) != root:
        skipped.append(
            f"artifact {path.as_posix()} is a link out of {root}: not hashed {_LINK_OUT_FIX}"
        )
        return None
    return _Found(Path(target)) if os.path.isfile(target) else None


def _is_dir(path: Path) -> bool:
    """Whether ``path`` is a folder, links followed; False when it cannot be told (a link on
    the way that cannot be read: :func:`_resolved` names it)."""
    try:
        return path.is_dir()
    except OSError:
        return False


def _resolved(path: str | Path, named: Path, skipped: list[str]) -> str | None:
    """``path`` with every link resolved; None, with a warning naming ``named``, when a link on
    the way cannot be read: ``ckpt/pid1 -> /proc/1/cwd`` is EACCES for a runner that is not
    root, and realpath raised it (the gate ended in an internal error)."""
    try:
        return os.path.realpath(path)
    except OSError as exc:
        skipped.append(
            f"artifact {named.as_posix()} is a link that cannot be resolved "
            f"({exc.strerror or type(exc).__name__}): not hashed {_LINK_OUT_FIX}"
        )
        return None


def _artifact(name: str, item: _Found, hash_files: bool) -> Artifact:
    """Its size and sha256 (:func:`digest`); one that cannot be read is InputError naming it."""
    try:
        if not hash_files:
            return Artifact(name, os.stat(item.opened, follow_symlinks=False).st_size)
        sha256, size = digest(item.opened)
    except (OSError, untrusted_json.Unusable) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise InputError(
            f"cannot read the artifact {name}: {why}",
            hint="make it a readable regular file, or leave it out of artifacts",
        ) from None
    return Artifact(name, size, sha256)


def digest(target: Path) -> tuple[str, int]:
    """The sha256 (hex) and size of the regular file at ``target``, a path resolved inside its
    workspace: opened by :func:`open_resolved` (never through a link; a FIFO refused, never
    waited on), read by :func:`gpuci.files.hash_fd` up to the size it states.

    Raises:
        OSError: it cannot be opened or read, or reads on past its size (``/proc/self/pagemap``
            states 0 bytes and reads on for hundreds of GiB).
        untrusted_json.Unusable: it is no regular file, or a link was swapped in on its path.
    """
    with open_resolved(target) as handle:
        fd = handle.fileno()
        hasher, size = files.hash_fd(fd, size=os.fstat(fd).st_size)
    return hasher.hexdigest(), size
