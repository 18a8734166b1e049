"""Fixtures shared by every test folder; plain helpers live in gpuci_testing.py."""

import pytest

from gpuci_testing import run_cli


@pytest.fixture
def cli():
    return run_cli
