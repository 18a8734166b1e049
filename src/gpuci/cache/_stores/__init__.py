"""Opening a store from its URL: ``file:///dir`` (the embedded default) or ``s3://bucket/prefix``.

The factory sits above both backends (:mod:`gpuci.cache._stores.file`,
:mod:`gpuci.cache._stores.s3.store`), so they never import each other's module to find one another.
The S3 backend (and boto3 with it) is imported only when an ``s3://`` URL is opened.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from urllib.parse import unquote, urlparse, urlsplit

from gpuci.cache import _layout as layout
from gpuci.cache._stores.base import Store, redact_url
from gpuci.cache._stores.file import LocalStore
from gpuci.errors import InputError

__all__ = ["open_store"]


def _refuse_secrets_in_url(text: str, mask: Callable[[str], None] | None) -> None:
    """An S3 URL names a bucket; credentials in it would be printed and are never used."""
    parsed = urlsplit(text)
    secrets = [s for s in (parsed.username, parsed.password, parsed.query) if s]
    if mask is not None:
        for secret in secrets:
            mask(secret)
            if unquote(secret) != secret:
                mask(unquote(secret))
    if parsed.username or parsed.password:
        raise InputError(
            f"store '{redact_url(text)}' carries credentials in the URL",
            hint="write it as s3://bucket/prefix and give S3 credentials through the "
            "environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY from secrets)",
        )


def open_store(
    url: str | None,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    environ: Mapping[str, str] | None = None,
    mask: Callable[[str], None] | None = None,
) -> Store:
    """``s3://bucket/prefix`` or ``file:///dir``; empty means the embedded local store."""
    env = os.environ if environ is None else environ
    text = (url or "").strip() or layout.default_store_url(env)
    parsed = urlparse(text)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise InputError(
                f"store '{text}' names a host; a file store is a local folder",
                hint="write it as file:///absolute/path",
            )
        return LocalStore(Path(unquote(parsed.path)))
    if parsed.scheme == "s3":
        _refuse_secrets_in_url(text, mask)
        if not parsed.netloc:
            raise InputError(
                f"store '{redact_url(text)}' has no bucket", hint="write it as s3://bucket/prefix"
            )
        from gpuci.cache._stores.s3.store import S3Store

        return S3Store(
            parsed.netloc,
            parsed.path.strip("/"),
            endpoint_url=(endpoint_url or "").strip() or None,
            region=(region or "").strip() or None,
            environ=env,
            mask=mask,
        )
    if not parsed.scheme and text.startswith("/"):
        return LocalStore(Path(text))
    raise InputError(
        f"store '{redact_url(text)}' is neither s3://bucket/prefix nor file:///dir",
        hint="set store to s3://bucket/prefix or file:///absolute/path",
    )
