"""Whether a dry run may ask a server anything: never, unless ``--probe`` says so.

A dry run is the laptop check before a GPU job, and the README promises it needs no network:
so by default every ``--dry-run`` plans from what it was given (the URL, the expected digest,
the key) and says what a real run would fetch and verify. ``--probe`` (``GPUCI_PROBE=true``)
opts in to read-only probes: a HEAD (or one-byte GET) per download, a listing of pods.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuci import settings


def probes_allowed(rt_or_env: object) -> bool:
    """True when read-only probes are allowed (a Runtime or an environment mapping)."""
    env = getattr(rt_or_env, "environ", rt_or_env)
    if not isinstance(env, Mapping):
        return False
    return settings.PROBE.value(env).lower() in ("1", "true", "yes")
