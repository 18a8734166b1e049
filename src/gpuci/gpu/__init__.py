"""GPU discovery and checks. ``nvml.py`` is the only module that touches nvidia-ml-py.

The Python API is :mod:`gpuci.gpu.api` (``setup``, ``smoke``); the commands' typed inputs are
in :mod:`gpuci.gpu.options`. Nothing is imported here on purpose: ``python -m gpuci --help``
must not load NVML.
"""

__all__: list[str] = []
