"""Who is asking (CI identity), whom they may spend for, and how much: the budgets file.

The budgets file lives in the repository (default ``.gpuci/budgets.yml``) so that changing a
budget is a reviewed commit; protect it with CODEOWNERS and a protected branch::

    period: 30d            # the window spend is counted over
    reap-interval: 15m     # how often your reaper runs (at least this is counted past a TTL)
    default: 50            # USD per period for anyone not listed (omit: no limit)
    owners:
      alice: 100
      team-ml: 400
    delegations:           # identity -> owners it may act for
      alice: [team-ml]
      ci-bot: [team-ml]

``budget-usd`` (an input anyone can pass) can only lower what the file allows, never raise it;
``reap-interval`` (an input too) can only lengthen the time a pod is counted past its TTL.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuci import settings, untrusted_json, untrusted_yaml
from gpuci.errors import InputError
from gpuci.inputs import parse_duration
from gpuci.pods._runpod.naming import clean_owner, fold_owner
from gpuci.pods.options import UpInputs
from gpuci.untrusted_child import git

DEFAULT_FILE = ".gpuci/budgets.yml"
DEFAULT_PERIOD_S = 30 * 86400.0
#: How long past its expiry a pod is counted when the budgets file names no reap interval;
#: the job's own ``reap-interval`` can lengthen it, never shorten it.
REAP_INTERVAL_FLOOR_S = 15 * 60.0
MAX_FILE = 256 * 1024
#: The longest budget period ``start --ttl`` takes from a pod's reservation (a ledger object).
MAX_ADMITTED_PERIOD_S = 366 * 86400.0


@dataclass(frozen=True)
class Identity:
    """Who runs this job, and whether CI vouches for it (False on a laptop)."""

    login: str
    from_ci: bool
    source: str


def ci_identity(environ: Mapping[str, str]) -> Identity:
    """The login CI vouches for: GitHub's triggering actor, GitLab's user, else git's user."""
    if settings.GITHUB_ACTIONS.raw(environ) == "true" or settings.GITHUB_RUN_ID.raw(environ):
        for actor in (settings.GITHUB_TRIGGERING_ACTOR, settings.GITHUB_ACTOR):
            login = actor.raw(environ)
            if login:
                return Identity(clean_owner(login), True, actor.name)
    in_gitlab = settings.GITLAB_CI.raw(environ) == "true" or settings.CI_PIPELINE_URL.raw(environ)
    gitlab_login = settings.GITLAB_USER_LOGIN.raw(environ)
    if in_gitlab and gitlab_login:
        return Identity(clean_owner(gitlab_login), True, settings.GITLAB_USER_LOGIN.name)
    git = _git_user(environ)
    if git:
        return Identity(clean_owner(git), False, "git config user.email")
    for name in ("USER", "USERNAME"):
        if environ.get(name):
            return Identity(clean_owner(environ[name]), False, name)
    return Identity("unknown", False, "nothing")


def _git_user(environ: Mapping[str, str]) -> str:
    """The local part of git's user.email (a login-like name), or user.name."""
    for key in ("user.email", "user.name"):
        value = git("config", "--get", key, env=environ)
        if value:
            return value.partition("@")[0] if key == "user.email" else value
    return ""


@dataclass
class Budgets:
    period_s: float = DEFAULT_PERIOD_S
    reap_interval_s: float = REAP_INTERVAL_FLOOR_S
    default: float | None = None
    owners: dict[str, float] = field(default_factory=dict)
    delegations: dict[str, set[str]] = field(default_factory=dict)
    source: str = ""  # the file read, empty when none

    def limit(self, owner: str) -> float | None:
        return self.owners.get(fold_owner(owner), self.default)

    def may_act_for(self, identity: str, owner: str) -> bool:
        """Whether ``identity`` may start pods billed to ``owner`` (case-insensitively)."""
        identity, owner = fold_owner(identity), fold_owner(owner)
        return identity == owner or owner in self.delegations.get(identity, set())


