"""The house rules, checked on the source: layers point one way, packages stack, no import cycle, short modules.

core (``trtfarm/`` without ``trtfarm/cli``) <- ``flows/`` and ``tasks/`` (Prefect wiring) <- the command line
(``trtfarm/cli``). Only the farm commands import Prefect. Inside the core, each package (or top-level module) has a
level in ``LEVELS`` and imports only units of lower levels; two modules never import each other. Imports inside
functions (and under ``TYPE_CHECKING``) count as imports here too. docs/architecture.md draws the same stack.
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


# Bottom first. A unit is a core package (trtfarm/<package>/) or top-level module (trtfarm/<module>.py); units on
# one level do not import each other.
LEVELS: tuple[tuple[str, ...], ...] = (
    ("trtfarm", "errors", "nearest"),  # the package itself (its version), the error kinds, the name nearest a typo
    ("interrupt", "scratch", "cachedir", "yamlfile", "onnxfile", "extras", "layout"),  # plain utilities; store keys
    ("identity", "onnxshapes", "layout_shared"),  # content addresses; the sizes an ONNX graph's inputs take; the
    # store's keys under no model's folder
    ("store", "signing", "profiles", "machine"),  # storage adapters, keys and signatures, shapes, this machine
    ("precision",),  # ModelOpt conversion and the accuracy gate
    ("vocabulary",),  # fleet schema, build specs, models and exports, targets, jobs, outcomes
    ("project",),  # what a project's folders and this machine say: the fleet file or built-in fleet, farm.yaml
    ("toolchain", "modelfile"),  # the TensorRT / TensorRT-RTX builder seam; an export's ONNX checked and digested
    ("workers",),  # worker admission, pools, images, identity
    ("publishing",),  # manifests, publish, releases, the model registry, attestations, gc
    ("releases",),  # the release ledger: one state machine for every move of a channel, receipts, gates
    ("state",),  # the one read model of the store: survey, cells, the state record, the views' entry points
    ("runtime",),  # loading and pulling plans on a serving host
    ("validation",),  # engine checks and figures
    ("building", "triggers"),  # running one build job; the webhook receiver
    ("planning", "reports", "serving"),  # planning a run; run reports; Triton repositories
    ("executor", "run_setup"),  # carrying out what planning decided; one run's setup, read once (both share it)
    ("pipeline",),  # one run, start to end
    ("tasks",), ("flows",), ("cli",), ("__main__",),  # Prefect wiring, the command line, `python -m trtfarm`
)
LEVEL = {unit: i for i, units in enumerate(LEVELS) for unit in units}


def unit_of(name: str) -> str:
    """``trtfarm.planning.plan`` -> ``planning``; ``trtfarm.layout`` -> ``layout``; ``flows.dispatch`` -> ``flows``."""
    parts = name.split(".")
    if parts[0] != "trtfarm":
        return parts[0]
    return parts[1] if len(parts) > 1 else "trtfarm"


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


def test_nothing_shipped_imports_the_developer_tools():
    """``tools/`` (the bindings check) is not in the wheel: nothing in trtfarm/, flows/ or tasks/ imports it."""
    offences = [f"{name} imports {imp}" for name, path in modules().items() for imp in imports(path)
                if imp.split(".")[0] == "tools"]
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


def test_every_unit_has_a_level():
    assert sorted({unit_of(n) for n in modules()} - set(LEVEL)) == []


def test_packages_import_only_the_levels_below_them():
    known = modules()
    offences = sorted(f"{name} ({unit_of(name)}, level {LEVEL[unit_of(name)]}) imports {imp} "
                      f"({unit_of(imp)}, level {LEVEL[unit_of(imp)]})"
                      for name, path in known.items() for imp in imports(path)
                      if imp in known and unit_of(imp) != unit_of(name)
                      and LEVEL[unit_of(imp)] >= LEVEL[unit_of(name)])
    assert offences == []


def test_no_two_modules_import_each_other():
    known = modules()
    graph = {name: {i for i in imports(path) if i in known and i != name} for name, path in known.items()}
    assert sorted(f"{a} <-> {b}" for a in graph for b in graph[a] if a < b and a in graph[b]) == []


READ_MODEL = ("trtfarm.state.survey", "trtfarm.state.summaries", "trtfarm.state.record")


def test_only_the_state_package_reads_the_survey_and_the_record():
    """The store's state is modelled once: the listings, each object's summary and the state record are read through
    ``trtfarm/state``'s views and cells, never by a command, a flow or another package on its own."""
    inside = tuple(f"{m}." for m in READ_MODEL)
    offences = sorted(f"{name} -> {imp}" for name, path in modules().items() if not name.startswith("trtfarm.state")
                      for imp in imports(path) if imp in READ_MODEL or imp.startswith(inside))
    assert offences == []


@pytest.mark.parametrize("name", sorted(modules()))
def test_no_module_is_over_400_lines(name):
    assert len(modules()[name].read_text().splitlines()) <= 400
