"""The Hugging Face hub cache layout, named once: where a repo lives and what a revision holds.

``layout: hf`` caches one repo's folder of ``HF_HUB_CACHE`` (``models--org--name`` with
``blobs/``, ``snapshots/<commit>/`` of relative symlinks into ``../../blobs`` and ``refs/<name>``
files naming a commit), so a job can run with ``HF_HUB_OFFLINE=1`` after the restore. The tree
code already keeps in-tree symlinks as symlinks; this module only picks the folder and, with
``hf-revision``, the part of it one revision needs.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from gpuci import files, settings, untrusted_json
from gpuci.cache._format import manifest as mf
from gpuci.cache._format.select import select
from gpuci.errors import InputError

__all__ = [
    "REPO_TYPES",
    "commit_of",
    "foreign_folder",
    "hub_cache",
    "paths",
    "pick_revision",
    "repo_folder",
    "revision_patterns",
    "saved_folder",
]

REPO_TYPES = ("models", "datasets", "spaces")


def hub_cache(environ: Mapping[str, str]) -> Path:
    """``HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``. A ``~user``
    no one is stays as written (``Path.expanduser`` raised RuntimeError: an internal error)."""
    if settings.HF_HUB_CACHE.is_set(environ):
        return Path(os.path.expanduser(settings.HF_HUB_CACHE.value(environ)))
    if settings.HF_HOME.is_set(environ):
        return Path(os.path.expanduser(settings.HF_HOME.value(environ))) / "hub"
    home = environ.get("HOME") or str(Path.home())
    return Path(home) / ".cache" / "huggingface" / "hub"


def repo_folder(repo: str) -> str:
    """``org/name`` -> ``models--org--name``; ``datasets/org/name`` -> ``datasets--org--name``.

    Raises InputError for anything else (empty, too many parts, ``..``, ``--`` or a NUL, which
    no file name holds, in a part).
    """
    parts = [p for p in repo.strip().strip("/").split("/") if p]
    kind = "models"
    if len(parts) == 3 and parts[0] in REPO_TYPES:
        kind, parts = parts[0], parts[1:]
    if (
        not parts
        or len(parts) > 2
        or any(p in (".", "..") or "--" in p or "\0" in p for p in parts)
    ):
        raise InputError(
            f"hf-repo '{repo}' is not a Hugging Face repo id",
            hint="set hf-repo to org/name, or datasets/org/name for a dataset",
        )
    return "--".join([kind, *parts])


def paths(hf_repo: str, path: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """The one path an hf-layout save or restore works on: ``<hub cache>/<repo folder>``.

    ``path`` is the ``path`` input (empty: ``HF_HUB_CACHE``). Raises InputError when
    ``hf_repo`` is empty or no repo id, or ``path`` lists several folders.
    """
    repo = hf_repo.strip()
    if not repo:
        raise InputError("layout is hf but hf-repo is empty", hint="set hf-repo to org/name")
    if len(path) > 1:
        raise InputError(
            "layout hf takes one path (the hub cache folder), this lists several",
            hint="set path to the HF_HUB_CACHE folder, or leave it empty for the default",
        )
    base = Path(os.path.expanduser(path[0])) if path and path[0] else hub_cache(environ)
    return [str(base / repo_folder(repo))]


# A ref file holds a 40-hex commit; more than this is no ref (huggingface_hub writes ~40 bytes).
MAX_REF_BYTES = 4096


def commit_of(folder: Path, revision: str, warnings: list[str] | None = None) -> str:
    """The commit a revision names in a local repo folder (a ref's content, or the name).

    ``refs/<revision>`` is read only as a regular file of at most :data:`MAX_REF_BYTES`, opened
    without following a link: a job could plant a link there (to ``/proc/self/pagemap``, a FIFO)
    or a sparse file of gigabytes. Anything else is said in ``warnings`` and the revision is
    taken as the commit's name.
    """
    ref = folder / "refs" / revision
    try:
        text = _read_ref(folder, revision)
    except FileNotFoundError:
        return revision
    except (OSError, ValueError) as exc:
        if warnings is not None:
            why = _why(exc)
            warnings.append(f"not read {ref}: {why}; the revision '{revision}' is taken as commit")
        return revision
    return text.strip() or revision


def _why(exc: Exception) -> str:
    return (exc.strerror if isinstance(exc, OSError) else None) or str(exc)


def _read_ref(folder: Path, revision: str) -> str:
    """A ref file's text: a regular file reached below the repo folder through no link
    (:func:`gpuci.files.open_below`), at most MAX_REF_BYTES of UTF-8."""
    *above, name = ["refs", *revision.split("/")]
    try:
        refs = files.open_below(folder, above)
        try:
            fd = files.open_regular(name, follow=False, dir_fd=refs)
        finally:
            os.close(refs)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        link = exc.filename if isinstance(exc, files.Blocked) else folder / "refs" / revision
        raise ValueError(f"{link} is a symlink, and gpu-ci reads no ref through one") from None
    with os.fdopen(fd, "rb") as handle:
        return untrusted_json.read_handle(handle, MAX_REF_BYTES)  # Unusable: a ValueError


def saved_folder(manifest: mf.Manifest) -> str:
    """The repo folder a manifest was saved from (its root's last name)."""
    return PurePosixPath(manifest.roots[0].get("path", "").rstrip("/")).name


def foreign_folder(manifest: mf.Manifest, hf_repo: str) -> str | None:
    """The saved repo folder when it is not the one ``hf-repo`` asks for, else None.

    Restoring another repo's tree under the requested name would make ``from_pretrained``
    load the wrong model offline, silently: such a manifest is never a hit.
    """
    folder = saved_folder(manifest)
    wanted = repo_folder(hf_repo)
    return None if len(manifest.roots) == 1 and folder == wanted else folder or "(unnamed)"


def revision_patterns(revision: str, commit: str) -> list[str]:
    """Include globs for one revision: its ref file, its snapshot (links bring the blobs),
    and huggingface_hub's own records of it: the file listing ``trees/<commit>.json`` and
    ``.no_exist/<commit>/`` (files the hub said are absent, so offline loads skip them).

    Both names match as written: a ref file is anyone's text, and one holding ``*`` picked
    every snapshot of the folder (``snapshots/*/*``) as that revision's."""
    commit, revision = _literal(commit), _literal(revision)
    patterns = [f"snapshots/{commit}/*", f"trees/{commit}.json", f".no_exist/{commit}/*"]
    if revision != commit:
        patterns.append(f"refs/{revision}")
    return patterns


def _literal(name: str) -> str:
    """``name`` as an fnmatch pattern matching only itself (``glob.escape``'s brackets)."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def pick_revision(manifest: mf.Manifest, revision: str, commit: str) -> mf.Manifest:
    """The part of a repo folder's manifest one revision needs (its ref, snapshot, records).

    Raises InputError when the folder holds no snapshot of that revision.
    """
    picked = select(manifest, revision_patterns(revision, commit), [])
    if not any(e.path.startswith(f"snapshots/{commit}/") for e in picked.entries):
        raise InputError(
            f"revision '{revision}' has no snapshot in the cached repo folder",
            hint="download that revision before saving, or fix hf-revision",
        )
    return picked
