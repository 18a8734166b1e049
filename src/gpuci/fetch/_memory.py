"""Keep a download's 1 MiB buffers in malloc's heap, so the kernel does not fault them in anew.

Why: every body read allocates fresh buffers of up to 1 MiB (httpcore's recv, h11's receive
buffer and its slice, httpcore's ``bytes()`` of it; :mod:`gpuci.fetch._client` reads 1 MiB at a
time), and a few of them are alive at once while the writer and hasher threads hold theirs.
glibc serves such sizes with ``mmap`` (over its 128 KiB threshold) or gives freed heap back to
the kernel once more than twice the last freed size sits unused at the top, so each new buffer
is page-faulted in again, 4 KiB at a time: measured on loopback (1 GiB, one connection,
scripts/bench_fetch.py), about a third of the client's CPU per verified byte went to those
faults, for no byte of validation, and the two settings below remove most of them (figures:
docs/benchmarks.md, "Where a verified GiB's CPU went").

What: ``mallopt(M_MMAP_THRESHOLD, 4 MiB)`` (buffers up to 4 MiB come from the heap, reused
after ``free``) and ``mallopt(M_TRIM_THRESHOLD, 32 MiB)`` (up to 32 MiB of freed heap stays with
the process instead of going back and being faulted in again), once per process, on glibc only.
Both are documented tunables (``mallopt(3)``); setting them fixes glibc's sliding thresholds at
these values, so each malloc arena the download's threads use keeps at most ~32 MiB more than
it would (the peak is unchanged). The ``retry-fetch`` command sets them in its own process; a
program calling :func:`gpuci.cache.api.fetch_file` keeps its own malloc unless it calls
:func:`keep_buffers_in_heap` itself (a library does not tune its host's allocator). A
user who tunes malloc (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_`` or ``glibc.malloc``
in ``GLIBC_TUNABLES``) keeps their settings: we then change nothing.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

M_TRIM_THRESHOLD = -1  # glibc's <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 4 << 20
TRIM_THRESHOLD = 32 << 20
_USER_KNOBS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")

_lock = threading.Lock()
_state: bool | None = None  # None: not tried yet


def _glibc_mallopt() -> Callable[[int, int], int] | None:
    """glibc's ``mallopt``, or None (musl, macOS, or no C library to load)."""
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018  # only glibc has it (musl has a mallopt stub)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):  # TypeError: CDLL(None) off POSIX
        return None
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt


def user_tunes_malloc(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """Whether the user already set malloc's thresholds (then theirs stand)."""
    if any(name in environ for name in _USER_KNOBS):
        return True
    return "glibc.malloc." in environ.get("GLIBC_TUNABLES", "")


def apply_thresholds(
    mallopt: Callable[[int, int], int] | None,
    environ: dict[str, str] | os._Environ[str],
) -> bool:
    """Set both thresholds through ``mallopt``; False (nothing changed) when the user tunes
    malloc or there is no glibc. ``mallopt`` returns 1 on success; a refusal leaves glibc's
    defaults, which are only slower."""
    if mallopt is None or user_tunes_malloc(environ):
        return False
    ok = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    return mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1 and ok


def keep_buffers_in_heap() -> bool:
    """Apply the thresholds once per process (the retry-fetch command; a program using the API
    may call it too).

    Returns whether they are in effect."""
    global _state
    with _lock:
        if _state is None:
            _state = apply_thresholds(_glibc_mallopt(), os.environ)
        return _state
