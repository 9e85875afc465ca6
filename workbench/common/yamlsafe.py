"""YAML as users write it, read without the traps: ``load(text)``.

PyYAML's safe loader keeps the last of two equal keys, recurses once per nesting level (a deep
document raises RecursionError) and shares each alias's value, so a few hundred bytes of
aliases (a "billion laughs") expand to billions of values when printed or walked. This loader
refuses all three with ``Refused``, which names the key path and the limit.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MAX_DEPTH = 100  # nesting levels, aliases expanded
MAX_VALUES = 100_000  # scalars, keys and containers, aliases expanded
_MERGE = "tag:yaml.org,2002:merge"
_NO_KEY = object()


class Refused(yaml.YAMLError):
    """YAML this loader will not build: ``path`` is the key path, ``message`` says why."""

    def __init__(self, path: str, message: str):
        self.path, self.message = path, message
        super().__init__(f"{path}: {message}" if path else message)


def load(text: str) -> Any:
    """The single document in ``text``, like ``yaml.safe_load`` but refusing the traps."""
    loader = _Loader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def key_path(parts: list[str]) -> str:
    """``["a", "[0]", "b"]`` -> ``a[0].b``, cut to a readable length."""
    path = ""
    for part in filter(None, parts):
        path += part if not path or part.startswith("[") else "." + part
    return path if len(path) <= 200 else path[:200] + "..."


class _Loader(yaml.SafeLoader):
    def __init__(self, stream):
        super().__init__(stream)
        self._parts: list[str] = []  # key path of the node being composed

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            return super().compose_node(parent, index)
        self._parts.append(_part(index))
        try:
            if len(self._parts) > MAX_DEPTH:
                raise Refused(key_path(self._parts), _too_deep())
            return super().compose_node(parent, index)
        finally:
            self._parts.pop()

    def compose_mapping_node(self, anchor):
        node = super().compose_mapping_node(anchor)
        lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self._key(key_node)
            if key is _NO_KEY:
                continue
            line = key_node.start_mark.line + 1
            if key in lines:
                where = (f"twice on line {line}" if lines[key] == line
                         else f"lines {lines[key]} and {line}")
                raise Refused(key_path([*self._parts, _part(key_node)]),
                              f"duplicate key ({where}); allowed: each key once in a mapping")
            lines[key] = line
        return node

    def compose_document(self):
        node = super().compose_document()
        _check_expansion(node)
        return node

    def _key(self, node: Node) -> Any:
        """The Python value of a plain key (``_NO_KEY`` for merges and complex keys)."""
        if not isinstance(node, ScalarNode) or node.tag == _MERGE:
            return _NO_KEY
        try:
            key = self.construct_object(node)
            hash(key)
        except Exception:  # a bad key is reported when the document is built
            return _NO_KEY
        return key


def _part(index) -> str:
    """The key-path part of a child: ``[i]`` in a sequence, the key in a mapping."""
    if isinstance(index, int):
        return f"[{index}]"
    if isinstance(index, ScalarNode):
        return index.value if len(index.value) <= 60 else index.value[:60] + "..."
    return ""  # the root, a mapping's key, or a complex key


def _too_deep() -> str:
    return f"nested deeper than {MAX_DEPTH} levels; allowed: at most {MAX_DEPTH}"


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return node.value
    if isinstance(node, MappingNode):
        return [child for pair in node.value for child in pair]
    return []


def _check_expansion(root: Node | None) -> None:
    """Refuse a document whose aliases, expanded, hold too many values, nest too deeply or
    contain themselves. Iterative, each node visited once: (values, depth) per node."""
    if root is None:
        return
    measured: dict[int, tuple[int, int]] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in measured:
            continue
        kids = _children(node)
        if not children_done:
            if id(node) in open_nodes:
                raise Refused("", "an alias refers to a value that contains it; allowed: "
                                  "aliases of finished values")
            open_nodes.add(id(node))
            stack.append((node, True))
            stack.extend((kid, False) for kid in kids if id(kid) not in measured)
            continue
        open_nodes.discard(id(node))
        values = 1 + sum(measured[id(kid)][0] for kid in kids)
        depth = 1 + max((measured[id(kid)][1] for kid in kids), default=0)
        if values > MAX_VALUES:
            raise Refused("", f"aliases expand the document to more than {MAX_VALUES} values; "
                              f"allowed: at most {MAX_VALUES}")
        if depth > MAX_DEPTH:
            raise Refused("", f"aliases expand to a value {_too_deep()}")
        measured[id(node)] = (values, depth)
