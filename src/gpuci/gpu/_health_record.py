"""A health record per GPU: every gpu-smoke verdict in the store, and a report of failures.

Beside the pods ledger and in the same stores (``s3://bucket/prefix`` or ``file:///dir``), so
every runner reads one history: ``gpu-health/verdicts/<gpu>/<ms>-<pass|fail>-<nonce>.json``,
one immutable object per GPU per smoke (UUID, serial where known, host, runner, checks and
their figures, time), written create-if-absent. The time is in the key, so a report for the
last N days reads only those objects, and older ones never count against the read's cap.
Objects are inputs like any other from a store: each read is capped, the listing is bounded,
malformed objects are skipped. Writing is a courtesy: a failure is a warning, never the smoke's
verdict. Nothing here deletes a verdict (a runner needs no delete right on the shared store):
old ones are removed by the store's lifecycle rule (docs/quarantine.md#the-health-record).
"""

from __future__ import annotations

import heapq
import json
import re
import secrets
import socket
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuci import settings, untrusted_json
from gpuci.errors import InfraError, InputError
from gpuci.gpu._smoke.checks import about_the_gpu
from gpuci.gpu.options import ReportInputs
from gpuci.runtime import Result, Runtime, markdown_table
from gpuci.units import utc_iso

__all__ = [
    "MAX_KEYS",
    "MAX_LISTED",
    "MAX_OBJECT",
    "ROOT",
    "recent_failures",
    "record",
    "report",
    "store_url",
    "verdicts",
]

ROOT = "gpu-health/verdicts"
MAX_OBJECT = 64 * 1024  # a verdict is a few kB; anything bigger is not ours
MAX_KEYS = 20_000  # a report reads no more than the newest this many verdicts in its window
MAX_LISTED = 20 * MAX_KEYS  # the listing's bound: keys named, in the window or not
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_KEY_TIME = re.compile(r"/(\d{15})-(pass|fail)-[0-9a-f]+\.json$")


def store_url(value: str | None, environ: Mapping[str, str]) -> str:
    """The configured store (input, then ``GPUCI_GPU_HEALTH_STORE``); empty: none."""
    return (value or "").strip() or settings.GPU_HEALTH_STORE.value(environ)


def _open(url: str, environ: Mapping[str, str], rt: Runtime | None = None) -> Any:
    from gpuci.cache._stores import open_store

    endpoint = settings.GPU_HEALTH_ENDPOINT_URL.value(environ)
    endpoint = endpoint or settings.AWS_ENDPOINT_URL_S3.value(environ)
    return open_store(
        url,
        endpoint_url=endpoint or settings.AWS_ENDPOINT_URL.value(environ) or None,
        environ=environ,
        mask=rt.mask if rt is not None else None,
    )


def _text(value: Any, limit: int = 64) -> str:
    """A short string field from a report or a stored verdict (an input): else empty."""
    return value.strip()[:limit] if isinstance(value, str) else ""


def verdicts(result: Result, environ: Mapping[str, str], now: float) -> list[dict[str, Any]]:
    """One record per GPU from a smoke's report; none when the run was not a verdict."""
    report = result.report
    if result.exit_code not in (0, 1) or not isinstance(report.get("checks"), list):
        return []
    host = settings.NODE_NAME.value(environ) or socket.gethostname()
    runner = settings.RUNNER_NAME.value(environ) or settings.CI_RUNNER_DESCRIPTION.value(environ)
    # RunPod's API names no machine, only the data centre (RUNPOD_DC_ID inside a pod): the
    # finest unit pods placement can steer away from.
    data_center = settings.RUNPOD_DC_ID.value(environ) or settings.DATA_CENTER.value(environ)
    out = []
    for gpu in report.get("gpus") or []:
        if not isinstance(gpu, dict) or not isinstance(gpu.get("index"), int):
            continue
        mine = [
            c
            for c in report["checks"]
            if isinstance(c, dict) and c.get("gpu") in (gpu["index"], None)
        ]
        failed = [
            str(c.get("name"))
            for c in mine
            if c.get("status") == "fail" and about_the_gpu(str(c.get("reason") or ""))
        ]
        out.append(
            {
                "schema": 1,
                "uuid": str(gpu.get("uuid") or ""),
                "serial": _text(gpu.get("serial")) or None,
                "index": gpu["index"],
                "name": str(gpu.get("name") or ""),
                "host": host,
                "runner": runner,
                "data_center": data_center,
                "pod": settings.RUNPOD_POD_ID.value(environ),
                "passed": not failed,
                "failed_checks": failed,
                "checks": mine,
                "time": now,
                "at": utc_iso(now),
            }
        )
    return out


