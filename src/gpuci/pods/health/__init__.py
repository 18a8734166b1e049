"""Smoke before hand-over: the verdict channel, gpu-ci on the pod, avoidance, re-placement
(all internal); and :mod:`~gpuci.pods.health.llmprobe`, the probe of what a pod serves, which
users' workflows run as ``python -m gpuci.pods.health.llmprobe``."""

__all__ = ["llmprobe"]
