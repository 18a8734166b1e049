"""The one ranged-download engine: parts, resume, progress and the connection controller.

The cache's restore (:mod:`gpuci.cache._transfer.download`: blob parts from a store, sha256 as they
land, the tier filled from the hashed bytes) and retry-fetch (:mod:`gpuci.fetch._segments`:
HTTP segments with validators and a resumable ``.incomplete``) drive it; each brings only its
source (how a range is fetched) and its sink's stages (where bytes go, how they are verified).

- :mod:`gpuci.ranged._extents`: cutting a download into parts, and what is already on disk;
- :mod:`gpuci.ranged._plan`: the planner: segments resumed from their last written byte on a
  retry, the holes an earlier run left, work stealing as connections are added;
- :mod:`gpuci.ranged._drive`: the one loop moving a source's chunks into a sink;
- :mod:`gpuci.ranged._sink`: the one sink, writing (and hashing) on helper threads in order;
- :mod:`gpuci.ranged._retry`: a segment's retry from its last written byte; a worker's loop;
- :mod:`gpuci.ranged._pace`: the slowest body accepted (a grace, then a minimum rate), which
  the S3 store's bodies and retry-fetch's share;
- :mod:`gpuci.ranged._pool`: the workers, each holding one of the controller's
  (:class:`gpuci.adaptive.Concurrency`) slots; a driver's planner feeds it as slots free up.

It stands on the foundation only (adaptive, hashcursor, retry), so both features import it.
"""

__all__: list[str] = []  # nothing public: the engine the cache and fetch drive
