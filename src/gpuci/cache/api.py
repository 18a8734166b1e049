"""gpu-ci's Python API: :func:`restore` and :func:`save` (the cache commands without the CLI),
and :func:`fetch_file` (re-exported from :mod:`gpuci.fetch`).

They build the commands' typed inputs (:mod:`gpuci.cache.options`) and call the operations the
commands call (:func:`gpuci.cache._restore.operation.restore`,
:func:`gpuci.cache._save.operation.save`), so a Python caller gets the same lookup, checks and
store handling, and typed results; the commands only render those results as action outputs::

    from gpuci.cache.api import restore, save
    save("weights-v1", ["models/"], store="file:///srv/cache")
    got = restore("weights-v1", ["models/"], store="file:///srv/cache")
    assert got.hit

Errors are raised, never returned: :class:`gpuci.errors.InputError` for a bad key, path or
option (exit 2 in the CLI), :class:`gpuci.errors.StoreError` (an :class:`InfraError`) when the
store cannot be read or written, :class:`gpuci.errors.IntegrityError` when restored bytes do
not match their digests. A miss is not an error: ``RestoreResult.hit`` is False.

It lives in ``gpuci.cache.api`` rather than ``gpuci.cache`` so that importing
``gpuci.cache`` loads nothing: a restore's start-up loads only what it uses.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from gpuci.cache.options import RestoreInputs, SaveInputs
from gpuci.errors import InputError
from gpuci.fetch import FetchPolicy, FetchResult, fetch_file
from gpuci.inputs import checked
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


@dataclass(frozen=True)
class RestoreResult:
    """What a restore did: ``hit`` is True only for the exact key (or the manifest asked for)."""

    hit: bool
    matched_key: str  # "" on a miss and for a restore by manifest
    manifest: str  # sha256 of the manifest restored; "" on a miss
    files: int
    bytes_downloaded: int
    bytes_from_local: int
    result: Result  # the step's Result, as the CLI would report it (headline, report, warnings)
    warnings: tuple[str, ...] = ()  # what went wrong without failing (e.g. a use not recorded)


@dataclass(frozen=True)
class SaveResult:
    """What a save did: ``outcome`` is saved, updated, unchanged, same-content or lost-race."""

    outcome: str
    manifest: str
    files: int
    bytes_uploaded: int
    result: Result  # the step's Result, as the CLI would report it
    warnings: tuple[str, ...] = ()  # e.g. the lost race, naming the tree that won


_RESTORE = RestoreInputs()  # the keywords' defaults are the inputs' (gpuci.inputs.inp)
_SAVE = SaveInputs()


def restore(
    key: str,
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    store: str = _RESTORE.store,
    restore_keys: Sequence[str] = (),
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    endpoint_url: str = _RESTORE.endpoint_url,
    region: str = _RESTORE.region,
    local_cache: str = _RESTORE.local_cache,
    local_cache_mode: str = _RESTORE.local_cache_mode,
    runtime: Runtime | None = None,
) -> RestoreResult:
    """Restore the tree saved under ``key`` (else the newest ``restore_keys`` prefix match).

    Args:
        key: the exact cache key, e.g. ``weights-llama-3-8b-v1``.
        path: the folder or file to restore into, or several in the order they were saved.
        store: ``s3://bucket/prefix`` or ``file:///dir``; empty: the embedded local store.
        restore_keys: key prefixes to fall back to, tried in order; the newest match of the
            first prefix that matches wins.
        include: restore only the files matching these globs.
        exclude: skip the files matching these globs.
        endpoint_url: an S3-compatible endpoint (MinIO, R2, Ceph...); empty: AWS.
        region: the S3 region; empty: from the AWS configuration.
        local_cache: the runner-local blob folder: a folder, ``on``, ``off`` or ``auto``.
        local_cache_mode: ``copy``, ``verify`` or ``link`` (see docs/security.md).
        runtime: the environment, output streams and masks; default: this process's.

    Returns:
        What was restored; a miss is ``hit=False`` with ``matched_key=""``, not an error.

    Raises:
        InputError: a bad key, no path, an unknown ``local_cache_mode``, or a path count that
            differs from the save's.
        StoreError: the store cannot be read (an :class:`~gpuci.errors.InfraError`).
        IntegrityError: restored bytes that do not match their digests.
    """
    inp = RestoreInputs(
        key=_text("key", key),
        path=_paths(path),
        restore_keys=_texts("restore_keys", restore_keys),
        include=_texts("include", include),
        exclude=_texts("exclude", exclude),
        store=store,
        endpoint_url=endpoint_url,
        region=region,
        local_cache=local_cache,
        local_cache_mode=local_cache_mode,
    )
    from gpuci.cache._restore import operation, report  # loaded by the first restore

    rt = runtime or Runtime()
    done = operation.restore(checked(inp), rt)
    match, moved = done.match, done.moved
    return RestoreResult(
        hit=match is not None and match.exact,
        matched_key=match.matched_key if match else "",
        manifest=match.ref.manifest if match else "",
        files=match.files if match else 0,
        bytes_downloaded=moved.downloaded if moved else 0,
        bytes_from_local=moved.from_local if moved else 0,
        result=report.render(done, rt),
        warnings=tuple(message for message, _ in done.warnings),
    )


def save(
    key: str,
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    store: str = _SAVE.store,
    endpoint_url: str = _SAVE.endpoint_url,
    region: str = _SAVE.region,
    local_cache: str = _SAVE.local_cache,
    layout: str = _SAVE.layout,
    hf_repo: str = _SAVE.hf_repo,
    follow_symlinks: str = _SAVE.follow_symlinks,
    runtime: Runtime | None = None,
) -> SaveResult:
    """Save ``path`` under ``key``, uploading only the blobs the store lacks.

    Args:
        key: the cache key to save under.
        path: the folder or file to save, or several (restores list them in this order); with
            ``layout="hf"`` it may be empty (the hub cache folder).
        store: ``s3://bucket/prefix`` or ``file:///dir``; empty: the embedded local store.
        endpoint_url: an S3-compatible endpoint (MinIO, R2, Ceph...); empty: AWS.
        region: the S3 region; empty: from the AWS configuration.
        local_cache: the runner-local blob folder: a folder, ``on``, ``off`` or ``auto``.
        layout: ``plain`` (the paths as they are) or ``hf`` (one Hugging Face repo).
        hf_repo: with ``layout="hf"``: the repo, ``org/name`` or ``datasets/org/name``.
        follow_symlinks: ``inside`` (a link leaving the saved paths is skipped, with a
            warning: a link a PR planted must not upload what it points at) or ``all`` (the
            file behind such a link is saved as a file, each link said in a warning).
        runtime: the environment, output streams and masks; default: this process's.

    Returns:
        What the save did: ``outcome`` is saved, updated, unchanged, same-content or lost-race.

    Raises:
        InputError: a bad key, no path, a path that is not there, or an unknown ``layout``.
        StoreError: the store cannot be written (an :class:`~gpuci.errors.InfraError`).
        ConflictError: the key changed under this save and could not be settled.
    """
    inp = SaveInputs(
        key=_text("key", key),
        path=_paths(path) if layout == "plain" or path else [],
        store=store,
        endpoint_url=endpoint_url,
        region=region,
        local_cache=local_cache,
        layout=layout,
        hf_repo=hf_repo,
        follow_symlinks=follow_symlinks,
    )
    from gpuci.cache._save import operation, report  # loaded by the first save

    done = operation.save(checked(inp), runtime or Runtime())
    return SaveResult(
        outcome=done.word,
        manifest=done.digest,
        files=done.files,
        bytes_uploaded=done.bytes_uploaded,
        result=report.render(done),
        warnings=tuple(message for message, _ in done.warnings),
    )


def _text(name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{name} must be a non-empty string", hint=f"pass {name} as text")
    return value.strip()


def _texts(name: str, value: object) -> list[str]:
    """A list argument's strings; one string is one item: ``list("weights-")`` would be nine
    one-letter items, a restore-keys prefix ``w`` that restores any key starting with it."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, Sequence) or isinstance(items, bytes):
        raise InputError(f"{name} must be a list of strings", hint=f"pass {name} as [str, ...]")
    if not all(isinstance(item, str) and "\0" not in item for item in items):
        raise InputError(f"{name} must hold strings only", hint=f"pass {name} as [str, ...]")
    return list(items)


def _paths(path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    """One path (a str or a ``Path``) or several; bytes (a sequence of numbers) is refused."""
    many = [path] if isinstance(path, str | os.PathLike) else path
    if not isinstance(many, Sequence) or isinstance(many, bytes):
        raise InputError("path must be a path or a list of paths", hint="pass path as a str")
    paths = [os.fspath(p) if isinstance(p, os.PathLike) else p for p in many]
    if not all(isinstance(p, str) and "\0" not in p for p in paths):
        raise InputError("path must hold str or Path items", hint="pass path as a str")
    if not paths or not all(p.strip() for p in paths):
        raise InputError("no path given", hint="pass the folders or files as path")
    return paths
