"""``cache-weights ls``: the keys in a store with their sizes and ages, newest first."""

from __future__ import annotations

import threading
import time
from typing import Any

from gpuci.cache import layout, refs, usage
from gpuci.cache.common import store_from
from gpuci.cache.store import LocalStore
from gpuci.cache.transfer import parallel
from gpuci.runtime import Result, Runtime, human_bytes, markdown_table


def age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def run(values: dict[str, Any], rt: Runtime) -> Result:
    store = store_from(values, rt)
    if values.get("pins"):
        from gpuci.cache.pins import listing_result

        return listing_result(store)
    namespace = layout.namespace(rt.environ)
    prefix = values.get("prefix") or ""
    ignored: list[str] = []
    infos = (
        []
        if isinstance(store, LocalStore) and not store.exists()
        else refs.listing(store, namespace, prefix, ignored)
    )
    details: dict[str, refs.Ref] = {}
    lock = threading.Lock()

    def read(info: refs.RefInfo) -> None:
        ref = refs.read(store, namespace, info.key)
        if ref is not None:
            with lock:
                details[info.key] = ref

    parallel(read, infos, layout.workers(rt.environ))
    used = usage.last_uses(store, namespace) if infos else {}
    now = time.time()
    rows, items = [], []
    for info in infos:
        ref = details.get(info.key)
        if ref is None:
            continue
        rows.append(
            [
                info.key,
                ref.files,
                human_bytes(ref.bytes),
                age(now - info.modified),
                f"{age(now - used[info.key])} ago" if info.key in used else "never",
                ref.manifest[:12],
            ]
        )
        items.append(
            {
                "key": info.key,
                "manifest": ref.manifest,
                "files": ref.files,
                "bytes": ref.bytes,
                "modified": info.modified,
                "last_used": used.get(info.key),
                "created": ref.created,
            }
        )
    result = Result(command="cache-weights ls")
    for warning in ignored:
        result.warning(warning, "gpu-ci cache: ref ignored")
    under = f" under '{prefix}'" if prefix else ""
    result.headline = f"{len(items)} key(s) in {store.url}{under}"
    if rows:
        result.summary.append(
            markdown_table(["key", "files", "size", "age", "last use", "manifest"], rows)
        )
    result.report = {"store": store.url, "namespace": namespace, "keys": items}
    return result
