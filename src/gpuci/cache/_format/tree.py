"""Walking a local tree into manifest entries (without hashes yet).

Symlinks that stay inside the tree are kept as symlinks (Hugging Face snapshots point into
``../../blobs``). One that leaves the tree, on its own or through other links
(:mod:`gpuci.cache._format.manifest`), is what a job (or a pull request's job, on a runner
that keeps the folder) can plant to make a later trusted save upload what it points at
(``config.json -> ~/.docker/config.json``); so with ``follow-symlinks: inside`` (the default)
it is skipped, with one warning, and with ``all`` the file it names is saved as a file, each
such link said in a warning. Names restore would refuse (a backslash, ``c:``), names that are
not UTF-8, folders deeper than :data:`~gpuci.cache._format.manifest.MAX_DEPTH`, files the job
cannot read and folders it cannot list are skipped with a warning too. A manifest save writes
is therefore never one restore refuses, and nothing in the tree ends a save in an internal
error.
"""

from __future__ import annotations

import os
import posixpath
import stat
from dataclasses import dataclass, field
from pathlib import Path

from gpuci import untrusted_json
from gpuci.cache import _layout as layout
from gpuci.cache._format import manifest
from gpuci.cache._format.manifest import Entry
from gpuci.errors import InputError
from gpuci.inputs import resolve_path

__all__ = ["FOLLOW_SYMLINKS", "Tree", "resolve_path", "scan", "shown"]

# The follow-symlinks input: keep only links inside the saved paths, or also save the files
# behind links that leave them.
FOLLOW_SYMLINKS = ("inside", "all")
# How many links out of the tree a follow-symlinks: all warning names before it counts the rest.
NAMED_LINKS = 10


@dataclass(frozen=True)
class Seen:
    """Which file the scan saw at a file entry's path: a later open must find that very file
    (a job that can write the tree may swap in a link to a secret, or a FIFO, since)."""

    dev: int
    ino: int
    follow: bool  # reached through a link (a root, or a link under follow-symlinks: all)


@dataclass
class Tree:
    roots: list[dict[str, str]] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)
    sources: dict[int, Path] = field(default_factory=dict)  # id(entry) -> local file
    seen: dict[int, Seen] = field(default_factory=dict)  # id(file entry) -> what the scan saw
    warnings: list[str] = field(default_factory=list)

    def source(self, entry: Entry) -> Path:
        return self.sources[id(entry)]

    def seen_at(self, entry: Entry) -> Seen:
        return self.seen[id(entry)]


def shown(path: Path | str) -> str:
    """A local path fit to print: bytes that are not UTF-8 as ``\\xff`` escapes."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


@dataclass
class _Skipped:
    """What a scan left out, by reason: said once per reason, naming the first."""

    by_reason: dict[str, list[str]] = field(default_factory=dict)

    def add(self, reason: str, what: str) -> None:
        self.by_reason.setdefault(reason, []).append(what)

    def warnings(self) -> list[str]:
        out = []
        for reason, items in self.by_reason.items():
            others = f" (and {len(items) - 1:,} more like it)" if len(items) > 1 else ""
            out.append(f"skipped {items[0]}: {reason}{others}")
        return out


@dataclass
class _Scan:
    """One scan's state: the tree it fills, how links out of it are treated, what it skipped."""

    tree: Tree
    follow: str
    skipped: _Skipped = field(default_factory=_Skipped)
    left: list[str] = field(default_factory=list)  # links out, skipped (follow-symlinks: inside)
    followed: list[str] = field(default_factory=list)  # links out, saved as files (all)

    def warnings(self) -> list[str]:
        out = self.skipped.warnings()
        if self.left:
            more = len(self.left) - 1
            others = f" and {more:,} other link{'s' if more > 1 else ''}" if more else ""
            out.append(
                f"skipped {self.left[0]}{others} leaving the saved paths: a link out of them is "
                "not followed, so a link planted in the tree cannot make this save upload what it "
                "points at; set follow-symlinks: all to save the files they point at"
            )
        if self.followed:
            named = ", ".join(self.followed[:NAMED_LINKS])
            more = len(self.followed) - NAMED_LINKS
            rest = f" and {more:,} more" if more > 0 else ""
            out.append(
                f"saved the files behind {len(self.followed):,} links leaving the saved paths "
                f"(follow-symlinks: all): {named}{rest}; check that each is meant to be cached"
            )
        return out


