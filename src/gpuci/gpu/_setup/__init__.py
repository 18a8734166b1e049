"""``gpu-setup``: :mod:`.operation` reads and judges the GPUs (a typed ``Setup``),
:mod:`.report` renders it, :mod:`.command` is the target; :mod:`gpuci.gpu.api` calls the operation.
"""
