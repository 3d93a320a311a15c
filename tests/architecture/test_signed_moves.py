"""Every path to a move of a release pointer carries the process's signing key: none drops it on the way.

The functions that write a pointer (``move_release``, ``repair_pointer``, ``refresh_release``) take a ``signer``.
Following calls through the source (a name resolved through the module's imports), every function that calls one of
them, or calls a function that takes a signer on the way to one, must have a signer to hand on: a ``signer``
parameter of its own, or the key loaded right there (``signing_settings(...).signer()``: a command; the run's
``RunSetup.signer``: ``run_local``, the build-matrix flow; ``worker_signer()``: a farm child). And every such call
hands it on. A process with TRTFARM_SIGNING_KEY therefore signs every pointer move it makes;
tests/test_release_pointer.py checks the moves themselves.
"""

from __future__ import annotations

import ast

from .test_layers import modules

WRITERS = {"trtfarm.releases.moves.apply", "trtfarm.publishing.release.repair_pointer",
           "trtfarm.publishing.release.refresh_release"}


class Function:
    """A module-level function: its qualified name, its node, and the qualified names its plain calls resolve to."""

    def __init__(self, qualified: str, node: ast.FunctionDef, names: dict[str, str]) -> None:
        self.qualified, self.node = qualified, node
        self.calls = [(c, names[c.func.id]) for c in ast.walk(node)
                      if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id in names]
        self.loads = any(isinstance(c, ast.Attribute) and c.attr == "signer"  # a key loaded, or a run setup's
                         or isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == "worker_signer"
                         for c in ast.walk(node))
        params = [a.arg for a in node.args.posonlyargs + node.args.args]
        self.slot = params.index("signer") if "signer" in params else None
        self.takes = self.slot is not None or any(a.arg == "signer" for a in node.args.kwonlyargs)


def _functions() -> dict[str, Function]:
    """Every module-level function of the packages by qualified name; a name resolves to its own module's function
    or to what an import (at the top or inside a function) binds it to."""
    found = {}
    for module, path in modules().items():
        tree = ast.parse(path.read_text())
        names = {n.name: f"{module}.{n.name}" for n in tree.body if isinstance(n, (ast.FunctionDef,
                                                                                    ast.AsyncFunctionDef))}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found[f"{module}.{node.name}"] = Function(f"{module}.{node.name}", node, names)
    return found


def _carriers(functions: dict[str, Function]) -> set[str]:
    """The writers, and every function taking a signer that calls a carrier (to a fixed point)."""
    carry = set(WRITERS)
    while True:
        more = {q for q, f in functions.items() if q not in carry and f.takes and any(t in carry for _, t in f.calls)}
        if not more:
            return carry
        carry |= more


def test_the_walk_finds_the_known_paths_to_a_pointer_move():
    carry = _carriers(_functions())
    assert WRITERS <= set(_functions())  # the writers are where this test thinks they are
    for known in ("building.release_move.release_if_allowed", "executor.settle",
                  "building.run_job.run_job", "publishing.sign_store.sign_store"):
        assert f"trtfarm.{known}" in carry, known
    assert "tasks.build.settle_model" in carry  # the flow's settle (the executor calls it through its settler)
    for planner in ("planning.triage.triage", "planning.triage.triage_listed", "planning.plan.plan_export",
                    "planning.plan.listed_stage", "pipeline.plan_run",
                    "planning.dry_run.planned_decisions"):  # planning decides (a dry run too): it moves nothing
        assert f"trtfarm.{planner}" not in carry, planner


def test_whoever_calls_on_the_way_to_a_pointer_move_has_the_signer_and_hands_it_on():
    functions = _functions()
    carry = _carriers(functions)
    offences, seen = [], 0
    for q, f in sorted(functions.items()):
        for call, target in f.calls:
            if target not in carry:
                continue
            seen += 1
            if not (f.takes or f.loads):
                offences.append(f"{q} calls {target} with no signer to hand on (take `signer` or load the key)")
            slot = functions[target].slot
            if not (any(k.arg == "signer" for k in call.keywords) or (slot is not None and len(call.args) > slot)):
                offences.append(f"{q} calls {target} without the signer (line {call.lineno})")
    assert seen >= 12 and offences == []
