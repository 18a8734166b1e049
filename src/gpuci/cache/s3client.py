"""The store's boto3 client: made on first use, retries as botocore's own knobs say, and every
refusal heard by the save's or restore's concurrency controller.

boto3 costs 0.3-0.6 s to import and set up, so only what needs it builds it: conditional
writes, uploads, listings without the fast path, and answers only boto3 can act on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from gpuci.cache import layout
from gpuci.cache.s3errors import _THROTTLE_CODES, S3Errors, bce, upload_failed
from gpuci.errors import StoreError
from gpuci.retry import aws_max_attempts


def retry_settings(environ: Mapping[str, str]) -> tuple[str, int]:
    """botocore's own knobs (AWS_RETRY_MODE, AWS_MAX_ATTEMPTS), with sturdier defaults."""
    mode = environ.get("AWS_RETRY_MODE", "").strip() or "standard"
    return mode, aws_max_attempts(environ)


class BotoClient(S3Errors):
    """boto3's S3 client for the store (mixed into :class:`gpuci.cache.s3.S3Store`)."""

    region: str | None
    mask: Callable[[str], None] | None
    on_throttle: Callable[[], None] | None
    _client_lock: threading.Lock
    _transfer: Any

    @property
    def client(self):  # -> botocore's S3 client, created on first use
        if self._client is None:
            with self._client_lock:
                if self._client is None:
                    self._make_client()
        return self._client

    def _make_client(self) -> None:
        import boto3  # 0.3 s: only when a listing, an upload or a fallback needs it
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        mode, attempts = retry_settings(self.environ)
        try:
            session = boto3.session.Session(region_name=self.region)
            creds = session.get_credentials()
        except bce().BotoCoreError as exc:
            raise self._config_error(exc) from None
        if creds is None:
            raise StoreError(
                f"no AWS credentials found for {self.url}",
                hint="configure credentials (aws-actions/configure-aws-credentials, "
                "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a profile)",
            )
        frozen = creds.get_frozen_credentials()
        if self.mask is not None:
            for secret in (frozen.access_key, frozen.secret_key, frozen.token):
                if secret:
                    self.mask(secret)
        config = Config(
            signature_version="s3v4",
            retries={"mode": mode, "max_attempts": attempts},
            max_pool_connections=2 * layout.MAX_CONNECTIONS,  # the controller decides
            connect_timeout=min(10.0, self.limits.timeout),
            read_timeout=self.limits.timeout,
            s3={"addressing_style": "path"} if self.endpoint else {},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        # Managed transfers (the touch's copy) run on the caller's thread, inside its slot, so
        # the controller hears of a refusal from the request that holds the slot.
        self._transfer = TransferConfig(
            multipart_threshold=layout.MULTIPART_THRESHOLD,
            multipart_chunksize=layout.MULTIPART_CHUNK,
            use_threads=False,
        )
        try:
            self._client = session.client("s3", endpoint_url=self.endpoint or None, config=config)
        except bce().BotoCoreError as exc:
            raise self._config_error(exc) from None
        # botocore retries throttling itself; the controller hears of each refusal too.
        self._client.meta.events.register("needs-retry.s3", self._heard_answer)

    def _heard_answer(self, response=None, caught_exception=None, **_: object) -> None:
        """A botocore attempt ended: pass refusals (429, 503 SlowDown, 5xx) and dropped
        connections on to the listening controller. Returns None: retries stay botocore's."""
        listener = self.on_throttle
        if listener is None:
            return None
        if response is not None:
            status = getattr(response[0], "status_code", 200)
            code = str(response[1].get("Error", {}).get("Code", "")) if response[1] else ""
            if status == 429 or status >= 500 or code in _THROTTLE_CODES:
                listener()
        elif caught_exception is not None:
            listener()
        return None

    def _call(self, op: str, key: str, fn: Callable, **kwargs):
        try:
            return fn(Bucket=self.bucket, **kwargs)
        except (bce().BotoCoreError, bce().ClientError) as exc:
            raise self._error(exc, op, key) from None
        except upload_failed() as exc:
            raise self._error(exc, op, key) from None
