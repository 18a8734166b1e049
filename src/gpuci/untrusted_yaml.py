"""YAML a pull request may write (a workflow, an action, a budgets file), read with GitHub's own
bounds: the one YAML reader for untrusted files, as :mod:`gpuci.untrusted_json` is for JSON.

A pull request writes the files a dry run reads, and ``yaml.safe_load`` alone trusts their
shape: 50,000 nested brackets end it in ``RecursionError``, and nine anchors of ten aliases
each (a 550-byte file) stand for 10**9 values that every later walk of the document visits.
GitHub's template reader refuses both; so does this loader, with the line and the limit:

- nesting: at most :data:`MAX_DEPTH` levels (the runner reads an action.yml within 100,
  ``ActionManifestManager``'s ``TemplateMemory(maxDepth: 100)``; workflows within 50);
- size: at most :data:`MAX_NODES` values, an alias counted as everything its anchor holds each
  time it is used (GitHub accepts anchors since September 2025 and reads a document within
  1,000,000 parse events, ``ParseOptions.MaxParseEvents``), and no alias inside its own anchor;
- keys: none twice in one mapping (GitHub: "'key' is already defined"; PyYAML keeps the last);
- escapes: none of a UTF-16 surrogate, paired or not (YamlDotNet's scanner: "found invalid
  Unicode character escape code"; PyYAML makes a string of it that no UTF-8 can hold);
- integers: at most :data:`MAX_INT_DIGITS` digits (GitHub reads a number as a double, 17
  significant digits; Python refuses to read or print one of more than 4,300 digits with a
  ``ValueError``, which no caller expects of a YAML reader); ``0x``/``0o`` ones within 32 bits,
  as GitHub's reader takes them (``0x1FFFFFFFF`` is refused, ``0xFFFFFFFF`` is -1); and a value
  tagged ``!!int`` or ``!!float`` that is no number is no YAML rather than a ``ValueError``;
- floats: none past a double's range (``1e400``: GitHub's reader refuses it, PyYAML made it
  infinity);
- dates: the text written (GitHub has no timestamp type), never a datetime or a ValueError;
- tags: on a value, only the core schema's (``!!int`` on a plain ``0x1f``, not on ``'0x1f'``
  or ``1_000``; no ``!``), as GitHub's reader takes them; on a mapping or list, none
  (``!!set`` is the mapping written);
- plain scalars: read by GitHub's YAML 1.2 core schema, not PyYAML's YAML 1.1 (``yes`` is text,
  ``0755`` is 755), so a plan prints and compares the values the run has.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MAX_DEPTH = 100
MAX_NODES = 1_000_000
MAX_INT_DIGITS = 100  # a run count or a size needs 20; Python stops at 4,300 (int_max_str_digits)
# A check of each text (value or key) a caller adds: (problem, hint) for one to refuse, else None
ScalarCheck = Callable[[str], "tuple[str, str] | None"]
_SURROGATE = re.compile("[\ud800-\udfff]")  # only an escape makes one (the reader refuses it raw)


class Refused(yaml.MarkedYAMLError):
    """A file GitHub's reader refuses too: ``problem`` says why, ``hint`` what GitHub allows."""

    def __init__(self, problem: str, hint: str, mark: Any) -> None:
        super().__init__(problem=problem, problem_mark=mark)
        self.hint = hint


class DuplicateKey(Refused):
    """A mapping that names ``key`` again, case-blind: ``first`` is how it was first spelled."""

    def __init__(self, key: str, first: str, mark: Any) -> None:
        super().__init__(
            f"names the key '{key[:60]}' twice in one mapping",
            f"GitHub refuses a file whose mapping repeats a key, case-blind ('{key[:60]}' is "
            "already defined); keep one",
            mark,
        )
        self.key, self.first = key, first


