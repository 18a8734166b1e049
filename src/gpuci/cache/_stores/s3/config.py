"""Where the S3 store's credentials, region and endpoint come from: the whole AWS chain.

Keys in the environment (what aws-actions/configure-aws-credentials sets) with the region and
endpoint known from the inputs or the environment are read here, without botocore: a restore
with them never pays botocore's slow import (docs/benchmarks.md#figures-behind-the-code), nor
does one with plain keys in a profile (:mod:`gpuci.cache._stores.s3.profile`). Everything else -
a profile with a role, SSO, ``credential_process``, web identity, the instance role, a region
or ``endpoint_url`` in the AWS config file - is botocore's job (:func:`_from_botocore`): its
session resolves them, and the store signs with what it resolved
(:mod:`gpuci.cache._stores.s3.signer`) on its one bounded client. Role credentials expire: they
are frozen again at each signing, so botocore refreshes them; the resolution and every refresh
end by the operation's deadline (:mod:`gpuci.cache._stores.s3.credentials`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuci import settings
from gpuci.cache._stores.s3.network import Limits
from gpuci.cache._stores.s3.profile import aws_file_bytes, static_profile
from gpuci.cache._stores.s3.signer import (
    Address,
    EnvCredentials,
    configured_endpoint,
    env_credentials,
    is_region,
)
from gpuci.errors import InputError, NoCredentials, StoreError
from gpuci.retry import aws_max_attempts
from gpuci.settings import Setting

if TYPE_CHECKING:
    from gpuci.cache._stores.s3.credentials import Chain

Mask = Callable[[str], None] | None
_ANY_SOURCE = "the profile's credential source (SSO login, credential_process, role)"
#: Credentials at the time of a signing; the argument is the operation's deadline (monotonic).
Creds = Callable[[float | None], EnvCredentials]


def retry_settings(environ: Mapping[str, str]) -> tuple[str, int]:
    """botocore's own knobs (AWS_RETRY_MODE, AWS_MAX_ATTEMPTS), with sturdier defaults."""
    mode = settings.AWS_RETRY_MODE.value(environ)
    return mode, aws_max_attempts(environ)


@dataclass(frozen=True)
class Settings:
    """What the store needs to sign and send: the address, the credentials to sign with, and
    what chose the endpoint (for messages)."""

    address: Address
    creds: Creds
    endpoint: str  # "" for AWS
    endpoint_source: str


def resolve(
    bucket: str,
    endpoint_url: str | None,
    region: str | None,
    environ: Mapping[str, str],
    mask: Mask,
    limits: Limits | None = None,
) -> Settings:
    """The store's settings, as the AWS CLI would use them. botocore's chain, when needed,
    resolves within one operation's time limit (``limits``, default the defaults').

    Raises:
        InputError: AWS configuration botocore cannot use (a missing profile, a bad endpoint).
        StoreError: no credentials anywhere in the chain, or resolving them failed or did not
            end in time.
    """
    endpoint, source = configured_endpoint(endpoint_url, environ)
    region = (
        (region or "").strip()
        or settings.AWS_REGION.value(environ)
        or settings.AWS_DEFAULT_REGION.value(environ)
    )
    fips = settings.AWS_USE_FIPS_ENDPOINT.is_true(environ)
    dualstack = settings.AWS_USE_DUALSTACK_ENDPOINT.is_true(environ)
    env_creds = env_credentials(environ)
    static = None
    if env_creds is None:  # plain keys in a profile need no botocore either
        static = static_profile(
            environ,
            _aws_file(environ, settings.AWS_CONFIG_FILE, "config"),
            _aws_file(environ, settings.AWS_SHARED_CREDENTIALS_FILE, "credentials"),
        )
    if static is not None:
        env_creds, region = static.creds, region or static.region
    ignore = settings.AWS_IGNORE_CONFIGURED_ENDPOINT_URLS.is_true(environ)
    config_says = _config_text(environ)
    needs_botocore = static is None and (
        env_creds is None
        or settings.AWS_PROFILE.is_set(environ)
        or (not endpoint and not ignore and "endpoint_url" in config_says)
        or (not region and "region" in config_says)
        or (not fips and "use_fips_endpoint" in config_says)
        or (not dualstack and "use_dualstack_endpoint" in config_says)
    )
    if needs_botocore:
        creds, found = _from_botocore(environ, mask, f"s3://{bucket}", limits or Limits())
        if not endpoint and found.endpoint:
            endpoint, source = found.endpoint, found.endpoint_source
        region = region or found.region
        fips, dualstack = fips or found.fips, dualstack or found.dualstack
    else:
        assert env_creds is not None
        creds = _constant(env_creds, mask)
    address = _address(bucket, endpoint, source, region, fips, dualstack)
    return Settings(address, creds, endpoint, source)


