"""Load YAML into a pydantic model with errors that point at the file and line.

The file is parsed once into a node tree that keeps each node's position, and the data is built from that tree. A
pydantic error location (``("targets", 2, "gpu")``) is walked down the tree to the deepest node that exists, so
every error names ``file:line``. A key given twice in one mapping is an error too (PyYAML would keep the last one
silently): ``tf32: true`` then ``tf32: false`` is a typo or a merge accident, never an intent.
"""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from trtfarm.errors import ConfigError
from trtfarm.nearest import closest

M = TypeVar("M", bound=BaseModel)
# PyYAML's safe loader, in C (libyaml, in PyYAML's wheels) where it is there: the same nodes, lines and data, about
# ten times faster than the Python one, which reads a fleet file of a hundred lines in some 10 ms.
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class LocatedValueError(ValueError):
    """A ValueError raised in a model validator that knows where in the document it belongs."""

    def __init__(self, message: str, loc: tuple) -> None:
        super().__init__(message)
        self.loc = loc


def _location(err: dict) -> tuple:
    cause = (err.get("ctx") or {}).get("error")
    return tuple(err["loc"]) + tuple(getattr(cause, "loc", ()))


def _node_at(root: yaml.Node | None, loc: tuple, key: bool = False) -> yaml.Node | None:
    """The node an error's location names.

    With ``key``, the last step's key (an unknown key's own line), not its value, which may start a line below.
    """
    node = root
    for n, part in enumerate(loc):
        if isinstance(node, yaml.MappingNode):
            pair = next(((k, v) for k, v in node.value if k.value == part), None)
            if pair is None:
                return node
            if (key and n == len(loc) - 1) or pair[1] is None:
                return pair[0]
            node = pair[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            return node
    return node


def _model_at(model: object, loc: tuple) -> type[BaseModel] | None:
    """The pydantic model that holds the keys at ``loc`` (through dicts, lists and optionals), or None."""
    for part in loc:
        model = _unwrap(model)
        if isinstance(model, type) and issubclass(model, BaseModel):
            field = model.model_fields.get(part)
            model = field.annotation if field is not None else None
        elif typing.get_origin(model) in (dict, list):
            model = typing.get_args(model)[-1]
        else:
            return None
    model = _unwrap(model)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _unwrap(annotation: object) -> object:
    """``X | None`` -> ``X``."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


def _near_key(model: type[BaseModel], err: dict) -> str | None:
    """For an unknown key: the model's key nearest to it (a typo's fix), or None."""
    loc = _location(err)
    holder = _model_at(model, loc[:-1])
    return closest(str(loc[-1]), holder.model_fields) if holder is not None and loc else None


def _block_keys(model: type[BaseModel], err: dict, hint: str) -> str:
    """What an unknown or missing key's fix lists: the keys of the block it is in (``hint`` for the file's top).

    ``promotion.soak: unknown key. promotion's keys: receipts, soak_s, ...``, never the file's own keys.
    """
    block = _location(err)[:-1]
    holder = _model_at(model, block) if block else None
    if holder is None:
        return hint or (f"Keys: {', '.join(_keys_of(model))}." if not block else "")
    return f"{'.'.join(map(str, block))}'s keys: {', '.join(_keys_of(holder))}."


def _keys_of(model: type[BaseModel]) -> list[str]:
    """The keys a model reads from YAML (a field's alias where it has one)."""
    return [f.alias or name for name, f in model.model_fields.items()]


def _describe(err: dict, hint: str, near: str | None = None) -> str:
    loc = ".".join(str(p) for p in _location(err)) or "(top level)"
    kind = err["type"]
    if kind == "extra_forbidden":
        return f"{loc}: unknown key; did you mean {near!r}?" if near else f"{loc}: unknown key. {hint}".rstrip()
    if kind == "missing":
        return f"{loc}: required key is missing. {hint}".rstrip()
    msg = err["msg"].removeprefix("Value error, ")
    return f"{loc}: {msg}"


def duplicate_keys(root: yaml.Node | None) -> list[tuple[str, int, int]]:
    """``(key, line, first line)`` for each key given again in the same mapping (lines 1-based)."""
    found, seen, stack = [], set(), [root]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:  # an alias is the same node again
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[str, int] = {}
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    line = key.start_mark.line + 1
                    if key.value in first:
                        found.append((key.value, line, first[key.value]))
                    first.setdefault(key.value, line)
                stack += [key, value]
        elif isinstance(node, yaml.SequenceNode):
            stack += node.value
    return sorted(found, key=lambda d: d[1])


def _parse(path: Path, text: str | None = None) -> tuple[yaml.Node | None, object]:
    try:
        text = path.read_text(encoding="utf-8") if text is None else text
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the file ({err.strerror}).") from err
    except UnicodeDecodeError as err:
        line = path.read_bytes()[:err.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset {err.start}); "
                          "save the file as UTF-8.") from err
    loader = LOADER(text)
    try:
        root = loader.get_single_node()  # parsed once: the node tree (with lines), and the data built from it
        dups = duplicate_keys(root)  # before the data is built: building it folds `<<` merges into the tree
        if dups:
            raise ConfigError("\n".join(f"{path}:{line}: key {key!r} is given twice (first on line {first}); "
                                         "keep one" for key, line, first in dups))
        data = loader.construct_document(root) if root is not None else None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(f"{where}: not valid YAML: {getattr(err, 'problem', err)}. Fix the syntax there.") from err
    finally:
        loader.dispose()
    return root, data


def load_yaml(path: Path) -> object:
    """Read a YAML file as plain data; ``ConfigError`` (file:line) for bad syntax or a key given twice."""
    return _parse(Path(path))[1]


def model_from_yaml(path: Path, model: type[M], hint: str = "", text: str | None = None) -> M:
    """Parse ``path`` into ``model``; raise ``ConfigError`` naming the file, the line and the fix.

    ``text``: the file's text, when the caller holds it already (``path`` then only names it in errors).
    """
    root, data = _parse(path, text)
    try:
        return model.model_validate(data if data is not None else {})
    except ValidationError as err:
        raise ConfigError("\n".join(_error_lines(path, root, model, err.errors(), hint))) from err


def _error_lines(path: Path, root: yaml.Node | None, model: type[BaseModel], errors: list[dict], hint: str) -> list:
    """One ``file:line: what. fix`` per error; a required key missing beside a typo of it is the typo's line only."""
    near = {id(e): _near_key(model, e) for e in errors if e["type"] == "extra_forbidden"}
    typos = {(_location(e)[:-1], n) for e in errors if (n := near.get(id(e)))}
    lines = []
    for e in errors:
        if e["type"] == "missing" and (_location(e)[:-1], _location(e)[-1]) in typos:
            continue  # said at the typo: `gpu:` for the required `gpus:`
        node = _node_at(root, _location(e), key=e["type"] == "extra_forbidden")
        line = node.start_mark.line + 1 if node is not None else 1
        lines.append(f"{path}:{line}: {_describe(e, _block_keys(model, e, hint), near.get(id(e)))}")
    return lines
