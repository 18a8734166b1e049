"""A fake NVML for tests, the action harness and ``GPUCI_FAKE_NVML``: profiles recorded from real
GPUs (:mod:`~gpuci.gpu.fake.profiles`), their devices (:mod:`~gpuci.gpu.fake.devices`) and the
library surface :mod:`gpuci.gpu.nvml` calls (:class:`~gpuci.gpu.fake.nvml.FakeNvml`).
Nothing is imported here: a real run never loads the fake.
"""
