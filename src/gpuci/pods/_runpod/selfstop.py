"""The self-stop timer that runs inside the pod: the layer that works when CI is gone.

RunPod's own auto-stop flags never worked reliably, and a cancelled job never runs its
teardown. So ``up`` makes the container's command a small POSIX shell wrapper: it starts a
background timer, then ``exec``s the user's command. The wrapper and the command travel in the
pod's env (``GPUCI_WRAPPER``, ``GPUCI_START_COMMAND``) and ``args`` is only
``sh -c 'eval "$GPUCI_WRAPPER"'``, so user text is never re-quoted. At
``GPUCI_EXPIRES_EPOCH`` the timer stops the pod through the API with the pod's own id
(``RUNPOD_POD_ID``) and the pod-scoped key RunPod injects (``RUNPOD_API_KEY``), retrying until
the call succeeds. The expiry is absolute, so a restart does not reset the clock;
``pods start --ttl`` moves it. Tests run this exact script with ``sh`` against the fake API.
"""

from __future__ import annotations

from gpuci import settings
from gpuci.pods.health import _handover as handover

ENV_WRAPPER = settings.WRAPPER.name
ENV_COMMAND = settings.START_COMMAND.name
ENV_API_URL = settings.RUNPOD_API_URL_ON_POD.name

ARGS = "sh -c 'eval \"$GPUCI_WRAPPER\"'"

# ``gpuci_pod_call METHOD SUFFIX BODY``: one call of RunPod's pod API for this pod, with its own
# id and key (curl, else wget for a POST, else python3); ``gpuci_stop [ACTION]`` is the pod
# action (also the runner start script's way to end its pod), and handover's rename uses it too.
STOP_FUNCTION = r"""
gpuci_pod_call() {
  u="${GPUCI_RUNPOD_API_URL:-https://api.runpod.io}/v2/pods/${RUNPOD_POD_ID}$2"
  if command -v curl >/dev/null 2>&1; then
    curl -fsS -m 30 -o /dev/null -X "$1" -H "Authorization: Bearer ${RUNPOD_API_KEY}" \
      -H "Content-Type: application/json" -d "$3" "$u"
  elif [ "$1" = POST ] && command -v wget >/dev/null 2>&1; then
    wget -q -T 30 -O /dev/null --header="Authorization: Bearer ${RUNPOD_API_KEY}" \
      --header="Content-Type: application/json" --post-data="$3" "$u"
  else
    python3 -c 'import os, sys, urllib.request as r
q = r.Request(sys.argv[1], sys.argv[2].encode(), method=sys.argv[3])
q.add_header("Authorization", "Bearer " + os.environ["RUNPOD_API_KEY"])
q.add_header("Content-Type", "application/json")
r.urlopen(q, timeout=30)' "$u" "$3" "$1"
  fi
}
gpuci_stop() {
  gpuci_pod_call POST /action "{\"action\":\"${1:-${GPUCI_SELF_STOP_ACTION:-stop}}\"}"
}
""".strip()

_TIMER = r"""
(
  left=$(( ${GPUCI_EXPIRES_EPOCH:-0} - $(date +%s) ))
  if [ "$left" -gt 0 ]; then sleep "$left"; fi
  until gpuci_stop; do sleep "${GPUCI_SELF_STOP_RETRY_S:-30}"; done
) &
"""
WRAPPER = STOP_FUNCTION + _TIMER + 'exec sh -c "$GPUCI_START_COMMAND"\n'
# With smoke before handover (gpuci.pods.health._handover): the timer runs first, so a hung smoke
# still ends at the expiry; a hardware verdict stops the pod and the command never starts.
SMOKE_WRAPPER = (
    STOP_FUNCTION
    + "\n"
    + handover.SHELL
    + _TIMER
    + 'gpuci_smoke_gate || exit "$?"\nexec sh -c "$GPUCI_START_COMMAND"\n'
)


def wrap(command: str, api_url: str, smoke: bool = False) -> tuple[str, dict[str, str]]:
    """``args`` and the env entries that make ``command`` stop its pod at the expiry (and,
    with ``smoke``, run only after gpu-smoke found no hardware failure)."""
    env = {ENV_WRAPPER: SMOKE_WRAPPER if smoke else WRAPPER, ENV_COMMAND: command}
    if api_url.rstrip("/") != "https://api.runpod.io":
        env[ENV_API_URL] = api_url.rstrip("/")
    return ARGS, env
