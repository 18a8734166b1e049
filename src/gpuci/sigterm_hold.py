"""The runner's SIGTERM held back over work that must not stop half done.

A restore merging into a folder the job already has replaces one name at a time, and on any
failure puts back what it replaced (:mod:`gpuci.cache._restore.place`). The runner's cancel is
SIGTERM (GitLab's, GitHub's after its SIGINT), and the CLI's handler ends the process at once
(:func:`gpuci.cli._kill_helpers_on_sigterm`): landing mid-merge, it left the folder a mix of
the old files and the new, with no undo. :func:`sigterm_held` blocks SIGTERM on the calling
thread (``pthread_sigmask``) while such work runs; one that came meanwhile stays pending and is
delivered as the mask is restored, so the process still ends, just after the work.

The hold is bounded by the work it covers, which must be local and short (renames and links on
one filesystem, no network, no wait on anyone): the runner SIGKILLs a step its SIGTERM did not
end within its grace period, and SIGKILL cannot be held. Python runs handlers on the main
thread, so a hold counts there. When another thread takes the signal (the kernel gives a
process's signal to any thread not blocking it), the CLI's handler runs on the main thread
mid-work, but the end it makes is the signal raised again on that thread
(``signal.raise_signal``), which the hold keeps pending too: helpers are killed at once, and
the process ends after the work.

Only ``signal`` is imported: a warm restore starts no thread and loads no ``threading``.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["sigterm_held"]


@contextmanager
def sigterm_held() -> Iterator[None]:
    """Hold SIGTERM on this thread while inside; one that came meanwhile is delivered on the
    way out (its handler runs then, or its default ends the process)."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
