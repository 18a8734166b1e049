"""Static keys in an AWS profile, read without botocore when botocore would find just them.

botocore's import is most of a restore's start-up (~0.25 s of ~1.9 s remote-like), and a
self-hosted runner often holds plain keys in ``~/.aws/credentials``: for that profile the
chain's answer is known from two small INI files. :func:`static_profile` reads them as
botocore does (``RawConfigParser``, the same sections and precedence) and answers only when
nothing else could take part: the active profile's sections hold keys, a region and an output
format and nothing more (no role, SSO, ``credential_process``, web identity, endpoint or S3
setting), the environment names no other source, and the files parse. Anything else is
``None``: botocore's chain resolves it, with its bounds and one-line errors (:mod:`.config`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpuci import files, settings
from gpuci.cache._stores.s3.signer import EnvCredentials
from gpuci.errors import InputError

if TYPE_CHECKING:
    import configparser

__all__ = ["StaticProfile", "aws_file_bytes", "static_profile"]

_KEYS = ("aws_access_key_id", "aws_secret_access_key", "aws_session_token")
# What a profile section may hold for the answer to be botocore's without botocore.
_CONFIG_OK = frozenset({"region", "output", *_KEYS})
_CREDENTIALS_OK = frozenset(_KEYS)
# Variables that bring in another source before the credentials file (web identity), name
# the profile otherwise than AWS_PROFILE, or are half of the environment's keys (botocore then
# fails with PartialCredentialsError, naming the missing one: never the profile's keys instead).
_OTHER_SOURCES = (
    settings.AWS_ACCESS_KEY_ID,
    settings.AWS_WEB_IDENTITY_TOKEN_FILE,
    settings.AWS_ROLE_ARN,
    settings.AWS_DEFAULT_PROFILE,
)
_MAX_BYTES = 1 << 20  # an AWS file larger than this is refused: botocore would read it all


@dataclass(frozen=True)
class StaticProfile:
    """The profile's keys and region ("" when it names none)."""

    creds: EnvCredentials
    region: str


def static_profile(
    environ: Mapping[str, str], config: Path, credentials: Path
) -> StaticProfile | None:
    """The active profile's static keys, as botocore's chain would resolve them with no keys in
    the environment; None when botocore could answer otherwise (then botocore answers)."""
    if any(environ.get(setting.name) for setting in _OTHER_SOURCES):  # unstripped, as botocore
        return None
    if "$" in f"{config}{credentials}":  # botocore expands variables in these paths
        return None
    name = settings.AWS_PROFILE.value(environ) or "default"
    conf, creds = _parse(config), _parse(credentials)
    if conf is None or creds is None:
        return None
    section = _config_section(conf, name)
    if section is None or not set(section) <= _CONFIG_OK:
        return None
    stored = dict(creds[name]) if creds.has_section(name) else {}
    if not set(stored) <= _CREDENTIALS_OK:
        return None
    # botocore: the credentials file's keys, then (credential_process aside) the config file's
    for source in (stored, section):
        access, secret = source.get(_KEYS[0], ""), source.get(_KEYS[1], "")
        if access and secret:
            keys = EnvCredentials(access, secret, source.get(_KEYS[2], ""))
            return StaticProfile(keys, section.get("region", "").strip())
        if access or secret:  # partial: botocore's PartialCredentialsError says which
            return None
    return None  # no keys: the container endpoint or the instance role, botocore's


def aws_file_bytes(path: Path) -> bytes | None:
    """The AWS config or credentials file's bytes, read the one way gpu-ci reads a file someone
    else may have put there (:func:`gpuci.files.open_regular`): b"" when it is absent or no
    regular file (a FIFO, a device, a folder: botocore's ``os.path.isfile`` skips those as
    absent, and opening one here would wait for ever), None when it cannot be opened (botocore
    skips it too, and says what it then misses).

    Raises:
        InputError: it is over 1 MiB (botocore would read it all into memory).
    """
    try:
        handle = os.fdopen(files.open_regular(path), "rb")
    except (FileNotFoundError, files.NotRegular):
        return b""
    except OSError:
        return None
    with handle:
        data = handle.read(_MAX_BYTES + 1)
    if len(data) > _MAX_BYTES:
        raise InputError(
            f"the AWS file {path} is over {_MAX_BYTES >> 20} MiB, too large to be AWS settings",
            hint="point AWS_CONFIG_FILE / AWS_SHARED_CREDENTIALS_FILE at the real AWS files",
        )
    return data


def _parse(path: Path) -> configparser.RawConfigParser | None:
    """The file as botocore parses it (an empty one when absent or no regular file:
    :func:`aws_file_bytes`); None when it cannot be read or parsed: botocore then says why."""
    import configparser  # only when no keys are in the environment: a warm restore skips it

    parser = configparser.RawConfigParser()
    data = aws_file_bytes(path)
    if data is None:
        return None
    try:
        parser.read_string(data.decode())
    except (UnicodeDecodeError, configparser.Error):
        return None
    return parser


def _config_section(conf: configparser.RawConfigParser, name: str) -> dict[str, str] | None:
    """The profile's section of the config file ({} when absent), as botocore names them:
    ``[profile NAME]``, and ``[default]`` for default; None when both spellings exist."""
    spelt = [f"profile {name}", *(["default"] if name == "default" else [])]
    found = [dict(conf[section]) for section in spelt if conf.has_section(section)]
    if len(found) > 1:
        return None
    return found[0] if found else {}
