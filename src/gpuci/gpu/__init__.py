"""GPU discovery and checks. ``nvml.py`` is the only module that touches nvidia-ml-py.

Nothing is imported here on purpose: ``python -m gpuci --help`` must not load NVML.
"""
