"""Clients for the code forges' REST APIs (GitHub, GitLab): comments, merge-request notes, runners.

``_rest`` is the shared client (retries, one-line errors, shape checks, origin-only pagination);
``_github`` and ``_gitlab`` add each service's calls, ``_runner_admin`` a runner's removal. All
are internal (``_``-named): used by ``training`` (the report), ``pods`` (self-hosted runners)
and ``quarantine``; they import nothing from those, nor from the commands above them.
"""

__all__: list[str] = []  # nothing public, nothing imported here: httpx loads only with a client
