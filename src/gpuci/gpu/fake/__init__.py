"""A fake NVML for tests, the action harness and ``GPUCI_FAKE_NVML``: profiles recorded from real
GPUs (:mod:`~gpuci.gpu.fake._profiles`), their devices (:mod:`~gpuci.gpu.fake._devices`) and the
library surface :mod:`gpuci.gpu._nvml` calls (:class:`~gpuci.gpu.fake.nvml.FakeNvml`).
Public: :mod:`~gpuci.gpu.fake.nvml` (``FakeNvml``, the profiles' names). Nothing is imported here:
a real run never loads the fake.
"""

__all__ = ["nvml"]
