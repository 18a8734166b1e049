"""How a smoking pod whose image has no gpu-ci gets it: pinned, its dependencies as pinned.

``pip install "gpuci @ $GPUCI_PACKAGE"`` pinned gpu-ci alone: its dependencies (httpx,
botocore, ...) and its build backend came from the package index, at whatever versions it
served that minute, on a pod about to be handed a job. So the pod does what
``scripts/bootstrap.sh`` does on a runner, with the source ``GPUCI_PACKAGE`` pins
(:mod:`gpuci.pods.health._pod_gpuci`):

1. gpu-ci's **source** at that version, into a private folder, nothing in it built or run: a
   ``git+URL@<commit>`` is cloned and checked out (git checks it object by object), and a
   ``git+`` URL whose ref (after the last ``@`` before the first ``#``) is not a full 40-hex
   commit is refused, as a branch or tag can move (the rule of ``_pod_gpuci.is_pinned``); an
   archive (``URL#sha256=<hex>``, as the GitLab template's source archive) is refused unless its
   bytes hash to that;
2. that source's ``requirements.lock`` with ``pip install --require-hashes --no-deps`` (the
   flags bootstrap.sh gives pip): every dependency at its locked version, each download checked
   against its hash, nothing resolved from the index; ``--target`` a folder only the smoke uses;
3. the source's ``src/`` first on the smoke's ``PYTHONPATH``: gpu-ci is pure Python, so it is
   linked, not installed, and no unlocked build backend is fetched.

The smoke runs on the image's own Python (its torch, for a framework check), so no venv: the
two folders go on its path (:data:`gpuci.pods.health._handover.SHELL`'s ``gpuci_py``).

A source without ``requirements.lock`` (a wheel) cannot pin its dependencies: the pod refuses it
in one line and hands over ``smoke skipped``, never an unpinned install in its place.

No line the pod writes (its log, ``gpuci_why``, so its name) holds the URL's userinfo: the
archive fetch never prints the URL, and ``gpuci_unsecret`` takes it out of git's last line.
"""

from __future__ import annotations

# An archive's bytes, checked and unpacked: stdlib only (the pod has no gpu-ci yet). Exit 1 with
# one line on stderr (what ``gpuci_install`` quotes), the folder left absent. The URL's userinfo
# (``user:token@``, which urllib cannot parse) travels as a Basic Authorization header, never to
# a host a redirect names; no line holds the URL or an exception's text that could quote it.
_UNPACK = r"""
import base64, hashlib, io, sys, tarfile, urllib.error, urllib.parse, urllib.request, zipfile
url, want = sys.argv[1].partition("#sha256=")[::2]
def fetch(url):
    parts = urllib.parse.urlsplit(url)
    who, at, host = parts.netloc.rpartition("@")
    request = urllib.request.Request(urllib.parse.urlunsplit(parts._replace(netloc=host)))
    if at:
        pair = ":".join(urllib.parse.unquote(p) for p in who.partition(":")[::2])
        basic = base64.b64encode(pair.encode()).decode()
        request.add_unredirected_header("Authorization", "Basic " + basic)
    with urllib.request.urlopen(request, timeout=300) as answer:
        return answer.read((256 << 20) + 1)
def cause(exc):
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    inner = exc.reason if isinstance(getattr(exc, "reason", None), BaseException) else exc
    text = getattr(inner, "strerror", None) if isinstance(inner, OSError) else None
    return type(inner).__name__ + (f" ({text})" if isinstance(text, str) and text else "")
try:
    data = fetch(url)
except Exception as exc:
    sys.exit(f"cannot download it: {cause(exc)}")
if len(data) > 256 << 20:
    sys.exit("the archive is over 256 MiB, more than any gpu-ci source")
got = hashlib.sha256(data).hexdigest()
if want and got != want.lower():
    sys.exit(f"its sha256 is {got}, not the pinned {want}: nothing of it was used")
try:
    if zipfile.is_zipfile(io.BytesIO(data)):
        zipfile.ZipFile(io.BytesIO(data)).extractall(sys.argv[2])
    else:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(sys.argv[2], **safe)
except Exception as exc:
    sys.exit(f"cannot unpack it: {type(exc).__name__}: {exc}")
"""

