"""The cache layout, named once: object keys, size thresholds and file-name suffixes.

Everything that decides where a byte lives in a store, or how transfers are cut up, is a
constant here, so the format documented in ``docs/cache-format.md`` has one source of truth.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote

from gpuci import settings
from gpuci.errors import InputError

if TYPE_CHECKING:
    from gpuci.adaptive import Concurrency

FORMAT_VERSION = 1

BLOBS = "blobs/sha256"  # blobs/sha256/<ab>/<hex>: one file's bytes, immutable
PACKS = "packs/sha256"  # packs/sha256/<ab>/<hex>: many small files' bytes back to back
MANIFESTS = "manifests"  # manifests/<hex>.json: canonical JSON, hex = sha256 of the bytes
REFS = "refs"  # refs/<namespace>/<quoted key>: small JSON naming a manifest
USES = "uses"  # uses/<namespace>/<quoted key>: small JSON, rewritten by each restore (last use)
# The runner-local tier only: runs/sha256/<ab>/<pack hex>.<start>-<end>, bytes start..end of a
# pack as a restore received them (or a whole pack a save sent), for the small files in them.
TIER_RUNS = "runs/sha256"
PINS = "pins"  # pins/<hex>.json: small JSON; prune keeps manifest <hex> and all it reaches
# meta/conditional-writes.json: small JSON, whether the server honours If-None-Match/If-Match
# (gpuci.cache._format.refs probes once, under meta/probes/<random>, and records the answer)
CONDITIONAL_WRITES = "meta/conditional-writes.json"
CONDITIONAL_PROBES = "meta/probes"

DEFAULT_NAMESPACE = "default"

# Files below this size are packed; above it each file is its own blob.
PACK_THRESHOLD = 1 << 20
# A pack is closed once it reaches this size (bytes of file data).
PACK_TARGET = 16 << 20
# Ranged GETs: a large blob is fetched in parts of this size, packs in runs of whole files
# up to this size. Big enough to amortise a request, small enough to spread across workers.
PART_SIZE = 64 << 20
# A lone big file is spread across workers, but never in parts smaller than this.
MIN_PART = 4 << 20
PACK_RUN = 8 << 20
# Reads from the network and from disk go through buffers of this size.
IO_CHUNK = 4 << 20
# Buffered writes and the hash take a chunk this much at a time, so the bytes are still in the
# CPU cache between the two: one 4 MiB pwrite cost several times the kernel CPU of 16 of
# 256 KiB (docs/benchmarks.md#figures-behind-the-code).
WRITE_SLICE = 256 << 10
# The largest file, and the largest offset in a pack, a manifest may name: a PiB, far past
# S3's 5 TiB objects; any number above it is a hostile manifest, refused before the OS sees it.
MAX_FILE_BYTES = 1 << 50
# Uploads above this size go multipart.
MULTIPART_THRESHOLD = 64 << 20
MULTIPART_CHUNK = 32 << 20
# Parts are cut so a file can use every allowed connection, but never below this (S3 wants
# 5 MiB) nor into more than S3's 10,000 parts.
MIN_UPLOAD_PART = 8 << 20
MAX_PARTS = 10_000

# Connections: adaptive (gpuci.adaptive) unless GPUCI_CACHE_WORKERS fixes a count. Data
# transfers start with a few and grow while throughput rises, up to a ceiling per direction;
# a fixed count is capped at MAX_CONNECTIONS. Restore sizes each connection's buffers so all
# of them together stay within MEMORY_BUDGET (peak RSS under 300 MiB at any count).
DEFAULT_WORKERS = 8  # metadata fan-out (HEADs, ref reads) when no count is fixed
MAX_CONNECTIONS = 64
DOWNLOAD_CONNECTIONS = 32  # 32 x 16 MiB/s is more than two cores can write and hash
UPLOAD_CONNECTIONS = 64  # parts stream from disk: a connection holds almost nothing
MEMORY_BUDGET = 192 << 20

# Prune deletes objects no ref reaches only once older than its grace (``--grace``, 6h), so a
# save uploading right now (blobs first, ref last) never loses a blob. A save touches any blob it
# reuses that is older than TOUCH_AFTER, which prune keeps under half the grace.
TOUCH_AFTER = 3600

INCOMPLETE = ".incomplete"
STAGING_PREFIX = ".gpuci-staging-"

_HEX = re.compile(r"[0-9a-f]{64}")
# Keys are quoted char by char, so quote(prefix) is a prefix of quote(key): prefix listing works.
_KEY_SAFE = "-_.~+=@,:"


def is_sha256(text: str) -> bool:
    return bool(_HEX.fullmatch(text))


def manifest_digest(text: str, what: str = "manifest") -> str:
    """A manifest digest as given by a person or a record: ``<hex>`` or ``sha256:<hex>``."""
    digest = str(text or "").strip().lower().removeprefix("sha256:")
    if not is_sha256(digest):
        shown = str(text).encode("unicode_escape").decode("ascii")[:80]
        raise InputError(
            f"{what} '{shown}' is not a sha256 digest",
            hint=f"give {what} as 64 hex digits (or sha256:<hex>), e.g. from provenance.json",
        )
    return digest


def blob_key(digest: str) -> str:
    return f"{BLOBS}/{digest[:2]}/{digest}"


def run_name(pack: str, start: int, end: int) -> str:
    """A tier run's file name: bytes ``start`` to ``end`` of pack ``pack``."""
    return f"{pack}.{start}-{end}"


