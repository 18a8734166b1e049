"""``runners``: manage self-hosted runners gpu-smoke quarantined (``release`` gives one back)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuci.commands import Command

if TYPE_CHECKING:
    from gpuci.quarantine import ReleaseInputs

RELEASE: Command[ReleaseInputs] = Command(
    name="release",
    help="Give a quarantined runner back: restore its labels (GitHub) or unpause it (GitLab), "
    "after a passing gpu-smoke on it or with --force.",
    target="gpuci.quarantine:release",
    options="gpuci.quarantine:ReleaseInputs",
    positional="name",
)

COMMAND: Command[None] = Command(
    name="runners",
    help="Self-hosted runners gpu-smoke took out of the pool: release one.",
    subcommands=(RELEASE,),
)
