"""Ephemeral GPU pods on RunPod from CI: deploy, list, stop, start, destroy, reap, cost.

Nothing is forgotten because four independent layers end a pod: ``down`` in an
``if: always()`` job, a self-stop timer inside the pod, the scheduled ``reap``, and a budget
check that refuses pods an owner cannot afford. Heavy imports (httpx) stay inside the modules.
"""

__all__: list[str] = []  # nothing imported here: httpx loads only with a client
