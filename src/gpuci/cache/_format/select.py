"""Partial restore: keep only the manifest entries that ``include`` / ``exclude`` globs pick.

A pattern without ``/`` matches a file's name anywhere in the tree (``*.safetensors``); one
with ``/`` matches the whole path from the root (``tokenizer/*.json``, where ``*`` also crosses
folders). A kept symlink keeps the in-tree file it points at (a Hugging Face snapshot's links
into ``blobs/``), and every folder above a kept entry is kept, so the restored part of the tree
is whole.
"""

from __future__ import annotations

import fnmatch
import posixpath
from dataclasses import replace

from gpuci.cache._format import manifest as mf


def _matches(path: str, patterns: list[str]) -> bool:
    name = posixpath.basename(path)
    for pattern in patterns:
        pattern = pattern.strip().lstrip("/")
        if "/" in pattern:
            if fnmatch.fnmatchcase(path, pattern):
                return True
        elif fnmatch.fnmatchcase(name, pattern):
            return True
    return False


def wanted(path: str, include: list[str], exclude: list[str]) -> bool:
    if include and not _matches(path, include):
        return False
    return not (exclude and _matches(path, exclude))


def unmatched(manifest: mf.Manifest, include: list[str]) -> list[str]:
    """The include patterns that pick no file or link: a typo restores nothing, silently."""
    names = [
        e.path or posixpath.basename(manifest.roots[e.root]["path"].rstrip("/"))
        for e in manifest.entries
        if e.type != "dir"
    ]
    return [p for p in include if p.strip() and not any(_matches(n, [p]) for n in names)]


def select(manifest: mf.Manifest, include: list[str], exclude: list[str]) -> mf.Manifest:
    """A copy of ``manifest`` holding only the picked entries (all of them with no patterns)."""
    if not include and not exclude:
        return manifest
    by_id = {(e.root, e.path): e for e in manifest.entries}
    keep: set[tuple[int, str]] = set()
    for entry in manifest.entries:
        if entry.type == "dir":
            continue
        # A root that is itself a file is matched by its own name.
        path = entry.path or posixpath.basename(manifest.roots[entry.root]["path"].rstrip("/"))
        if wanted(path, include, exclude):
            keep.add((entry.root, entry.path))
    # Follow kept symlinks to what they name inside the tree (chains included).
    pending = [by_id[k] for k in keep if by_id[k].type == "symlink"]
    while pending:
        link = pending.pop()
        target = posixpath.normpath(posixpath.join(posixpath.dirname(link.path), link.target))
        ident = (link.root, target)
        hit = by_id.get(ident)
        if hit is None or ident in keep:
            continue
        if hit.type == "dir":  # a link to a folder: keep everything under it
            for other in manifest.entries:
                ident2 = (other.root, other.path)
                inside = other.root == link.root and other.path.startswith(target + "/")
                if inside and ident2 not in keep:
                    keep.add(ident2)
                    if other.type == "symlink":
                        pending.append(other)
        keep.add(ident)
        if hit.type == "symlink":
            pending.append(hit)
    for root, path in list(keep):
        parent = posixpath.dirname(path) if path else ""
        while parent:
            keep.add((root, parent))
            parent = posixpath.dirname(parent)
    entries = [e for e in manifest.entries if (e.root, e.path) in keep]
    return replace(manifest, entries=entries)
