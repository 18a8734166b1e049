"""Put a staged root in place, and take it all back when the restore fails.

A root whose target is new is one rename. Into a folder that exists, the staged tree is merged
name by name relative to folder descriptors opened ``O_NOFOLLOW``, so a link planted in the
target is replaced, never written through. Whatever held a name is kept in the staging folder's
trash (a hard link where it can, so a file is still replaced by one atomic rename) until the
whole restore succeeded: one that fails puts it all back, so bad input loses nothing the job
had. What bad input can be found before the merge (a target of the wrong type, a cached link
that would leave through the job's own links) is refused before anything is downloaded.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from gpuci.cache._format import manifest as mf
from gpuci.cache._restore.staging import DIR_FLAGS, Staging
from gpuci.errors import InputError


def not_a_folder(target: Path) -> InputError:
    return InputError(
        f"path '{target}' exists and is not a folder, so the cached folder cannot go there",
        hint="remove it or restore to another path",
    )


def not_a_file(target: Path) -> InputError:
    return InputError(
        f"path '{target}' is a folder, so the cached file cannot go there",
        hint="remove it or restore to another path",
    )


def escaping_link(link: Path, entry: mf.Entry, resolved: str, root: Path) -> InputError:
    return InputError(
        f"restored symlink {link} -> {entry.target} resolves to {resolved}, outside {root}, "
        "through links already in that folder; nothing was restored",
        hint="restore into an empty folder, or remove the links the job left there",
    )


@dataclass
class _Step:
    """One name a placement changed, to put back on failure."""

    parts: tuple[str, ...]  # the folder holding ``name``, from the target's parent
    name: str
    aside: str | None  # what held ``name`` before, by its name in the trash; None: nothing
    mode: int | None = None  # a merged folder's mode before (only that changed)


class Placement:
    """One root put in place from its staging folder, with what it replaced kept aside."""

    def __init__(self, target: Path, staging: Staging) -> None:
        self.target = target
        self.staging = staging
        self.steps: list[_Step] = []

    def place(self, kind: str) -> None:
        """Rename the staged root onto the target, or merge it into the folder already there."""
        top = os.open(self.target.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            if kind == "file":
                self._place_file(top)
            else:
                self._place_dir(top)
        finally:
            os.close(top)

    def undo(self) -> None:
        """Put back what was replaced, newest first; a step that cannot be undone (the folder
        changed meanwhile) leaves the others to go on."""
        if not self.steps:
            return
        top = os.open(self.target.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for step in reversed(self.steps):
                try:
                    self._undo(top, step)
                except OSError:
                    continue
        finally:
            os.close(top)
        self.steps.clear()

    def _place_file(self, top: int) -> None:
        name = self.target.name
        try:
            held = os.lstat(name, dir_fd=top).st_mode
        except FileNotFoundError:
            held = None
        if held is not None and stat.S_ISDIR(held):
            raise not_a_file(self.target)
        aside = None if held is None else self._keep(name, top, atomic=True)
        self._put(str(self.staging.tree), top, (), name, aside)  # a link there is replaced

    def _place_dir(self, top: int) -> None:
        name = self.target.name
        try:
            sub = os.open(name, DIR_FLAGS, dir_fd=top)
        except FileNotFoundError:
            self._put(str(self.staging.tree), top, (), name, None)  # one rename
            return
        except OSError as exc:
            if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                raise
            raise not_a_folder(self.target) from None
        try:
            self._merge(str(self.staging.tree), sub, (name,))
        finally:
            os.close(sub)

    def _merge(self, src: str, dest: int, parts: tuple[str, ...]) -> None:
        """Merge the staged folder ``src`` into the open folder ``dest``, one name at a time:
        a file or link replaces its namesake atomically, a folder is entered only when a real
        folder holds its name, and whatever else holds it (a planted link) is moved aside."""
        for item in sorted(os.scandir(src), key=lambda i: i.name):
            name = item.name
            if not item.is_dir(follow_symlinks=False):
                self._put(item.path, dest, parts, name, self._keep(name, dest, atomic=True))
                continue
            try:
                sub = os.open(name, DIR_FLAGS, dir_fd=dest)
            except FileNotFoundError:
                self._put(item.path, dest, parts, name, None)  # new here: the whole subtree
                continue
            except OSError as exc:
                if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                    raise
                self._put(item.path, dest, parts, name, self._keep(name, dest, atomic=False))
                continue
            try:
                self._merge(item.path, sub, (*parts, name))
                self._set_mode(sub, item, parts)
            finally:
                os.close(sub)

    def _keep(self, name: str, dest: int, atomic: bool) -> str | None:
        """Keep what holds ``name`` in the trash; its name there, or None when nothing did.

        ``atomic``: a hard link, leaving it in place for one atomic replace (a folder, or a
        file this user may not link, is moved instead)."""
        trash, kept = self.staging.trash(), self.staging.trash_name()
        if atomic:
            try:
                os.link(name, kept, src_dir_fd=dest, dst_dir_fd=trash, follow_symlinks=False)
                return kept
            except FileNotFoundError:
                return None
            except OSError:
                pass
        try:
            os.rename(name, kept, src_dir_fd=dest, dst_dir_fd=trash)  # a link moves, unfollowed
        except FileNotFoundError:
            return None
        return kept

    def _put(
        self, src: str, dest: int, parts: tuple[str, ...], name: str, aside: str | None
    ) -> None:
        self.steps.append(_Step(parts, name, aside))  # first: a failed rename is undone too
        os.replace(src, name, dst_dir_fd=dest)  # a rename replaces a link, never follows it

    def _set_mode(self, sub: int, item: os.DirEntry[str], parts: tuple[str, ...]) -> None:
        mode = stat.S_IMODE(item.stat(follow_symlinks=False).st_mode)
        before = stat.S_IMODE(os.fstat(sub).st_mode)
        if before != mode:
            self.steps.append(_Step(parts, item.name, None, before))
            os.fchmod(sub, mode)

    def _undo(self, top: int, step: _Step) -> None:
        dest = _walk(top, step.parts)
        try:
            if step.mode is not None:
                sub = os.open(step.name, DIR_FLAGS, dir_fd=dest)
                try:
                    os.fchmod(sub, step.mode)
                finally:
                    os.close(sub)
                return
            trash = self.staging.trash()
            try:
                os.rename(step.name, self.staging.trash_name(), src_dir_fd=dest, dst_dir_fd=trash)
            except FileNotFoundError:
                pass
            if step.aside is not None:
                os.rename(step.aside, step.name, src_dir_fd=trash, dst_dir_fd=dest)
        finally:
            if dest != top:
                os.close(dest)


def _walk(top: int, parts: tuple[str, ...]) -> int:
    """The folder ``parts`` below ``top``, opened without following a link."""
    fd = top
    try:
        for part in parts:
            sub = os.open(part, DIR_FLAGS, dir_fd=fd)
            if fd != top:
                os.close(fd)
            fd = sub
    except BaseException:
        if fd != top:
            os.close(fd)
        raise
    return fd


def refuse_links_leaving(manifest: mf.Manifest, index: int, target: Path) -> None:
    """Before anything is written: refuse a cached link of root ``index`` that the folder
    already at ``target`` would lead outside it, through a link the job made there.

    The manifest's links stay inside among themselves (checked at parse); only a name it does
    not list can be one of the job's links, and only that is looked at on disk."""
    entries = [e for e in manifest.entries if e.root == index]
    if not any(e.type == "symlink" for e in entries):
        return
    tree = _Listed(entries, os.path.realpath(target))
    for entry in entries:
        if entry.type != "symlink":
            continue
        resolved = tree.lands(entry.path.rpartition("/")[0], entry.target)
        if resolved != tree.inside and not resolved.startswith(tree.inside + os.sep):
            raise escaping_link(target / entry.path, entry, resolved, target)