def record(result: Result, health_store: str | None, rt: Runtime) -> None:
    """Write this smoke's verdicts when a store is configured (``health_store``, else
    ``GPUCI_GPU_HEALTH_STORE``); a failure is one warning."""
    url = store_url(health_store, rt.environ)
    if not url or rt.dry_run:
        return
    now = time.time()
    items = verdicts(result, rt.environ, now)
    if not items:
        return
    try:
        store = _open(url, rt.environ, rt)
        for item in items:
            folder = _SAFE.sub("_", item["uuid"])[:80] or "_"
            kind = "pass" if item["passed"] else "fail"
            key = f"{ROOT}/{folder}/{int(now * 1000):015d}-{kind}-{secrets.token_hex(4)}.json"
            data = json.dumps(item, sort_keys=True, separators=(",", ":")).encode()
            store.put_if_absent(key, data)
    except Exception as exc:  # the verdict is made; the record must never undo it
        text = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        result.warning(f"GPU health record not written: {text}", "gpu-smoke health record")


# The fields a verdict is read by, and the JSON types each must have (absent or null is fine).
_FIELDS: dict[str, tuple[type, ...]] = {
    "uuid": (str,),
    "passed": (bool,),
    "failed_checks": (list,),
    "data_center": (str,),
    "at": (str,),
    "time": (int, float),
    "host": (str,),
    "runner": (str,),
    "name": (str,),
    "serial": (str,),
    "pod": (str,),
    "index": (int,),
    "checks": (list,),
}


def _verdict(data: bytes) -> tuple[dict[str, Any] | None, str]:
    """A stored verdict from its bytes, or (None, why it is not one): an input, checked for
    size, nesting and the type of every field read, before anything reads it."""
    try:
        item = untrusted_json.parse_object(data, MAX_OBJECT, fields=_FIELDS)
    except untrusted_json.Unusable as exc:
        return None, str(exc)
    if not isinstance(item.get("uuid"), str):
        return None, "it has no string uuid"
    if not all(isinstance(c, str) for c in item.get("failed_checks") or []):
        return None, "its 'failed_checks' holds something other than strings"
    return item, ""


@dataclass
class _Read:
    """The verdicts read, and the objects skipped as not verdicts (key -> why)."""

    items: list[dict[str, Any]]
    skipped: dict[str, str]
    notes: list[str] = field(default_factory=list)  # where the read is not the whole window

    def warning(self) -> str:
        """One line naming what was skipped or left unread, or empty."""
        said = untrusted_json.skipped_warning("GPU health record", self.skipped, "verdicts")
        return "; ".join(w for w in [*self.notes, said] if w)


def _read(store: Any, since: float) -> _Read:
    """The verdicts written at or after ``since``: at most the newest :data:`MAX_KEYS` of them.

    A key names its time, so verdicts outside the window are passed over by name, never read
    nor counted against the cap: old verdicts pile up (nothing in gpu-ci deletes them), and
    they must not make the recent ones unreadable. More than the cap inside the window reads
    the newest, with one warning; the listing itself stops at :data:`MAX_LISTED` keys.
    """
    out = _Read([], {})
    newest: list[tuple[int, str, int]] = []  # a min-heap of (ms, key, size) in the window
    in_window = 0
    for n, info in enumerate(store.list(ROOT + "/")):
        if n >= MAX_LISTED:
            out.notes.append(
                f"GPU health record: stopped listing after {MAX_LISTED} keys, so verdicts may be "
                f"missing; remove verdicts older than any window read ({ROOT}/, see "
                "docs/quarantine.md#the-health-record)"
            )
            break
        m = _KEY_TIME.search("/" + info.key)
        if not m or int(m[1]) / 1000 < since:
            continue
        in_window += 1
        entry = (int(m[1]), info.key, info.size)
        if len(newest) < MAX_KEYS:
            heapq.heappush(newest, entry)
        elif entry > newest[0]:
            heapq.heapreplace(newest, entry)
    if in_window > MAX_KEYS:
        out.notes.append(
            f"GPU health record: {in_window} verdicts in the window, over the {MAX_KEYS} read: "
            f"the newest {MAX_KEYS} are reported; ask for fewer days for a complete count"
        )
    for _, key, size in sorted(newest):
        if size > MAX_OBJECT:  # by its listed size: never read
            out.skipped[key] = f"{size} bytes, over {MAX_OBJECT >> 10} KiB"
            continue
        got = store.get(key, limit=MAX_OBJECT)
        if not got:
            continue
        item, why = _verdict(got[0])
        if item is None:
            out.skipped[key] = why
        else:
            out.items.append(item)
    return out


