"""gpu-ci's Python API: :func:`restore` and :func:`save` (the cache commands without the CLI),
and :func:`fetch_file` (re-exported from :mod:`gpuci.fetch`).

They build the commands' typed inputs (:mod:`gpuci.cache.options`) directly and run the same
phases as ``cache-weights restore`` / ``save``, so a Python caller gets the same lookup, checks
and store handling, and typed results instead of action outputs::

    from gpuci.cache.api import restore, save
    save("weights-v1", ["models/"], store="file:///srv/cache")
    got = restore("weights-v1", ["models/"], store="file:///srv/cache")
    assert got.hit

Errors are raised, never returned: :class:`gpuci.errors.InputError` for a bad key, path or
option (exit 2 in the CLI), :class:`gpuci.errors.StoreError` (an :class:`InfraError`) when the
store cannot be read or written, :class:`gpuci.errors.IntegrityError` when restored bytes do
not match their digests. A miss is not an error: ``RestoreResult.hit`` is False.

It lives in ``gpuci.cache.api`` rather than ``gpuci.cache`` because ``gpuci.cache.restore`` and
``gpuci.cache.save`` are already module names (the commands' own).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuci.cache.options import RestoreInputs, SaveInputs
from gpuci.errors import InputError
from gpuci.fetch import FetchPolicy, FetchResult, fetch_file
from gpuci.runtime import Result, Runtime

__all__ = [
    "FetchPolicy",
    "FetchResult",
    "RestoreInputs",
    "RestoreResult",
    "SaveInputs",
    "SaveResult",
    "fetch_file",
    "restore",
    "save",
]

_LAYOUTS = ("plain", "hf")
_TIER_MODES = ("copy", "verify", "link")


@dataclass(frozen=True)
class RestoreResult:
    """What a restore did: ``hit`` is True only for the exact key (or the manifest asked for)."""

    hit: bool
    matched_key: str  # "" on a miss and for a restore by manifest
    manifest: str  # sha256 of the manifest restored; "" on a miss
    files: int
    bytes_downloaded: int
    bytes_from_local: int
    result: Result  # the command's full Result (headline, report, warnings)


@dataclass(frozen=True)
class SaveResult:
    """What a save did: ``outcome`` is saved, updated, unchanged, same-content or lost-race."""

    outcome: str
    manifest: str
    files: int
    bytes_uploaded: int
    result: Result


def restore(
    key: str,
    path: str | Sequence[str],
    *,
    store: str = "",
    restore_keys: Sequence[str] = (),
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    endpoint_url: str = "",
    region: str = "",
    local_cache: str = "",
    local_cache_mode: str = "copy",
    runtime: Runtime | None = None,
) -> RestoreResult:
    """Restore the tree saved under ``key`` (else the newest ``restore_keys`` prefix match)
    into ``path`` (one folder or file, or several in the order they were saved).

    ``store`` is ``s3://bucket/prefix`` or ``file:///dir`` (default: the embedded local store).
    Raises :class:`~gpuci.errors.InputError` (bad key, no path, an unknown ``local_cache_mode``,
    a path count that differs from the save's), :class:`~gpuci.errors.StoreError` (the store
    cannot be read) or :class:`~gpuci.errors.IntegrityError` (bytes that fail their digest).
    """
    _choice("local_cache_mode", local_cache_mode, _TIER_MODES)
    inp = RestoreInputs(
        key=_text("key", key),
        path=_paths(path),
        restore_keys=list(restore_keys),
        include=list(include),
        exclude=list(exclude),
        store=store,
        endpoint_url=endpoint_url,
        region=region,
        local_cache=local_cache,
        local_cache_mode=local_cache_mode,
    )
    from gpuci.cache import restore_command

    res = restore_command.run(inp, runtime or Runtime())
    out = res.outputs
    return RestoreResult(
        hit=bool(out.get("cache-hit")),
        matched_key=str(out.get("matched-key") or ""),
        manifest=str(out.get("manifest") or ""),
        files=int(out.get("files") or 0),
        bytes_downloaded=int(out.get("bytes-downloaded") or 0),
        bytes_from_local=int(out.get("bytes-from-local") or 0),
        result=res,
    )


def save(
    key: str,
    path: str | Sequence[str],
    *,
    store: str = "",
    endpoint_url: str = "",
    region: str = "",
    local_cache: str = "",
    layout: str = "plain",
    hf_repo: str = "",
    runtime: Runtime | None = None,
) -> SaveResult:
    """Save ``path`` (one folder or file, or several) under ``key``, uploading only the blobs
    the store lacks.

    Raises :class:`~gpuci.errors.InputError` (bad key, no path, a path that is not there, an
    unknown ``layout``), :class:`~gpuci.errors.StoreError` (the store cannot be written) or
    :class:`~gpuci.errors.ConflictError` (the key changed under this save and could not be
    settled).
    """
    _choice("layout", layout, _LAYOUTS)
    inp = SaveInputs(
        key=_text("key", key),
        path=_paths(path) if layout == "plain" or path else [],
        store=store,
        endpoint_url=endpoint_url,
        region=region,
        local_cache=local_cache,
        layout=layout,
        hf_repo=hf_repo,
    )
    from gpuci.cache import save as save_command

    res = save_command.run(inp, runtime or Runtime())
    out = res.outputs
    return SaveResult(
        outcome=str(out.get("outcome") or ""),
        manifest=str(out.get("manifest") or ""),
        files=int(out.get("files") or 0),
        bytes_uploaded=int(out.get("bytes-uploaded") or 0),
        result=res,
    )


def _text(name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{name} must be a non-empty string", hint=f"pass {name} as text")
    return value.strip()


def _paths(path: str | Sequence[str]) -> list[str]:
    paths = [path] if isinstance(path, str) else [str(p) for p in path]
    if not paths or not all(str(p).strip() for p in paths):
        raise InputError("no path given", hint="pass the folders or files as path")
    return [str(p) for p in paths]


def _choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise InputError(
            f"{name} is {value!r}, not one of: {', '.join(choices)}",
            hint=f"set {name} to one of {', '.join(choices)}",
        )