def run_span(name: str, pack: str) -> tuple[int, int] | None:
    """(start, end) from a tier run's file name when it is one of ``pack``'s, else None (a name
    in the tier is read strictly: ASCII digits only, a span of one byte or more)."""
    if not name.startswith(pack + "."):
        return None
    start, sep, end = name[len(pack) + 1 :].partition("-")
    if not sep or not (start + end).isascii() or not (start.isdigit() and end.isdigit()):
        return None
    if len(start) > 18 or len(end) > 18 or int(start) >= int(end):
        return None
    return int(start), int(end)


def pack_key(digest: str) -> str:
    return f"{PACKS}/{digest[:2]}/{digest}"


def manifest_key(digest: str) -> str:
    return f"{MANIFESTS}/{digest}.json"


def pin_key(digest: str) -> str:
    return f"{PINS}/{digest}.json"


def refs_prefix(namespace: str) -> str:
    return f"{REFS}/{quote(namespace, safe=_KEY_SAFE)}/"


def ref_key(namespace: str, key: str) -> str:
    return refs_prefix(namespace) + quote(key, safe=_KEY_SAFE)


def use_key(namespace: str, key: str) -> str:
    return f"{USES}/{quote(namespace, safe=_KEY_SAFE)}/{quote(key, safe=_KEY_SAFE)}"


def key_from_ref(namespace: str, object_key: str) -> str:
    return unquote(object_key[len(refs_prefix(namespace)) :])


def namespace(environ: Mapping[str, str]) -> str:
    """``GPUCI_CACHE_NAMESPACE`` (else ``default``); ``.``, ``..`` and control characters are
    refused, since the namespace is a folder name in a file store."""
    name = settings.CACHE_NAMESPACE.value(environ) or DEFAULT_NAMESPACE
    variable = settings.CACHE_NAMESPACE.name
    if name in (".", "..") or any(ord(c) < 32 or 127 <= ord(c) < 160 for c in name):
        raise InputError(
            f"{variable} {name.encode('unicode_escape').decode('ascii')!r} is not a usable "
            "namespace",
            hint=f"set {variable} to a plain name such as the repository's",
        )
    return name


def default_store_url(environ: Mapping[str, str]) -> str:
    """``GPUCI_STORE``, else ``$RUNNER_TOOL_CACHE/gpuci/store`` on a runner, else ~/.cache."""
    if settings.STORE.is_set(environ):
        return settings.STORE.value(environ)
    tool_cache = settings.RUNNER_TOOL_CACHE.value(environ)
    base = Path(tool_cache) / "gpuci" if tool_cache else Path.home() / ".cache" / "gpuci"
    if not tool_cache and settings.XDG_CACHE_HOME.is_set(environ):
        base = Path(settings.XDG_CACHE_HOME.value(environ)) / "gpuci"
    return (base / "store").absolute().as_uri()


def upload_parts(
    size: int, connections: int, largest: int = MULTIPART_CHUNK
) -> list[tuple[int, int, int]]:
    """(part number, offset, length) of a multipart upload of ``size`` bytes; no part over
    ``largest`` (the single-PUT size a server takes) unless S3's 10,000-part limit needs it."""
    part = max(MIN_UPLOAD_PART, min(MULTIPART_CHUNK, -(-size // max(1, connections))))
    part = -(-part // (1 << 20)) << 20  # whole MiB
    part = min(part, max(5 << 20, largest >> 20 << 20))
    fewest = -(-size // MAX_PARTS)
    if part < fewest:
        part = -(-fewest // (1 << 20)) << 20
    return [
        (number, offset, min(part, size - offset))
        for number, offset in enumerate(range(0, size, part), start=1)
    ]


def multipart_threshold(environ: Mapping[str, str] | None = None) -> int:
    """Files of this many bytes or more go up in parts; ``GPUCI_MULTIPART_THRESHOLD`` (bytes,
    or with a ``MiB`` suffix) lowers it for servers with a small body limit (a 413 says so)."""
    if not settings.MULTIPART_THRESHOLD.is_set(environ):
        return MULTIPART_THRESHOLD
    text, variable = settings.MULTIPART_THRESHOLD.value(environ), settings.MULTIPART_THRESHOLD.name
    scale = 1 << 20 if text.lower().endswith("mib") else 1
    try:
        value = int(text[:-3] if scale > 1 else text) * scale
    except ValueError:
        value = 0
    if not 5 << 20 <= value <= 5 << 30:
        raise InputError(
            f"{variable}={text[:40]!r} is not a size between 5 MiB and 5 GiB",
            hint=f"set {variable} to bytes (e.g. 8388608) or MiB (e.g. 8MiB)",
        )
    return value


def fixed_workers(environ: Mapping[str, str] | None = None) -> int | None:
    """The connection count a user fixed with ``GPUCI_CACHE_WORKERS``; None: adaptive."""
    try:
        return max(1, int(settings.CACHE_WORKERS.value(environ)))
    except ValueError:
        return None


def workers(environ: Mapping[str, str] | None = None) -> int:
    """Threads for small metadata requests (HEADs, ref reads): the fixed count, else 8."""
    return fixed_workers(environ) or DEFAULT_WORKERS


def concurrency(environ: Mapping[str, str], ceiling: int) -> Concurrency:
    """The controller for one transfer: the user's fixed count (at most MAX_CONNECTIONS),
    else adaptive from a few connections up to ``ceiling``."""
    from gpuci.adaptive import Concurrency  # (and threading): only for a transfer

    fixed = fixed_workers(environ)
    if fixed is not None:
        return Concurrency.fixed(min(fixed, MAX_CONNECTIONS))
    return Concurrency(ceiling=min(ceiling, MAX_CONNECTIONS))
