"""Clients for the code forges' REST APIs (GitHub, GitLab): comments, merge-request notes, runners.

``rest`` is the shared client (retries, one-line errors, shape checks, origin-only pagination);
``github`` and ``gitlab`` add each service's calls. Used by ``training`` (the report) and
``pods`` (self-hosted runners); imports nothing from either, nor from the commands above them.
"""

__all__: list[str] = []  # nothing imported here: httpx loads only with a client
