"""Fixtures of the GitLab template tests (test_gitlab_install.py, test_gitlab_ci_local.py)."""

from __future__ import annotations

import pytest
from real_clients import pinned_source


@pytest.fixture(scope="session")
def gpuci_source(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """(GPUCI_SOURCE, GPUCI_SOURCE_SHA256): this checkout as GitHub's archive of a commit, made
    once per session (per xdist worker) for every test that installs gpu-ci from it."""
    return pinned_source(tmp_path_factory.mktemp("gpuci-source"))