def _inside(rel: str, target: str) -> str | None:
    """The in-tree relative target of a symlink at ``rel``, or None when it escapes."""
    if target.startswith("/") or manifest.target_problem(target) is not None:
        return None
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
    if resolved == ".." or resolved.startswith("../"):
        return None
    return target


def _add_file(
    tree: Tree, index: int, rel: str, full: Path, st: os.stat_result, *, follow: bool
) -> None:
    """A file entry, with the file ``st`` is the stat of (``follow``: of a link's target)."""
    entry = Entry("file", index, rel, mode=stat.S_IMODE(st.st_mode) & 0o777, size=st.st_size)
    tree.entries.append(entry)
    tree.sources[id(entry)] = full
    tree.seen[id(entry)] = Seen(st.st_dev, st.st_ino, follow)


def _readable_file(
    scan: _Scan, index: int, rel: str, full: Path, st: os.stat_result, *, follow: bool
) -> bool:
    """A regular file, added when the job may read it; else skipped, as an unlistable folder is."""
    if not os.access(full, os.R_OK):
        scan.skipped.add("this job cannot read it (permission denied)", shown(full))
        return False
    _add_file(scan.tree, index, rel, full, st, follow=follow)
    return True


def _add_link(scan: _Scan, index: int, root: Path, rel: str, full: Path) -> None:
    try:
        target = os.readlink(full)
    except OSError as exc:  # no longer a link (swapped since its lstat), or gone
        scan.skipped.add(f"it changed while the scan looked at it ({exc.strerror})", shown(full))
        return
    if not untrusted_json.encodes(target):
        scan.skipped.add("a symlink whose target is not UTF-8", shown(full))
        return
    if target.startswith("/"):  # absolute but inside the tree: store it relative
        try:
            inner = Path(target).relative_to(root).as_posix()
            target = posixpath.relpath(inner, posixpath.dirname(rel) or ".")
        except ValueError:
            pass
    kept = _inside(rel, target)
    if kept is not None:
        link = Entry("symlink", index, rel, target=kept)
        scan.tree.entries.append(link)
        scan.tree.sources[id(link)] = full
        return
    _leaving(scan, index, rel, full, target)


def _leaving(scan: _Scan, index: int, rel: str, full: Path, target: str) -> None:
    """A link that leaves the tree: skipped (inside), or the file it names saved as a file."""
    if scan.follow != "all":
        scan.left.append(f"{shown(full)} (-> {shown(target)})")
        return
    try:
        st = full.stat()
    except OSError:
        scan.skipped.add("a symlink that does not resolve", f"{shown(full)} (-> {shown(target)})")
        return
    if not stat.S_ISREG(st.st_mode):
        scan.skipped.add(
            "a symlink to something other than a file, outside the cached tree",
            f"{shown(full)} (-> {shown(target)})",
        )
        return
    if _readable_file(scan, index, rel, full, st, follow=True):
        scan.followed.append(f"{shown(full)} -> {shown(target)}")


def _refused_name(scan: _Scan, rel: str, full: Path) -> bool:
    """Whether a name cannot go in a manifest (not UTF-8, or one restore refuses): skipped."""
    if not untrusted_json.encodes(rel):
        scan.skipped.add("its name is not UTF-8, which a manifest cannot hold", shown(full))
        return True
    problem = manifest.path_problem(rel)
    if problem is not None:
        scan.skipped.add(f"its path {problem}, which restore refuses", shown(full))
        return True
    return False


def _entry_of(scan: _Scan, index: int, root: Path, rel: str, full: Path) -> bool:
    """Add what is at ``rel``; True when it is a folder to walk into."""
    if _refused_name(scan, rel, full):
        return False
    try:
        lst = full.lstat()
    except OSError as exc:
        scan.skipped.add(f"it cannot be looked at ({exc.strerror})", shown(full))
        return False
    if stat.S_ISLNK(lst.st_mode):
        _add_link(scan, index, root, rel, full)
    elif stat.S_ISDIR(lst.st_mode):
        scan.tree.entries.append(Entry("dir", index, rel, mode=stat.S_IMODE(lst.st_mode) & 0o777))
        return True
    elif stat.S_ISREG(lst.st_mode):
        _readable_file(scan, index, rel, full, lst, follow=False)
    else:
        scan.skipped.add("not a regular file", shown(full))
    return False


