"""For ``pods reap``'s report: the nodes whose GPUs failed gpu-smoke again and again.

A node is whatever the GPU health record can name: a RunPod data centre (the finest unit
placement can avoid), a GPU by UUID, a pod, or a self-hosted host (records without a data
centre). One smoke is one failure however many GPUs it flagged (an 8-GPU pod failing NCCL is
one event for its data centre, not eight), so a node is listed when it failed in
:data:`REPEATED` or more distinct smokes within ``failure-days``. Reading the record is a
courtesy of the report: an unreadable store is one warning, never a failed reap.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from gpuci.errors import InfraError
from gpuci.gpu import _health_record as gpu_health
from gpuci.runtime import Result, Runtime, markdown_table

REPEATED = 2
KINDS = ("data centre", "GPU", "pod", "host")


def _nodes(item: Mapping[str, Any]) -> Iterable[tuple[str, str]]:
    dc = str(item.get("data_center") or "")
    if dc:
        yield "data centre", dc
    if item.get("uuid"):
        yield "GPU", str(item["uuid"])
    if item.get("pod"):
        yield "pod", str(item["pod"])
    if not dc and item.get("host"):
        yield "host", str(item["host"])


def repeated(failures: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Nodes with :data:`REPEATED` or more failed smokes, most failures first."""
    nodes: dict[tuple[str, str], dict[str, Any]] = defaultdict(
        lambda: {"events": set(), "last": "", "checks": set(), "gpus": set(), "where": set()}
    )
    for item in failures:
        # One smoke is one event however many GPUs it flagged: its verdicts share the exact
        # time it was recorded (``at`` is whole seconds: two smokes can share one).
        when = item.get("time") if isinstance(item.get("time"), (int, float)) else item.get("at")
        event = (str(item.get("pod") or item.get("host") or ""), str(when or ""))
        for kind, name in _nodes(item):
            node = nodes[(kind, name)]
            node["events"].add(event)
            node["last"] = max(node["last"], str(item.get("at") or ""))
            node["checks"].update(str(c) for c in item.get("failed_checks") or [])
            if item.get("uuid") and kind != "GPU":
                node["gpus"].add(str(item["uuid"]))
            if item.get("data_center") and kind != "data centre":
                node["where"].add(str(item["data_center"]))
    rows = [
        {
            "kind": kind,
            "node": name,
            "failures": len(n["events"]),
            "last": n["last"],
            "checks": sorted(n["checks"]),
            "gpus": sorted(n["gpus"]),
            "data_centers": sorted(n["where"]),
        }
        for (kind, name), n in nodes.items()
        if len(n["events"]) >= REPEATED
    ]
    return sorted(rows, key=lambda r: (KINDS.index(r["kind"]), -r["failures"], r["node"]))


def add_to_report(result: Result, store: str, days: float, rt: Runtime, now: float) -> None:
    """Name the nodes with repeated hardware failures in the reap's summary and report."""
    url = gpu_health.store_url(store, rt.environ)
    if days <= 0 or not url:
        return
    try:
        failures = gpu_health.recent_failures(
            url, rt.environ, now - days * 86400, rt, warn=result.warning
        )
    except (InfraError, OSError) as exc:
        text = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        result.warning(f"GPU health record not read, repeated failures not listed: {text}")
        return
    rows = repeated(failures)
    result.report["repeated_failures"] = {"days": days, "nodes": rows}
    if not rows:
        return
    result.summary.append(
        f"### Repeated GPU failures (health record, last {days:g} day(s))\n\n"
        + markdown_table(
            ["node", "name", "failed smokes", "last", "checks", "GPUs", "data centres"],
            [
                [
                    r["kind"],
                    r["node"],
                    r["failures"],
                    r["last"],
                    ", ".join(r["checks"]),
                    ", ".join(r["gpus"]),
                    ", ".join(r["data_centers"]),
                ]
                for r in rows
            ],
        )
    )
    result.warning(
        "repeated GPU failures: "
        + "; ".join(f"{r['kind']} {r['node']} ({r['failures']}x)" for r in rows)
    )
