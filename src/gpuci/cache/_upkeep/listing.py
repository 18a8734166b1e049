"""``cache-weights ls``: the keys in a store with their sizes and ages, newest first; with
``--pins``, the pinned manifests (:mod:`gpuci.cache._upkeep.pins`) with their reasons."""

from __future__ import annotations

import time

from gpuci.cache import _layout as layout
from gpuci.cache._common import store_from
from gpuci.cache._format import refs
from gpuci.cache._format.refs import escape
from gpuci.cache._stores.base import Store
from gpuci.cache._stores.file import LocalStore
from gpuci.cache._upkeep.options import LsInputs
from gpuci.cache._upkeep.pins import read_all
from gpuci.ranged._pool import parallel
from gpuci.runtime import Result, Runtime, markdown_table
from gpuci.units import human_age, human_bytes

__all__ = ["pins_result", "run"]


def run(inp: LsInputs, rt: Runtime) -> Result:
    """``cache-weights ls``: the keys (or, with pins, the pins); StoreError when the store fails."""
    store = store_from(inp, rt)
    if inp.pins:
        return pins_result(store)
    namespace = layout.namespace(rt.environ)
    prefix = inp.prefix
    ignored: list[str] = []
    infos = (
        []
        if isinstance(store, LocalStore) and not store.exists()
        else refs.listing(store, namespace, prefix, ignored)
    )
    details = _read_refs(store, infos, rt, ignored)
    used = refs.last_uses(store, namespace) if infos else {}
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
                human_age(now - info.modified),
                f"{human_age(now - used[info.key])} ago" if info.key in used else "never",
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


def _read_refs(
    store: Store, infos: list[refs.RefInfo], rt: Runtime, ignored: list[str]
) -> dict[str, refs.Ref]:
    """Each listed ref read in parallel. One gone since the listing is left out; one unusable
    is left out with a warning in ``ignored`` (the first :data:`refs.MAX_IGNORED`, then a
    count), so one bad object does not hide every good key."""

    def read(info: refs.RefInfo) -> tuple[str, refs.Ref | None, list[str]]:
        why: list[str] = []
        return info.key, refs.read_listed(store, info, why), why

    details: dict[str, refs.Ref] = {}
    unusable: list[str] = []
    for key, ref, why in parallel(read, infos, layout.workers(rt.environ)):
        if ref is not None:
            details[key] = ref
        unusable.extend(why)
    unusable.sort()
    ignored.extend(unusable[: refs.MAX_IGNORED])
    if len(unusable) > refs.MAX_IGNORED:
        ignored.append(
            f"ignored {len(unusable) - refs.MAX_IGNORED} more unusable refs in {store.url}; "
            "delete them and save those keys again"
        )
    return details


def pins_result(store: Store) -> Result:
    """``cache-weights ls --pins``: every pin, newest first, with its reason."""
    pins = [] if isinstance(store, LocalStore) and not store.exists() else read_all(store)
    now = time.time()
    result = Result(command="cache-weights ls")
    result.headline = f"{len(pins)} pinned manifest(s) in {store.url}"
    rows = [
        [p.manifest, escape(p.reason)[1:-1], human_age(now - p.modified), p.producer.get("run", "")]
        for p in pins
    ]
    if rows:
        result.summary.append(markdown_table(["manifest", "reason", "age", "run"], rows))
    result.report = {
        "store": store.url,
        "pins": [
            {
                "manifest": p.manifest,
                "reason": p.reason,
                "created": p.created,
                "producer": p.producer,
            }
            for p in pins
        ],
    }
    return result
