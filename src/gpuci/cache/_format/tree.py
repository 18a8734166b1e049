"""Walking a local tree into manifest entries (without hashes yet).

Symlinks that stay inside the tree are kept as symlinks (Hugging Face snapshots point into
``../../blobs``); one that leaves the tree, on its own or through other links
(:mod:`gpuci.cache._format.manifest`), is followed when it names a file, so the cache holds the
bytes the job actually used, and skipped with a warning otherwise. A manifest save writes is
therefore never one restore refuses.
"""

from __future__ import annotations

import os
import posixpath
import stat
from dataclasses import dataclass, field
from pathlib import Path

from gpuci.cache._format import manifest
from gpuci.cache._format.manifest import Entry
from gpuci.errors import InputError
from gpuci.inputs import resolve_path


@dataclass
class Tree:
    roots: list[dict[str, str]] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)
    sources: dict[int, Path] = field(default_factory=dict)  # id(entry) -> local file
    warnings: list[str] = field(default_factory=list)

    def source(self, entry: Entry) -> Path:
        return self.sources[id(entry)]


def _inside(rel: str, target: str) -> str | None:
    """The in-tree relative target of a symlink at ``rel``, or None when it escapes."""
    if target.startswith("/"):
        return None
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
    if resolved == ".." or resolved.startswith("../"):
        return None
    return target


def _add_file(tree: Tree, index: int, rel: str, full: Path, st: os.stat_result) -> None:
    entry = Entry("file", index, rel, mode=stat.S_IMODE(st.st_mode) & 0o777, size=st.st_size)
    tree.entries.append(entry)
    tree.sources[id(entry)] = full


def _add_link(tree: Tree, index: int, root: Path, rel: str, full: Path) -> None:
    target = os.readlink(full)
    if target.startswith("/"):  # absolute but inside the tree: store it relative
        try:
            inner = Path(target).relative_to(root).as_posix()
            target = posixpath.relpath(inner, posixpath.dirname(rel) or ".")
        except ValueError:
            pass
    kept = _inside(rel, target)
    if kept is not None:
        link = Entry("symlink", index, rel, target=kept)
        tree.entries.append(link)
        tree.sources[id(link)] = full
        return
    _follow(tree, index, rel, full, target)


def _follow(tree: Tree, index: int, rel: str, full: Path, target: str) -> None:
    """A link that leaves the tree: keep the file it names as a file, else skip it."""
    try:
        st = full.stat()
    except OSError:
        tree.warnings.append(f"skipped {full}: a symlink to {target} that does not resolve")
        return
    if stat.S_ISREG(st.st_mode):
        _add_file(tree, index, rel, full, st)
    else:
        tree.warnings.append(f"skipped {full}: a symlink to {target}, outside the cached tree")


def scan(paths: list[str]) -> Tree:
    tree = Tree()
    for index, raw in enumerate(paths):
        root = resolve_path(raw)
        try:
            st = root.stat()
        except FileNotFoundError:
            raise InputError(
                f"path '{raw}' does not exist, so there is nothing to save",
                hint="save after the step that creates it, or fix the path input",
            ) from None
        if stat.S_ISREG(st.st_mode):
            tree.roots.append({"path": raw.strip(), "kind": "file"})
            _add_file(tree, index, "", root, st)
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise InputError(
                f"path '{raw}' is neither a file nor a folder", hint="list files or folders"
            )
        tree.roots.append({"path": raw.strip(), "kind": "dir"})
        for dirpath, dirnames, filenames in os.walk(root):
            base = Path(dirpath)
            rel_dir = base.relative_to(root).as_posix()
            rel_dir = "" if rel_dir == "." else rel_dir
            dirnames.sort()
            for name in list(dirnames):
                full = base / name
                rel = f"{rel_dir}/{name}" if rel_dir else name
                if full.is_symlink():
                    dirnames.remove(name)
                    _add_link(tree, index, root, rel, full)
                else:
                    mode = stat.S_IMODE(full.lstat().st_mode) & 0o777
                    tree.entries.append(Entry("dir", index, rel, mode=mode))
            for name in sorted(filenames):
                full = base / name
                rel = f"{rel_dir}/{name}" if rel_dir else name
                lst = full.lstat()
                if stat.S_ISLNK(lst.st_mode):
                    _add_link(tree, index, root, rel, full)
                elif stat.S_ISREG(lst.st_mode):
                    _add_file(tree, index, rel, full, lst)
                else:
                    tree.warnings.append(f"skipped {full}: not a regular file")
    _drop_chained_escapes(tree)
    tree.entries.sort(key=lambda e: (e.root, e.path))
    return tree


def _drop_chained_escapes(tree: Tree) -> None:
    """Links that leave only through other links (``b -> a/..`` with ``a -> .``) go the way a
    lone escaping link goes; repeat, since dropping one changes what the others resolve to."""
    while True:
        kept = [e for e in tree.entries if e.type == "symlink"]
        by_root: dict[int, dict[str, str]] = {}
        for entry in kept:
            by_root.setdefault(entry.root, {})[entry.path] = entry.target
        bad = {
            (root, path)
            for root, tree_links in by_root.items()
            for path in manifest.escaping_links(tree_links)
        }
        if not bad:
            return
        for entry in kept:
            if (entry.root, entry.path) in bad:
                tree.entries.remove(entry)
                full = tree.sources.pop(id(entry))
                _follow(tree, entry.root, entry.path, full, entry.target)