class _BoundedLoader(yaml.SafeLoader):
    """``SafeLoader`` that counts, while composing, each node's depth and the nodes an alias
    stands for: refused before anything walks the document."""

    def __init__(
        self, stream: str, check: ScalarCheck | None = None, case_blind: bool = True
    ) -> None:
        super().__init__(stream)
        self._check, self._case_blind = check, case_blind
        self._level = 0  # the level of the node being composed (the document's root is 1)
        self._reach = 0  # the deepest level reached, aliases read in full
        self._nodes = 0  # nodes so far, aliases read in full
        self._sizes: dict[str, tuple[int, int]] = {}  # anchor -> (nodes, levels) it holds

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            self._read_alias(event)
            return super().compose_node(parent, index)
        self._level += 1
        outer_reach, self._reach = self._reach, self._level
        first = self._nodes
        self._count(1, self._level, event)
        node = super().compose_node(parent, index)
        if event.anchor is not None:
            self._sizes[event.anchor] = (self._nodes - first, self._reach - self._level + 1)
        self._reach = max(outer_reach, self._reach)
        self._level -= 1
        return node

    def _read_alias(self, event: yaml.AliasEvent) -> None:
        """Count what the alias stands for where it stands; refuse one inside its anchor."""
        if event.anchor in self.anchors and event.anchor not in self._sizes:
            raise Refused(
                f"uses the alias *{event.anchor} inside its own anchor &{event.anchor}",
                "an anchor must be complete before an alias names it (GitHub cannot expand a "
                "value that holds itself)",
                event.start_mark,
            )
        nodes, levels = self._sizes.get(event.anchor or "", (0, 0))
        self._count(nodes, self._level + levels, event)

    def _count(self, nodes: int, reach: int, event: yaml.Event) -> None:
        self._nodes += nodes
        self._reach = max(self._reach, reach)
        if self._reach > MAX_DEPTH:
            raise Refused(
                f"nests deeper than {MAX_DEPTH} levels",
                f"GitHub reads at most {MAX_DEPTH} levels of nested mappings and lists "
                "(aliases counted where they stand); flatten the file",
                event.start_mark,
            )
        if self._nodes > MAX_NODES:
            raise Refused(
                f"holds more than {MAX_NODES:,} values once its aliases are read",
                f"GitHub reads a workflow within {MAX_NODES:,} values, each alias counted as "
                "all its anchor holds; use fewer aliases of large anchors",
                event.start_mark,
            )

    def compose_scalar_node(self, anchor: Any) -> ScalarNode:
        tag = self.peek_event().tag
        node = super().compose_scalar_node(anchor)
        if tag == "!":  # GitHub's reader: "Unexpected tag '!'" (PyYAML read ``! 12`` as 12)
            node.tag = tag
        if tag is not None and node.tag != f"{_CORE}str":
            _refuse_tagged(node)
        if _SURROGATE.search(node.value):
            raise Refused(
                "holds an escape of a surrogate (\\ud800-\\udfff), which names no character",
                "GitHub refuses such an escape as an invalid Unicode character escape code; "
                "write the character itself, or \\U0001F600 for one beyond \\uffff",
                node.start_mark,
            )
        refused = self._check(node.value) if self._check and node.tag == f"{_CORE}str" else None
        if refused:
            raise Refused(*refused, node.start_mark)
        return node

    def compose_mapping_node(self, anchor: Any) -> MappingNode:
        node = super().compose_mapping_node(anchor)
        _refuse_duplicate_keys(
            node, self._case_blind
        )  # as written: construction merges (``<<``) into it
        node.tag = f"{_CORE}map"  # GitHub reads a mapping's tag (``!!set``, ``!foo``) as none
        return node

    def compose_sequence_node(self, anchor: Any) -> SequenceNode:
        node = super().compose_sequence_node(anchor)
        node.tag = f"{_CORE}seq"  # and a list's (``!!omap``, ``!!pairs``)
        return node

    def construct_integer(self, node: ScalarNode) -> int | float:
        """An integer as GitHub's reader reads one, tagged ``!!int`` or not (``MatchInteger``):
        ``[-+]?[0-9]+`` of at most :data:`MAX_INT_DIGITS` digits, or ``0x``/``0o`` digits as
        :func:`int32` reads them, refused past 32 bits (``compose_scalar_node`` lets no other
        ``!!int`` through: ``1_000``, ``1:2``, ``+-5``)."""
        text = node.value if isinstance(node.value, str) else ""
        digits = text[1:] if text[:1] in ("-", "+") else text
        if _DECIMAL.fullmatch(text) and len(digits) > MAX_INT_DIGITS:
            raise Refused(
                f"holds an integer of {len(digits):,} digits",
                f"write a number of at most {MAX_INT_DIGITS} digits (GitHub reads one as a "
                "double, 17 significant digits), or quote it to keep it as text",
                node.start_mark,
            )
        if _DECIMAL.fullmatch(text):  # ``0755`` is 755 to GitHub; PyYAML read it as octal
            number = int(text, 10)  # GitHub reads a double: ``-0`` is -0, its text "-0"
            return -0.0 if number == 0 and text[0] == "-" else number
        hexa = int32(text)
        assert hexa is not None  # compose_scalar_node let only digits, 0x and 0o through
        if math.isnan(hexa):
            raise Refused(
                f"holds the integer {text[:40]}, past 32 bits",
                "GitHub reads a 0x or 0o integer as an Int32 (at most 0xFFFFFFFF, "
                "0o37777777777) and refuses a larger one; write it in decimal, or quote it",
                node.start_mark,
            )
        return int(hexa)

    def construct_yaml_float(self, node: ScalarNode) -> float:
        """A float (``compose_scalar_node`` let only the core schema's through); one past a
        double's range (``1e400``; Python reads infinity) is refused, as GitHub's reader
        refuses it (``MatchFloat``: "exceeds range", invalid for the type)."""
        number = float(super().construct_yaml_float(node))
        if math.isinf(number) and str(node.value).lstrip("+-").lower() != ".inf":
            raise Refused(
                f"holds the number {str(node.value)[:40]}, past a double's range",
                "GitHub refuses a number beyond 1.7976931348623157E+308 as invalid for its type; "
                "quote it to keep it as text, or write .inf for infinity",
                node.start_mark,
            )
        return number


