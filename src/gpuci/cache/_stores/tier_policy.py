"""Whether the runner-local tier is on here, and why: ``local-cache``, else ``GPUCI_LOCAL_CACHE``,
else ``auto``.

Filling the tier costs a cold restore about as much as the transfer itself (every file is
written twice), which pays back only when a later job on the same disk restores the same
files. A runner thrown away after its job never sees that later job, so ``auto`` (the default)
is off there and on everywhere else (self-hosted runners, a laptop, any CI we cannot tell).

What counts as thrown away after the job, from the environment the runner itself sets:

- **GitHub-hosted**: ``RUNNER_ENVIRONMENT=github-hosted`` (set by actions/runner on GitHub's
  own machines; ``self-hosted`` on everything else);
- **GitLab.com's hosted runners**: ``CI_SERVER_HOST=gitlab.com`` and a runner whose
  description is one of GitLab's runner managers (``*.runners-manager.gitlab.com``, e.g.
  ``green-4.saas-linux-small-amd64.runners-manager.gitlab.com/default``) or that carries a
  hosted-runner tag (``saas-linux-*``, ``saas-macos-*``, ``saas-windows-*``): each of those
  jobs runs in a VM made for it and deleted after it;
- **a gpu-ci runner pod on RunPod** (``pods runners up``): the pod's environment says it
  terminates itself after its one job (``GPUCI_RUNNER_PLATFORM`` set and
  ``GPUCI_SELF_STOP_ACTION=terminate``, both set by :func:`gpuci.pods._runners.registry.pod_env`).

The dry run plans with :func:`choose` too, so a plan and the run agree.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpuci import settings

__all__ = ["TierChoice", "choose", "default_root", "ephemeral_runner"]

OFF = frozenset({"off", "false", "no", "none", "0"})
ON = frozenset({"on", "true", "yes", "1"})
AUTO = "auto"
_GITLAB_MANAGERS = ".runners-manager.gitlab.com"
_GITLAB_HOSTED_TAGS = ("saas-linux-", "saas-macos-", "saas-windows-")


@dataclass(frozen=True)
class TierChoice:
    """The tier's setting here: on (at ``root``) or off, and the reason in a few words.

    ``text`` is what the output, the summary and the dry run print, e.g.
    ``off: GitHub-hosted runner, thrown away after the job``.
    """

    on: bool
    root: Path | None
    why: str

    @property
    def text(self) -> str:
        return f"{'on' if self.on else 'off'}: {self.why}"


def default_root(environ: Mapping[str, str]) -> Path:
    """``$RUNNER_TOOL_CACHE/gpuci/local`` on a runner, else ~/.cache/gpuci/local."""
    tool_cache = settings.RUNNER_TOOL_CACHE.value(environ)
    if tool_cache:
        return Path(tool_cache) / "gpuci" / "local"
    xdg = settings.XDG_CACHE_HOME.value(environ) if settings.XDG_CACHE_HOME.is_set(environ) else ""
    base = Path(xdg) if xdg else Path(environ.get("HOME") or Path.home()) / ".cache"
    return base / "gpuci" / "local"


def ephemeral_runner(environ: Mapping[str, str]) -> str | None:
    """The kind of runner this is when it is thrown away after the job (None: not known to be).

    Args:
        environ: the job's environment.

    Returns:
        ``GitHub-hosted runner``, ``GitLab.com hosted runner``, ``gpu-ci runner pod on
        RunPod`` or None.
    """
    if settings.RUNNER_ENVIRONMENT.value(environ).lower() == "github-hosted":
        return "GitHub-hosted runner"
    if _gitlab_hosted(environ):
        return "GitLab.com hosted runner"
    # both set by gpuci.pods._runners.registry.pod_env on a runner pod that ends after one job
    if (
        settings.RUNNER_PLATFORM.is_set(environ)
        and settings.SELF_STOP_ACTION.value(environ).lower() == "terminate"
    ):
        return "gpu-ci runner pod on RunPod"
    return None


def _gitlab_hosted(environ: Mapping[str, str]) -> bool:
    """GitLab.com's own runners: a runner-manager description or a hosted-runner tag."""
    if settings.CI_SERVER_HOST.value(environ).lower() != "gitlab.com":
        return False
    description = settings.CI_RUNNER_DESCRIPTION.value(environ).lower()
    if _GITLAB_MANAGERS in description:
        return True
    # CI_RUNNER_TAGS is a JSON array ("[\"saas-linux-small-amd64\"]"), older runners a comma
    # list: splitting on the punctuation reads both without trusting it as JSON.
    tags = settings.CI_RUNNER_TAGS.value(environ).lower()
    words = tags.replace("[", " ").replace("]", " ").replace('"', " ").replace(",", " ").split()
    return any(word.startswith(_GITLAB_HOSTED_TAGS) for word in words)


def choose(environ: Mapping[str, str], local_cache: str = "") -> TierChoice:
    """The tier asked for: ``local_cache`` (the input), then ``GPUCI_LOCAL_CACHE``, then auto.

    Each may be ``off`` (also false, no, none, 0), ``on`` (also true, yes, 1: the default
    folder, even on a runner thrown away after the job), ``auto`` (off on such a runner, else
    on) or a folder. Nothing is created or checked here (see
    :func:`gpuci.cache._stores.tier_open.open_tier`).

    Args:
        environ: the job's environment.
        local_cache: the ``local-cache`` input ('' when not given).

    Returns:
        The choice, with a reason fit to print.
    """
    text, source = local_cache.strip(), "local-cache"
    if not text:
        text, source = settings.LOCAL_CACHE.value(environ), settings.LOCAL_CACHE.name
    word = text.lower()
    if word in OFF:
        return TierChoice(False, None, f"{source} is {text}")
    if word in ON:
        return TierChoice(True, _real(default_root(environ)), f"{source} is {text}")
    if text and word != AUTO:
        return TierChoice(True, _real(Path(os.path.expanduser(text))), f"{source} names it")
    kind = ephemeral_runner(environ)
    if kind is not None:
        return TierChoice(
            False, None, f"{kind}, thrown away after the job (local-cache: on keeps one anyway)"
        )
    return TierChoice(
        True,
        _real(default_root(environ)),
        "auto, not a runner known to be thrown away after the job",
    )


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))
