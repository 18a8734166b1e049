"""Values for people: ``human_bytes(1536) == "1.5 KiB"``, ``human_age(7200) == "2h"``, an
output value as text (``format_output(True) == "true"``), and a time as RFC 3339 in UTC
(``utc_iso(0) == "1970-01-01T00:00:00Z"``) and back (``parse_iso``).

Imports nothing (``datetime`` only when a time is converted: ~1 ms of a start-up that
converts none), so any module may use it."""

from __future__ import annotations

__all__ = ["cap_text", "format_output", "human_age", "human_bytes", "parse_iso", "utc_iso"]


def human_bytes(n: float) -> str:
    """``n`` bytes in binary units (B, KiB ... TiB), one decimal above bytes."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def cap_text(limit: int) -> str:
    """A byte cap as a message names it: whole MiB, else whole KiB (``16 MiB``, ``64 KiB``)."""
    return f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit >> 10} KiB"


def human_age(seconds: float) -> str:
    """A duration in its largest whole unit (d, h, m, s), for ages in listings."""
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def format_output(value: str | int | float | bool | None) -> str:
    """Booleans are always ``true``/``false``; ``None`` is empty; floats lose trailing noise."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}" if abs(value) < 1e15 else str(value)
    return str(value)


def utc_iso(ts: float) -> str:
    """Unix seconds as RFC 3339 in UTC to the second: the one form RunPod's API, pod tags, the
    ledger, the GPU health record and the training records write."""
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(text: str) -> float:
    """Unix seconds from an ISO 8601 time with ``Z`` or an offset (ValueError if it is none)."""
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
