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

from gpuci import files
from gpuci.cache._format import manifest as mf
from gpuci.cache._restore.staging import DIR_FLAGS, Staging
from gpuci.errors import InputError

# What ``link`` says where a filesystem (or its settings) allows no hard link.
_NO_LINKS = (errno.EPERM, errno.EMLINK, errno.EOPNOTSUPP, errno.ENOTSUP)
_MAX_OPEN = 256  # the job's folders kept open while its links are read: then all are closed


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
    placed: tuple[int, int] | None = None  # (st_dev, st_ino) this restore renamed onto ``name``
    inside: set[int] | None = None  # a placed folder: the inodes staged under it


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
            sub = files.open_below(top, [name])
        except FileNotFoundError:
            if self._put_new(str(self.staging.tree), top, (), name):
                return
            sub = files.open_below(top, [name])
        except files.Blocked:
            raise not_a_folder(self.target) from None
        try:
            self._merge(str(self.staging.tree), sub, (name,))
        finally:
            os.close(sub)

    def _put_new(self, src: str, dest: int, parts: tuple[str, ...], name: str) -> bool:
        """One rename onto a name that was missing; False when a folder appeared there
        meanwhile (another job's restore of the same cache): it is merged into instead."""
        try:
            self._put(src, dest, parts, name, None)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            return False
        return True

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
                sub = files.open_below(dest, [name])
            except FileNotFoundError:
                if self._put_new(item.path, dest, parts, name):  # new here: the whole subtree
                    continue
                sub = files.open_below(dest, [name])
            except files.Blocked:
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
        """Put ``src`` at ``name``, then record the inode placed there: the undo moves back only
        that one, so it never takes away what another restore put there later. A file or link
        goes onto a name found missing by :func:`_link_new`, never over one that appeared
        meanwhile: that one is moved aside like any other (whoever put it there; the undo puts
        it back) and this restore's own file renamed over it; a folder, or onto a name held
        (``aside``), by a rename, recording the inodes under it (the undo leaves a folder
        another restore merged into since: :func:`_only_ours`). A rename that failed changed
        nothing at ``name`` (another restore's folder may hold it by now), so it is recorded
        only to put back what was moved aside."""
        st = os.lstat(src)
        placed = (st.st_dev, st.st_ino)
        inside = _inodes(src) if stat.S_ISDIR(st.st_mode) else None
        if inside is None and aside is None:
            if _link_new(src, dest, name):
                self.steps.append(_Step(parts, name, None, placed=placed))
                os.unlink(src)
                return
            aside = self._keep(name, dest, atomic=True)
        try:
            os.replace(src, name, dst_dir_fd=dest)  # a rename replaces a link, never follows it
        except OSError:
            if aside is not None:
                self.steps.append(_Step(parts, name, aside))
            raise
        self.steps.append(_Step(parts, name, aside, placed=placed, inside=inside))

    def _set_mode(self, sub: int, item: os.DirEntry[str], parts: tuple[str, ...]) -> None:
        mode = stat.S_IMODE(item.stat(follow_symlinks=False).st_mode)
        before = stat.S_IMODE(os.fstat(sub).st_mode)
        if before != mode:
            self.steps.append(_Step(parts, item.name, None, before))
            os.fchmod(sub, mode)

    def _undo(self, top: int, step: _Step) -> None:
        dest = files.open_below(top, step.parts)  # no link followed on the way back either
        try:
            if step.mode is not None:
                sub = os.open(step.name, DIR_FLAGS, dir_fd=dest)
                try:
                    os.fchmod(sub, step.mode)
                finally:
                    os.close(sub)
                return
            trash = self.staging.trash()
            if (
                step.placed is not None
                and _holds(dest, step.name) == step.placed
                and (step.inside is None or _only_ours(dest, step.name, step.inside))
            ):
                os.rename(step.name, self.staging.trash_name(), src_dir_fd=dest, dst_dir_fd=trash)
            if step.aside is not None and _holds(dest, step.name) is None:
                os.rename(step.aside, step.name, src_dir_fd=trash, dst_dir_fd=dest)
        finally:
            os.close(dest)


def _link_new(src: str, dest: int, name: str) -> bool:
    """Put the staged ``src`` onto ``name``, found missing, by a hard link (the staged name is
    the caller's to unlink): unlike a rename, it never replaces what appeared there meanwhile
    (another restore of the same cache placing it too, or a file another user planted). True:
    placed; False: placed nothing (something holds the name now, or this filesystem refuses
    hard links): the caller moves that aside and renames its own file there. What holds the
    name is never read nor kept as this restore's: the restore places its own inode, with the
    manifest's mode and this user as owner."""
    try:
        os.link(src, name, dst_dir_fd=dest, follow_symlinks=False)
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno not in _NO_LINKS:
            raise
        return False
    return True


def _holds(dest: int, name: str) -> tuple[int, int] | None:
    """The (st_dev, st_ino) of what holds ``name`` in ``dest`` now (a link unfollowed); None:
    nothing. The undo touches a name only while it holds what this restore put there."""
    try:
        st = os.lstat(name, dir_fd=dest)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def _inodes(folder: str) -> set[int]:
    """The inodes under the staged ``folder`` (this restore's own, in its staging folder)."""
    found: set[int] = set()
    todo = [folder]
    while todo:
        with os.scandir(todo.pop()) as items:
            for item in items:
                found.add(item.inode())
                if item.is_dir(follow_symlinks=False):
                    todo.append(item.path)
    return found


