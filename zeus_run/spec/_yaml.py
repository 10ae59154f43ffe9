"""Read a YAML document safely: bounded, strict about duplicates, numbers as people write them.

Specs come from users and run directories from disk, so neither is trusted.
Before any Python object is built the text is checked against limits that a
real spec never comes near: its size, the number of YAML events, nesting depth
(also through aliases), and the number of nodes once aliases are expanded (the
"billion laughs"). Integers longer than `MAX_INT_DIGITS` digits are refused.

Numbers follow YAML 1.2, not PyYAML's YAML 1.1: ``1e-3`` is a float (1.1 needs
a dot), ``010`` is ten (1.1 reads octal 8), ``0o17`` and ``0x1F`` are octal and
hex; ``1:30`` and dates stay strings. ``yes``/``no``/``on``/``off`` stay
booleans, as before. A key written twice in one mapping is an error naming both
lines. Each scalar's source text is kept, so a field can use what the user
wrote (``env: {N: 010}`` is ``"010"``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.resolver import BaseResolver

#: Largest spec file (unit: bytes).
MAX_BYTES = 1 << 20
#: Most YAML events (scalars, starts and ends of mappings and sequences) in a document.
MAX_EVENTS = 50_000
#: Deepest nesting of mappings and sequences, counting through aliases.
MAX_DEPTH = 32
#: Most nodes once every alias is expanded.
MAX_NODES = 50_000
#: Longest integer literal (digits).
MAX_INT_DIGITS = 40
#: Longest float literal (characters).
MAX_FLOAT_CHARS = 100

_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"


class YamlLimitError(ValueError):
    """The document breaks a limit or is not valid YAML.

    Attributes:
        line: 1-based line of the problem, if known.
        why: What is wrong.
        field: The top-level field whose value breaks the limit, if known.
    """

    def __init__(self, why: str, line: int | None = None, field: str | None = None) -> None:
        super().__init__(why)
        self.why = why
        self.line = line
        self.field = field


@dataclass(frozen=True)
class DuplicateKey:
    """A key written twice in one mapping.

    Attributes:
        path: Dotted path of the key.
        first: 1-based line of its first occurrence.
        second: 1-based line of the repeat.
        text: Source text of the repeated value (None for a mapping or list).
    """

    path: str
    first: int
    second: int
    text: str | None


@dataclass
class YamlDocument:
    """A parsed document.

    Attributes:
        data: The constructed value (mappings are dicts).
        lines: Dotted key path -> 1-based line where the key is written.
        text: Dotted key path -> source text of its scalar value, as written (quotes removed).
        duplicates: Keys written twice in one mapping.
    """

    data: Any
    lines: dict[str, int] = field(default_factory=dict)
    text: dict[str, str] = field(default_factory=dict)
    duplicates: list[DuplicateKey] = field(default_factory=list)


class _Resolver(BaseResolver):
    """YAML 1.2 core-schema numbers, YAML 1.1 booleans, null and merge keys; everything else is a string."""


_Resolver.add_implicit_resolver(
    "tag:yaml.org,2002:bool",
    re.compile(r"^(?:yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$"),
    list("yYnNtTfFoO"),
)
_Resolver.add_implicit_resolver(
    _INT, re.compile(r"^(?:[-+]?[0-9][0-9_]*|0o[0-7_]+|0x[0-9a-fA-F_]+)$"), list("-+0123456789")
)
_Resolver.add_implicit_resolver(
    _FLOAT,
    re.compile(
        r"^(?:[-+]?(?:\.[0-9][0-9_]*|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+.0123456789"),
)
_Resolver.add_implicit_resolver("tag:yaml.org,2002:merge", re.compile(r"^(?:<<)$"), ["<"])
_Resolver.add_implicit_resolver("tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""])


class _Constructor(SafeConstructor):
    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        text = str(self.construct_scalar(node)).replace("_", "")
        digits = text.lstrip("+-")
        if len(digits) > MAX_INT_DIGITS:
            raise ConstructorError(
                None, None, f"an integer with {len(digits)} digits (at most {MAX_INT_DIGITS})", node.start_mark
            )
        sign = -1 if text.startswith("-") else 1
        prefix = digits[:2].lower()
        if prefix in ("0x", "0o", "0b"):
            return sign * int(digits[2:], {"0x": 16, "0o": 8, "0b": 2}[prefix])
        return sign * int(digits)

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        text = str(self.construct_scalar(node))
        if len(text) > MAX_FLOAT_CHARS:
            raise ConstructorError(
                None, None, f"a number written with {len(text)} characters (at most {MAX_FLOAT_CHARS})", node.start_mark
            )
        return float(super().construct_yaml_float(node))


_Constructor.add_constructor(_INT, _Constructor.construct_yaml_int)  # type: ignore[type-var]
_Constructor.add_constructor(_FLOAT, _Constructor.construct_yaml_float)  # type: ignore[type-var]

try:  # the C parser: about 30 times faster on large input
    from yaml._yaml import CParser as _Parser
except ImportError:  # pragma: no cover - PyYAML built without libyaml

    class _Parser(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser, yaml.composer.Composer):  # type: ignore[no-redef]
        def __init__(self, stream: str) -> None:
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)
            yaml.composer.Composer.__init__(self)


class _Loader(_Parser, _Constructor, _Resolver):
    def __init__(self, stream: str) -> None:
        _Parser.__init__(self, stream)
        _Constructor.__init__(self)
        _Resolver.__init__(self)


def load_yaml(text: str) -> YamlDocument:
    """Parse one YAML document within the limits above.

    Raises:
        YamlLimitError: A limit is broken, or the text is not valid YAML.
    """
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_BYTES:
        raise YamlLimitError(f"the file is {size:,} bytes; a job spec may have at most {MAX_BYTES:,}")
    try:
        _check_events(text)
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return YamlDocument(None)
            _check_graph(node)
            doc = YamlDocument(None)
            _index(node, "", doc, set())
            doc.data = loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        why = getattr(exc, "problem", None) or str(exc)
        if not isinstance(exc, ConstructorError):
            why = f"not valid YAML: {why}"
        raise YamlLimitError(why, mark.line + 1 if mark is not None else None) from None
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        if isinstance(exc, YamlLimitError):
            raise
        raise YamlLimitError(f"cannot be read: {type(exc).__name__}: {exc}") from None
    return doc


_TOO_DEEP = f"mappings and lists are nested more than {MAX_DEPTH} levels deep"


def _check_events(text: str) -> None:
    """Count events and nesting depth without building anything (the parser is iterative).

    The top-level key being read is tracked, so that a refusal names its field.
    """
    depth = 0
    top = _TopKey()
    parser = _Loader(text)
    try:
        for count, event in enumerate(_events(parser)):
            if count >= MAX_EVENTS:
                raise YamlLimitError(
                    f"the document has more than {MAX_EVENTS:,} YAML nodes; a job spec has a few dozen",
                    _line(event),
                    top.key,
                )
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                top.start(depth, event)
                depth += 1
                if depth > MAX_DEPTH:
                    raise YamlLimitError(_TOO_DEEP, _line(event), top.key)
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
                top.ended(depth)
            else:
                top.item(depth, event)
    except yaml.YAMLError as exc:
        # libyaml refuses very deep nesting itself, before the events reach the count above.
        why = str(getattr(exc, "problem", "") or exc)
        if "nesting depth" not in why:
            raise
        mark = getattr(exc, "problem_mark", None)
        raise YamlLimitError(_TOO_DEEP, mark.line + 1 if mark is not None else None, top.key) from None
    finally:
        parser.dispose()


class _TopKey:
    """Which top-level key of the document's mapping the events are under (None: none, or not a mapping)."""

    def __init__(self) -> None:
        self.key: str | None = None
        self._mapping = False
        self._expect_key = True

    def start(self, depth: int, event: yaml.Event) -> None:
        if depth == 0:
            self._mapping = isinstance(event, yaml.MappingStartEvent)
        elif depth == 1 and self._mapping and self._expect_key:
            self.key = None  # a complex key

    def ended(self, depth: int) -> None:
        if depth == 1 and self._mapping:
            self._expect_key = not self._expect_key

    def item(self, depth: int, event: yaml.Event) -> None:
        if depth != 1 or not self._mapping:
            return
        if self._expect_key:
            self.key = str(getattr(event, "value", "")) if isinstance(event, yaml.ScalarEvent) else None
        self._expect_key = not self._expect_key


