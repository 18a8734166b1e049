"""A workflow or action file's YAML, read with GitHub's own bounds.

A pull request writes the files a dry run reads, and ``yaml.safe_load`` alone trusts their
shape: 50,000 nested brackets end it in ``RecursionError``. GitHub's template reader refuses
such a file; so does this loader, with the line and the limit:

- nesting: at most :data:`MAX_DEPTH` levels (the runner reads an action.yml within 100,
  ``ActionManifestManager``'s ``TemplateMemory(maxDepth: 100)``; workflows within 50), an
  alias as deep as its anchor where it stands, and no alias inside its own anchor.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import Node

MAX_DEPTH = 100


class Refused(yaml.MarkedYAMLError):
    """A file GitHub's reader refuses too: ``problem`` says why, ``hint`` what GitHub allows."""

    def __init__(self, problem: str, hint: str, mark: Any) -> None:
        super().__init__(problem=problem, problem_mark=mark)
        self.hint = hint


class _BoundedLoader(yaml.SafeLoader):
    """``SafeLoader`` that measures, while composing, each node's depth (an alias's as deep as
    its anchor): refused before anything walks the document."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._level = 0  # the level of the node being composed (the document's root is 1)
        self._reach = 0  # the deepest level reached, aliases read in full
        self._heights: dict[str, int] = {}  # anchor -> the levels it holds

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            self._read_alias(event)
            return super().compose_node(parent, index)
        self._level += 1
        outer_reach, self._reach = self._reach, self._level
        self._count(self._level, event)
        node = super().compose_node(parent, index)
        if event.anchor is not None:
            self._heights[event.anchor] = self._reach - self._level + 1
        self._reach = max(outer_reach, self._reach)
        self._level -= 1
        return node

    def _read_alias(self, event: yaml.AliasEvent) -> None:
        """Count what the alias stands for where it stands; refuse one inside its anchor."""
        if event.anchor in self.anchors and event.anchor not in self._heights:
            raise Refused(
                f"uses the alias *{event.anchor} inside its own anchor &{event.anchor}",
                "an anchor must be complete before an alias names it (GitHub cannot expand a "
                "value that holds itself)",
                event.start_mark,
            )
        self._count(self._level + self._heights.get(event.anchor or "", 0), event)

    def _count(self, reach: int, event: yaml.Event) -> None:
        self._reach = max(self._reach, reach)
        if self._reach > MAX_DEPTH:
            raise Refused(
                f"nests deeper than {MAX_DEPTH} levels",
                f"GitHub reads at most {MAX_DEPTH} levels of nested mappings and lists "
                "(aliases counted where they stand); flatten the file",
                event.start_mark,
            )


def load(text: str) -> Any:
    """The document in ``text``; :class:`Refused` past GitHub's bounds, another
    ``yaml.YAMLError`` when it is no YAML."""
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
