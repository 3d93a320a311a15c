"""The house rules, checked on the source: layers point one way, no import cycle, no module over 400 lines.

core (``trtfarm/`` without ``trtfarm/cli``) <- ``flows/`` and ``tasks/`` (Prefect wiring) <- the command line
(``trtfarm/cli``). Only the farm commands import Prefect. Imports inside functions count as imports here too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("trtfarm", "flows", "tasks")
FARM_COMMANDS = {"trtfarm.cli.farm"}  # the CLI modules allowed to talk to a Prefect server


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))}


def imports(path: Path, top_level_only: bool = False) -> set[str]:
    """Every module ``path`` imports (``from a.b import c`` counts as ``a.b`` and, if it is a module, ``a.b.c``)."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else ast.walk(tree)
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def is_core(name: str) -> bool:
    return name.split(".")[0] == "trtfarm" and not name.startswith(("trtfarm.cli", "trtfarm.__main__"))


def test_the_core_imports_neither_prefect_nor_typer_nor_the_layers_above_it():
    offences = [f"{name} imports {imp}" for name, path in modules().items() if is_core(name)
                for imp in imports(path) if imp.split(".")[0] in ("prefect", "typer", "flows", "tasks")
                or imp.startswith("trtfarm.cli")]
    assert offences == []


def test_only_the_farm_commands_import_prefect_in_the_command_line():
    offences = [name for name, path in modules().items() if name.startswith("trtfarm.cli")
                and name not in FARM_COMMANDS and any(i.split(".")[0] == "prefect" for i in imports(path))]
    assert offences == []


def test_flows_and_tasks_never_import_the_command_line():
    offences = [f"{name} imports {imp}" for name, path in modules().items() if name.split(".")[0] in ("flows", "tasks")
                for imp in imports(path) if imp.startswith("trtfarm.cli")]
    assert offences == []


def test_there_is_no_import_cycle_at_module_level():
    known = modules()
    graph = {name: {i for i in imports(path, top_level_only=True) if i in known and i != name}
             for name, path in known.items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt] if nxt in stack else [node, nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []


@pytest.mark.parametrize("name", sorted(modules()))
def test_no_module_is_over_400_lines(name):
    assert len(modules()[name].read_text().splitlines()) <= 400
