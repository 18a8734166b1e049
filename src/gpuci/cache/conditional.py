"""Whether a store honours conditional writes, found out once and kept in the store.

Refs are moved with ``If-None-Match: *`` / ``If-Match`` so that two jobs saving one key cannot
both win. Some S3-compatible servers (s3rver, fauxqs, older gateways) accept those headers and
ignore them: both writes succeed, the later one silently replaces the earlier, and without a
check both jobs would say ``saved``. So before the first ref write to a store we ask it once:
a probe object is created twice with ``If-None-Match: *`` and replaced with a wrong
``If-Match``; an honouring server refuses both (412/409). The answer is kept under
:data:`gpuci.cache.layout.CONDITIONAL_WRITES` (one small GET per save afterwards) and for the
life of this process.

Where writes are not honoured, :func:`write_ref` does what it can without the server: it reads
the ref again just before writing (a change since the save's first read is a lost race, as a
refused ``If-Match`` would be), writes, waits :data:`READ_BACK_AFTER` and reads the ref back;
a ref naming another manifest is a lost race too. That narrows the window; it cannot close it,
which is why the save also warns that concurrent saves on such a store are not safe.
"""

from __future__ import annotations

import json
import time
import uuid
import weakref
from collections.abc import Callable

from gpuci import untrusted_json
from gpuci.cache import layout
from gpuci.cache.store import Store
from gpuci.errors import ConflictError

# Long enough for the other job's write, issued within the same second, to have landed.
READ_BACK_AFTER = 1.0
_MAX_MARKER = 4 << 10
# A well-formed ETag no object has: a wrong If-Match must be refused.
_WRONG_ETAG = '"' + "0" * 32 + '"'

UNSAFE = (
    "{url} ignores conditional writes (If-None-Match / If-Match): concurrent saves of one key "
    "on this store are not safe (each save reads its ref back to tell a lost race, but two "
    "jobs can still both report saved); use a store that honours them (AWS S3, MinIO, "
    "SeaweedFS, R2) or let one job at a time save a key"
)

_known: weakref.WeakKeyDictionary[Store, bool] = weakref.WeakKeyDictionary()


def honoured(store: Store) -> bool:
    """Whether ``store`` refuses conditional writes it should refuse: from this process's
    memory, else the store's own record, else a probe (whose answer is then recorded)."""
    if store in _known:
        return _known[store]
    answer = getattr(store, "honours_conditional_writes", None)
    if answer is None:
        answer = _recorded(store)
    if answer is None:
        answer = probe(store)
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


def probe(store: Store) -> bool:
    """Ask the server itself: create a probe object twice, then replace it with a wrong ETag."""
    name = f"{layout.CONDITIONAL_PROBES}/{uuid.uuid4().hex}"
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
    if honoured(store):
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
