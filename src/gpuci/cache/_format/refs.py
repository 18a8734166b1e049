"""Keys: the refs that name manifests, how a ref is moved safely, and each key's last use.

Refs are the only mutable objects in a store, so they are the only ones written with
conditions: ``If-None-Match: *`` to create, ``If-Match: <etag>`` to move. Two jobs saving one
key cannot both win, and a ref is written last, after every blob its manifest names exists.
``restore-keys`` is a prefix listing of refs (all pages), newest first. What a ref names is read
here too (:func:`fetch_manifest`): checked against its digest before it is parsed.

Whether a store honours conditional writes, found out once and kept in the store.

Refs are moved with ``If-None-Match: *`` / ``If-Match`` so that two jobs saving one key cannot
both win. Some S3-compatible servers (s3rver, fauxqs, older gateways) accept those headers and
ignore them: both writes succeed, the later one silently replaces the earlier, and without a
check both jobs would say ``saved``. So before the first ref write to a store we ask it once:
a probe object is created twice with ``If-None-Match: *`` and replaced with a wrong
``If-Match``; an honouring server refuses both (412/409). The answer is kept under
:data:`gpuci.cache._layout.CONDITIONAL_WRITES` (one small GET per save afterwards) and for the
life of this process.

Where writes are not honoured, :func:`write_ref` does what it can without the server: it reads
the ref again just before writing (a change since the save's first read is a lost race, as a
refused ``If-Match`` would be), writes, waits :data:`READ_BACK_AFTER` and reads the ref back;
a ref naming another manifest is a lost race too. That narrows the window; it cannot close it,
which is why the save also warns that concurrent saves on such a store are not safe.

Last use of a key: ``uses/<namespace>/<key>``, rewritten by every restore.

Refs change only when a key is saved, so a key restored every day but saved once a month would
look a month old; prune and ``ls`` read the last use from here instead. Recording it is best
effort: a job whose credentials may only read (a fork's pull request) still restores.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote

from gpuci import untrusted_json
from gpuci.cache import _layout as layout
from gpuci.cache._format import manifest as mf
from gpuci.cache._format.manifest import canonical_json, now_iso
from gpuci.cache._stores.base import Store
from gpuci.cache._stores.file import LocalStore
from gpuci.errors import ConflictError, GpuciError, InputError, IntegrityError, StoreError
from gpuci.redact import excerpt
from gpuci.units import human_bytes

if TYPE_CHECKING:  # imported where the thread starts: a file store's restore starts none
    from gpuci.background import Background

MAX_KEY = 512
# C0 and C1 control characters (and DEL): one regex scan, not a Python loop per character
# (a listing checks every key it names: a loop was far too slow for a large listing;
# docs/benchmarks.md#figures-behind-the-code).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
# A ref is about 200 bytes of JSON; one above this cap is refused unread (a hostile store
# cannot make a lookup hold a gigabyte).
MAX_REF = 64 << 10
# A restore-keys lookup keeps this many of a prefix's newest refs while the listing streams by:
# enough to step past refs deleted between the listing and their read (a prune running).
NEWEST = 16
# Warnings about refs whose names no save could write: the first few, then a count.
MAX_IGNORED = 10


@dataclass(frozen=True)
class Ref:
    """A key and the manifest it names, with what the ref says of that tree; read from the
    store, also the ETag it came with (a save's conditional replace) and its time."""

    key: str
    manifest: str
    etag: str = ""
    modified: float = 0.0
    files: int = 0
    bytes: int = 0
    created: str = ""


def check_key(key: str, what: str = "key") -> str:
    if not key or not key.strip():
        raise InputError(f"the cache {what} is empty", hint=f"set {what} to a non-empty string")
    if len(key) > MAX_KEY:
        raise InputError(
            f"the cache {what} is {len(key)} characters, over {MAX_KEY}",
            hint=f"shorten the {what} (hash long parts, e.g. hashFiles())",
        )
    if _CONTROL.search(key):
        raise InputError(
            f"the cache {what} {escape(key)} holds control characters",
            hint=f"remove them from {what}",
        )
    if key in (".", ".."):
        raise InputError(
            f"the cache {what} {key!r} names a folder, not a key",
            hint=f"give {what} a name with at least one other character",
        )
    return key


def escape(text: str) -> str:
    """A key fit for one printed line: quoted, control characters and non-ASCII escaped, so a
    name from a listing cannot start a line (``::error::``) or fake one."""
    return "'" + text.encode("unicode_escape").decode("ascii").replace("'", "\\'") + "'"


def ref_body(key: str, manifest: str, files: int, size: int) -> bytes:
    return canonical_json(
        {
            "format": layout.FORMAT_VERSION,
            "key": key,
            "manifest": manifest,
            "files": files,
            "bytes": size,
            "created": now_iso(),
        }
    )


def _parse(store: Store, object_key: str, data: bytes, etag: str, modified: float, key: str) -> Ref:
    """A ref as read back from the store: untrusted (size, nesting, numbers, then types)."""
    try:
        raw = untrusted_json.parse_object(data, MAX_REF, "a ref")
    except untrusted_json.Unusable as exc:
        raise StoreError(
            f"ref {store.url}/{object_key} is not usable: {exc}",
            hint="delete the ref and save the key again",
        ) from None
    manifest = untrusted_json.text(raw, "manifest")
    if not layout.is_sha256(manifest):
        shown = excerpt(manifest, 80) if manifest else "nothing"
        raise StoreError(
            f"ref {store.url}/{object_key} names an invalid manifest '{shown}'",
            hint="delete the ref and save the key again",
        )
    return Ref(
        key=key,
        manifest=manifest,
        etag=etag,
        modified=modified,
        files=untrusted_json.count(raw, "files"),
        bytes=untrusted_json.count(raw, "bytes"),
        created=untrusted_json.text(raw, "created"),
    )


def manifest_of(data: bytes) -> str | None:
    """The manifest a ref's body names, or None when the body is unusable (prune's reading)."""
    try:
        name = untrusted_json.text(untrusted_json.parse_object(data, MAX_REF, "a ref"), "manifest")
    except untrusted_json.Unusable:
        return None
    return name if layout.is_sha256(name) else None


def ref_name(store: Store, namespace: str, key: str, what: str = "key") -> str:
    """The ref's object name, refused (exit 2) when the store cannot hold a name that long."""
    name = layout.ref_key(namespace, key)
    limit = store.name_limit
    if limit is not None and len(name.encode()) > limit:
        raise InputError(
            f"the cache {what} is {len(name.encode())} bytes as an object name in {store.url}, "
            f"over the {limit} bytes that store allows (non-ASCII characters take 6 bytes each "
            "once encoded)",
            hint=f"shorten the {what} (hash long parts, e.g. hashFiles())",
        )
    return name


def read(store: Store, namespace: str, key: str) -> Ref | None:
    object_key = ref_name(store, namespace, key)
    got = store.get(object_key, limit=MAX_REF)
    if got is None:
        return None
    data, etag = got
    return _parse(store, object_key, data, etag, 0.0, key)


@dataclass(frozen=True)
class RefInfo:
    """A ref as a listing names it, unread: its key, object key, time and size."""

    key: str
    object_key: str
    modified: float
    size: int


def _check_canonical(namespace: str, key: str, name: str) -> None:
    """A ref's name is the quoting of its key, exactly: another spelling of the same key (a raw
    ``é`` for ``%C3%A9``) is no ref a save wrote, and prune would delete the use record of the
    key it spells, which is another key's."""
    try:
        canonical = layout.ref_key(namespace, key)
    except UnicodeEncodeError:  # a name that is not text
        canonical = ""
    if canonical != name:
        raise InputError("its name is not how a save spells a key")


def refs_under(
    store: Store, namespace: str, prefix: str = "", ignored: list[str] | None = None
) -> Iterator[RefInfo]:
    """Every ref whose key starts with ``prefix``, as the store lists them (all pages, lazily).

    Names from a listing are input like any other: a key that :func:`check_key` refuses (an
    encoded newline, a control character, ``..``) is left out, and a warning fit to print is
    added to ``ignored`` (the first :data:`MAX_IGNORED`, then one line counting the rest, so a
    listing of hostile names cannot grow the warnings without bound).
    """
    base = layout.refs_prefix(namespace)
    start = ref_name(store, namespace, prefix, "restore-keys prefix") if prefix else base
    refused = 0
    for item in store.list(start):
        key = layout.key_from_ref(namespace, item.key)
        try:
            check_key(key)
            _check_canonical(namespace, key, item.key)
        except InputError as exc:
            refused += 1
            if ignored is not None and refused <= MAX_IGNORED:
                ignored.append(
                    f"ignored the ref {escape(item.key)} in {store.url}: {exc.message} "
                    "(a key no save could write; delete it)"
                )
            continue
        yield RefInfo(key, item.key, item.modified, item.size)
    if ignored is not None and refused > MAX_IGNORED:
        ignored.append(
            f"ignored {refused - MAX_IGNORED} more refs in {store.url} whose names no save "
            "could write; delete them"
        )


def listing(
    store: Store, namespace: str, prefix: str = "", ignored: list[str] | None = None
) -> list[RefInfo]:
    """Every ref whose key starts with ``prefix`` (all pages), newest first: for ``ls`` and
    prune, which look at every key. A restore needs only :func:`newest`."""
    found = list(refs_under(store, namespace, prefix, ignored))
    found.sort(key=_age, reverse=True)
    return found


def newest(
    store: Store, namespace: str, prefix: str, count: int, ignored: list[str] | None = None
) -> list[RefInfo]:
    """The ``count`` newest refs under ``prefix``, newest first, holding no more than that many
    while the listing streams by (a listing of millions of keys, or of endless pages, costs a
    restore time, never memory). ``heapq`` is imported here: an exact hit lists nothing."""
    import heapq

    return heapq.nlargest(count, refs_under(store, namespace, prefix, ignored), key=_age)


def _age(info: RefInfo) -> tuple[float, str]:
    return info.modified, info.key


def read_listed(store: Store, info: RefInfo, ignored: list[str] | None = None) -> Ref | None:
    """A ref a listing named, read: None when it was deleted since (a prune running) or is
    unusable. An unusable one (over the cap, not JSON, no manifest) is one bad object among
    many, not a failing store: a warning fit to print goes to ``ignored`` and the caller goes
    on to the next ref. A store that cannot be read still raises StoreError."""
    got = store.get(info.object_key, limit=MAX_REF)
    if got is None:
        return None
    data, etag = got
    try:
        return _parse(store, info.object_key, data, etag, info.modified, info.key)
    except StoreError as exc:
        if ignored is not None:
            ignored.append(f"ignored a ref: {exc.one_line()}")
        return None


def lookup(
    store: Store,
    namespace: str,
    key: str,
    restore_keys: list[str],
    ignored: list[str] | None = None,
) -> tuple[Ref, bool] | None:
    """(ref, exact): the exact key, else the newest usable match of the first prefix that has one.

    The exact key's ref is the one the job named: unusable, it is an error (StoreError) that
    says to delete it, as a save of that key says. A prefix's matches are other keys: one that
    is unusable is ignored with a warning in ``ignored`` (:func:`newest_usable`).
    """
    exact = read(store, namespace, key)
    if exact is not None:
        return exact, True
    for prefix in restore_keys:
        ref = newest_usable(store, namespace, prefix, ignored)
        if ref is not None:
            return ref, False
    return None


def newest_usable(
    store: Store, namespace: str, prefix: str, ignored: list[str] | None = None
) -> Ref | None:
    """The newest ref under ``prefix`` that can be read and used.

    The :data:`NEWEST` newest are tried in turn (a ref deleted between the listing and its
    read, or unusable, gives way to the next newest); when all of them failed, the prefix is
    listed once more and the next :data:`NEWEST` not yet tried are.
    """
    tried: set[str] = set()
    for _ in range(2):
        count = len(tried) + NEWEST
        # A second listing repeats the first one's warnings about names: keep them once.
        infos = newest(store, namespace, prefix, count, None if tried else ignored)
        for info in infos:
            if info.object_key in tried:
                continue
            tried.add(info.object_key)
            ref = read_listed(store, info, ignored)
            if ref is not None:
                return ref
        if len(infos) < count:
            return None  # every match was tried
    return None


def write(store: Store, namespace: str, key: str, body: bytes, current: Ref | None) -> str:
    """Create (If-None-Match) or move (If-Match) the ref; ConflictError when someone raced us,
    on a store that ignores those conditions too, as far as reading back can tell
    (:mod:`gpuci.cache._format.refs`)."""

    def now() -> tuple[str, str] | None:
        ref = read(store, namespace, key)
        return (ref.manifest, ref.etag) if ref is not None else None

    manifest = str(json.loads(body)["manifest"])
    etag = current.etag if current is not None else None
    return write_ref(store, ref_name(store, namespace, key), body, manifest, etag, now)


# ----- what a ref points at -------------------------------------------------------------------
def fetch_manifest(store: Store, digest: str) -> tuple[mf.Manifest, int]:
    """Fetch, check the hash against the name, parse and validate. Returns (manifest, bytes)."""
    got = store.get(layout.manifest_key(digest), limit=mf.MAX_MANIFEST)
    if got is None:
        raise StoreError(
            f"manifest {digest[:12]} named by the ref is missing from {store.url}",
            hint="the store was pruned or damaged; save the key again",
        )
    data = got[0]
    mf.check_size(len(data), digest[:12])  # before hashing: the store read at most cap + 1
    actual = hashlib.sha256(data).hexdigest()
    if actual != digest:
        raise IntegrityError(
            f"manifest {digest[:12]} in {store.url} hashes to {actual[:12]}",
            hint="the store holds a corrupt manifest; delete it and save the key again",
        )
    return mf.parse(data, digest[:12]), len(data)


def parse_checked(data: bytes, digest: str) -> mf.Manifest:
    """A manifest read back, checked against its name; InputError (saying why) when unusable:
    what prune and a save's reuse of small files read, where an unusable one is skipped."""
    if len(data) > mf.MAX_MANIFEST:
        raise InputError(f"over {human_bytes(mf.MAX_MANIFEST)}")
    actual = hashlib.sha256(data).hexdigest()
    if actual != digest:
        raise InputError(f"it hashes to {actual[:12]}")
    return mf.parse(data, digest[:12])


def fetch_by_digest(store: Store, digest: str) -> tuple[mf.Manifest, int]:
    """A manifest asked for by digest (a provenance record, a pin): absent is bad input."""
    if store.head(layout.manifest_key(digest)) is None:
        raise InputError(
            f"manifest {digest[:12]} is not in {store.url}",
            hint="check store; a manifest no key names is pruned unless pinned "
            "(cache-weights pin --manifest ... --reason ...)",
        )
    return fetch_manifest(store, digest)


# Long enough for the other job's write, issued within the same second, to have landed.
READ_BACK_AFTER = 1.0
_MAX_MARKER = 4 << 10
# A well-formed ETag no object has: a wrong If-Match must be refused.
_WRONG_ETAG = '"' + "0" * 32 + '"'

CONDITIONAL_WRITES_UNSAFE = (
    "{url} ignores conditional writes (If-None-Match / If-Match): concurrent saves of one key "
    "on this store are not safe (each save reads its ref back to tell a lost race, but two "
    "jobs can still both report saved); use a store that honours them (AWS S3, MinIO, "
    "SeaweedFS, R2) or let one job at a time save a key"
)

_known: weakref.WeakKeyDictionary[Store, bool] = weakref.WeakKeyDictionary()


def conditional_writes_honoured(store: Store) -> bool:
    """Whether ``store`` refuses conditional writes it should refuse: from this process's
    memory, else the store's own record, else a probe (whose answer is then recorded)."""
    if store in _known:
        return _known[store]
    answer = getattr(store, "honours_conditional_writes", None)
    if answer is None:
        answer = _recorded(store)
    if answer is None:
        answer = probe_conditional_writes(store)
        record = {"format": layout.FORMAT_VERSION, "honoured": answer, "checked": time.time()}
        store.put(layout.CONDITIONAL_WRITES, json.dumps(record, sort_keys=True).encode())
    _known[store] = answer
    return answer


def _recorded(store: Store) -> bool | None:
    """The store's record of an earlier probe; None when absent or unreadable (probe again)."""
    got = store.get(layout.CONDITIONAL_WRITES, limit=_MAX_MARKER)
    if got is None:
        return None
    try:
        value = untrusted_json.parse_object(got[0], _MAX_MARKER).get("honoured")
    except untrusted_json.Unusable:
        return None
    return value if isinstance(value, bool) else None


def probe_conditional_writes(store: Store) -> bool:
    """Ask the server itself: create a probe object twice, then replace it with a wrong ETag."""
    name = f"{layout.CONDITIONAL_PROBES}/{os.urandom(16).hex()}"  # uuid costs a restore ~3 ms
    try:
        store.put_if_absent(name, b"1")
        if not _refused(lambda: store.put_if_absent(name, b"2")):
            return False
        return _refused(lambda: store.put_if_match(name, b"3", _WRONG_ETAG))
    finally:
        try:
            store.delete(name)
        except Exception:  # best effort: a left probe is a few bytes, prune leaves it alone
            pass


def _refused(write: Callable[[], object]) -> bool:
    try:
        write()
    except ConflictError:
        return True
    return False


def write_ref(
    store: Store,
    name: str,
    body: bytes,
    manifest: str,
    current_etag: str | None,
    read: Callable[[], tuple[str, str] | None],
) -> str:
    """Create (``current_etag`` None) or move the ref ``name``; ConflictError when another job's
    write stands instead. ``read`` gives the ref's ``(manifest, etag)`` now, or None."""
    if conditional_writes_honoured(store):
        if current_etag is None:
            return store.put_if_absent(name, body)
        return store.put_if_match(name, body, current_etag)
    # The server will not refuse for us: refuse what it would have, then check what stood.
    now = read()
    if (now[1] if now else None) != current_etag:
        raise ConflictError(f"{name} was changed by someone else since it was read")
    etag = (
        store.put_if_absent(name, body)
        if current_etag is None
        else store.put_if_match(name, body, current_etag)
    )
    time.sleep(READ_BACK_AFTER)
    stood = read()
    if stood is None or stood[0] != manifest:
        raise ConflictError(f"{name} names another manifest after this job wrote it")
    return etag


def touch_use(store: Store, namespace: str, key: str) -> str | None:
    """Record the use; returns why it could not be recorded (the caller warns), else None."""
    try:
        store.put(layout.use_key(namespace, key), canonical_json({"key": key, "used": now_iso()}))
    except GpuciError as exc:  # read-only credentials: the restore itself succeeded
        return exc.message
    except OSError as exc:  # a read-only store folder
        return exc.strerror or str(exc)
    return None


class UseRecording:
    """:func:`touch_use` on a thread of its own, so the write goes out beside the restore's
    transfer: on a remote store it is one more round trip (docs/benchmarks.md, "Issue 28, round 4:
    cold restore CPU") that the restore used to wait for after its last byte. A restore that
    then fails has still recorded a use (the key was wanted, which is what prune asks). On a
    file store the record is one local rename: it is written when the result is asked for, and a
    tier hit starts no thread (nor imports one)."""

    def __init__(self, store: Store, namespace: str, key: str) -> None:
        self._args = (store, namespace, key)
        self._write: Background[str | None] | None = None
        if not isinstance(store, LocalStore):
            from gpuci.background import Background

            self._write = Background(lambda: _touch_beside(*self._args), "gpuci-last-use")

    def result(self) -> str | None:
        """Wait for the write (or, on a file store, make it now); returns what :func:`touch_use`
        returns. A bug in it is raised here, where the caller waits."""
        if self._write is None:
            return touch_use(*self._args)
        return self._write.result()


def _touch_beside(store: Store, namespace: str, key: str) -> str | None:
    """:func:`touch_use` beside a transfer on the same store: a transfer that stops the store's
    requests (a part failed for good; the restore may go on with a fresh flag) ends this one
    too, which is the record's failure, never an Interrupted where the restore waits."""
    from gpuci.retry import Interrupted  # loaded with the S3 store already

    try:
        return touch_use(store, namespace, key)
    except Interrupted as exc:
        return str(exc)


def last_uses(store: Store, namespace: str) -> dict[str, float]:
    """key -> when it was last restored (seconds since the epoch), from one listing."""
    prefix = layout.use_key(namespace, "")
    return {unquote(item.key[len(prefix) :]): item.modified for item in store.list(prefix)}
