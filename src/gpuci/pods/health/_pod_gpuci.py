"""Where a pod gets gpu-ci for its smoke before handover, pinned, so stock images smoke too.

Stock GPU images (runpod/pytorch, nvidia/cuda) have no gpu-ci, so without this every pod said
``smoke skipped``. ``up`` therefore gives a smoking pod ``GPUCI_PACKAGE``: where the pod gets
gpu-ci's source when ``python3 -m gpuci`` is missing, and with it the ``requirements.lock`` whose
hash-pinned dependencies it installs (into a private folder, only for the smoke:
:mod:`gpuci.pods.health._pod_install`).

What ``up`` sends, from ``gpuci-source`` (default in the action: this action's own
repository at the ref the workflow used, ``${{ github.action_repository }}@${{
github.action_ref }}``, as an input default because composite steps see those two empty,
actions/runner#2473; elsewhere: ``GPUCI_PACKAGE``, as the GitLab pods template sets it):

- ``OWNER/REPO@REF``: the ref is resolved to its commit through GitHub's API (a 40-hex ref is
  taken as is), and the pod installs ``git+https://github.com/OWNER/REPO@SHA``: git checks
  every object against the SHA, so the pod runs gpu-ci's code at exactly the commit the
  workflow's action ran, even if a tag moves later; its dependencies are the versions and
  hashes that commit's ``requirements.lock`` pins. The image needs git and pip (runpod/pytorch
  has both).
- a URL: as given. Pinned (:func:`is_pinned`, the pod's rule too) when it is a ``git+`` URL
  whose ref is a full commit (``@<40 hex>`` before any ``#``) or an archive with
  ``#sha256=<64 hex>`` (the pod refuses other bytes); otherwise ``up`` warns that it is not,
  with any credentials in the URL redacted, and the pod refuses a ``git+`` URL at a branch, a
  tag or no ref (``smoke skipped``) where it installs an unpinned archive. It must hold
  gpu-ci's source with its lock (a wheel does not: the pod refuses it rather than install
  unpinned dependencies).
- ``none``: nothing is installed (the image's gpu-ci or ``smoke skipped``).

A ref that cannot be resolved is one warning naming the cause and the fix, and the pod gets
no install (``smoke skipped``), never an unpinned one in its place.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from gpuci import settings
from gpuci.errors import GpuciError
from gpuci.forges import _github as gh
from gpuci.redact import redact_url

_REPO_AT = re.compile(r"((?!\.\.?/)[A-Za-z0-9_.-]+/(?!\.\.?@)[A-Za-z0-9_.-]+)@([^\s@]+)")
_COMMIT = re.compile(r"[0-9a-f]{40}")
_GIT_COMMIT = re.compile(r"[0-9a-fA-F]{40}")
_ARCHIVE_HASH = re.compile(r"#sha256=[0-9a-fA-F]{64}$")
_REF = re.compile(r"[A-Za-z0-9_./+-]{1,200}")


class _Commits(gh.GitHubReader):
    hint_404 = "no such repository or ref on this GitHub"

    def commit(self, repo: str, ref: str) -> str:
        body = self._json(self._send("GET", f"/repos/{repo}/commits/{ref}"), "the commit", dict)
        sha = str(body.get("sha") or "").lower()
        if not _COMMIT.fullmatch(sha):
            raise ValueError(f"GitHub named no commit for {repo}@{ref}")
        return sha


def resolve(source: str, environ: Mapping[str, str], warn: Callable[[str], None]) -> str:
    """The pip URL a smoking pod installs gpu-ci from (``GPUCI_PACKAGE``), or "" for none.

    Args:
        source: ``gpuci-source``: ``OWNER/REPO@REF``, a pip URL, ``none`` or "" (then
            ``GPUCI_PACKAGE``).
        environ: the job's environment (GitHub's API and server URLs, its token).
        warn: takes one line: an unpinned URL, or a ref that did not resolve.

    Returns:
        The URL for the pod's env, or "" when the pod gets none.
    """
    text = source.strip()
    if text in ("", "@"):  # outside Actions the action's default renders as "@"
        text = settings.PACKAGE.value(environ)
    if text.lower() in ("", "none"):
        return ""
    m = _REPO_AT.fullmatch(text)
    if m is None:
        if text.startswith("git+") and not is_pinned(text):
            warn(
                f"the pod refuses gpu-ci from {redact_url(text)}, which names no full "
                "commit SHA: a git URL installs only at one, so the smoke is skipped; pin it "
                "with @<commit SHA>"
            )
        elif not is_pinned(text):
            warn(
                f"the pod installs gpu-ci from {redact_url(text)}, which names no commit or "
                "hash: pin it "
                "with @<commit SHA> (git+https) or #sha256=<archive's sha256>"
            )
        return text
    repo, ref = m.group(1), m.group(2)
    try:
        sha = ref.lower() if _COMMIT.fullmatch(ref.lower()) else _commit_of(repo, ref, environ)
    except (GpuciError, ValueError) as exc:
        why = exc.one_line() if isinstance(exc, GpuciError) else str(exc)
        warn(
            f"gpu-ci is not installed on the pod, so a stock image skips its smoke: could not "
            f"resolve {repo}@{ref} to a commit ({why}); use the action at a commit SHA, or "
            "set gpuci-source to a pinned pip URL"
        )
        return ""
    server = settings.GITHUB_SERVER_URL.value(environ).rstrip("/")
    return f"git+{server}/{repo}@{sha}"


def is_pinned(url: str) -> bool:
    """Whether the pod installs exactly one version from ``url``: the rule its ``gpuci_source``
    applies (:mod:`gpuci.pods.health._pod_install`).

    A ``git+`` URL is pinned only by a full commit, the text after the last ``@`` before the
    first ``#`` being 40 hex (git checks the tree against it; a ``#sha256=`` is never checked on
    a clone); any other URL, an archive, only by ``#sha256=<64 hex>`` at its end.
    """
    if url.startswith("git+"):
        return bool(_GIT_COMMIT.fullmatch(url.partition("#")[0].rpartition("@")[2]))
    return bool(_ARCHIVE_HASH.search(url))


def planned(source: str, environ: Mapping[str, str], warn: Callable[[str], None]) -> str:
    """What :func:`resolve` would send, without asking GitHub (a dry run): a ref stays a ref."""
    text = source.strip()
    if text in ("", "@"):
        text = settings.PACKAGE.value(environ)
    m = _REPO_AT.fullmatch(text)
    if m is None:
        return resolve(text, environ, warn)
    server = settings.GITHUB_SERVER_URL.value(environ).rstrip("/")
    return f"git+{server}/{m.group(1)}@{m.group(2)}"


def _commit_of(repo: str, ref: str, environ: Mapping[str, str]) -> str:
    if not _REF.fullmatch(ref) or ".." in ref:
        raise ValueError(f"{ref!r} is not a git ref")
    token = settings.GITHUB_TOKEN.value(environ) or settings.RUNNER_TOKEN.value(environ)
    api = settings.GITHUB_API_URL.value(environ)
    with _Commits(api, token, attempts=2) as client:
        return client.commit(repo, ref)
