"""The runner pod's start script: run one CI job, then end the pod.

It is the pod's command, so it runs under the self-stop wrapper (gpuci.pods._runpod.selfstop: the
TTL timer still ends a pod whose job hangs) and travels in the pod's env like any command: no user
text in it, nothing re-quoted. It reads what ``gpuci.pods._runners.registry.pod_env`` put there:

- **GitHub**: finds the actions runner in the image (``$GPUCI_RUNNER_DIR``, /actions-runner,
  /home/runner/actions-runner, /opt/actions-runner), else downloads the pinned release
  (``RUNNER_VERSION``) and refuses it unless its sha256 is ``RUNNER_SHA256`` (checked before
  unpacking). Then ``./run.sh --jitconfig``: the runner registers, takes one job,
  de-registers and exits. ``RUNNER_ALLOW_RUNASROOT=1`` when running as root.
- **GitLab**: ``gitlab-runner run-single --max-builds 1 --wait-timeout IDLE`` (from the
  image), then deletes its own runner with its own token (``DELETE /api/v4/runners``).

**Idle timeout.** GitLab's ``--wait-timeout`` is the idle timeout. The actions runner has none,
so the script watches for the job to start and stops the runner when none has after
``GPUCI_RUNNER_IDLE_S``. "Started" is either sign, whichever comes first: the worker's log
``_diag/Worker_*.log`` appearing (the listener spawns ``Runner.Worker`` for every job and it
writes this file first, whatever the console says), or the listener's console line
``Running job:`` (the runner's own stdout; a job's output never goes there, so a job cannot
fake it, and the worker file covers a runner whose console wording changes).

Whatever ends the runner, the pod then terminates itself (``gpuci_stop terminate``, the pod's
own id and key, retried until RunPod answers). The credential is read into a shell variable
and removed from the environment before the runner starts, so the job's steps do not inherit
it. That is not isolation: the job runs as the same user in the same container and could read
it from the runner's command line or the container's first process (``/proc``). A JIT
configuration is bound to this one runner and its one job; a GitLab runner token would let a
job take other jobs whose tags the runner has, until the runner deletes itself at the end
(docs/runners.md: give the train job a per-pipeline tag).
"""

from __future__ import annotations

from gpuci import settings
from gpuci.pods._runpod import selfstop
from gpuci.pods.health import _handover as handover

# The fallback when GitHub's releases API cannot be reached (gpuci.pods._runners.release resolves
# the newest release at every ``up``): actions/runner 2.338.0 and the sha256 its release notes
# publish for actions-runner-linux-x64-2.338.0.tar.gz (the same as the asset's digest). Bump
# both together (docs/runners.md); a test fails when the fake's newest release is newer.
RUNNER_VERSION = "2.338.0"
RUNNER_SHA256 = "af4b794c1bc41d73d40535e3fe092a39f9679cd8d965954c2aca25a05ca41d32"
ENV_RELEASE_URL = settings.RUNNER_RELEASE_URL.name  # a mirror (or a test server): hash holds

