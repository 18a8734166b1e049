"""Opening the tier a job asked for: its size and mode inputs, and whether its folder is private.

:mod:`gpuci.cache._stores.tier_policy` says whether the tier is on here, and where; this module
makes the :class:`~gpuci.cache._stores.tier.LocalTier` that restore and save use, after checking
that no other user can write the folder or any folder above it (docs/security.md): a tier
another user can swap is not used, with a warning, and the job goes on with the store alone.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

from gpuci import inputs, ownership, settings
from gpuci.cache._stores.tier import LocalTier, parse_mode
from gpuci.cache._stores.tier_policy import TierChoice, choose
from gpuci.errors import InputError

__all__ = ["DEFAULT_SIZE", "open_tier", "parse_size", "private_root_problem", "runner_uid"]

DEFAULT_SIZE = "100GiB"


def parse_size(raw: str, what: str = "local-cache-size") -> int:
    """``500MB``, ``100GiB``, ``2T``, ``0`` or ``none`` (no limit) -> bytes, 0 meaning no limit.

    The units are those of every size input (:func:`gpuci.inputs.parse_size`): ``MB`` is 1000^2,
    ``MiB`` and a bare ``M`` 1024^2, so ``local-cache-size`` and ``max-bytes`` read alike.
    """
    try:
        limit = inputs.parse_size(raw or "")
    except ValueError:
        raise InputError(
            f"input '{what}' is '{raw}', not a size",
            hint=f"set {what} to a size such as 500MB, 100GiB or 0 for no limit",
        ) from None
    return limit or 0


def open_tier(
    environ: Mapping[str, str],
    *,
    local_cache: str = "",
    local_cache_size: str = "",
    local_cache_mode: str = "",
) -> tuple[LocalTier | None, list[str], TierChoice]:
    """The tier asked for (``local-cache``, then ``GPUCI_LOCAL_CACHE``, then ``auto``: see
    :mod:`gpuci.cache._stores.tier_policy`).

    Returns (tier, warnings, choice): the tier is None when off, or when the folder could be
    written by another user (then the warning says why, and the job goes on with the store
    alone); ``choice`` says which and why, for the output and the summary. Raises InputError
    for an unknown mode or an unreadable size.
    """
    mode = parse_mode(local_cache_mode)
    limit = parse_size(local_cache_size or DEFAULT_SIZE)
    choice = choose(environ, local_cache)
    if not choice.on or choice.root is None:
        return None, [], choice
    problem = private_root_problem(choice.root, runner_uid(environ))
    if problem is not None:
        return (
            None,
            [
                f"local cache not used: {problem} (fix: point local-cache at a folder only "
                "this user can write, or remove it so gpu-ci recreates it 0700)"
            ],
            TierChoice(False, None, f"{choice.root} is not private to this user"),
        )
    return LocalTier(choice.root, limit, mode), [], choice


def runner_uid(environ: Mapping[str, str]) -> int | None:
    """In GitHub Actions, the runner's own user: the owner of ``RUNNER_TEMP``.

    It runs the job anyway; trusting the folders it owns lets a container job (root inside,
    the runner's uid on the mounted ``/__w`` and ``/__t``) keep its tier.
    """
    temp = settings.RUNNER_TEMP.value(environ)
    if not settings.GITHUB_ACTIONS.is_true(environ) or not temp:
        return None
    try:
        return os.stat(temp).st_uid
    except OSError:
        return None


def private_root_problem(root: Path, runner: int | None = None) -> str | None:
    """Why ``root`` cannot be the tier (None: it can).

    The tier itself, when it exists, must be a folder owned by the current user that nobody
    else can write; every folder above it must be owned by us, root or the runner's user and
    not writable by others unless sticky (``/tmp``), so no other user can swap any part of the
    path.
    """
    uid = ownership.current_uid()
    for parent in reversed(root.parents):
        try:
            st = os.lstat(parent)
        except FileNotFoundError:
            break  # we create the rest, as ourselves
        except OSError as exc:  # a name too long, a folder this user may not enter
            return f"{parent} cannot be looked at: {exc.strerror or exc}"
        if st.st_uid not in (0, uid, runner):
            return f"{parent} is owned by uid {st.st_uid}, who could replace the folder"
        if st.st_mode & ownership.OTHERS_WRITE and not st.st_mode & stat.S_ISVTX:
            return f"{parent} can be written by other users (mode {stat.S_IMODE(st.st_mode):o})"
    try:
        st = os.lstat(root)
    except FileNotFoundError:
        return None
    except OSError as exc:  # a name too long, a file where a folder goes above it
        return f"{root} cannot be looked at: {exc.strerror or exc}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{root} is not a folder"
    if st.st_uid != uid:
        return f"{root} is owned by uid {st.st_uid}, not {uid}"
    if st.st_mode & ownership.OTHERS_WRITE:
        return f"{root} can be written by other users (mode {stat.S_IMODE(st.st_mode):o})"
    return None
