"""``gpu-setup``: read the GPUs through NVML, judge them against the job's needs, report.

:mod:`~gpuci.gpu.setup.operation` reads, judges and records (the typed :class:`Setup`), and
:mod:`~gpuci.gpu.setup.report` renders it as the step's Result; :mod:`~gpuci.gpu.setup.command`
is the command's target and :func:`gpuci.gpu.api.setup` the Python API, both on the operation.
"""