def _usd(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise InputError(
            f"budgets file: {where} must be a non-negative number of USD, not {value!r}",
            hint="write e.g. 'alice: 100'",
        )
    return float(value)


def parse(data: Any, source: str) -> Budgets:
    if data is None:
        return Budgets(source=source)
    if not isinstance(data, dict):
        raise InputError(f"budgets file {source} is not a mapping", hint="see docs/pods.md")
    unknown = set(data) - {"period", "reap-interval", "default", "owners", "delegations"}
    if unknown:
        raise InputError(
            f"budgets file {source}: unknown key(s) {', '.join(sorted(map(str, unknown)))}",
            hint="use period, reap-interval, default, owners and delegations",
        )
    out = Budgets(source=source)
    out.period_s = _duration(data, "period", source, out.period_s)
    out.reap_interval_s = _duration(data, "reap-interval", source, out.reap_interval_s)
    if data.get("default") is not None:
        out.default = _usd(data["default"], "default")
    owners = data.get("owners") or {}
    delegations = data.get("delegations") or {}
    if not isinstance(owners, dict) or not isinstance(delegations, dict):
        raise InputError(
            f"budgets file {source}: owners and delegations must be mappings",
            hint="see docs/pods.md for the format",
        )
    out.owners = {
        name: _usd(owners[key], f"owners.{key}")
        for name, key in _names(owners, "owners", source).items()
    }
    for ident, key in _names(delegations, "delegations", source).items():
        allowed = delegations[key]
        if isinstance(allowed, str):
            allowed = [allowed]
        if not isinstance(allowed, list):
            raise InputError(
                f"budgets file {source}: delegations.{key} must be a list of owners",
                hint="write e.g. 'alice: [team-ml]'",
            )
        out.delegations[ident] = {clean_owner(str(a)) for a in allowed}
    return out


def _duration(data: dict[Any, Any], key: str, source: str, default: float) -> float:
    if data.get(key) is None:
        return default
    try:
        return parse_duration(str(data[key]))
    except ValueError:
        raise InputError(
            f"budgets file {source}: {key} {data[key]!r} is not a duration",
            hint=f"write e.g. {key}: {'30d' if key == 'period' else '15m'}",
        ) from None


def _names(section: dict[Any, Any], where: str, source: str) -> dict[str, Any]:
    """Each key of a budgets-file section as an owner name (folded: usernames are
    case-insensitive) -> the key as written; two keys naming one owner are refused."""
    out: dict[str, Any] = {}
    for key in section:
        name = clean_owner(str(key))
        if name in out:
            raise InputError(
                f"budgets file {source}: {where}.{out[name]} and {where}.{key} name one owner "
                f"('{name}'; GitHub and GitLab usernames are case-insensitive)",
                hint="keep one of them",
            )
        out[name] = key
    return out


def load(value: str | None, cwd: Path | None = None) -> Budgets:
    """The budgets file named by ``budgets`` (default ``.gpuci/budgets.yml``, optional)."""
    import yaml

    explicit = (value or "").strip() not in ("", DEFAULT_FILE)  # the default may be absent
    path = Path((value or "").strip() or DEFAULT_FILE)
    if not path.is_absolute():
        path = (cwd or Path.cwd()) / path
    if not path.is_file():
        if explicit:
            raise InputError(
                f"budgets file {value} does not exist",
                hint="commit it (see docs/pods.md) or leave budgets empty",
            )
        return Budgets()
    hint = "fix the file; see docs/pods.md for the format"
    text = untrusted_json.read_input(path, "budgets file", hint, MAX_FILE)
    try:  # the one bounded reader: no key twice, no alias bomb, no nesting past its bound
        data = untrusted_yaml.load(text, case_blind=False)  # owners' case: named below
    except untrusted_yaml.Refused as exc:
        raise InputError(f"budgets file {path} is not usable: {exc.problem}", hint=hint) from None
    except yaml.YAMLError as exc:
        raise InputError(
            f"budgets file {path} is not valid YAML ({type(exc).__name__})", hint=hint
        ) from None
    return parse(data, str(value or DEFAULT_FILE))


@dataclass(frozen=True)
class Decision:
    owner: str
    identity: Identity
    budget: float | None
    period_s: float
    notes: tuple[str, ...] = ()
    grace_s: float = REAP_INTERVAL_FLOOR_S  # how long past its expiry a pod is counted


def decide(inp: UpInputs, environ: Mapping[str, str], cwd: Path | None = None) -> Decision:
    """The owner to bill and their budget; refuses (exit 2) an owner CI does not vouch for."""
    ident = ci_identity(environ)
    book = load(inp.budgets or None, cwd)
    asked = clean_owner(inp.owner) if inp.owner else ""
    owner = asked or ident.login
    notes: list[str] = []
    if asked and asked != ident.login:
        if ident.from_ci and not book.may_act_for(ident.login, asked):
            raise InputError(
                f"owner '{asked}' differs from the CI identity '{ident.login}' "
                f"({ident.source}) and the budgets file does not delegate it",
                hint=f"drop owner, or add '{ident.login}: [{asked}]' under delegations in "
                f"{book.source or DEFAULT_FILE}",
            )
        if not ident.from_ci:
            notes.append(f"owner {asked} is self-declared here (no CI identity to check)")
    limit = book.limit(owner)
    asked_budget = inp.budget_usd
    if asked_budget is not None:
        asked_budget = float(asked_budget)
        if limit is not None and asked_budget > limit:
            notes.append(
                f"budget-usd {asked_budget:.2f} is above {owner}'s {limit:.2f} in "
                f"{book.source}; the file's budget applies"
            )
        limit = asked_budget if limit is None else min(limit, asked_budget)
    period = book.period_s if book.source else float(inp.budget_period or 0)
    grace = max(book.reap_interval_s, float(inp.reap_interval or 0))
    return Decision(owner, ident, limit, period or DEFAULT_PERIOD_S, tuple(notes), grace)


def decide_extension(
    owner: str,
    environ: Mapping[str, str],
    admitted_budget: float | None,
    admitted_period_s: float | None,
    budgets: str = "",
    cwd: Path | None = None,
) -> Decision:
    """Whose money ``pods start --ttl`` spends, and under which budget: ``up``'s owner rule
    (the CI identity, or a delegation in the budgets file ``budgets``, read as ``up`` reads
    it; exit 2 otherwise), and the lower of the file's amount and the one the pod was admitted
    under (its reservation's). Without a file the period is the admitted one, which the ledger
    (anyone with write access to its store) wrote: at most :data:`MAX_ADMITTED_PERIOD_S`."""
    ident = ci_identity(environ)
    book = load(budgets or None, cwd)
    if ident.from_ci and not book.may_act_for(ident.login, owner):
        raise InputError(
            f"the pod is {owner}'s: the CI identity '{ident.login}' ({ident.source}) may not "
            "give it a new expiry, and the budgets file does not delegate it",
            hint=f"let {owner} run it, or add '{ident.login}: [{owner}]' under delegations in "
            f"{book.source or DEFAULT_FILE}",
        )
    limits = [x for x in (book.limit(owner), admitted_budget) if x is not None]
    admitted = min(admitted_period_s or DEFAULT_PERIOD_S, MAX_ADMITTED_PERIOD_S)
    period = book.period_s if book.source else admitted
    return Decision(owner, ident, min(limits) if limits else None, period, (), book.reap_interval_s)
