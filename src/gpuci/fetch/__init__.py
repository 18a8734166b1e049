"""Resumable, retried, verified downloads: the Python API under the ``retry-fetch`` command.

Other commands download through :func:`fetch_file` (one code path for retries, resume and
sha256 checks)::

    from gpuci.fetch import FetchPolicy, fetch_file
    result = fetch_file(url, "weights.bin", sha256="...", policy=FetchPolicy(attempts=3))
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuci.fetch._download import FetchResult, fetch_file
    from gpuci.fetch._policy import FetchPolicy

__all__ = ["FetchPolicy", "FetchResult", "fetch_file", "options"]

# Imported when first asked for, so loading ``gpuci.fetch.options`` (the registry reads the
# inputs of retry-fetch from it for ``--help``) does not load httpx.
_DEFINED_IN = {
    "FetchPolicy": "gpuci.fetch._policy",
    "FetchResult": "gpuci.fetch._download",
    "fetch_file": "gpuci.fetch._download",
}


def __getattr__(name: str) -> Any:
    if name == "options":  # a public submodule not imported yet (``from gpuci.fetch import *``)
        return importlib.import_module("gpuci.fetch.options")
    if name not in _DEFINED_IN:
        raise AttributeError(f"module 'gpuci.fetch' has no attribute {name!r}")
    return getattr(importlib.import_module(_DEFINED_IN[name]), name)
