"""The backends' one exception, in a module of its own so each backend imports it from here and
not from the package that loads the backends (which would be an import cycle)."""

from __future__ import annotations

__all__ = ["BackendUnavailable"]


class BackendUnavailable(Exception):
    """The framework is installed but cannot drive a GPU here; the reason is one line.

    ``built_cuda``: the CUDA version the framework was built for ("12.8"), when known, so the
    caller can tell a torch newer than the driver from a broken node.
    """

    def __init__(self, reason: str, built_cuda: str | None = None) -> None:
        super().__init__(reason)
        self.built_cuda = built_cuda
