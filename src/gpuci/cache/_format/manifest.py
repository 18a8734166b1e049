"""Manifests: the immutable, canonical-JSON description of one saved tree.

A manifest lists every file (path, size, mode, sha256 and where its bytes live), every symlink
that stays inside the tree and every directory. Its name is the sha256 of its canonical bytes,
so a manifest cannot change without changing its name. :func:`parse` refuses anything that could
write outside the target (``..``, absolute paths, symlinks that escape on their own or through
each other) before a byte is written, and anything above :data:`MAX_MANIFEST` unread.

Resolving a tree's symlinks through each other, on paper, before anything touches the disk.

Each link's target can look harmless on its own and still climb out once the links it passes
through are followed: ``a -> .``, ``b -> a/..`` (the tree's parent), ``c -> b/../outside``.
Save (which links to keep as links) and restore (which manifests to refuse) both ask this
module, which walks a target component by component as the kernel does, but through the tree's
own list of links instead of the filesystem.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import posixpath
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuci import settings, untrusted_json
from gpuci.cache import _layout as layout
from gpuci.errors import InputError
from gpuci.redact import excerpt

# A manifest above this many bytes is refused unparsed (about 400,000 files): a hostile store
# cannot make restore hold gigabytes of JSON, and save refuses to write one restore would refuse.
MAX_MANIFEST = 64 << 20
# Restored files keep at most these permission bits: never setuid, setgid, sticky, or writable
# by group or others, whatever the manifest says (0o6777 restores as 0o755).
FILE_MODE_MASK = 0o755


def placed_mode(mode: int) -> int:
    """The permission bits a restored file or folder gets for a manifest ``mode``."""
    return mode & FILE_MODE_MASK


PRODUCER_ENV = {
    "commit": (
        settings.GITHUB_SHA,
        settings.CI_COMMIT_SHA,
        settings.BUILDKITE_COMMIT,
        settings.GIT_COMMIT,
    ),
    "run": (
        settings.GITHUB_RUN_ID,
        settings.CI_PIPELINE_ID,
        settings.BUILDKITE_BUILD_ID,
        settings.BUILD_ID,
    ),
    "repository": (settings.GITHUB_REPOSITORY, settings.CI_PROJECT_PATH),
    "job": (settings.GITHUB_JOB, settings.CI_JOB_ID),
}


@dataclass
class Entry:
    """One thing in a tree: a file, a symlink or a directory, relative to its root."""

    type: str  # "file" | "symlink" | "dir"
    root: int
    path: str  # posix, relative to the root; "" only for a root that is itself a file
    mode: int = 0o644
    size: int = 0
    sha256: str = ""
    target: str = ""  # symlinks only
    pack: str = ""  # packed files: sha256 of the pack holding the bytes
    offset: int = 0  # packed files: where the bytes start in the pack

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "root": self.root, "path": self.path}
        if self.type == "file":
            out.update(size=self.size, mode=self.mode, sha256=self.sha256)
            if self.pack:
                out.update(pack=self.pack, offset=self.offset)
        elif self.type == "symlink":
            out["target"] = self.target
        else:
            out["mode"] = self.mode
        return out

    def content_id(self) -> tuple[Any, ...]:
        """What the entry means, without where its bytes happen to be stored."""
        return (self.type, self.root, self.path, self.mode, self.size, self.sha256, self.target)


@dataclass
class Manifest:
    """One saved tree: its key, roots and entries, and when and by what job it was saved."""

    key: str
    roots: list[dict[str, str]]
    entries: list[Entry]
    created: str = ""
    producer: dict[str, str] = field(default_factory=dict)
    format: int = layout.FORMAT_VERSION

    @property
    def files(self) -> list[Entry]:
        return [e for e in self.entries if e.type == "file"]

    @property
    def total_bytes(self) -> int:
        return sum(e.size for e in self.files)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "key": self.key,
            "created": self.created,
            "producer": self.producer,
            "roots": self.roots,
            "files": len(self.files),
            "bytes": self.total_bytes,
            "entries": [e.to_json() for e in self.entries],
        }

    def canonical(self) -> bytes:
        return canonical_json(self.to_json())

    def digest(self) -> str:
        return hashlib.sha256(self.canonical()).hexdigest()

    def same_tree(self, other: Manifest) -> bool:
        return self.roots == other.roots and [e.content_id() for e in self.entries] == [
            e.content_id() for e in other.entries
        ]


def canonical_json(obj: Any) -> bytes:
    """Sorted keys, no whitespace, UTF-8: one byte sequence per meaning, so hashes are stable."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def producer(environ: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, candidates in PRODUCER_ENV.items():
        for var in candidates:
            if var.is_set(environ):
                out[name] = var.value(environ)
                break
    return out


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# ----- parsing and validation ----------------------------------------------------------------