def _address(
    bucket: str, endpoint: str, source: str, region: str, fips: bool, dualstack: bool
) -> Address:
    """Where the bucket's requests go; a region or an endpoint that cannot be one is refused."""
    if not endpoint and region and not is_region(region):
        raise InputError(
            f"the region {region[:40]!r} is not an AWS region name",
            hint="set the region input (or AWS_REGION) to the bucket's region, e.g. eu-west-1",
        )
    try:
        return Address.of(bucket, endpoint, region or "us-east-1", fips, dualstack)
    except ValueError:
        raise InputError(
            f"the S3 endpoint (set by {source or 'endpoint-url'}) is not an http(s)://host[:port]"
            " URL",
            hint="set the endpoint as http(s)://host[:port]",
        ) from None


def _constant(creds: EnvCredentials, mask: Mask) -> Creds:
    """Keys from the environment or a profile's plain keys, masked in the job's log first."""
    for secret in (creds.access_key, creds.secret_key, creds.token):
        if secret and mask is not None:
            mask(secret)

    def constant(until: float | None = None) -> EnvCredentials:
        return creds

    return constant


def _aws_file(environ: Mapping[str, str], setting: Setting, name: str) -> Path:
    """``setting`` (AWS_CONFIG_FILE, ...), else ``~/.aws/<name>`` under the environment's HOME."""
    path = setting.value(environ) if setting.is_set(environ) else ""
    if not path:
        home = environ.get("HOME", "").strip()
        path = str(Path(home) / ".aws" / name) if home else f"~/.aws/{name}"
    return Path(os.path.expanduser(path))  # as botocore: an unknown ~user stays as written


def _config_text(environ: Mapping[str, str]) -> str:
    """The AWS config file's text ("" when absent or no regular file, as botocore reads it;
    at most 1 MiB: :func:`aws_file_bytes`): whether botocore has more to say."""
    data = aws_file_bytes(_aws_file(environ, settings.AWS_CONFIG_FILE, "config"))
    return (data or b"").decode(errors="replace")


@dataclass(frozen=True)
class _Found:
    region: str
    endpoint: str
    endpoint_source: str
    fips: bool
    dualstack: bool


def _from_botocore(
    environ: Mapping[str, str], mask: Mask, url: str, limits: Limits
) -> tuple[Creds, _Found]:
    """Credentials and config from botocore's session: the whole chain, as the AWS CLI, held
    to one operation's time limit."""
    import botocore.exceptions
    import botocore.session

    from gpuci.cache._stores.s3.credentials import Chain

    session = botocore.session.Session()
    chain: Chain | None = None
    if environ is not os.environ:  # botocore reads os.environ: name what the caller's says
        session.set_config_variable(
            "config_file", str(_aws_file(environ, settings.AWS_CONFIG_FILE, "config"))
        )
        creds_file = _aws_file(environ, settings.AWS_SHARED_CREDENTIALS_FILE, "credentials")
        session.set_config_variable("credentials_file", str(creds_file))
        if settings.AWS_PROFILE.is_set(environ):
            session.set_config_variable("profile", settings.AWS_PROFILE.value(environ))
    try:
        found = _config(session, environ)
        chain = Chain(session, url, limits.timeout)
        until = time.monotonic() + limits.operation
        resolved = chain.resolve(until)
        if resolved is None:
            raise NoCredentials(
                f"no AWS credentials found for {url}",
                hint="configure credentials (aws-actions/configure-aws-credentials, "
                "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a profile)",
            )
        creds = _Refreshing(resolved, mask, url, chain, limits.operation)
        creds(until)  # resolve now: fail early, mask early
    except botocore.exceptions.BotoCoreError as exc:
        source = chain.describe() if chain is not None else ""
        raise config_error(exc, environ, url, source) from None
    return creds, found


