"""When no GPU can start a CUDA context but NVML sees healthy GPUs: the image, not the node.

Three common causes fail every context the same way on a healthy node, and telling the user to
drain it would send them after the wrong thing:

- a CPU-only torch (the default wheel on some indexes) and no cupy;
- a container with NVML but no ``libcuda.so.1``: the NVIDIA container runtime mounts only the
  libraries ``NVIDIA_DRIVER_CAPABILITIES`` asks for, and ``utility`` alone gives nvidia-smi and
  NVML but not the CUDA driver;
- a framework built for a newer CUDA than the driver supports (torch cu128 on a 12.2 driver)
  without the forward-compatibility package.

:func:`diagnose` names the cause it can see and the fix, as one line for an exit-2 headline.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Mapping

from gpuci import settings
from gpuci.gpu._checks import version_ge

LIBCUDA = "libcuda.so.1"


def libcuda_loads() -> bool:
    """Whether the CUDA driver library can be loaded in this process (no CUDA call made)."""
    try:
        ctypes.CDLL(LIBCUDA)
    except OSError:
        return False
    return True


def _version(text: str | None) -> tuple[int, ...] | None:
    try:
        return tuple(int(p) for p in (text or "").split(".")[:2]) or None
    except ValueError:
        return None


def diagnose(
    why: str,
    framework: str,
    built_cuda: str | None,
    driver_cuda: tuple[int, int] | None,
    environ: Mapping[str, str],
    has_libcuda: Callable[[], bool] = libcuda_loads,
) -> str:
    """``cause (fix: ...)`` for a framework that could start no GPU on a healthy node."""
    if "CPU-only" in why:
        return (
            f"{why} (fix: install a CUDA build of torch, e.g. pip install torch --index-url "
            "https://download.pytorch.org/whl/cu124, or install cupy; this is the job's image, "
            "not the node)"
        )
    if not has_libcuda():
        caps = settings.NVIDIA_DRIVER_CAPABILITIES.raw(environ)
        seen = f" (NVIDIA_DRIVER_CAPABILITIES={caps})" if caps is not None else ""
        return (
            f"{why}: NVML works but {LIBCUDA}, the CUDA driver library, is not in this "
            f"container{seen} (fix: run the container with NVIDIA_DRIVER_CAPABILITIES="
            "compute,utility, or --gpus all with the NVIDIA container toolkit; not the node)"
        )
    built = _version(built_cuda)
    if built and driver_cuda and not version_ge(driver_cuda, built):
        driver = "{}.{}".format(*driver_cuda)
        return (
            f"{why}: {framework} was built for CUDA {built_cuda} but this driver supports CUDA "
            f"up to {driver} (fix: install a {framework} built for CUDA {driver} or older, or "
            "upgrade the driver / add the CUDA forward-compatibility package; not the node)"
        )
    return (
        f"{why} (fix: check that the job's {framework} and CUDA libraries match the driver"
        + (f" (CUDA up to {'{}.{}'.format(*driver_cuda)})" if driver_cuda else "")
        + f"; python -c 'import {framework}' on this runner shows the error. NVML sees "
        "healthy GPUs, so the node is not blamed)"
    )
