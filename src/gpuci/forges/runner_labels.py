"""Which runner labels quarantine may take off, and the names it uses: no HTTP client here.

gpu-smoke checks its ``quarantine-labels`` input against these before it runs, on a GPU image
that may have no httpx; the calls themselves are in ``runner_admin``.
"""

from __future__ import annotations

from collections.abc import Iterable

QUARANTINE_LABEL = "gpuci-quarantined"
# The labels a runner application reports itself (actions/runner's OS and architecture
# names): GitHub marks them read-only and refuses to remove them. Compared case-insensitively.
READ_ONLY_LABELS = frozenset(
    {"self-hosted", "linux", "windows", "macos", "x64", "x86", "arm", "arm64"}
)


def refused_labels(labels: Iterable[str]) -> list[str]:
    """The labels in ``labels`` that quarantine cannot or must not take off."""
    return [lb for lb in labels if lb.lower() in READ_ONLY_LABELS or lb.lower() == QUARANTINE_LABEL]