def _line(item: Any) -> int | None:
    mark = getattr(item, "start_mark", None)
    return mark.line + 1 if mark is not None else None


def _events(parser: Any) -> Any:
    while parser.check_event():
        yield parser.get_event()


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_graph(root: yaml.Node) -> None:
    """Refuse recursive aliases, and alias expansion that is too large or too deep (iteratively).

    The values of a top-level mapping are checked one by one, in order, so that a refusal names its field.
    """
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    if isinstance(root, yaml.MappingNode):
        for key, value in root.value:
            try:
                _check_value(value, size, depth)
            except YamlLimitError as exc:
                if isinstance(key, yaml.ScalarNode):
                    exc.field = str(key.value)
                raise
    _check_value(root, size, depth)


def _check_value(root: yaml.Node, size: dict[int, int], depth: dict[int, int]) -> None:
    """`_check_graph` from ``root``, with the sizes and depths of the nodes seen so far (filled in)."""
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            kids = _children(node)
            size[key] = min(1 + sum(size[id(k)] for k in kids), MAX_NODES + 1)
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
            on_path.discard(key)
            line = _line(node)
            if size[key] > MAX_NODES:
                raise YamlLimitError(
                    f"aliases expand to more than {MAX_NODES:,} nodes (a 'billion laughs'); write the values out", line
                )
            if depth[key] > MAX_DEPTH + 1:
                raise YamlLimitError(f"aliases nest values more than {MAX_DEPTH} levels deep", line)
            continue
        if key in size:
            continue
        on_path.add(key)
        stack.append((node, True))
        for kid in _children(node):
            if id(kid) in on_path:
                raise YamlLimitError("an alias refers to a value that contains it", _line(kid))
            if id(kid) not in size:
                stack.append((kid, False))


def _index(node: yaml.Node, prefix: str, doc: YamlDocument, seen: set[int]) -> None:
    """Record key lines, scalar texts and duplicate keys (each shared node is visited once)."""
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _index(item, prefix, doc, seen)
        return
    if not isinstance(node, yaml.MappingNode):
        return
    first: dict[tuple[str, str], int] = {}
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            continue
        if key_node.tag == "tag:yaml.org,2002:merge":
            _index(value_node, prefix, doc, seen)
            continue
        path = f"{prefix}{key_node.value}"
        line = _line(key_node) or 0
        ident = (key_node.tag, key_node.value)
        text = value_node.value if isinstance(value_node, yaml.ScalarNode) else None
        if ident in first:
            doc.duplicates.append(DuplicateKey(path, first[ident], line, text))
            continue
        first[ident] = line
        doc.lines[path] = line
        if text is not None:
            doc.text[path] = text
        _index(value_node, path + ".", doc, seen)
