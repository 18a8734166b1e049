"""GPU discovery and checks. ``_nvml.py`` is the only module that touches nvidia-ml-py.

Public: the Python API :mod:`gpuci.gpu.api` (``setup``, ``smoke``), the commands' typed inputs
:mod:`gpuci.gpu.options`, and the fake NVML tests and users inject (:mod:`gpuci.gpu.fake`). The
rest (``_``-named) is internal and may change. Nothing is imported here on purpose:
``python -m gpuci --help`` must not load NVML.
"""

__all__ = ["api", "fake", "options"]