class _Listed:
    """A root's entries as the merge will leave them over the folder ``inside``."""

    def __init__(self, entries: list[mf.Entry], inside: str) -> None:
        self.inside = inside
        self.links = {e.path: e.target for e in entries if e.type == "symlink"}
        self.files = {e.path for e in entries if e.type == "file"}
        self.listed = {e.path for e in entries}  # and the folders they imply
        self.listed.update(
            "/".join(parts[:i])
            for e in entries
            for parts in [e.path.split("/")]
            for i in range(1, len(parts))
        )

    def lands(self, start: str, to: str) -> str:
        """Where the link target ``to``, read from the folder ``start``, ends once merged: the
        manifest's links followed on paper, the job's on disk (from there, as realpath does)."""
        here = [p for p in start.split("/") if p]
        pending = list(reversed(to.split("/")))
        hops = 0
        while pending:
            part = pending.pop()
            if part in ("", "."):
                continue
            if part == "..":
                if not here:  # above the target: parse refuses that; realpath, to be sure
                    return os.path.realpath(os.path.join(self.inside, "..", *reversed(pending)))
                here.pop()
                continue
            rel = "/".join([*here, part])
            link = self.links.get(rel)
            if link is not None:
                hops += 1
                if hops > mf.MAX_LINK_HOPS:
                    return self.inside  # a loop leads nowhere
                pending.extend(reversed(link.split("/")))
                continue
            if rel not in self.listed and _jobs_link(self.inside, [*here, part]):
                return os.path.realpath(os.path.join(self.inside, rel, *reversed(pending)))
            here.append(part)
            if rel in self.files:
                break  # nothing lies under a cached file: the link dangles here
        return os.path.join(self.inside, *here)


def _jobs_link(inside: str, parts: list[str]) -> bool:
    """Whether the folder holds a link at ``parts`` that the merge keeps (a folder on the way
    that is a link is replaced by the manifest's, so nothing under it is the job's)."""
    try:
        top = os.open(inside, DIR_FLAGS)
    except OSError:
        return False
    try:
        fd = _walk(top, tuple(parts[:-1]))
    except OSError:
        os.close(top)
        return False
    try:
        return stat.S_ISLNK(os.lstat(parts[-1], dir_fd=fd).st_mode)
    except OSError:
        return False
    finally:
        if fd != top:
            os.close(fd)
        os.close(top)


def refuse_escaping_links(manifest: mf.Manifest, targets: list[Path]) -> None:
    """After placing: a restored tree never holds a link that resolves outside it on the real
    filesystem (the check before the merge cannot see a folder that changed meanwhile)."""
    for entry in manifest.entries:
        if entry.type != "symlink":
            continue
        root = targets[entry.root]
        inside = os.path.realpath(root)
        resolved = os.path.realpath(root / entry.path)
        if resolved != inside and not resolved.startswith(inside + os.sep):
            raise escaping_link(root / entry.path, entry, resolved, root)
