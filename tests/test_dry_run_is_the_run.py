"""``farm run --dry-run`` says what the run does, on a generated matrix of stores (issue 58).

One store is built for real (TensorRT-RTX on this CPU): ``enc`` released on three targets, and ``old``, released on
them from its first export while its second export is registered and unbuilt (every target's pointer names another
build). Each case copies it and puts each of two ``enc`` targets in one state of ``STATES`` (the product of them);
the third stays released. Then three answers must be equal for every (model, target):

- the dry run (``planning/dry_run.py`` through ``state.views.dry_run``, what ``farm run --dry-run --json`` prints):
  the farm's planner over the store's read model (listings, the cells of ``state/run_view.py``);
- the run's own decisions as ``trtfarm build`` plans them (``plan_run`` in local mode: every target's manifest and
  pointer read, no read model);
- what the state means (``STATES``), so that both cannot be wrong together.

The same for a trial run (``release: false``: no pointer moves), where a published build is up to date.

A few cases go through the CLI, and one through a real ``trtfarm build``, whose outcomes must be what the dry run
said. No case is skipped: a target this machine cannot build is left out of the fleet (a farm run does not skip it).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from trtfarm import layout
from trtfarm.pipeline import plan_run, run_local
from trtfarm.planning.dry_run import planned_decisions, run_decisions
from trtfarm.planning.requests import MatrixRequest
from trtfarm.publishing.registry import register_export
from trtfarm.run_setup import find_exports
from trtfarm.state.views import dry_run
from trtfarm.store import open_store

from . import forkcli
from .fleet_store import encoder_export
from .fleets import THREE_TARGETS

pytestmark = pytest.mark.integration

VARIED = ("rtx-4090-rtx1.7", "rtx3090-rtx1.7-o5")  # the targets each case puts in a state (the third stays released)

# state -> what a run does with the target in it
STATES = {
    "released": "up-to-date",
    "absent": "build",  # never built: no plan folder, no pointer
    "unreleased": "release",  # published, then the run was killed before its pointer moved
    "plan resized": "build",  # the plan object is not the size its manifest says: rebuilt
    "plan bytes changed": "up-to-date",  # same size: only `--verify-store`'s re-hash sees it
    "manifest damaged": "withdraw+rebuild",  # the manifest of this very build does not parse
    "pointer damaged": "release",  # the pointer does not parse: the release repairs it
    "deleted under its pointer": "build",  # its folder deleted (gc, by hand), its pointer left naming it
    "pointer on another build": "release",  # a whole pointer, of another target's build (copied by hand)
}


def _damage(root: Path, state: str, prefix: str, pointer: str) -> None:
    """Put one (model, target) of the file store at ``root`` in ``state``."""
    folder, manifest, plan = root / prefix, root / layout.manifest_key(prefix), root / layout.plan_key(prefix)
    if state in ("absent", "deleted under its pointer"):
        shutil.rmtree(folder)
    if state in ("absent", "unreleased"):
        (root / pointer).unlink()
    if state == "plan resized":
        plan.write_bytes(plan.read_bytes() + b"\0" * 16)
    if state == "plan bytes changed":
        data = bytearray(plan.read_bytes())
        data[len(data) // 2] ^= 0xFF
        plan.write_bytes(bytes(data))
    if state == "manifest damaged":
        manifest.write_bytes(b"{" + manifest.read_bytes()[1:-9])
    if state == "pointer damaged":
        (root / pointer).write_bytes(b"{not json")
    if state == "pointer on another build":  # the third target's pointer, which stays released in every case
        other = next(p for p in (root / "releases/enc").rglob("*") if p.is_file() and "rtx-5090" in str(p))
        (root / pointer).write_bytes(other.read_bytes())


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """(work folder, the built store's folder, fleet file, (model, target) -> (plan folder, release pointer))."""
    work = tmp_path_factory.mktemp("dry-run-is-the-run")
    fleet = work / "gpu_targets.yaml"
    fleet.write_text(THREE_TARGETS)
    root = work / "base"
    store = open_store(str(root))
    register_export(store, encoder_export(work / "enc", 0, name="enc"))
    register_export(store, encoder_export(work / "old-0", 1, name="old"))
    rows = run_local(MatrixRequest(store=str(root), targets_file=str(fleet)), report="none")
    assert {r.outcome.status for r in rows} == {"built"} and len(rows) == 6, rows
    register_export(store, encoder_export(work / "old-1", 2, name="old"))  # newer weights, not built
    where = {}
    for r in rows:
        if r.model == "enc":
            prefix = layout.folder_of(r.outcome.manifest_key)
            gpu, label = layout.parse_plan_key(r.outcome.manifest_key)[2:4]
            where[r.model, r.outcome.target] = (prefix, layout.release_key("enc", gpu, label))
    return work, root, fleet, where


def _store_in(base, name: str, states: dict[str, str]) -> Path:
    work, root, _, where = base
    copy = work / name
    shutil.copytree(root, copy)
    for target, state in states.items():
        _damage(copy, state, *where["enc", target])
    return copy


def _request(root: Path, fleet: Path, model: str | None, trial: bool) -> MatrixRequest:
    given = {"model": model} if model else {}
    return MatrixRequest(store=str(root), targets_file=str(fleet), **given, **({"release": False} if trial else {}))


def _dry(root: Path, fleet: Path, model: str | None = None, trial: bool = False) -> dict[tuple[str, str], str]:
    """What ``farm run --dry-run`` says (the functions it calls), one word per (model, target)."""
    store = open_store(str(root))
    request = _request(root, fleet, model, trial)
    f, targets = request.check_targets()
    exports = find_exports(store, model)
    decided, refused, view = planned_decisions(request, store, exports, f, targets)
    assert refused == {}
    said = dry_run(store, f, exports, decided, refused, survey=view.survey)  # as `farm run --dry-run` does
    assert len(said.decisions) == len(decided)
    return {(d.model, d.target): d.run for d in said.decisions}


def _run(root: Path, fleet: Path, model: str | None = None, trial: bool = False) -> dict[tuple[str, str], str]:
    """What ``trtfarm build`` plans (local mode: every manifest and pointer read), one word per (model, target)."""
    store = open_store(str(root))
    request = _request(root, fleet, model, trial)
    return {(d.model, d.target): d.run for work in plan_run(request, store, find_exports(store, model), farm=False)
            for d in run_decisions(work)}


def _meant(states: dict[str, str], trial: bool = False) -> dict[tuple[str, str], str]:
    """What each state means for a run; a trial's (``--trial``: no pointer moves) is up to date once published."""
    out = {("enc", t): STATES[states.get(t, "released")] for t in ("rtx-4090-rtx1.7", "rtx-5090-rtx1.7",
                                                                  "rtx3090-rtx1.7-o5")}
    if trial:
        out = {k: "up-to-date" if v == "release" else v for k, v in out.items()}
    out.update({("old", t): "build" for t in ("rtx-4090-rtx1.7", "rtx-5090-rtx1.7", "rtx3090-rtx1.7-o5")})
    return out


CASES = [dict(zip(VARIED, pair, strict=True)) for pair in itertools.product(STATES, repeat=2)]


def test_the_dry_run_and_the_run_decide_alike_on_every_store_of_the_matrix(base):
    _, _, fleet, _ = base
    wrong = []
    for i, states in enumerate(CASES):
        root = _store_in(base, f"case-{i}", states)
        meant = _meant(states)
        dry, run = _dry(root, fleet), _run(root, fleet)
        one = _dry(root, fleet, "enc")  # one model: its own listings, not the whole store's
        if not dry == run == meant or {k: v for k, v in dry.items() if k[0] == "enc"} != one:
            wrong.append((states, {k: (meant[k], dry.get(k), run.get(k), one.get(k)) for k in meant
                                   if len({meant[k], dry.get(k), run.get(k), one.get(k, meant[k])}) > 1}))
        shutil.rmtree(root)
    # each: the states, and {(model, target): (meant, dry run, run, dry run of enc alone)} where they differ
    assert wrong == [], "\n".join(map(str, wrong))


def test_a_trial_is_up_to_date_once_published_in_the_dry_run_as_in_the_run(base):
    _, _, fleet, _ = base
    wrong = []
    for i, state in enumerate(STATES):  # each state on both varied targets, for a run that moves no pointer
        states = dict.fromkeys(VARIED, state)
        root = _store_in(base, f"trial-{i}", states)
        meant, dry, run = _meant(states, trial=True), _dry(root, fleet, trial=True), _run(root, fleet, trial=True)
        if not dry == run == meant:
            wrong.append((state, {k: (meant[k], dry.get(k), run.get(k)) for k in meant
                                  if len({meant[k], dry.get(k), run.get(k)}) > 1}))
        shutil.rmtree(root)
    assert wrong == [], "\n".join(map(str, wrong))


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "80", "TRTFARM_SIGNING_KEY": ""}
    return forkcli.trtfarm(args, env=env, timeout=300)


