"""Shared helpers for gpu-setup tests: a clean environment and a CLI runner in a subprocess."""

from __future__ import annotations

import io
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuci.gpu._setup.command import run
from gpuci.gpu.fake.nvml import FakeNvml
from gpuci.gpu.options import SetupInputs
from gpuci.inputs import build, resolve, specs_of
from gpuci.runtime import Result, Runtime
from gpuci_testing import clean_env as base_env
from gpuci_testing import run_cli


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """``gpuci_testing.clean_env`` without CUDA_* (the host's GPU selection and order),
    reports and journal under tmp_path."""
    env = {k: v for k, v in base_env().items() if not k.startswith("CUDA_")}
    env.update(
        RUNNER_TEMP=str(tmp_path),
        GPUCI_JOURNAL=str(tmp_path / "journal.jsonl"),
        NO_COLOR="1",
    )
    env.update(extra)
    return env


@pytest.fixture
def gpu_env() -> Callable[..., dict[str, str]]:
    """``clean_env`` for tests that build their own subprocess."""
    return clean_env


@pytest.fixture
def cli(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run ``python -m gpuci gpu-setup ARGS`` the way a CI step would."""

    def invoke(*args: str, fake: str | None = None, **env: str) -> subprocess.CompletedProcess:
        environ = clean_env(tmp_path, **env)
        if fake is not None:
            environ["GPUCI_FAKE_NVML"] = fake
        return run_cli("gpu-setup", *args, env=environ, cwd=tmp_path, timeout=30)

    return invoke


def _cli_json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def cli_json() -> Callable[[subprocess.CompletedProcess[str]], dict[str, Any]]:
    """Parse a ``--json`` run, asserting no traceback escaped."""
    return _cli_json


@pytest.fixture
def setup_run(tmp_path: Path) -> Callable[..., Result]:
    """Run gpu-setup in-process on a FakeNvml, inputs resolved like the CLI resolves them;
    ``visible``: CUDA_VISIBLE_DEVICES."""

    def invoke(
        profiles: list[str] | FakeNvml,
        dry_run: bool = False,
        visible: str | None = None,
        **flags: str,
    ) -> Result:
        environ = clean_env(tmp_path)
        if visible is not None:
            environ["CUDA_VISIBLE_DEVICES"] = visible
        values = resolve(
            specs_of(SetupInputs), {k.replace("_", "-"): v for k, v in flags.items()}, environ
        )
        fake = profiles if isinstance(profiles, FakeNvml) else FakeNvml(profiles)
        rt = Runtime(environ, json_mode=True, dry_run=dry_run, stdout=io.StringIO())
        return run(build(SetupInputs, values), rt, nvml=fake)

    return invoke