def _walk(scan: _Scan, index: int, root: Path) -> None:
    """Every entry under ``root``, folders in name order, without recursion (any depth)."""
    pending = [""]
    while pending:
        rel_dir = pending.pop()
        base = root / rel_dir if rel_dir else root
        try:
            names = sorted(os.listdir(base))
        except OSError as exc:
            scan.skipped.add(f"this job cannot list the folder ({exc.strerror})", shown(base))
            continue
        folders = []
        for name in names:
            if not rel_dir and name.startswith(layout.STAGING_PREFIX):
                continue  # a restore's own staging, inside a mount-point target: never data
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if _entry_of(scan, index, root, rel, base / name):
                folders.append(rel)
        pending.extend(reversed(folders))


def _root_stat(raw: str, root: Path, linked_root: bool) -> os.stat_result:
    """The stat of a path input (followed); a path the system refuses to look at (a name too
    long for it, a folder this user may not enter: ``/proc/1/cwd``) is the input's error."""
    try:
        if linked_root and root.is_symlink():
            raise InputError(
                f"the folder {shown(root)} is a symlink (to {shown(os.readlink(root))}), and "
                "gpu-ci does not save through a folder it names itself: a job could point it "
                "anywhere",
                hint="make it a real folder (download into the hub cache again), then save",
            )
        return root.stat()
    except FileNotFoundError:
        raise InputError(
            f"path '{raw}' does not exist, so there is nothing to save",
            hint="save after the step that creates it, or fix the path input",
        ) from None
    except OSError as exc:
        raise InputError(
            f"path {shown(raw)} cannot be read: {exc.strerror or exc}",
            hint="name a folder or file this job can read, with a shorter path",
        ) from None


def scan(paths: list[str], follow: str = "inside", linked_roots: bool = True) -> Tree:
    """The tree under ``paths``: ``follow`` is the follow-symlinks input; ``linked_roots``
    False refuses a path that is itself a link (one gpu-ci computed, not one the user named).
    """
    state = _Scan(Tree(), follow)
    for index, raw in enumerate(paths):
        root = resolve_path(raw)
        st = _root_stat(raw, root, not linked_roots)
        if stat.S_ISREG(st.st_mode):
            state.tree.roots.append({"path": raw.strip(), "kind": "file"})
            _add_file(state.tree, index, "", root, st, follow=True)  # root.stat() follows
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise InputError(
                f"path '{raw}' is neither a file nor a folder", hint="list files or folders"
            )
        state.tree.roots.append({"path": raw.strip(), "kind": "dir"})
        _walk(state, index, root)
    _drop_chained_escapes(state)
    state.tree.entries.sort(key=lambda e: (e.root, e.path))
    state.tree.warnings.extend(state.warnings())
    return state.tree


def _drop_chained_escapes(scan: _Scan) -> None:
    """Links that leave only through other links (``b -> a/..`` with ``a -> .``) go the way a
    lone escaping link goes; repeat, since dropping one changes what the others resolve to.
    Each round resolves each link once (:class:`manifest.LinkResolver`), within one budget."""
    tree = scan.tree
    budget = manifest.MAX_WALKED
    while True:
        kept = [e for e in tree.entries if e.type == "symlink"]
        by_root: dict[int, dict[str, str]] = {}
        for entry in kept:
            by_root.setdefault(entry.root, {})[entry.path] = entry.target
        bad: set[tuple[int, str]] = set()
        for root, tree_links in by_root.items():
            resolver = manifest.LinkResolver(tree_links, max(budget, 0))
            bad.update((root, path) for path in tree_links if resolver.escapes(path))
            budget = resolver.left
        if not bad:
            return
        gone = [e for e in kept if (e.root, e.path) in bad]
        tree.entries = [e for e in tree.entries if (e.root, e.path) not in bad]
        for entry in gone:
            full = tree.sources.pop(id(entry))
            _leaving(scan, entry.root, entry.path, full, entry.target)
