"""The content-addressed cache: blobs, packs, manifests and refs in an S3 or local store.

Modules, each with one job: ``layout`` (names and sizes), ``manifest`` (the tree format),
``tree`` (walking a local tree), ``store`` / ``s3`` (where objects live), ``refs`` (keys and
conditional updates), ``packs`` (small files), ``transfer`` (moving bytes), and the commands
``save``, ``restore`` and ``listing``. Nothing here is imported by ``gpuci`` itself. The
Python API is :mod:`gpuci.cache.api` (``restore``, ``save``, ``fetch_file``).
"""

__all__: list[str] = []  # nothing imported here: a restore's start-up loads only what it uses
