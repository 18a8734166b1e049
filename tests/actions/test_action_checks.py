"""The action checks: JSON schema, actionlint, zizmor and our own thinness rules.

Each check runs over the real files and must pass, and is fed a deliberately broken file to
prove it can fail (a check that cannot fail proves nothing).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from action_env import REPO

SKIP_DIRS = {".git", ".venv", "node_modules", ".bench", ".clients", ".pytest_cache", ".ruff_cache"}
# act_stubs/: test-only stand-ins for other people's actions under act, not gpu-ci actions.
SKIP_DIRS |= {"act_stubs"}


def tool(name: str) -> str:
    """A dev tool from this venv (or PATH); a missing one fails: these checks are not optional."""
    found = shutil.which(
        name, path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    )
    if not found:
        pytest.fail(f"{name} not found (fix: pip install -e '.[dev]')")
    return found


def run(*argv: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "NO_COLOR": "1"},
    )


def action_files() -> list[Path]:
    found = []
    for dirpath, dirnames, filenames in os.walk(REPO):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        found += [Path(dirpath) / f for f in filenames if f in ("action.yml", "action.yaml")]
    return sorted(found)


def workflow_files() -> list[Path]:
    return sorted((REPO / ".github" / "workflows").glob("*.y*ml"))


def test_the_repository_has_the_actions_and_a_self_test_workflow() -> None:
    rel = {p.relative_to(REPO).as_posix() for p in action_files()}
    assert {
        "action.yml",
        "actions/gpu-setup/action.yml",
        "actions/cache-weights/action.yml",
        "actions/cache-weights/restore/action.yml",
        "actions/cache-weights/save/action.yml",
        "actions/retry-fetch/action.yml",
        "actions/gpu-smoke/action.yml",
    } <= rel
    uses = " ".join(p.read_text() for p in workflow_files())
    assert "uses: ./actions/gpu-setup" in uses


# ----- JSON schema (check-jsonschema's vendored GitHub schemas, offline) ----------------------
def test_every_action_yml_matches_the_github_actions_schema() -> None:
    proc = run(
        tool("check-jsonschema"),
        "--builtin-schema",
        "vendor.github-actions",
        *map(str, action_files()),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_workflows_match_the_github_workflows_schema() -> None:
    files = [*workflow_files(), *sorted((REPO / "examples" / "workflows").glob("*.yml"))]
    proc = run(
        tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", *map(str, files)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "runs",
    [
        "runs:\n  using: composite\n",  # no steps
        "runs:\n  using: composite\n  steps:\n    - run: echo hi\n      shell: bash\n"
        "      uses: actions/checkout@v4\n",  # run and uses in one step
        "runs:\n  using: node99\n  main: index.js\n",  # no such runtime
    ],
)
def test_schema_check_rejects_a_broken_action(tmp_path: Path, runs: str) -> None:
    broken = tmp_path / "action.yml"
    broken.write_text(f"name: broken\ndescription: broken on purpose\n{runs}")
    proc = run(tool("check-jsonschema"), "--builtin-schema", "vendor.github-actions", str(broken))
    assert proc.returncode != 0, proc.stdout
    assert "action.yml" in proc.stdout + proc.stderr


# ----- actionlint over the self-test workflows (it reads ./actions/<name> metadata too) --------
def test_actionlint_passes_on_the_workflows() -> None:
    proc = run(tool("actionlint"), "-no-color", *map(str, workflow_files()))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_catches_a_bad_input_and_a_bad_output(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()  # actionlint finds the project root by it
    shutil.copytree(REPO / "actions" / "gpu-setup", tmp_path / "actions" / "gpu-setup")
    workflows = tmp_path / ".github" / "workflows"
    workflows.mkdir(parents=True)
    (workflows / "bad.yml").write_text(
        "on: push\npermissions: {}\njobs:\n  gpu:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - id: gpu\n        uses: ./actions/gpu-setup\n        with:\n"
        "          min-memroy-gb: 40\n"
        '      - run: echo "$N"\n        env:\n          N: ${{ steps.gpu.outputs.gpu-cnt }}\n'
    )
    proc = run(tool("actionlint"), "-no-color", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert 'input "min-memroy-gb" is not defined' in proc.stdout
    assert "gpu-cnt" in proc.stdout


# ----- zizmor (offline: no GitHub API) -------------------------------------------------------
def test_zizmor_finds_nothing_in_workflows_and_actions() -> None:
    targets = [".github/workflows", "action.yml", "actions"]
    proc = run(tool("zizmor"), "--offline", "--no-progress", "--color=never", *targets)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_zizmor_catches_template_injection_in_an_action(tmp_path: Path) -> None:
    bad = tmp_path / "action.yml"
    bad.write_text(
        "name: bad\ndescription: injection on purpose\ninputs:\n  ref:\n    description: x\n"
        "runs:\n  using: composite\n  steps:\n"
        '    - shell: bash\n      run: echo "${{ inputs.ref }}"\n'
    )
    proc = run(tool("zizmor"), "--offline", "--no-progress", "--color=never", str(bad))
    assert proc.returncode != 0
    assert "template-injection" in proc.stdout + proc.stderr


# ----- our own rules (DESIGN.md principle 6), over every action in the repo ------------------
@pytest.mark.parametrize("path", action_files(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_action_is_thin_and_injection_free(path: Path) -> None:
    action = yaml.safe_load(path.read_text())
    assert action["runs"]["using"] == "composite"
    steps = action["runs"]["steps"]
    inputs = set(action.get("inputs") or {})
    passed: set[str] = set()
    gpuci_steps = 0
    for step in steps:
        script = step.get("run", "")
        passed |= set(re.findall(r"inputs\.([A-Za-z0-9_-]+)", str(step.get("if", ""))))
        assert "${{" not in script, f"{step.get('name')}: expression inside run: (use env:)"
        assert "github.action_path" not in str(step), "use $GITHUB_ACTION_PATH in scripts"
        for key, value in (step.get("env") or {}).items():
            if key.startswith("INPUT_"):
                assert re.fullmatch(r"INPUT_[A-Z0-9_]+", key), key
                passed |= set(re.findall(r"inputs\.([A-Za-z0-9_-]+)", str(value)))
        if re.search(r'"\$GPUCI_PYTHON" -c ".*from gpuci\.cli import main', script):
            gpuci_steps += 1
            assert step.get("shell") == "bash"
        if "bootstrap.sh" in script:
            assert "$GITHUB_ACTION_PATH" in script
    assert any("bootstrap.sh" in s.get("run", "") for s in steps), "no bootstrap step"
    assert gpuci_steps >= 1, "no python -m gpuci step"
    assert inputs <= passed, (
        f"inputs neither passed through env: nor tested in if:: {sorted(inputs - passed)}"
    )
    for name, output in (action.get("outputs") or {}).items():
        assert re.fullmatch(
            r"\$\{\{ steps\.[a-z0-9_-]+\.outputs\.[a-z0-9-]+( \|\| '\w+')? \}\}", output["value"]
        ), name


# ----- shellcheck over the scripts the actions run -------------------------------------------
def test_shellcheck_passes_on_bootstrap() -> None:
    proc = run(tool("shellcheck"), "--severity=style", str(REPO / "scripts" / "bootstrap.sh"))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_shellcheck_catches_an_unquoted_expansion(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sh"
    bad.write_text("#!/usr/bin/env bash\nvenv=$1\nrm -rf $venv/lib\n")
    proc = run(tool("shellcheck"), str(bad))
    assert proc.returncode != 0
    assert "SC2086" in proc.stdout