# What a plain scalar is, as GitHub's reader (``YamlObjectReader``: the YAML 1.2 core schema)
# tells it, not PyYAML's YAML 1.1: ``yes``, ``on`` and ``12:30`` are text, ``0755`` is 755,
# ``1e3`` a number, a lone ``=`` text (PyYAML had no constructor for it); the rest is text.
_CORE = "tag:yaml.org,2002:"
_DECIMAL = re.compile(r"[-+]?[0-9]+")
_CORE_SCHEMA = (
    ("bool", r"true|True|TRUE|false|False|FALSE", "tTfF"),
    ("int", r"[-+]?[0-9]+|0x[0-9a-fA-F]+|0o[0-7]+", "-+0123456789"),
    (
        "float",
        r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)",
        "-+.0123456789",
    ),
    ("null", r"~|null|Null|NULL|", ["~", "n", "N", ""]),
)
_KINDS = {kind: re.compile(pattern) for kind, pattern, _ in _CORE_SCHEMA}
_BoundedLoader.yaml_implicit_resolvers = {}
_BoundedLoader.add_implicit_resolver("tag:yaml.org,2002:merge", re.compile(r"^(?:<<)$"), ["<"])
for _kind, _pattern, _first in _CORE_SCHEMA:  # int before float: "12" is an integer
    _BoundedLoader.add_implicit_resolver(
        f"tag:yaml.org,2002:{_kind}", re.compile(rf"^(?:{_pattern})$"), list(_first)
    )
_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_integer)
_BoundedLoader.add_constructor("tag:yaml.org,2002:float", _BoundedLoader.construct_yaml_float)


_INT32 = re.compile(r"0(?:x([0-9a-fA-F]+)|o([0-7]+))")  # only a lowercase x or o, no sign