def _bad(source: str, why: str) -> InputError:
    return InputError(
        f"manifest {source} is unsafe or malformed: {why}",
        hint="do not restore it; save the key again from a trusted job",
    )


def _show(value: Any) -> str:
    """A value from the manifest, quoted and cut to fit one line (a path may be megabytes)."""
    return excerpt(repr(value), 120)


# A path deeper than this many folders is refused (save skips it): placing and walking stay
# shallow, and 256 short names still fit PATH_MAX. A link target over PATH_MAX bytes, or of more
# components than a link at the deepest folder needs to climb to the top and down again, is no
# link a kernel would follow: refused too, so resolving links costs at most that much each.
MAX_DEPTH = 256
MAX_TARGET_BYTES = 4096
MAX_TARGET_PARTS = 2 * MAX_DEPTH
_NOT_NORMAL = frozenset(("", ".", ".."))  # path components no normalised relative path has
# What no entry path or link target holds: NUL, and a lone surrogate (JSON "\ud800": no UTF-8
# text, which save never writes and os.open or os.symlink would refuse midway through a restore).
_NO_NAME_CHAR = re.compile("[\x00\ud800-\udfff]")


def path_problem(path: str) -> str | None:
    """Why restore would refuse ``path`` (a non-empty entry path), or None: save skips what
    this names, so it never writes a manifest restore refuses."""
    if path == "" or "\\" in path or _NO_NAME_CHAR.search(path):
        return "is empty or holds NUL, backslash or a lone surrogate (no UTF-8 text)"
    if path.startswith("/") or _drive(path):
        return "is absolute"
    parts = path.split("/")
    if not _NOT_NORMAL.isdisjoint(parts):
        return "is not normalised or climbs out with '..'"
    if len(parts) > MAX_DEPTH:
        return f"is more than {MAX_DEPTH} folders deep"
    return None


def _drive(path: str) -> bool:
    """A Windows drive (``c:``) only: ``1:2.bin`` or ``::x`` are plain POSIX names."""
    return len(path) > 1 and path[1] == ":" and path[0].isascii() and path[0].isalpha()


def _check_path(source: str, path: Any, allow_empty: bool) -> str:
    if not isinstance(path, str):
        raise _bad(source, f"path {_show(path)} is not text")
    if path == "" and allow_empty:
        return path
    problem = path_problem(path)
    if problem is not None:
        raise _bad(source, f"path {_show(path)} {problem}")
    return path


def target_problem(target: str) -> str | None:
    """Why a link target is no link restore keeps (on its own), or None."""
    if not target or _NO_NAME_CHAR.search(target):
        return "has no target, or one holding NUL or a lone surrogate (no UTF-8 text)"
    if len(target.encode()) > MAX_TARGET_BYTES:
        return f"has a target over {MAX_TARGET_BYTES} bytes"
    if target.count("/") >= MAX_TARGET_PARTS:
        return f"has a target of more than {MAX_TARGET_PARTS} components"
    return None


