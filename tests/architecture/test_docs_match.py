"""docs/architecture.md, held to the code: its folder table and its stack name the core's packages and modules as
they are, and its error table names every error class the code defines, with its kind and exit code.

The classes are found in the source (``ast``), not by importing: a class nobody imports is still an error class
users can meet. Each is then imported to read its kind (its base) and its exit code.
"""

from __future__ import annotations

import ast
import functools
import importlib
import re

import pytest

from tests.architecture.test_layers import LEVELS, REPO, modules, unit_of

DOC = (REPO / "docs" / "architecture.md").read_text()
CORE = REPO / "trtfarm"
EXCEPTIONS = {"BaseException", "Exception", "ValueError", "SystemExit"}
KINDS = {"UserInputError": "user input", "InfrastructureError": "infrastructure",
         "MismatchError": "mismatch or failure"}


@functools.cache  # the source does not change while the tests run: parsed once, not once per error class
def classes() -> dict[str, list[tuple[str, list[str]]]]:
    """Every class the core, flows and tasks define: name -> [(module, base names)]."""
    found: dict[str, list[tuple[str, list[str]]]] = {}
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "?") for b in node.bases]
                found.setdefault(node.name, []).append((name, bases))
    return found


@functools.cache
def error_classes() -> dict[str, str]:
    """Every exception class defined in trtfarm/, flows/, tasks/ (the command line included): name -> module."""
    every = classes()
    errors: dict[str, str] = {}
    grew = True
    while grew:
        grew = False
        for name, defs in every.items():
            for module, bases in defs:
                if name not in errors and any(b in EXCEPTIONS or b in errors for b in bases):
                    errors[name], grew = module, True
    return errors


def doc_error_rows() -> dict[str, tuple[str, str]]:
    """The error table of docs/architecture.md: class -> (kind, exit code)."""
    section = DOC.split("## Errors, as users and the retry policy see them", 1)[1].split("\n## ", 1)[0]
    return {m[1]: (m[2].split(":")[0].strip(), m[3].strip())
            for m in re.finditer(r"^\| `(\w+)` \| ([^|]+) \| ([^|]+) \|$", section, re.M)}


def test_no_two_classes_in_the_core_share_a_name():
    assert {n: [m for m, _ in d] for n, d in classes().items() if len(d) > 1} == {}


def test_every_error_class_is_in_the_docs_table_and_every_row_is_a_class():
    assert sorted(set(error_classes()) ^ set(doc_error_rows())) == []


@pytest.mark.parametrize("name", sorted(error_classes()))
def test_each_error_has_the_kind_and_exit_code_the_docs_say(name):
    from trtfarm.errors import TrtfarmError

    cls = getattr(importlib.import_module(error_classes()[name]), name)
    row = doc_error_rows().get(name)
    assert row is not None, f"{name} ({error_classes()[name]}) is not in docs/architecture.md's error table"
    kind, code = row
    if not issubclass(cls, TrtfarmError):  # control flow inside trtfarm, never shown as an error of its own
        assert kind == "internal", f"{name} is no TrtfarmError: map it to a kind, or document it as internal"
        return
    bases = [KINDS[c.__name__] for c in cls.__mro__ if c.__name__ in KINDS]
    assert kind == (bases[0] if bases else "the base of the three kinds"), name
    assert bases or cls is TrtfarmError, f"{name} is of none of the three kinds"
    assert code == str(cls.exit_code), name


def test_the_folder_table_names_every_core_package_and_each_of_its_modules():
    table = dict(re.findall(r"^\| `trtfarm/(\w*)/?` (?:\(top\) )?\| (.*) \|$", DOC, re.M))
    packages = {p.name for p in CORE.iterdir() if (p / "__init__.py").is_file()} - {"cli"}
    assert sorted(set(table) - {""} ^ packages) == []
    wrong = []
    for package, text in table.items():
        named = set(re.findall(r"`(\w+)\.py`", text))
        have = {p.stem for p in (CORE / package).glob("*.py")} - {"__init__", "__main__"}
        wrong += [f"trtfarm/{package}/{m}.py: named in the docs, not in the code" for m in sorted(named - have)]
        wrong += [f"trtfarm/{package}/{m}.py: in the code, not named in the docs" for m in sorted(have - named)]
    assert wrong == []


def test_the_stack_drawn_in_the_docs_is_the_levels_the_layer_test_holds():
    drawing = DOC.split("## The core is a stack", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    drawn = [re.split(r"\s{2,}", line.strip())[:-1] for line in drawing.strip().splitlines()]  # units, then what
    core = [[u for u in level if u not in ("trtfarm", "tasks", "flows", "cli", "__main__")] for level in LEVELS]
    assert [sorted(level) for level in reversed(drawn)] == [sorted(level) for level in core if level]
    assert {unit_of(n) for n in modules() if n.startswith("trtfarm.") and not n.startswith("trtfarm.cli")} \
        - {"__main__"} <= {u for level in drawn for u in level}


def test_no_command_catches_an_error_of_trtfarm_only_to_show_it():
    """One catch at the entry point: the app's group (``TrtfarmGroup.invoke``) shows every TrtfarmError by its kind.

    A command that catches one only to ``raise fail(e)`` re-wraps what that catch does already. A command may catch
    one to say what the error cannot know (where a damaged manifest came from), naming a code or other text.
    """
    errors = set(error_classes()) | {"TrtfarmError"}
    found = []
    for name, path in modules().items():
        if not name.startswith("trtfarm.cli"):
            continue
        for func in ast.walk(ast.parse(path.read_text())):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                if not isinstance(node, ast.ExceptHandler) or node.type is None or len(node.body) != 1:
                    continue
                caught = {n.id for n in ast.walk(node.type) if isinstance(n, ast.Name)}
                exc = getattr(node.body[0], "exc", None)
                if isinstance(node.body[0], ast.Raise) and isinstance(exc, ast.Call) and \
                        getattr(exc.func, "id", None) == "fail" and not exc.keywords and \
                        [getattr(a, "id", None) for a in exc.args] == [node.name] and caught & errors:
                    found.append(f"{path.relative_to(REPO)}:{func.name}")
    assert found == ["trtfarm/cli/common.py:invoke"]
