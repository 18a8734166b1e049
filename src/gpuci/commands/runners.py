"""``runners``: manage self-hosted runners gpu-smoke quarantined (``release`` gives one back)."""

from gpuci.commands import Command
from gpuci.commands.gpu_smoke import INPUTS as SMOKE_INPUTS
from gpuci.inputs import Input

RELEASE = Command(
    name="release",
    help="Give a quarantined runner back: restore its labels (GitHub) or unpause it (GitLab), "
    "after a passing gpu-smoke on it or with --force.",
    inputs=(
        Input("name", "The runner: its name on GitHub, its numeric id on GitLab.", "str"),
        Input(
            "labels",
            "GitHub: the labels to restore (the quarantine-labels the smoke removed).",
            "list",
        ),
        Input(
            "forge",
            "Which forge the runner belongs to (auto: GitLab inside GitLab CI, else GitHub).",
            "str",
            "auto",
            choices=("auto", "github", "gitlab"),
        ),
        Input("repository", "GitHub owner/name (default: GITHUB_REPOSITORY).", "str"),
        Input(
            "force",
            "Release without running the smoke here (after a false alarm).",
            "bool",
            "false",
        ),
        *(
            i
            for i in SMOKE_INPUTS
            if i.name not in ("on-failure", "quarantine-labels", "health-store")
        ),
    ),
    target="gpuci.quarantine:release",
    typed="gpuci.quarantine:ReleaseInputs",
    positional="name",
)

COMMAND = Command(
    name="runners",
    help="Self-hosted runners gpu-smoke took out of the pool: release one.",
    subcommands=(RELEASE,),
)