def _only_ours(dest: int, name: str, ours: set[int]) -> bool:
    """Whether the folder this restore placed at ``name`` holds nothing but ``ours`` (by inode,
    each folder opened ``O_NOFOLLOW``): one another restore merged into since is its now, and
    the undo leaves it. At most ``len(ours)`` entries are looked at."""
    todo, seen = [[name]], 0
    while todo:
        parts = todo.pop()
        fd = files.open_below(dest, parts)
        try:
            with os.scandir(fd) as items:
                for item in items:
                    seen += 1
                    if seen > len(ours) or item.inode() not in ours:
                        return False
                    if item.is_dir(follow_symlinks=False):
                        todo.append([*parts, item.name])
        finally:
            os.close(fd)
    return True


def refuse_links_leaving(manifest: mf.Manifest, index: int, target: Path) -> None:
    """Before anything is written: refuse a cached link of root ``index`` that the folder
    already at ``target`` would lead outside it (or round a loop), through a link the job made
    there; and the whole root once its links take over :data:`manifest.MAX_WALKED` steps.

    The manifest's links stay inside among themselves (checked at parse); only a name it does
    not list can be one of the job's links, and only that is looked at on disk, once."""
    entries = [e for e in manifest.entries if e.root == index]
    links = {e.path: e.target for e in entries if e.type == "symlink"}
    if not links:
        return
    inside = os.path.realpath(target)
    with _JobsLinks(entries, inside) as disk:
        resolver = mf.LinkResolver(links, mf.MAX_WALKED, disk.target)
        for entry in entries:
            if entry.type != "symlink" or not resolver.escapes(entry.path):
                continue
            if resolver.exhausted:
                raise InputError(
                    f"the cached links, with those already in {target}, take over "
                    f"{mf.MAX_WALKED:,} steps to resolve; nothing was restored",
                    hint="restore into an empty folder, or remove the links the job left there",
                )
            shown = _shown(inside, entry)
            raise escaping_link(target / entry.path, entry, shown, target)


def _shown(inside: str, entry: mf.Entry) -> str:
    """Where the link leads now, for the message (a loop, or a way out and back in, resolves
    inside on the disk as it is, so it is said so)."""
    real = os.path.realpath(os.path.join(inside, os.path.dirname(entry.path), entry.target))
    if real == inside or real.startswith(inside + os.sep):
        return f"a loop, or a way out and back in ({real})"
    return real


class _JobsLinks:
    """The job's links in the folder the merge goes into, read where the manifest lists nothing:
    the merge replaces what it lists, so nothing under a cached file, or under a folder of the
    job's that is a link, is kept. Folders are opened O_NOFOLLOW, each once (a few kept open)."""

    def __init__(self, entries: list[mf.Entry], inside: str) -> None:
        self.inside = [p for p in inside.split("/") if p]
        self.files = {e.path for e in entries if e.type == "file"}
        self.listed = {e.path for e in entries}
        # The folders they imply, found by bisection: never a set of every path's prefixes,
        # O(depth^2) bytes per entry (gigabytes from one hostile manifest of deep paths).
        self.sorted = sorted((e.root, e.path) for e in entries)
        self.fds: dict[str, int] = {}  # a folder's descriptor by its path; -1: not the job's
        self.top = inside

    def __enter__(self) -> _JobsLinks:
        try:
            self.fds[""] = os.open(self.top, DIR_FLAGS)
        except OSError:
            self.fds[""] = -1
        return self

    def __exit__(self, *_: object) -> None:
        self._close(keep_top=False)

    def target(self, name: str) -> str | None:
        """The target of the job's link at ``name`` (relative to the link's folder, an absolute
        one inside made relative), or None where the merge keeps no link of the job's."""
        if self._listed(name):
            return None
        if len(self.fds) > _MAX_OPEN:
            self._close(keep_top=True)
        folder, _, base = name.rpartition("/")
        fd = self._folder(folder)
        if fd < 0:
            return None
        try:
            link = os.readlink(base, dir_fd=fd)  # EINVAL: not a link
        except OSError:
            return None
        return self._relative(folder, link) if link.startswith("/") else link

    def _listed(self, name: str) -> bool:
        """Whether the manifest lists ``name``, or a path under it (a folder it implies)."""
        if name in self.listed:
            return True
        return (
            bool(self.sorted) and mf.first_below(self.sorted, self.sorted[0][0], name) is not None
        )

    def _folder(self, path: str) -> int:
        """The folder ``path`` of the job's, open (-1: none, a link, or one the merge replaces
        with a file), opened from the nearest one already open."""
        todo: list[str] = []
        up = path
        while up not in self.fds:
            up, _, part = up.rpartition("/")
            todo.append(part)
        fd = self.fds[up]
        for part in reversed(todo):
            up = f"{up}/{part}" if up else part
            try:
                fd = -1 if fd < 0 or up in self.files else os.open(part, DIR_FLAGS, dir_fd=fd)
            except OSError:
                fd = -1
            self.fds[up] = fd
        return fd

    def _relative(self, folder: str, link: str) -> str:
        """An absolute target as one relative to ``folder``: inside only when it starts with the
        target folder's real path, component by component (anything else leaves: "/", refused
        like a cached absolute link; realpath would follow links outside to say more)."""
        parts = [p for p in link.split("/") if p not in ("", ".")]
        if parts[: len(self.inside)] != self.inside:
            return "/"
        ups = [".."] * (folder.count("/") + 1 if folder else 0)
        return "/".join([*ups, *parts[len(self.inside) :]]) or "."

    def _close(self, keep_top: bool) -> None:
        top = self.fds.pop("")
        for fd in self.fds.values():
            if fd >= 0:
                os.close(fd)
        self.fds.clear()
        if keep_top:
            self.fds[""] = top
        elif top >= 0:
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
