"""A generated step runs gpu-ci, never the checkout's code of the same name.

A step runs in ``$GITHUB_WORKSPACE``, the checkout under test. ``python -m gpuci`` put that
folder first on sys.path, so a PR's ``gpuci/`` package (or a ``numpy.py``, ``torch.py`` the
smoke imports) ran in gpu-ci's place, with the step's tokens (``GPUCI_RUNNER_TOKEN``) in reach.
The command line is taken from the generated action.yml, as the runner runs it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from action_env import REPO, step_script

from gpuci_testing import gh_env

FORGED = (
    "import os\nprint('PR CODE RAN', os.environ.get('GPUCI_RUNNER_TOKEN'))\nraise SystemExit(0)\n"
)


def _hostile_checkout(root: Path) -> Path:
    """A PR's checkout holding a ``gpuci`` package and the modules the smoke may import."""
    (root / "gpuci").mkdir(parents=True)
    (root / "gpuci" / "__init__.py").write_text(FORGED)
    (root / "gpuci" / "__main__.py").write_text(FORGED)
    for name in ("numpy", "torch", "cupy", "pynvml", "httpx"):
        (root / f"{name}.py").write_text(FORGED)
    return root


def test_the_gpu_smoke_step_runs_gpu_ci_not_the_checkouts_package(tmp_path: Path) -> None:
    script = step_script("actions/gpu-smoke", tmp_path)
    workspace = _hostile_checkout(tmp_path / "workspace")
    report = tmp_path / "report.json"
    env = gh_env(
        tmp_path,
        GPUCI_PYTHON=sys.executable,
        # an empty entry (PYTHONPATH=$PYTHONPATH:/x with none set) names the current folder too
        PYTHONPATH=f"{REPO / 'src'}::",
        GPUCI_RUNNER_TOKEN="ghp_SECRETSECRET",
        GPUCI_FAKE_NVML="h200",
        INPUT_BUDGET_SECONDS="10",
        INPUT_REPORT=str(report),
    )
    proc = subprocess.run(
        ["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", str(script)],
        env=env,
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=120,
    )
    log = proc.stdout + proc.stderr
    assert "PR CODE RAN" not in log and "ghp_SECRETSECRET" not in log, log
    assert proc.returncode == 0, log
    assert report.is_file(), log  # the real gpu-smoke wrote its report


def test_the_step_keeps_pythonpath_for_the_smokes_framework(tmp_path: Path) -> None:
    """The cwd is dropped, PYTHONPATH is not (-I would drop it: a job's torch comes that way)."""
    script = step_script("actions/gpu-setup", tmp_path)
    extra = tmp_path / "extra"
    (extra / "gpuci_probe_mod").mkdir(parents=True)
    (extra / "gpuci_probe_mod" / "__init__.py").write_text("")
    workspace = _hostile_checkout(tmp_path / "workspace")
    code = (
        "import importlib.util; "
        "print('probe', importlib.util.find_spec('gpuci_probe_mod') is not None)"
    )
    line = script.read_text().strip().splitlines()[-1]
    # the step's own interpreter start, with a probe in gpu-ci's place
    probe = line.replace("from gpuci.cli import main; raise SystemExit(main())", code)
    assert probe != line, line
    script.write_text(probe.replace("exec ", "", 1) + "\n")
    env = gh_env(tmp_path, GPUCI_PYTHON=sys.executable, PYTHONPATH=f"{extra}:")
    proc = subprocess.run(
        ["bash", str(script)], env=env, cwd=workspace, capture_output=True, text=True, timeout=60
    )
    assert proc.stdout.strip() == "probe True", proc.stdout + proc.stderr


def test_the_gitlab_templates_start_gpu_ci_as_the_actions_do() -> None:
    """One way to start gpu-ci from a checkout: the GitLab ``gpuci`` function uses the same
    ``-c`` as the generated steps, and no template runs ``-m gpuci <command>`` in the checkout."""
    sys.path.insert(0, str(REPO / "scripts"))
    from gen_actions import SAFE_MAIN

    templates = sorted((REPO / "examples" / "gitlab").glob("*.yml"))
    install = (REPO / "examples" / "gitlab" / "gpuci-install.gitlab-ci.yml").read_text()
    assert f'gpuci() {{ "$GPUCI_PYTHON" -c "{SAFE_MAIN}" "$@"; }}' in install
    for path in templates:
        assert '-m gpuci "' not in path.read_text() and "-m gpuci pods" not in path.read_text()


def test_docs_show_the_same_start_for_a_shell() -> None:
    sys.path.insert(0, str(REPO / "scripts"))
    from gen_actions import SAFE_MAIN

    text = (REPO / "docs" / "actions.md").read_text()
    assert f'gpuci() {{ "$GPUCI_PYTHON" -c "{SAFE_MAIN}" "$@"; }}' in text