# ``gpuci_source DIR``: GPUCI_PACKAGE's source into DIR (git, else an archive), then
# ``gpuci_install``: the steps above; sets ``gpuci_site`` (the smoke's PYTHONPATH head) or
# ``gpuci_why`` (one line). ``gpuci_py`` is :data:`gpuci.pods.health._handover.SHELL`'s.
SHELL = (
    r"""
gpuci_source() {
  # gpu-ci's source at the version GPUCI_PACKAGE pins, into $1: nothing in it built or run
  case "$GPUCI_PACKAGE" in
    git+*)
      u="${GPUCI_PACKAGE#git+}"
      u="${u%%#*}"
      ref="${u##*@}"
      case "$ref" in "$u" | *[!0-9A-Fa-f]*) ref="" ;; esac
      if [ "${#ref}" != 40 ]; then
        echo "a git URL is installed only at a full 40-hex commit SHA, not a branch or tag," \
          "which can move: name the commit after its last @"
        return 1
      fi
      u="${u%@*}"
      command -v git >/dev/null 2>&1 || { echo "no git on the image to clone it"; return 1; }
      git clone -q --filter=blob:none --no-checkout -- "$u" "$1" ||
        { rm -rf "$1" && git clone -q --no-checkout -- "$u" "$1"; } || return 1
      git -C "$1" checkout -q --detach "$ref" 2>/dev/null ||
        { git -C "$1" fetch -q origin "$ref" && git -C "$1" checkout -q --detach FETCH_HEAD; }
      ;;
    *)
      "${GPUCI_SMOKE_PYTHON:-python3}" - "$GPUCI_PACKAGE" "$1" <<'UNPACK_PY'
"""
    + _UNPACK.strip()
    + r"""
UNPACK_PY
      ;;
  esac
}
gpuci_unsecret() {
  # stdin without GPUCI_PACKAGE's userinfo (user:token@) or its token alone, each as ***
  authority="${GPUCI_PACKAGE#*://}"
  authority="${authority%%/*}"
  case "$authority" in *@*) userinfo="${authority%@*}" ;; *) userinfo="" ;; esac
  case "$userinfo" in *:*) secret="${userinfo#*:}" ;; *) secret="$userinfo" ;; esac
  url_who="$userinfo" url_token="$secret" awk '
    function cut(line, s,   out, i) {
      out = ""
      while (s != "" && (i = index(line, s)) > 0) {
        out = out substr(line, 1, i - 1) "***"
        line = substr(line, i + length(s))
      }
      return out line
    }
    { print cut(cut($0, ENVIRON["url_who"]), ENVIRON["url_token"]) }'
}
gpuci_last() {
  # the last line of $1, no secret of the URL in it, from a fixed character set, for gpuci_why
  last=$(grep -v '^ *$' "$1" | tail -n 1 | gpuci_unsecret | tr -c 'A-Za-z0-9 .,:_=/+()@#*-' ' ')
  printf '%s' "${last:-$2}" | cut -c 1-160
}
gpuci_install() {
  # gpu-ci for the smoke: the image's, else GPUCI_PACKAGE's source (pinned by up) with the
  # dependencies its requirements.lock pins, hashes required (as scripts/bootstrap.sh)
  gpuci_why=""
  gpuci_ok=1
  gpuci_py -c 'import gpuci.pods.health._handover' >/dev/null 2>&1 && return 0
  gpuci_ok=0
  if [ -z "${GPUCI_PACKAGE:-}" ]; then
    gpuci_why="no gpu-ci on the image and no GPUCI_PACKAGE to install it from"
    return 1
  fi
  site="${GPUCI_POD_SITE:-${HOME:-/root}/.cache/gpuci/pod-site}"
  failed="gpu-ci install from GPUCI_PACKAGE failed"
  echo "gpu-ci: installing gpu-ci for the smoke from GPUCI_PACKAGE," \
    "its dependencies from its requirements.lock (hashes required)"
  rm -rf "$site/source" "$site/deps"
  mkdir -p "$site" 2>/dev/null
  if ! gpuci_source "$site/source" >"$site.log" 2>&1; then
    gpuci_why="$failed: $(gpuci_last "$site.log" 'no reason given')"
    return 1
  fi
  root="$site/source"
  for top in "$root"/*/; do  # an archive's one folder (GitHub's: <repo>-<ref>/)
    [ -f "$root/requirements.lock" ] || [ ! -f "${top}requirements.lock" ] || root="${top%/}"
  done
  if [ ! -f "$root/requirements.lock" ] || [ ! -d "$root/src/gpuci" ]; then
    gpuci_why="$failed: it holds no requirements.lock, so its dependencies cannot be pinned:"
    gpuci_why="$gpuci_why use a git URL at a commit or a source archive"
    return 1
  fi
  if ! "${GPUCI_SMOKE_PYTHON:-python3}" -m pip install -q --disable-pip-version-check \
      --no-input --require-hashes --no-deps --target "$site/deps" \
      -r "$root/requirements.lock" >>"$site.log" 2>&1; then
    gpuci_why="$failed: $(gpuci_last "$site.log" 'pip gave no reason')"
    return 1
  fi
  gpuci_site="$root/src:$site/deps"
  if ! gpuci_py -c 'import gpuci.pods.health._handover' >/dev/null 2>&1; then
    gpuci_why="gpu-ci installed from GPUCI_PACKAGE does not import"
    gpuci_site=""
    return 1
  fi
  gpuci_ok=1
  return 0
}
"""
).strip()