def int32(text: str) -> float | None:
    """``0x1F`` or ``0o17`` as the runner reads it, in YAML and in an expression's text alike:
    .NET's ``Int32.TryParse`` (hex) and ``Convert.ToInt32(text, 8)`` take 32 bits, those past
    0x7FFFFFFF negative (``0xFFFFFFFF`` is -1), and fail past them (NaN here). None when
    ``text`` is no such number."""
    found = _INT32.fullmatch(text)
    if found is None:
        return None
    hexa, octal = found.groups()
    number = int(hexa, 16) if hexa else int(octal, 8)
    if number >= 1 << 32:
        return math.nan
    return float(number - (1 << 32) if number >= 1 << 31 else number)


def _refuse_tagged(node: ScalarNode) -> None:
    """A value tagged other than ``!!str`` as GitHub's reader takes it (``AllowLiteral``): a
    tag of the core schema on a plain value it matches (``!!int 0x1f``), else refused: PyYAML
    read ``!!int '0x1_f'`` as 31, ``!!bool yes`` as true, ``!!binary`` as bytes, and made a
    ValueError (an internal error) of ``!!int +-5``."""
    tag = node.tag.replace(_CORE, "!!")
    pattern = _KINDS.get(tag[2:]) if tag.startswith("!!") else None
    if pattern is None:
        raise Refused(
            f"tags a value {tag[:40]}, a tag GitHub does not read",
            "GitHub reads only !!str, !!int, !!float, !!bool and !!null on a value; drop the tag",
            node.start_mark,
        )
    if node.style is not None or not pattern.fullmatch(node.value):
        raise Refused(
            f"holds {node.value[:40]!r} tagged {tag}, a value GitHub refuses for that tag",
            f"GitHub reads a value tagged {tag} only unquoted and written as an untagged one "
            "would be (YAML 1.2 core schema); drop the tag, or write !!str to keep it as text",
            node.start_mark,
        )


def _refuse_duplicate_keys(node: MappingNode, case_blind: bool = True) -> None:
    """GitHub refuses a mapping that names a key twice; PyYAML would keep the last silently.
    Keys compare as GitHub's ``TemplateReader`` compares them: as text (a number as its G15
    text, so ``0x10`` is ``16``; ``true``, ``TRUE``), case-blind (``OrdinalIgnoreCase``:
    ``env: {A: 1, a: 2}`` fails the run); a merge (``<<``) may repeat a key, as merging is
    meant to. Not ``case_blind``: keys compare as written (a file of gpu-ci's own, whose
    reader names case-blind clashes itself)."""
    seen: dict[str, str] = {}
    for key, _ in node.value:
        if not isinstance(key, ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
            continue
        text = _key_text(key)
        folded = fold(text) if case_blind else text
        if folded in seen:
            raise DuplicateKey(text, seen[folded], key.start_mark)
        seen[folded] = text


def fold(text: str) -> str:
    """``text`` as GitHub compares names, case-blind (.NET's ``OrdinalIgnoreCase``: each
    character upper-cased alone, so neither dotless i nor long s nor ß meets another)."""
    return "".join(c if c in "\u0131\u017f" or len(c.upper()) > 1 else c.upper() for c in text)


def _key_text(key: ScalarNode) -> str:
    """A key as GitHub's reader names it: a number, a boolean or a null as its text."""
    kind = key.tag.removeprefix(_CORE)
    if kind == "bool":
        return key.value.lower()
    if kind == "null":
        return ""
    if kind not in ("int", "float"):
        return key.value
    if kind == "int":
        number = int32(key.value)
        number = float(key.value) if number is None else number
    else:
        bare = key.value.lstrip("+-").lower()
        number = float(key.value.replace(".", "", 1) if bare in (".inf", ".nan") else key.value)
    if math.isnan(number) or math.isinf(number):
        return "NaN" if math.isnan(number) else "-Infinity" if number < 0 else "Infinity"
    return format(number, ".15g").replace("e", "E")


def load(text: str, check: ScalarCheck | None = None, case_blind: bool = True) -> Any:
    """The document in ``text``; :class:`Refused` past GitHub's bounds (or where ``check``
    refuses a text; ``case_blind``: keys that differ only in case are one key twice, as GitHub
    reads its files), another ``yaml.YAMLError`` when it is no YAML."""
    loader = _BoundedLoader(text, check, case_blind)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