BODY = r"""
set -u
gpuci_log() { echo "gpu-ci runner: $*"; }
gpuci_end() {
  gpuci_log "runner finished (status $1): terminating pod ${RUNPOD_POD_ID:-?}"
  until gpuci_stop terminate; do sleep "${GPUCI_SELF_STOP_RETRY_S:-30}"; done
  exit "$1"
}
gpuci_fetch() {
  max="${GPUCI_RUNNER_MAX_BYTES:-1073741824}"
  if command -v curl >/dev/null 2>&1; then
    curl -fsSL --retry 3 -m 600 --max-filesize "$max" -o "$2" "$1"
  elif command -v wget >/dev/null 2>&1; then
    wget -q -T 600 -O - "$1" | head -c "$((max + 1))" > "$2"
  else
    python3 -c 'import sys, urllib.request as r
most = int(sys.argv[3])
with r.urlopen(sys.argv[1], timeout=600) as answer, open(sys.argv[2], "wb") as out:
    while block := answer.read(1 << 20):
        out.write(block)
        if out.tell() > most:
            sys.exit(63)' "$1" "$2" "$max"
  fi
  got=$?
  size=$( { wc -c < "$2"; } 2>/dev/null || echo 0)
  if [ "$got" = 63 ] || [ "$size" -gt "$max" ]; then
    gpuci_log "refusing the runner download: over $max bytes (GPUCI_RUNNER_MAX_BYTES)"
    got=1
  fi
  [ "$got" = 0 ] || rm -f "$2"
  return "$got"
}
gpuci_sha256() {
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum "$1" | cut -d ' ' -f 1
  else
    python3 -c 'import hashlib, sys
digest = hashlib.sha256()
with open(sys.argv[1], "rb") as data:
    while block := data.read(1 << 20):
        digest.update(block)
print(digest.hexdigest())' "$1"
  fi
}
gpuci_install_runner() {
  ver="$GPUCI_ACTIONS_RUNNER_VERSION"
  url="${GPUCI_RUNNER_RELEASE_URL:-https://github.com/actions/runner/releases/download}/v$ver/actions-runner-linux-x64-$ver.tar.gz"
  dir="${GPUCI_RUNNER_HOME:-${HOME:-/root}/gpuci-actions-runner}"
  tgz="$dir.tar.gz"
  gpuci_log "downloading actions runner $ver"
  if ! gpuci_fetch "$url" "$tgz"; then
    gpuci_log "cannot download $url"
    return 1
  fi
  got=$(gpuci_sha256 "$tgz")
  if [ "$got" != "$GPUCI_ACTIONS_RUNNER_SHA256" ]; then
    gpuci_log "refusing the runner download: sha256 $got, expected $GPUCI_ACTIONS_RUNNER_SHA256"
    rm -f "$tgz"
    return 1
  fi
  mkdir -p "$dir" && tar xzf "$tgz" -C "$dir" || return 1
  rm -f "$tgz"
  if [ "$(id -u)" = 0 ] && [ -x "$dir/bin/installdependencies.sh" ] \
     && ! ldconfig -p 2>/dev/null | grep -q libicu; then
    "$dir/bin/installdependencies.sh" >/dev/null 2>&1 \
      || gpuci_log "warning: runner dependencies not installed"
  fi
  return 0
}
gpuci_job_started() {
  grep -q "Running job:" "$1" 2>/dev/null && return 0
  for f in "$2"/_diag/Worker_*.log; do
    [ -e "$f" ] && return 0
  done
  return 1
}
gpuci_version_ge() {
  awk -v a="$1" -v b="$2" 'BEGIN {
    if (split(a, x, ".") != 3 || split(b, y, ".") != 3) exit 1
    for (i = 1; i <= 3; i++) { if (x[i] + 0 > y[i] + 0) exit 0; if (x[i] + 0 < y[i] + 0) exit 1 }
    exit 0 }'
}
gpuci_image_runner_ok() {
  min="${GPUCI_ACTIONS_RUNNER_MIN_VERSION:-}"
  [ -n "$min" ] && [ -x "$1/bin/Runner.Listener" ] || return 0
  have=$("$1/bin/Runner.Listener" --version 2>/dev/null | head -n 1 | tr -cd '0-9.')
  if [ -z "$have" ]; then
    gpuci_log "cannot read the version of the runner in $1: using it"
    return 0
  fi
  if gpuci_version_ge "$have" "$min"; then return 0; fi
  gpuci_log "the image's actions runner $have is older than $min, the oldest GitHub accepts"
  return 1
}
gpuci_report() {  # gpuci_rename_pod: handover.SHELL, part of SCRIPT
  n="${GPUCI_RUNNER_NAME#gpuci-}"
  n="${n%%-*}"
  why=$(printf '%s' "$1" | tr -c 'A-Za-z0-9 .,:_/()+-' ' ' | cut -c 1-200)
  gpuci_rename_pod "$(printf 'gpuci owner=%s exp=%s run=%s n=%s refused: %s' \
    "${GPUCI_OWNER:-unknown}" "${GPUCI_EXPIRES_AT:-?}" "${GPUCI_RUN_URL:-local}" "$n" "$why" |
    tr -d '"\\')"
}
gpuci_refused() {
  line=$(grep -m 1 -e "is deprecated and cannot receive messages" "$1" 2>/dev/null)
  if [ -n "$line" ] || [ "$2" = 7 ]; then
    printf 'GitHub refused runner %s: %s' "$3" "${line:-its version is deprecated}"
    return 0
  fi
  line=$(grep -m 1 -e "An error occurred:" -e "Failed to create a session" \
    -e "Http response code: Unauthorized" "$1" 2>/dev/null)
  if [ -n "$line" ]; then
    printf 'GitHub refused runner %s: %s' "$3" "$line"
    return 0
  fi
  return 1
}
gpuci_stop_runner() {
  # run.sh forwards a stop to Runner.Listener only with RUNNER_MANUALLY_TRAP_SIG=1 (it then
  # sends SIGINT to the listener's process group); a bare TERM would orphan the listener.
  kill -TERM "$1" 2>/dev/null
  n=0
  while kill -0 "$1" 2>/dev/null && [ "$n" -lt 30 ]; do sleep 1; n=$((n + 1)); done
  kill -KILL "$1" 2>/dev/null
}
gpuci_idle_watch() {
  # The idle clock starts when the listener says it listens: a slow start (a busy or cold
  # machine) is not idleness, and a stop must not reach a listener still setting its traps.
  # One that never says so is stopped 2 minutes after the idle timeout.
  began=$(date +%s)
  listening=""
  limit=$((GPUCI_RUNNER_IDLE_S + 120))
  while sleep 1; do
    pid=$(cat "$3" 2>/dev/null)
    [ -n "$pid" ] || continue
    kill -0 "$pid" 2>/dev/null || return 0
    if [ -z "$listening" ] && grep -q "Listening for Jobs" "$1" 2>/dev/null; then
      listening=1
      began=$(date +%s)
      limit=$GPUCI_RUNNER_IDLE_S
    fi
    if gpuci_job_started "$1" "$2"; then gpuci_log "a job started"; return 0; fi
    if [ $(( $(date +%s) - began )) -ge "$limit" ]; then
      sleep 1
      if gpuci_job_started "$1" "$2"; then gpuci_log "a job started"; return 0; fi
      gpuci_log "no job within ${GPUCI_RUNNER_IDLE_S}s: stopping the runner"
      gpuci_stop_runner "$pid"
      return 0
    fi
  done
}
gpuci_github() {
  cfg="${GPUCI_RUNNER_JITCONFIG:-}"
  unset GPUCI_RUNNER_JITCONFIG
  dir=""
  for d in "${GPUCI_RUNNER_DIR:-}" /actions-runner /home/runner/actions-runner \
           /opt/actions-runner; do
    if [ -n "$d" ] && [ -x "$d/run.sh" ]; then
      gpuci_image_runner_ok "$d" && dir="$d"
      break
    fi
  done
  ver="image"
  if [ -z "$dir" ]; then
    gpuci_install_runner || return 3
    ver="$GPUCI_ACTIONS_RUNNER_VERSION"
  fi
  if [ "$(id -u)" = 0 ]; then export RUNNER_ALLOW_RUNASROOT=1; fi
  export RUNNER_MANUALLY_TRAP_SIG=1 ACTIONS_RUNNER_RETURN_VERSION_DEPRECATED_EXIT_CODE=1
  log="${TMPDIR:-/tmp}/gpuci-runner.$$.log"
  pidf="$log.pid"
  : >"$log"
  rm -f "$pidf"
  tail -n +1 -f "$log" &
  tailpid=$!
  gpuci_idle_watch "$log" "$dir" "$pidf" &
  watchpid=$!
  # The runner runs in the foreground: an ``&`` job of a non-interactive sh starts with SIGINT
  # ignored, and .NET keeps a signal ignored on entry, so run.sh's forwarded stop would be lost.
  # The watch finds it by the pid it writes before becoming run.sh.
  (cd "$dir" && exec sh -c 'echo "$$" >"$1"; shift; exec "$@"' sh "$pidf" \
    ./run.sh --jitconfig "$cfg") >"$log" 2>&1
  rc=$?
  cfg=""
  kill "$watchpid" 2>/dev/null
  sleep 1
  kill "$tailpid" 2>/dev/null
  if ! gpuci_job_started "$log" "$dir" && why=$(gpuci_refused "$log" "$rc" "$ver"); then
    gpuci_log "$why"
    gpuci_report "$why" || gpuci_log "could not report the refusal in the pod's name"
    sleep "${GPUCI_RUNNER_REPORT_S:-30}"
    return 4
  fi
  return "$rc"
}
gpuci_gitlab_delete_self() {
  u="$GPUCI_GITLAB_API_URL/runners"
  if command -v curl >/dev/null 2>&1; then
    printf 'token=%s' "$1" | curl -fsS -m 30 -o /dev/null -X DELETE \
      -H "Content-Type: application/x-www-form-urlencoded" --data-binary @- "$u"
  else
    printf '%s' "$1" | python3 -c 'import sys, urllib.parse as p, urllib.request as r
d = p.urlencode({"token": sys.stdin.read()}).encode()
q = r.Request(sys.argv[1], d, method="DELETE")
q.add_header("Content-Type", "application/x-www-form-urlencoded")
r.urlopen(q, timeout=30)' "$u"
  fi
}
gpuci_gitlab() {
  tok="${GPUCI_GITLAB_RUNNER_TOKEN:-}"
  unset GPUCI_GITLAB_RUNNER_TOKEN
  if ! command -v gitlab-runner >/dev/null 2>&1; then
    gpuci_log "gitlab-runner is not in the image: use an image that has it"
    rc=3
  else
    gitlab-runner run-single --url "$GPUCI_GITLAB_URL" --token "$tok" --executor shell \
      --max-builds 1 --wait-timeout "$GPUCI_RUNNER_IDLE_S"
    rc=$?
  fi
  n=0
  until gpuci_gitlab_delete_self "$tok"; do
    n=$((n + 1))
    if [ "$n" -ge 5 ]; then gpuci_log "could not delete the runner (down/reap will)"; break; fi
    sleep 2
  done
  return "$rc"
}
gpuci_smoke_gate || exit "$?"
case "${GPUCI_RUNNER_PLATFORM:-}" in
  github) gpuci_github; gpuci_end $? ;;
  gitlab) gpuci_gitlab; gpuci_end $? ;;
  *) gpuci_log "GPUCI_RUNNER_PLATFORM is not github or gitlab"; gpuci_end 2 ;;
esac
"""

SCRIPT = selfstop.STOP_FUNCTION + "\n" + handover.SHELL + "\n" + BODY.strip() + "\n"


def env() -> dict[str, str]:
    """The pinned release the script installs when the image has no runner (the fallback)."""
    return {
        settings.ACTIONS_RUNNER_VERSION.name: RUNNER_VERSION,
        settings.ACTIONS_RUNNER_SHA256.name: RUNNER_SHA256,
        settings.ACTIONS_RUNNER_MIN_VERSION.name: RUNNER_VERSION,
    }