def _read_store(url: str, environ: Mapping[str, str], rt: Runtime | None, since: float) -> _Read:
    """:func:`_read` on the store at ``url``; InfraError when it cannot be read."""
    try:
        return _read(_open(url, environ, rt), since)
    except OSError as exc:
        raise InfraError(
            f"cannot read the GPU health record: {exc}", hint="check the store URL and access"
        ) from None


def recent_failures(
    url: str,
    environ: Mapping[str, str],
    since: float,
    rt: Runtime | None = None,
    warn: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Hardware-failure verdicts written at or after ``since`` (for pods placement); objects
    that are not verdicts are skipped, named once to ``warn``.

    Raises InfraError when the store cannot be read.
    """
    got = _read_store(url, environ, rt, since)
    if got.warning() and warn is not None:
        warn(got.warning())
    return [i for i in got.items if i.get("passed") is False]


def report(inp: ReportInputs, rt: Runtime) -> Result:
    """``gpus report``: failures by node and GPU over the last ``--days``, as a Markdown table.

    Raises InputError when no store is configured, InfraError when it cannot be read.
    """
    url = store_url(inp.store, rt.environ)
    if not url:
        raise InputError(
            "no GPU health store configured",
            hint="pass --store (s3://bucket/prefix or file:///dir) or set GPUCI_GPU_HEALTH_STORE",
        )
    days = inp.days or 7.0  # 0 reads as the default, as before
    since = time.time() - days * 86400
    got = _read_store(url, rt.environ, rt, since)
    items = got.items
    rows = _by_gpu(items)
    failing = sorted(
        ((k, r) for k, r in rows.items() if r["fails"]), key=lambda kr: (-kr[1]["fails"], kr[0])
    )
    result = Result(command="gpus report")
    result.headline = (
        f"{len(failing)} GPU(s) on {len({k[0] for k, _ in failing})} node(s) failed gpu-smoke "
        f"in the last {days:g} day(s), of {len(rows)} GPU(s) in {len(items)} verdict(s)"
    )
    result.summary = [
        f"#### GPU health: failures in the last {days:g} day(s)\n\n{_failing_table(failing)}\n"
    ]
    result.outputs = {"failing-gpus": len(failing), "verdicts": len(items)}
    if got.warning():
        result.warning(got.warning())
    result.report = {
        "days": days,
        "verdicts": len(items),
        "failing": [
            {
                "host": h,
                "uuid": u,
                "serial": r["serial"] or None,
                "failed": r["fails"],
                "verdicts": r["runs"],
                "last": r["last"],
                "checks": sorted(r["checks"]),
            }
            for (h, u), r in failing
        ],
    }
    return result


_Row = dict[str, Any]  # runs, fails, last failure, failed checks, GPU name, runners, serial


def _by_gpu(items: list[dict[str, Any]]) -> dict[tuple[str, str], _Row]:
    """The verdicts summed per (node, GPU UUID)."""
    rows: dict[tuple[str, str], _Row] = defaultdict(
        lambda: {
            "runs": 0,
            "fails": 0,
            "last": "",
            "checks": set(),
            "name": "",
            "runner": set(),
            "serial": "",
        }
    )
    for item in items:
        row = rows[(str(item.get("host") or "?"), item["uuid"])]
        row["runs"] += 1
        row["name"] = str(item.get("name") or "")
        row["serial"] = _text(item.get("serial")) or row["serial"]
        if item.get("runner"):
            row["runner"].add(str(item["runner"]))
        if item.get("passed") is False:
            row["fails"] += 1
            row["last"] = max(row["last"], str(item.get("at") or ""))
            row["checks"].update(str(c) for c in item.get("failed_checks") or [])
    return rows


def _failing_table(failing: list[tuple[tuple[str, str], _Row]]) -> str:
    return markdown_table(
        [
            "node",
            "runner",
            "GPU",
            "UUID",
            "serial",
            "failed",
            "verdicts",
            "last failure",
            "failed checks",
        ],
        [
            (
                host,
                ", ".join(sorted(r["runner"])),
                r["name"],
                uuid,
                r["serial"] or "-",
                r["fails"],
                r["runs"],
                r["last"],
                ", ".join(sorted(r["checks"])),
            )
            for (host, uuid), r in failing
        ],
    )