def _int(source: str, value: Any, what: str, upper: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _bad(source, f"{what} {_show(value)} is not a non-negative integer")
    if upper is not None and value > upper:
        raise _bad(source, f"{what} {_show(value)} is out of range")
    return value


def _entry(source: str, raw: Any, file_roots: list[bool]) -> Entry:
    """One entry, every field checked. ``file_roots[i]``: whether root ``i`` is a single file.

    A manifest holds an entry per file (1,000s): the usual values (plain ``int``s in range) are
    let through by one test each, anything else goes to :func:`_int` for its refusal."""
    if not isinstance(raw, dict):
        raise _bad(source, "an entry is not an object")
    kind = raw.get("type")
    if kind not in ("file", "symlink", "dir"):
        raise _bad(source, f"entry type {_show(kind)} is unknown")
    root = raw.get("root")
    if type(root) is not int or root < 0:  # a bool is no int here (its type is bool)
        root = _int(source, root, "root")
    if root >= len(file_roots):
        raise _bad(source, f"entry names root {root}, the manifest has {len(file_roots)}")
    file_root = file_roots[root]
    path = _check_path(source, raw.get("path"), allow_empty=file_root and kind == "file")
    if file_root and path != "":
        raise _bad(source, f"root {root} is a single file but an entry names {_show(path)}")
    if kind == "file":
        return _file_entry(source, raw, root, path)
    if kind == "symlink":
        return Entry("symlink", root, path, target=_link_target(source, raw, path))
    mode = raw.get("mode", 0o755)
    if type(mode) is not int or not 0 <= mode <= 0o7777:
        mode = _int(source, mode, "mode", 0o7777)
    return Entry("dir", root, path, mode)


def _file_entry(source: str, raw: dict[str, Any], root: int, path: str) -> Entry:
    size, mode = raw.get("size"), raw.get("mode")
    if type(size) is not int or not 0 <= size <= layout.MAX_FILE_BYTES:
        size = _int(source, size, "size", layout.MAX_FILE_BYTES)
    if type(mode) is not int or not 0 <= mode <= 0o7777:
        mode = _int(source, mode, "mode", 0o7777)
    sha256 = str(raw.get("sha256", ""))
    if not layout.is_sha256(sha256):
        raise _bad(source, f"{_show(path)} has no valid sha256")
    if "pack" not in raw:
        return Entry("file", root, path, mode, size, sha256)
    pack = str(raw["pack"])
    if not layout.is_sha256(pack):
        raise _bad(source, f"{_show(path)} names an invalid pack")
    offset = _int(source, raw.get("offset"), "offset", layout.MAX_FILE_BYTES)
    return Entry("file", root, path, mode, size, sha256, pack=pack, offset=offset)


def _link_target(source: str, raw: dict[str, Any], path: str) -> str:
    """A symlink entry's target, refused when it leaves the tree on its own."""
    target = raw.get("target")
    if not isinstance(target, str):
        raise _bad(source, f"symlink {_show(path)} has no target")
    problem = target_problem(target)
    if problem is not None:
        raise _bad(source, f"symlink {_show(path)} {problem}")
    if target.startswith("/"):
        raise _bad(source, f"symlink {_show(path)} points at the absolute path {_show(target)}")
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    if resolved == ".." or resolved.startswith("../"):
        raise _bad(source, f"symlink {_show(path)} -> {_show(target)} escapes the target folder")
    return target


def check_size(size: int, source: str) -> None:
    """Refuse a manifest body above the cap (the store read at most ``MAX_MANIFEST + 1``)."""
    if size > MAX_MANIFEST:
        raise _bad(source, f"it is over the {MAX_MANIFEST >> 20} MiB cap for a manifest")


def _refuse_chained_escapes(source: str, entries: list[Entry]) -> None:
    """Each link may stay inside alone and still leave once followed through the others."""
    by_root: dict[int, dict[str, str]] = {}
    for entry in entries:
        if entry.type == "symlink":
            by_root.setdefault(entry.root, {})[entry.path] = entry.target
    resolver: LinkResolver | None = None
    for tree in by_root.values():
        resolver = LinkResolver(tree, resolver.left if resolver else MAX_WALKED)
        path = resolver.first_escape()
        if resolver.exhausted:
            raise _bad(source, f"its links take over {MAX_WALKED:,} steps to resolve")
        if path is not None:
            raise _bad(
                source,
                f"symlink {_show(path)} -> {_show(tree[path])} leaves the target folder once the "
                "links it passes through are followed (or loops)",
            )


def _refuse_nested_under_non_folders(source: str, entries: list[Entry]) -> None:
    """An entry under a file or a link of the manifest: writing it would write through the
    link, or cannot be done at all (``a`` a file and ``a/b``).

    Each file and link looks for a path below it in the sorted paths (one bisection), never
    joining the prefixes of every path: those are O(depth^2) bytes per entry, minutes of CPU
    for one hostile manifest of deep paths."""
    paths = sorted((e.root, e.path) for e in entries)
    for entry in entries:
        if entry.type not in ("symlink", "file"):
            continue
        below = first_below(paths, entry.root, entry.path)
        if below is None:
            continue
        if entry.type == "symlink":
            raise _bad(source, f"{_show(below)} lies under a symlink")
        raise _bad(source, f"{_show(below)} lies under a file of the same manifest")


def first_below(paths: list[tuple[int, str]], root: int, path: str) -> str | None:
    """A path of root ``root`` under ``path`` in the sorted ``paths``, or None: all that start
    with ``path/`` sort together, from where ``path/`` would go."""
    folder = f"{path}/"
    at = bisect.bisect_left(paths, (root, folder))
    if at < len(paths) and paths[at][0] == root and paths[at][1].startswith(folder):
        return paths[at][1]
    return None


def parse(data: bytes, source: str) -> Manifest:
    """Parse and validate a manifest: everything unsafe raises InputError before any write."""
    check_size(len(data), source)
    try:  # the one reader of what a store hands back: size, nesting, numbers, then the type
        raw = untrusted_json.parse_object(data, MAX_MANIFEST, "a manifest")
    except untrusted_json.Unusable as exc:
        raise _bad(source, str(exc)) from None
    if raw.get("format") != layout.FORMAT_VERSION:
        raise InputError(
            f"manifest {source} has format {excerpt(repr(raw.get('format')), 40)}; this gpu-ci "
            "reads format "
            f"{layout.FORMAT_VERSION}",
            hint="upgrade gpu-ci, or save the key again with this version",
        )
    roots = raw.get("roots")
    if not isinstance(roots, list) or not roots:
        raise _bad(source, "no roots")
    for root in roots:
        if not isinstance(root, dict) or root.get("kind") not in ("dir", "file"):
            raise _bad(source, "a root is malformed")
    entries_raw = raw.get("entries")
    if not isinstance(entries_raw, list):
        raise _bad(source, "no entries list")
    file_roots = [root["kind"] == "file" for root in roots]
    entries = [_entry(source, item, file_roots) for item in entries_raw]
    seen: set[tuple[int, str]] = set()
    for entry in entries:
        ident = (entry.root, entry.path)
        if ident in seen:
            raise _bad(source, f"{_show(entry.path)} appears twice")
        seen.add(ident)
    _refuse_nested_under_non_folders(source, entries)
    _refuse_chained_escapes(source, entries)
    producer = raw.get("producer") or {}
    if not isinstance(producer, dict):
        raise _bad(source, "producer is not an object")
    return Manifest(
        key=untrusted_json.text(raw, "key"),
        roots=[{"path": untrusted_json.text(r, "path"), "kind": str(r["kind"])} for r in roots],
        entries=entries,
        created=untrusted_json.text(raw, "created"),
        producer={str(k): str(v) for k, v in producer.items()},
    )


# The kernel gives up after this many links in one lookup (ELOOP); a loop never reaches a file.
MAX_LINK_HOPS = 40
# Components one manifest's (or one saved tree's) links may take to resolve, all together: each
# link is resolved once (later ones reuse it), so a real tree takes a few per link; a hostile
# one is refused past this, not walked for hours.
MAX_WALKED = 10_000_000
_TOO_FAR = MAX_LINK_HOPS + 1  # the hops of a link that does not resolve
_CHARGE_BYTES = 256  # a step costs one more for each this many bytes of the name it builds


class LinkResolver:
    """Resolves a tree's links through each other, each link once.

    ``links`` maps each link's path (posix, relative to the tree) to its target. A link's
    resolution (where it ends and how many links that took, itself included) depends on nothing
    else, so it is kept and reused: a thousand links through one long chain cost the chain once.
    At most ``budget`` components are walked in all; past it every answer is None and
    :attr:`exhausted` is set.

    ``unlisted``, when given, is asked once per name ``links`` lacks for the target of a link
    there all the same (a restore's target folder holds the job's own links, read on disk); its
    answers are kept, and such a link is followed like the others.
    """

    def __init__(
        self,
        links: Mapping[str, str],
        budget: int = MAX_WALKED,
        unlisted: Callable[[str], str | None] | None = None,
    ) -> None:
        self.links = links
        self.left = budget
        self.exhausted = False
        self.known: dict[str, tuple[str | None, int]] = {}
        self.active: set[str] = set()
        self.unlisted = unlisted
        self.found: dict[str, str | None] = {}  # ``unlisted``'s answers

    def resolve(self, start: str, target: str) -> str | None:
        """Where ``target``, read from the folder ``start``, ends inside the tree, or None."""
        return self._walk(start, target, 0)[0]

    def escapes(self, path: str) -> bool:
        """Whether the link at ``path`` leaves the tree (or loops) once followed."""
        return self._link(path, 0)[0] is None

    def first_escape(self) -> str | None:
        """The first link (in path order) that leaves the tree, or None when none does."""
        for path in sorted(self.links):
            if self.escapes(path) or self.exhausted:
                return path
        return None

    def _link(self, path: str, depth: int) -> tuple[str | None, int, bool]:
        """Where the link at ``path`` ends (None: out, a loop, too many links), the links that
        took (itself included), and whether that answer is final: one cut short because it
        was met more than MAX_LINK_HOPS links down is not (met nearer the top, it may resolve)
        and is not kept."""
        known = self.known.get(path)
        if known is not None:
            return (*known, True)
        if path in self.active:  # it needs itself: a loop, whatever the depth
            return None, _TOO_FAR, True
        if depth > MAX_LINK_HOPS:
            return None, _TOO_FAR, False
        target = self._target(path)
        if target is None or target.startswith("/") or target_problem(target) is not None:
            return self._keep(path, None, _TOO_FAR, True)
        self.active.add(path)
        try:
            end, hops, final = self._walk(_parent(path), target, depth + 1)
        finally:
            self.active.discard(path)
        return self._keep(path, end, hops + 1, final)

    def _keep(
        self, path: str, end: str | None, hops: int, final: bool
    ) -> tuple[str | None, int, bool]:
        final = final and not self.exhausted
        if final:
            self.known[path] = (end, hops)
        return end, hops, final

    def _walk(self, start: str, target: str, depth: int) -> tuple[str | None, int, bool]:
        """(where it ends or None, links passed, whether the answer holds whatever the depth).

        ``here`` holds the path of each folder on the way down, so a step builds one name; each
        step is charged to the budget by that name's length too (a path may be long)."""
        here = _prefixes(start)
        parts = target.split("/")
        if not self._charge(len(parts) + len(start) // _CHARGE_BYTES):
            return None, _TOO_FAR, False
        hops, final = 0, True
        for part in parts:
            if part in ("", "."):
                continue
            if part == "..":
                if not here:
                    return None, hops, final
                here.pop()
                continue
            name = f"{here[-1]}/{part}" if here else part
            if not self._charge(len(name) // _CHARGE_BYTES):
                return None, _TOO_FAR, False
            if name not in self.links and (self.unlisted is None or self._target(name) is None):
                here.append(name)
                continue
            end, used, settled = self._link(name, depth)
            hops += used
            final = final and settled
            if end is None or hops > MAX_LINK_HOPS or not self._charge(len(end) // _CHARGE_BYTES):
                return None, hops, final
            here = _prefixes(end)
        return (here[-1] if here else ""), hops, final

    def _target(self, name: str) -> str | None:
        """The target of the link at ``name``, or None where there is none."""
        target = self.links.get(name)
        if target is not None or self.unlisted is None:
            return target
        if name not in self.found:
            self.found[name] = self.unlisted(name)
        return self.found[name]

    def _charge(self, steps: int) -> bool:
        """Take ``steps`` from the budget: False (and exhausted) once it is spent."""
        self.left -= steps
        if self.left < 0:
            self.exhausted = True
        return not self.exhausted


def escaping_links(links: Mapping[str, str], budget: int = MAX_WALKED) -> list[str]:
    """The links (paths, sorted) that leave the tree once followed through the others; past the
    budget, every link not yet found inside counts as leaving."""
    resolver = LinkResolver(links, budget)
    return sorted(path for path in links if resolver.escapes(path))


def _prefixes(path: str) -> list[str]:
    """``a/b/c`` -> ``["a", "a/b", "a/b/c"]``: each folder on the way down to ``path``."""
    out: list[str] = []
    for part in path.split("/"):
        if part:
            out.append(f"{out[-1]}/{part}" if out else part)
    return out


def _parent(path: str) -> str:
    return path.rpartition("/")[0]
