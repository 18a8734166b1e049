"""Smoke before hand-over: the verdict channel, gpu-ci on the pod, avoidance, re-placement,
probes of what a pod serves."""
