"""Fixtures shared by every test folder; plain helpers live in gpuci_testing.py."""

import os
import signal
from collections.abc import Iterator

import pytest

from gpuci_testing import run_cli
from moto_s3 import moto_server

# Modules whose module-scoped fixture is expensive to build (a mounted filesystem): under
# pytest-xdist (addopts in pyproject.toml) their tests go to one worker as one unit, which
# builds it once, instead of each worker building its own (or one worker again after another
# module's test tore it down). These units start first. Grouped by the scheduler below, not by
# xdist_group marks: pytest 9.2 ignores the node-id suffix those rely on, so the marks silently
# grouped nothing (pytest-dev/pytest-xdist#1386). The gitlab-ci-local pipelines are not grouped:
# what they share, gpu-ci's source archive (tests/actions/conftest.py), takes a fraction of a
# CPU-second per worker, and each pipeline (a minute on a busy runner) goes to a free worker.
ONE_WORKER = {
    "tests/security/test_sec_tier.py": "reflink-fs",  # a loop-mounted XFS
}


# The modules whose tests take longest (from `pytest --durations` of a whole run, longest
# module first; the act and gitlab-ci-local ones hold tests of 1-3 minutes on a busy 2-core
# runner): they are started first, so that no worker is left running one of them alone at the
# end while the other is idle. xdist hands the workers the tests in collection order (each test
# its own unit under --dist loadgroup, but for the ONE_WORKER groups, which go first).
SLOW_FIRST = (
    "tests/actions/test_act_examples.py",
    "tests/actions/test_gitlab_ci_local.py",
    "tests/gpu/test_gpu_check_script.py",
    "tests/test_bench_smoke.py",
    "tests/cache/test_cache_hf_real.py",
    "tests/actions/test_bootstrap.py",
    "tests/pods/test_pods_smoke_handover.py",
    "tests/pods/test_pods_day.py",
    "tests/pods/test_pods_chaos_cancel.py",
    "tests/test_lint.py",  # mypy over src/
    "tests/security/test_sec_s3_hostile.py",
    "tests/cache/test_cache_faults.py",
    "tests/security/test_sec_s3_bounds.py",
    "tests/pods/test_pods_pod_gpuci.py",
    "tests/pods/test_pods_ledger.py",
    "tests/pods/test_pods_month.py",
    "tests/test_dryrun.py",
    "tests/smoke/test_smoke_load.py",
    "tests/actions/test_act_dryrun.py",
    "tests/pods/test_pods_action.py",
    "tests/training/test_training_examples.py",
    "tests/pods/test_pods_runner_boot.py",
)


def pytest_configure(config: pytest.Config) -> None:
    """A suite started in the background of a shell without job control (``cmd &`` in a
    script, nohup) inherits SIGINT ignored, and so would every CLI it starts: the Ctrl-C tests
    then each waited a minute and failed. Python's own handler is put back (xdist's workers run
    this too); a child then starts with SIGINT at its default, as from a terminal."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(tryfirst=True)  # before xdist's own: one worker per CPU
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` (addopts in pyproject.toml): two workers more than CPUs. A worker spends much
    of its time waiting on the servers and child processes its tests start (one worker per CPU
    kept 2 CPUs about half busy), so two more fill that idle time on a 2-core CI machine
    without crowding a large one. PYTEST_XDIST_AUTO_NUM_WORKERS still decides when set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's own hook reads it
    if hasattr(os, "sched_getaffinity"):  # the CPUs this process may use (a container's)
        return len(os.sched_getaffinity(0)) + 2
    return (os.cpu_count() or 1) + 2


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which would group by marks
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadgroup``: each test its own unit, but a ONE_WORKER module one unit."""
    if config.getvalue("dist") != "loadgroup":
        return None  # another mode asked for on the command line: xdist's own
    from xdist.scheduler import LoadScopeScheduling

    class OneWorkerModules(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return ONE_WORKER.get(nodeid.split("::", 1)[0], nodeid)

    return OneWorkerModules(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(SLOW_FIRST)}
    # Stable: every worker collects the same order, and the rest keep theirs.
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """A real moto S3 server on 127.0.0.1, started on first use (per xdist worker): tests/cache's
    stores, tests/pods' shared ledger, tests/security's hostile stores."""
    with moto_server() as endpoint:
        yield endpoint
