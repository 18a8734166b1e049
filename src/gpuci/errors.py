"""One error hierarchy for the whole product.

Every error carries a one-line ``message`` naming the cause and a ``hint`` naming the fix.
The class decides the documented exit code, so commands raise and never pick codes themselves.
A traceback reaching the user is a bug: the CLI turns each of these into one line (and an
annotation in GitHub Actions).
"""

from __future__ import annotations

from enum import IntEnum

from gpuci.redact import single_line


class ExitCode(IntEnum):
    OK = 0
    CHECK_FAILED = 1  # the command ran and a check said no
    BAD_INPUT = 2  # the user's input or configuration is wrong
    INFRA = 3  # S3, network, driver: the world around us failed


class GpuciError(Exception):
    """Base class: a message (the cause) and a hint (the fix)."""

    exit_code: ExitCode = ExitCode.BAD_INPUT
    title: str = "gpu-ci error"

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        """Message and hint on one line: a value quoted in them cannot start a line of its own."""
        text = single_line(self.message.strip())
        if self.hint:
            text = f"{text} (fix: {single_line(self.hint.strip())})"
        return text


class InputError(GpuciError):
    """A malformed or missing input, a bad workflow, a manifest we refuse to trust."""

    exit_code = ExitCode.BAD_INPUT
    title = "gpu-ci: bad input"


class CheckFailed(GpuciError):
    """The command ran and a requirement was not met (GPU too small, metric too low)."""

    exit_code = ExitCode.CHECK_FAILED
    title = "gpu-ci: check failed"


class InfraError(GpuciError):
    """Something outside our control failed: the store, the network, the driver."""

    exit_code = ExitCode.INFRA
    title = "gpu-ci: infrastructure error"


class JournalError(InfraError, OSError):
    """The job journal could not be written. Also an ``OSError``, so a step that treats its
    journal record as bookkeeping (``except OSError``: warn) keeps doing so."""

    title = "gpu-ci: journal"


class NvmlUnavailable(InfraError):
    title = "gpu-ci: NVML unavailable"


class StoreError(InfraError):
    title = "gpu-ci: cache store error"


class NoCredentials(StoreError):
    """botocore's whole chain found no AWS credentials (a dry run plans without them)."""


class FetchError(InfraError):
    title = "gpu-ci: download failed"


class IntegrityError(InfraError):
    """Bytes that do not match their sha256: never written under a final name."""

    title = "gpu-ci: integrity check failed"


class ConflictError(GpuciError):
    """Another job won a race (e.g. two saves of one key); reported cleanly, not a crash."""

    exit_code = ExitCode.CHECK_FAILED
    title = "gpu-ci: concurrent update"


class BackendUnavailable(Exception):
    """gpu-smoke's framework (torch, cupy) is installed but cannot drive a GPU here; the reason
    is one line. Not a :class:`GpuciError`: the smoke turns it into a check's verdict.

    ``built_cuda``: the CUDA version the framework was built for ("12.8"), when known, so the
    caller can tell a torch newer than the driver from a broken node.
    """

    def __init__(self, reason: str, built_cuda: str | None = None) -> None:
        super().__init__(reason)
        self.built_cuda = built_cuda
