"""The one YAML reader, with limits: bounded size, depth, alias expansion and scalar length.

Every YAML file infertop reads comes through here: the config (``compose``, whose nodes
config.py walks for its line numbers), the gateway's API-keys and weights files, themes and the
config text an incident bundle scrubs (``load`` / ``read_file``, plain data as ``yaml.safe_load``
gives). Each problem is one :class:`ConfigError` line naming the file and the line.

PyYAML composes a document into a node graph in which an alias is the
*same* node object as its anchor, so a 300-byte "billion laughs" file is a
small graph — until something walks it as a tree (``str()`` of a key,
building lists).  The composer here records each node's *expanded* size as
it is composed and stops as soon as one exceeds the cap, so a bomb fails
after a handful of levels, in time linear in the file.  It also caps the
nesting depth (before Python's recursion limit) and the length of any one
scalar, and refuses recursive aliases (``&a [*a]``).

Events come from libyaml when PyYAML has it (several times faster on big
files), else from PyYAML's pure-Python parser; composition is PyYAML's own
``Composer`` with the checks above, so nodes keep their line numbers.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

import yaml
from yaml.composer import Composer
from yaml.events import AliasEvent
from yaml.nodes import ScalarNode, SequenceNode
from yaml.resolver import Resolver

MAX_LINE_TEXT = 240  # characters of one error line before it is cut


def one_line(text: str, limit: int = MAX_LINE_TEXT) -> str:
    """``text`` on one line: control characters made visible, cut to ``limit``."""
    out = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
    return out if len(out) <= limit else out[: limit - 1] + "…"


class ConfigError(Exception):
    """A configuration problem, printable as one line: ``file:line: field: message``."""

    def __init__(self, path: str, line: int | None, field_path: str, message: str) -> None:
        self.path, self.line = one_line(path, 400), line
        self.field_path, self.message = one_line(field_path, 120), one_line(message)
        where = f"{self.path}:{line}" if line else self.path
        super().__init__(f"{where}: {self.field_path + ': ' if self.field_path else ''}{self.message}")


@dataclass(frozen=True)
class Limits:
    """What a config file may contain. Generous for real configs (150 000 engines fit);
    tight enough that no file can exhaust memory or time."""

    max_bytes: int = 16 * 2**20
    max_depth: int = 32  # nesting of mappings / lists (the schema needs 4)
    max_nodes: int = 2_000_000  # nodes after expanding every alias (150 000 engines: 750 000)
    max_scalar_chars: int = 65_536  # one string, number or key


DEFAULT_LIMITS = Limits()


class _LimitExceeded(Exception):
    def __init__(self, line: int | None, message: str) -> None:
        super().__init__(message)
        self.line, self.message = line, message


class _LimitedComposer(Composer):
    """PyYAML's composer, counting expanded nodes and depth as it goes."""

    limits: Limits

    def _init_limits(self, limits: Limits) -> None:
        self.limits = limits
        self._depth = 0
        self._size: dict[int, int] = {}  # id(node) -> nodes once every alias below it is expanded

    def compose_node(self, parent, index):  # noqa: ANN001 — PyYAML's signature
        event = self.peek_event()
        line = event.start_mark.line + 1 if event.start_mark is not None else None
        is_alias = isinstance(event, AliasEvent)
        self._depth += 1
        if self._depth > self.limits.max_depth:
            raise _LimitExceeded(line, f"nested deeper than {self.limits.max_depth} levels")
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if is_alias:
            size = self._size.get(id(node))
            if size is None:  # the anchor is still being composed: the alias is inside it
                raise _LimitExceeded(line, f"recursive alias *{event.anchor}")
        elif isinstance(node, ScalarNode):
            if len(node.value) > self.limits.max_scalar_chars:
                raise _LimitExceeded(line, f"a value longer than {self.limits.max_scalar_chars} characters")
            size = 1
        elif isinstance(node, SequenceNode):
            size = 1 + sum(self._size[id(c)] for c in node.value)
        else:
            size = 1 + sum(self._size[id(k)] + self._size[id(v)] for k, v in node.value)
        if size > self.limits.max_nodes:
            raise _LimitExceeded(line, f"expands to more than {self.limits.max_nodes} nodes "
                                       "(aliases repeat what they point to)")
        self._size[id(node)] = size
        return node


class _PyLoader(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser, _LimitedComposer,
                yaml.constructor.SafeConstructor, Resolver):
    def __init__(self, data: bytes, limits: Limits) -> None:
        yaml.reader.Reader.__init__(self, data)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self._init_limits(limits)


if yaml.__with_libyaml__:
    from yaml._yaml import CParser

    class _CLoader(CParser, _LimitedComposer, yaml.constructor.SafeConstructor, Resolver):
        """libyaml's events, PyYAML's (limited) composer and safe constructor."""

        # CParser composes in C too; these route composition through the Python composer.
        get_single_node = Composer.get_single_node
        compose_document = Composer.compose_document
        check_node = Composer.check_node
        get_node = Composer.get_node

        def __init__(self, data: bytes, limits: Limits) -> None:
            CParser.__init__(self, data)
            Composer.__init__(self)
            yaml.constructor.SafeConstructor.__init__(self)
            Resolver.__init__(self)
            self._init_limits(limits)

    _Loader: type = _CLoader
else:  # pragma: no cover — PyYAML built without libyaml
    _Loader = _PyLoader


def _line_at(data: bytes, offset: int | None) -> int | None:
    if offset is None or offset < 0:
        return None
    return data.count(b"\n", 0, offset) + 1


