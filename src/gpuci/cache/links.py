"""Resolving a tree's symlinks through each other, on paper, before anything touches the disk.

Each link's target can look harmless on its own and still climb out once the links it passes
through are followed: ``a -> .``, ``b -> a/..`` (the tree's parent), ``c -> b/../outside``.
Save (which links to keep as links) and restore (which manifests to refuse) both ask this
module, which walks a target component by component as the kernel does, but through the tree's
own list of links instead of the filesystem.
"""

from __future__ import annotations

from collections.abc import Mapping

# The kernel gives up after this many links in one lookup (ELOOP); a loop never reaches a file.
MAX_HOPS = 40


def resolve(links: Mapping[str, str], start: str, target: str) -> str | None:
    """Where ``target``, read from the folder ``start``, ends inside the tree, or None.

    ``links`` maps each link's path (posix, relative to the tree) to its target. None means the
    walk climbs above the tree, meets an absolute target, or loops.
    """
    here = [p for p in start.split("/") if p]
    pending = list(reversed(target.split("/")))
    hops = 0
    while pending:
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if not here:
                return None
            here.pop()
            continue
        link = links.get("/".join([*here, part]))
        if link is None:
            here.append(part)
            continue
        hops += 1
        if hops > MAX_HOPS or link.startswith("/"):
            return None
        pending.extend(reversed(link.split("/")))  # read on from the link's own folder
    return "/".join(here)


def escaping(links: Mapping[str, str]) -> list[str]:
    """The links (paths, sorted) that leave the tree once followed through the others."""
    return sorted(
        path for path, target in links.items() if resolve(links, _parent(path), target) is None
    )


def _parent(path: str) -> str:
    return path.rpartition("/")[0]
