"""The pods sub-commands' inputs, one frozen dataclass each, parsed once at the edge.

``gpuci.commands.dispatch.run_command`` resolves flags, ``INPUT_*`` and defaults, then builds
the class named by the command's ``typed`` (:mod:`gpuci.typed`); the phases read fields, which
mypy checks, instead of ``values["gpu-types"]``. Defaults repeat the specs' (in
``gpuci.commands.pods``; tests/test_typed.py keeps the two in step). Declared here rather than
beside the specs because pods may not import the command registry (tests/test_imports.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "CostInputs",
    "DownInputs",
    "ExecInputs",
    "LsInputs",
    "ReapInputs",
    "StartInputs",
    "StopInputs",
    "UpInputs",
]


@dataclass(frozen=True)
class UpInputs:
    gpu_types: list[str] = field(default_factory=list)
    image: str = ""
    command: str = ""
    env: list[str] = field(default_factory=list)
    ports: list[str] = field(default_factory=list)
    disk_gb: int = 50
    gpu_count: int = 1
    cloud: str = "SECURE"
    data_centers: list[str] = field(default_factory=list)
    ttl: float = 3600.0
    owner: str = ""
    ledger: str = ""
    budgets: str = ".gpuci/budgets.yml"
    budget_usd: float | None = None
    budget_period: float = 30 * 86400.0
    reap_interval: float = 900.0
    health_url: str = ""
    timeout: float = 1200.0
    notify: list[str] = field(default_factory=list)
    ssh_public_keys: list[str] = field(default_factory=list)
    placement_timeout: float = 600.0
    health_store: str = ""
    avoid_failed_days: int = 7
    smoke: bool | None = None  # None: on with a runner
    smoke_attempts: int = 2
    gpuci_source: str = ""  # where a smoking pod installs gpu-ci (gpuci.pods.health.pod_gpuci)
    runner: str = ""
    runner_labels: list[str] = field(default_factory=list)
    runner_group_id: int = 1
    runner_scope: str = "repo"
    runner_idle_timeout: float = 600.0
    runner_wait_online: bool = True
    runner_version: str = ""
    runner_sha256: str = ""


@dataclass(frozen=True)
class LsInputs:
    owner: str = ""
    all: bool = False
    ledger: str = ""


@dataclass(frozen=True)
class StopInputs:
    pod_id: list[str] = field(default_factory=list)
    ledger: str = ""


@dataclass(frozen=True)
class StartInputs:
    pod_id: list[str] = field(default_factory=list)
    ttl: float | None = None
    ledger: str = ""


@dataclass(frozen=True)
class DownInputs:
    pod_id: list[str] = field(default_factory=list)
    ledger: str = ""
    runner_scope: str = "repo"


@dataclass(frozen=True)
class ReapInputs:
    owner: str = ""
    grace: float = 0.0
    untagged_older_than: float | None = None
    ledger: str = ""
    notify: list[str] = field(default_factory=list)
    runner_scope: str = "repo"
    health_store: str = ""
    failure_days: int = 7


@dataclass(frozen=True)
class CostInputs:
    owner: str = ""
    period: float = 30 * 86400.0
    ledger: str = ""
    notify: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ExecInputs:
    pod_id: list[str] = field(default_factory=list)
    command: str = ""
    timeout: float = 600.0