@pytest.mark.parametrize("states", [{"rtx-4090-rtx1.7": "manifest damaged", "rtx3090-rtx1.7-o5": "unreleased"},
                                    {"rtx-4090-rtx1.7": "absent", "rtx3090-rtx1.7-o5": "plan resized"}],
                         ids=["damaged-unreleased", "absent-resized"])
def test_farm_run_dry_run_json_says_the_runs_words_and_a_real_build_does_them(base, states):
    work, _, fleet, _ = base
    root = _store_in(base, "cli-" + "-".join(s.replace(" ", "_") for s in states.values()), states)
    done = _cli("farm", "run", "enc", "--dry-run", "--json", "--store", str(root), "--targets-file", str(fleet))
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    said = {("enc", r["target"]): r["run"] for r in rows}
    assert said == {k: v for k, v in _meant(states).items() if k[0] == "enc"}, rows
    assert {r["action"] for r in rows if r["run"] in ("build", "withdraw+rebuild")} <= {"rebuild", "new"}, rows
    assert all(r["action"] == "keep" for r in rows if r["run"] in ("up-to-date", "release")), rows
    text = _cli("farm", "run", "enc", "--dry-run", "--store", str(root), "--targets-file", str(fleet))
    assert text.returncode == 0 and max(map(len, text.stdout.splitlines())) <= 80, text.stdout
    if states["rtx-4090-rtx1.7"] != "manifest damaged":
        return
    onnx = str(work / "enc" / "model.onnx")  # the registered export's own files: the same builds
    built = _cli("build", onnx, "--json", "--store", str(root), "--targets-file", str(fleet))  # the real run
    assert built.returncode == 0, built.stderr
    outcomes = {r["target"]: r for r in json.loads(built.stdout)}
    for (_, target), word in said.items():
        o = outcomes[target]
        assert o["status"] == ("built" if word in ("build", "withdraw+rebuild") else "up-to-date"), (word, o)
        assert o["released"], o  # every pointer serves its target's plan after the run
        if word in ("release", "up-to-date"):  # a rebuild of this build leaves its pointer where it was
            assert ("(already at " in o["release"]) == (word == "up-to-date"), (word, o)
    again = _cli("farm", "run", "enc", "--dry-run", "--json", "--store", str(root), "--targets-file", str(fleet))
    assert {r["run"] for r in json.loads(again.stdout)} == {"up-to-date"}, again.stdout
