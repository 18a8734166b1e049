"""Which response headers name one version of a file, strongly enough to splice bytes by.

Resuming a file (``Range`` + ``If-Range``) or fetching it in segments splices bytes from
several responses into one file, which is only sound when every response is known to come from
the same version. RFC 9110 section 8.8.1 says which validators can promise that: a strong
``ETag`` (not ``W/``), or a ``Last-Modified`` date that is *deducibly* strong (section
8.8.2.2: the response's ``Date`` is at least one second after it, so a second change within
that second cannot hide behind the same date). A weak ETag, or a date the server stamped
within the second it answered, may name other bytes: one stream only.
"""

from __future__ import annotations

import email.utils
from datetime import datetime

import httpx

__all__ = ["segment_validator", "strong_validator"]


def strong_validator(headers: httpx.Headers) -> str | None:
    """A strong ETag, else Last-Modified: what ``If-Range`` may carry (never a weak ETag)."""
    etag = headers.get("ETag")
    if etag and not etag.startswith("W/"):
        return etag
    return headers.get("Last-Modified")


def segment_validator(headers: httpx.Headers) -> str | None:
    """The validator that allows several ranged connections at once, or None.

    A strong ETag; else, with no ETag at all, a Last-Modified date at least one second
    before the response's Date (RFC 9110 8.8.2.2). A weak ETag means the server itself says
    the bytes may differ, so its Last-Modified is not taken instead."""
    etag = headers.get("ETag")
    if etag:
        return None if etag.startswith("W/") else etag
    modified, date = _date(headers.get("Last-Modified")), _date(headers.get("Date"))
    if modified is None or date is None or (date - modified).total_seconds() < 1:
        return None
    return headers.get("Last-Modified")


def version_of(headers: httpx.Headers, validator: str) -> str | None:
    """What this response says its version is, in the same kind as ``validator``."""
    if validator.startswith(('"', "W/")):
        return headers.get("ETag")
    return headers.get("Last-Modified") if not headers.get("ETag") else headers.get("ETag")


def _date(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return parsed if parsed.tzinfo is not None else None