def to_bytes(text: str | bytes, path: str) -> bytes:
    """UTF-8 bytes of ``text``, or a ConfigError naming the line of the first bad character."""
    if isinstance(text, bytes):
        try:
            text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ConfigError(path, _line_at(text, e.start), "", "not UTF-8 text") from None
        return text
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ConfigError(path, text.count("\n", 0, e.start) + 1, "", "not UTF-8 text") from None


def _size_text(n_bytes: int) -> str:
    return f"{n_bytes // 2**20} MiB" if n_bytes >= 2**20 else f"{n_bytes // 2**10} KiB"


def compose(data: bytes, path: str, limits: Limits = DEFAULT_LIMITS, *, pure_python: bool = False):
    """Compose ``data`` into a node graph (None for an empty document) and a
    loader whose constructor turns scalar nodes into values; ConfigError otherwise."""
    if len(data) > limits.max_bytes:
        raise ConfigError(path, None, "", f"larger than {_size_text(limits.max_bytes)}")
    cls = _PyLoader if pure_python else _Loader
    try:
        loader = cls(data, limits)  # PyYAML's reader checks the characters here
        return loader.get_single_node(), loader
    except _LimitExceeded as e:
        raise ConfigError(path, e.line, "", e.message) from None
    except yaml.reader.ReaderError as e:
        # libyaml counts bytes; PyYAML's reader characters of the decoded text.
        line: int | None
        if cls is _PyLoader:
            text = data.decode("utf-8", "replace")
            line = text.count("\n", 0, max(0, e.position)) + 1
        else:
            line = _line_at(data, e.position)
        raise ConfigError(path, line, "", f"invalid YAML: {e.reason}") from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark is not None else None
        raise ConfigError(path, line, "", f"invalid YAML: {e.problem or e.context}") from None
    except yaml.YAMLError as e:
        raise ConfigError(path, None, "", f"invalid YAML: {e}") from None
    except (RecursionError, MemoryError):  # belt and braces: the limits above come first
        raise ConfigError(path, None, "", "too large or too deeply nested") from None


def scalar_value(node: ScalarNode, loader, path: str, field_path: str):
    """The Python value of a scalar node (int, float, str, bool, None…), or ConfigError."""
    if node.tag == "tag:yaml.org,2002:str":  # most of a config; what SafeConstructor returns for it
        return node.value
    try:
        return loader.construct_object(node, deep=True)
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(path, node.start_mark.line + 1, field_path, f"invalid value: {problem}") from None
    except Exception as e:  # noqa: BLE001 — constructors fail their own ways: a 5000-digit int, `!!int ''`
        kind = node.tag.rsplit(":", 1)[-1]
        why = "a number too large" if "digits" in str(e) else f"not a valid {kind}: {node.value!r}"
        raise ConfigError(path, node.start_mark.line + 1, field_path, f"invalid value: {why}") from None


def load(text: str | bytes, path: str, limits: Limits = DEFAULT_LIMITS, *, pure_python: bool = False) -> object:
    """The plain data of one YAML document (what ``yaml.safe_load`` returns: dicts, lists,
    scalars; None when empty), read within ``limits``; ConfigError and nothing else."""
    node, loader = compose(to_bytes(text, path), path, limits, pure_python=pure_python)
    if node is None:
        return None
    try:
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as e:  # an unknown tag, an unhashable key, a bad timestamp…
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark is not None else None
        raise ConfigError(path, line, "", f"invalid value: {e.problem or e.context}") from None
    except RecursionError:  # unreachable with the depth limit; never a traceback
        raise ConfigError(path, None, "", "too deeply nested") from None
    except Exception as e:  # noqa: BLE001 — constructors fail their own ways: a 5000-digit int
        why = "a number too large" if "digits" in str(e) else one_line(str(e), 120)
        raise ConfigError(path, None, "", f"invalid value: {why}") from None


def read_bytes(path: str | os.PathLike, limits: Limits = DEFAULT_LIMITS) -> bytes:
    """The bytes of the file at ``path``, never more than ``limits.max_bytes`` + 1 (one over: the
    parser names the limit); a FIFO, device or directory is refused before it is read (it could block
    or never end) — except /dev/null, which reads empty (``--config /dev/null``: "no config file").
    A missing file raises FileNotFoundError (the caller knows whether that is an error); any other
    failure is a ConfigError."""
    name = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except OSError as e:
        raise ConfigError(name, None, "", f"cannot read: {e.strerror or e}") from None
    try:
        st, null = os.fstat(fd), os.stat(os.devnull)
        if stat.S_ISCHR(st.st_mode) and (st.st_rdev, st.st_ino) == (null.st_rdev, null.st_ino):
            return b""
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(name, None, "", "not a regular file (a FIFO, device or directory)")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as f:
            fd = -1  # the file object owns it now
            return f.read(limits.max_bytes + 1)
    except OSError as e:
        raise ConfigError(name, None, "", f"cannot read: {e.strerror or e}") from None
    finally:
        if fd >= 0:
            os.close(fd)


def read_file(path: str | os.PathLike, limits: Limits = DEFAULT_LIMITS) -> object:
    """:func:`load` of the file at ``path`` (read by :func:`read_bytes`); a missing file is a ConfigError."""
    try:
        data = read_bytes(path, limits)
    except FileNotFoundError as e:
        raise ConfigError(str(path), None, "", f"cannot read: {e.strerror or e}") from None
    return load(data, str(path), limits)

