"""Ephemeral GPU pods on RunPod from CI: deploy, list, stop, start, destroy, reap, cost.

Nothing is forgotten because four independent layers end a pod: ``down`` in an
``if: always()`` job, a self-stop timer inside the pod, the scheduled ``reap``, and a budget
check that refuses pods an owner cannot afford. Heavy imports (httpx) stay inside the modules.

Public: the commands' typed inputs (:mod:`gpuci.pods.options`) and :mod:`gpuci.pods.health`'s
``llmprobe`` (run by users' workflows as ``python -m gpuci.pods.health.llmprobe``); the rest
(``_``-named: ``_runpod/``, ``_lifecycle/``, ``_runners/``, ``_budgets/``, ``_notify.py``) is
internal and may change.
"""

__all__ = ["health", "options"]  # nothing imported here: httpx loads only with a client
