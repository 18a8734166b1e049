"""The backends' one exception, in a module of its own so each backend imports it from here and
not from the package that loads the backends (which would be an import cycle)."""

from __future__ import annotations

__all__ = ["BackendUnavailable"]


class BackendUnavailable(Exception):
    """The framework is installed but cannot drive a GPU here; the reason is one line."""
