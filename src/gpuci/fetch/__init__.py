"""Resumable, retried, verified downloads: the ``retry-fetch`` command and its Python API.

Other commands download through :func:`fetch_file` (one code path for retries, resume and
sha256 checks)::

    from gpuci.fetch import FetchPolicy, fetch_file
    result = fetch_file(url, "weights.bin", sha256="...", policy=FetchPolicy(attempts=3))
"""

from gpuci.fetch.client import new_client
from gpuci.fetch.command import run
from gpuci.fetch.download import FetchResult, fetch_file
from gpuci.fetch.policy import FetchPolicy

__all__ = ["FetchPolicy", "FetchResult", "fetch_file", "new_client", "run"]
