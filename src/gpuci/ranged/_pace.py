"""The slowest body accepted: one rule for the S3 store's bodies and retry-fetch's.

Each read of a body has its own timeout, so a server that sends one byte just inside it holds
a transfer open until a whole-job deadline (30 minutes for retry-fetch). Instead a body earns
its time by what arrives: a first-byte grace of one ``timeout`` after its headers, then one
second per ``min_rate`` bytes that came (a length the server claims earns nothing). The S3
store's watch (:class:`gpuci.cache._stores.s3.pool.Ranged`) moves a socket's deadline by it;
retry-fetch checks it after each chunk (:class:`gpuci.fetch._job.BodyWatch`).
"""

from __future__ import annotations

import math

__all__ = ["body_due"]


def body_due(start: float, timeout: float, got: int, min_rate: float) -> float:
    """When a body whose headers came at ``start`` falls under ``min_rate`` bytes a second,
    having delivered ``got`` bytes: ``start + timeout + got / min_rate``. ``min_rate`` 0 (the
    check turned off) never falls under it: ``inf``."""
    if min_rate <= 0:
        return math.inf
    return start + timeout + got / min_rate