def _config(session: Any, environ: Mapping[str, str]) -> _Found:
    """Region, endpoint_url (the profile's or its ``services`` section's), FIPS and dual-stack
    from the active profile."""
    scoped = session.get_scoped_config()  # ProfileNotFound for an unknown AWS_PROFILE
    region = str(scoped.get("region") or "")  # the environment's was read already
    endpoint, source = "", ""
    ignore = str(scoped.get("ignore_configured_endpoint_urls") or "")
    if ignore.lower() != "true" and not settings.AWS_IGNORE_CONFIGURED_ENDPOINT_URLS.is_true(
        environ
    ):
        section = scoped.get("services")
        services = session.full_config.get("services", {}).get(section, {}) if section else {}
        s3 = services.get("s3", {}) if isinstance(services, dict) else {}
        endpoint = str((s3 if isinstance(s3, dict) else {}).get("endpoint_url") or "")
        endpoint = endpoint or str(scoped.get("endpoint_url") or "")
        profile = settings.AWS_PROFILE.value(environ) or "default"
        source = f"endpoint_url of AWS profile '{profile}'" if endpoint else ""
    fips = str(scoped.get("use_fips_endpoint") or "").lower() == "true"
    dualstack = str(scoped.get("use_dualstack_endpoint") or "").lower() == "true"
    return _Found(region.strip(), endpoint.strip(), source, fips, dualstack)


class _Refreshing:
    """botocore's credentials, frozen at each call: expiring role credentials refresh under
    the store (botocore's own refresh, by the operation's deadline when ``chain`` is given),
    and each new secret is masked before it is used."""

    def __init__(
        self,
        creds: Any,
        mask: Mask,
        url: str,
        chain: Chain | None = None,
        within: float = Limits().operation,
    ) -> None:
        self._creds, self._mask, self._url = creds, mask, url
        self._chain, self._within = chain, within
        self._masked: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, until: float | None = None) -> EnvCredentials:
        """The credentials now, refreshed if due, by ``until`` (default: one operation from
        now)."""
        import botocore.exceptions

        if until is None:
            until = time.monotonic() + self._within
        try:
            if self._chain is None:
                frozen = self._creds.get_frozen_credentials()
            else:
                frozen = self._chain.frozen(self._creds, until)
        except botocore.exceptions.BotoCoreError as exc:
            source = self._chain.describe() if self._chain is not None else ""
            raise StoreError(
                f"cannot refresh the AWS credentials for {self._url} ({type(exc).__name__}"
                + (f" from {source})" if source else ")"),
                hint=f"check {source or _ANY_SOURCE} and retry",
            ) from None
        got = EnvCredentials(frozen.access_key or "", frozen.secret_key or "", frozen.token or "")
        with self._lock:
            for secret in (got.access_key, got.secret_key, got.token):
                if secret and secret not in self._masked:
                    self._masked.add(secret)
                    if self._mask is not None:
                        self._mask(secret)
        return got


def config_error(
    exc: Exception, environ: Mapping[str, str], url: str, source: str = ""
) -> Exception:
    """AWS configuration botocore cannot use (a missing profile, an unreadable config file, no
    credentials): one line, not an internal error. ``source``: the credential source that was
    running, in words, if known."""
    import botocore.exceptions as errors

    if isinstance(exc, errors.ProfileNotFound):
        profile = getattr(exc, "kwargs", {}).get("profile") or settings.AWS_PROFILE.value(environ)
        return InputError(
            f"AWS profile '{profile}' (AWS_PROFILE) is not in the AWS config files",
            hint="fix AWS_PROFILE or add that profile to ~/.aws/config "
            "(AWS_CONFIG_FILE), or unset AWS_PROFILE to use the environment's credentials",
        )
    if isinstance(exc, errors.NoCredentialsError | errors.PartialCredentialsError):
        kind = NoCredentials if isinstance(exc, errors.NoCredentialsError) else StoreError
        return kind(
            f"no usable AWS credentials for {url} ({type(exc).__name__})",
            hint="configure credentials (aws-actions/configure-aws-credentials or "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)",
        )
    config_errors = (
        errors.ConfigParseError,
        errors.ConfigNotFound,
        errors.InvalidConfigError,
        errors.UnknownCredentialError,
    )
    if isinstance(exc, config_errors):
        return InputError(
            f"the AWS configuration cannot be used: {str(exc)[:300]}",
            hint="fix ~/.aws/config or the AWS_* variables",
        )
    # A credential_process's error carries its stderr, which may hold a secret: name the
    # source and the error's type only.
    said = "" if isinstance(exc, errors.CredentialRetrievalError) else f": {str(exc)[:200]}"
    return StoreError(
        f"cannot resolve the AWS credentials for {url}"
        + (f" from {source}" if source else "")
        + f": {type(exc).__name__}{said}",
        hint="check the AWS profile's credential source (SSO login, credential_process, role)",
    )
