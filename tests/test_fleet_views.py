"""``trtfarm plan`` and ``trtfarm status`` on a store built by the suite, judged by the farm's own planner.

Every change a fleet file can make is drawn from the fleet and its schema (each toolchain's version and image, each
GPU's fields, each builder default, each target removed, a new GPU model): the what-if must list exactly the
(model, target) pairs whose plan folder the real planner (``plan_run``) changes between the two fleets, and nothing
else; ``farm run --dry-run`` must list exactly the builds the planner would send out.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import yaml

from trtfarm.errors import UserInputError
from trtfarm.project.fleet_file import load_fleet
from trtfarm.publishing.registry import register_export
from trtfarm.state.views import plan_fleet, status
from trtfarm.store import open_store
from trtfarm.vocabulary.fleet import BuilderSettings, Fleet, select_targets

from . import forkcli
from .fleet_store import DEDUPE_TARGETS, FLEET, build_all, built_store, encoder_export, planner_prefixes
from .store_requests import Tally, _open, counting

WRITES = ("put_if_absent", "compare_and_swap", "upload_file", "delete")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(work folder, store URI, fleet file) of the suite's store: built once, never changed by the tests using it."""
    work = tmp_path_factory.mktemp("fleet-views")
    store = (work / "store").as_uri()
    return work, store, built_store(work, store)


@pytest.fixture
def own_store(built, tmp_path):
    """A copy of the built store that a test may add to."""
    work, _, fleet = built
    shutil.copytree(work / "store", tmp_path / "store")
    return tmp_path, (tmp_path / "store").as_uri(), fleet


# --- the family of fleet changes -------------------------------------------------------------------------------------
def _other(value, info):
    """A valid value other than ``value`` for a settings field (bools flip, numbers step, enums move on)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        bounds = {type(m).__name__: getattr(m, "le", None) for m in info.metadata}
        return value - 1 if bounds.get("Le") == value else value + 1
    members = list(type(value))
    return members[(members.index(value) + 1) % len(members)]


def mutations(doc: dict) -> list[tuple[str, dict, str | None]]:
    """``(id, proposed fleet document, the reason every listed pair must carry)`` for every change of the family."""
    out = [("unchanged", doc, None)]

    def changed(path: tuple, value) -> dict:
        new = json.loads(json.dumps(doc))
        node = new
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
        return new

    for key, tc in doc["toolchains"].items():
        major, minor, patch, build = tc["version"].split(".")
        out.append((f"bump-{key}", changed(("toolchains", key, "version"), f"{major}.{minor}.{int(patch) + 1}.{build}"),
                    "toolchain:"))
        out.append((f"image-{key}", changed(("toolchains", key, "image"), f"registry.example/{key}:next"), None))
    for key, gpu in doc["gpus"].items():
        for field, value in (("pool", f"{gpu['pool']}-b"), ("count", 2), ("memory_gib", gpu["memory_gib"] * 2),
                             ("nvml_name", f"{gpu['nvml_name']} (rev B)")):
            out.append((f"gpu-{key}-{field}", changed(("gpus", key, field), value), None))
    defaults = BuilderSettings()
    for name, info in BuilderSettings.model_fields.items():
        value = _other(getattr(defaults, name), info)
        plain = value.value if hasattr(value, "value") else value
        out.append((f"default-{name}", changed(("defaults",), {name: plain}), "builder setting: "))
    for i, target in enumerate(doc["targets"]):
        new = json.loads(json.dumps(doc))
        del new["targets"][i]
        out.append((f"remove-{target['id']}", new, None))
    new = json.loads(json.dumps(doc))
    new["gpus"]["l40s"] = {"nvml_name": "NVIDIA L40S", "compute_capability": "8.9", "memory_gib": 48, "pool": "l40s"}
    new["targets"] += [{"id": f"l40s-{k}", "gpu": "l40s", "toolchain": k, "release_on": "built"}
                       for k in doc["toolchains"]]
    out.append(("new-gpu-l40s", new, "new GPU model"))
    return out


FAMILY = mutations(yaml.safe_load(FLEET))


@pytest.mark.parametrize("name,proposed_doc,reason", FAMILY, ids=[m[0] for m in FAMILY])
def test_a_proposed_fleet_lists_exactly_the_pairs_whose_plan_the_real_planner_changes(built, tmp_path, name,
                                                                                      proposed_doc, reason):
    _, store_uri, fleet_file = built
    proposed_file = tmp_path / "proposed.yaml"
    proposed_file.write_text(yaml.safe_dump(proposed_doc))
    try:
        proposed = load_fleet(proposed_file)
    except UserInputError as err:  # a change the schema refuses on its own (strip_plan needs a refit mode)
        assert name == "default-strip_plan" and "strip_plan needs a refit mode" in str(err), err
        return
    current = load_fleet(fleet_file)
    tally = Tally()
    with counting(tally):
        decisions = plan_fleet(_open(store_uri), current, proposed, cache=False)
    assert sum(tally.by_method().get(m, 0) for m in WRITES) == 0, tally.by_method()  # it reads; it writes nothing

    before = planner_prefixes(store_uri, fleet_file)
    try:
        after = planner_prefixes(store_uri, proposed_file)
    except UserInputError as refused:  # the real run refuses a model whose farm.yaml names a target now gone
        gone = name.removeprefix("remove-")
        assert gone in str(refused) and decisions.refused == [
            f"dedupe: its farm.yaml names {gone}, which the proposed fleet lacks: a run refuses dedupe until "
            "farm.yaml's targets or the fleet change"]
        return
    assert decisions.refused == []
    dropped = {pair for pair in before if pair not in after}
    # rebuild: it replaces the pair's published build; new: the pair never had one (a gained target, or never built)
    referee = {pair: ("rebuild" if before.get(pair, ("", False))[1] else "new")
               for pair, (prefix, published) in after.items()
               if not published and (pair not in before or before[pair][0] != prefix)}
    listed = {(d.model, d.target): d.action for d in decisions.decisions if d.action in ("rebuild", "new")}
    assert listed == referee
    assert {(d.model, d.target) for d in decisions.decisions if d.action == "drop"} == dropped
    assert {(d.model, d.target) for d in decisions.decisions} == set(after) | dropped  # every pair, once
    for d in decisions.changed():
        if reason and d.action != "drop":
            assert any(r.startswith(reason) for r in d.reasons), (d, reason)
        if d.action == "new":
            assert d.reasons[0] == "not built yet", d
        if d.action in ("rebuild", "new"):
            assert d.basis and (d.estimate_s is not None or d.basis.startswith("no basis")), d
    if name.startswith("bump-"):  # exactly the targets of that toolchain, in every model that builds them
        key = name.removeprefix("bump-")
        ids = {t.id for t in current.targets if t.toolchain == key}
        assert {t for _, t in listed} == ids
        assert all(d.estimate_s is not None for d in decisions.changed() if d.model == "encoder"
                   and "rtx" in d.target), decisions.changed()
    if name == "new-gpu-l40s":
        assert set(listed.values()) == {"new"} and {t for _, t in listed} == {"l40s-rtx-1.7", "l40s-trt-11.4"}
    if reason is None and not name.startswith("remove-"):
        assert decisions.changed() == [], decisions.changed()  # a change no build depends on lists nothing


def test_a_what_if_from_current_state_records_reads_one_object_per_model_and_decides_as_the_objects_do(own_store):
    """Each record keeps the summaries of the manifests its cells were computed from; the what-ifs read them."""
    work, store_uri, fleet_file = own_store
    current, store = load_fleet(fleet_file), open_store(store_uri)
    proposals = [current]
    for name, doc, _ in FAMILY:
        if name in ("bump-trt-11.4", "bump-rtx-1.7", "default-workspace_mib", "new-gpu-l40s"):
            (work / f"{name}.yaml").write_text(yaml.safe_dump(doc))
            proposals.append(load_fleet(work / f"{name}.yaml"))

    def decided(proposed) -> tuple:
        found = plan_fleet(_open(store_uri), current, proposed, cache=False)
        return [repr(d) for d in found.decisions], found.serving, found.triton, found.refused

    records = {k: store.get(k).data for k in store.list("state/")}
    assert sorted(records) == ["state/dedupe.json", "state/encoder.json"]  # each run recorded its model
    answers = []
    for proposed in proposals:
        tally = Tally()
        with counting(tally):
            answers.append(decided(proposed))
        assert sorted(k for (m, k) in tally.requests if m == "get") == sorted(records), tally.requests
        assert any(d.action in ("rebuild", "new") for d in plan_fleet(store, current, proposed).decisions) == \
            (proposed is not current)
    # a current record whose summaries are of other versions (here: other build times) costs the manifests' reads,
    # never an answer
    key = "state/encoder.json"
    doc = json.loads(records[key])
    wall = doc["summary_layout"].split(",").index("wall_s")
    other = {**doc, "manifests": {k: ["0-0", [v + 1000 if i == wall else v for i, v in enumerate(row)]]
                                  for k, (_, row) in doc["manifests"].items()}}
    store.compare_and_swap(key, json.dumps(other).encode(), store.get(key).etag)
    assert [decided(p) for p in proposals] == answers
    for key in records:  # and without records, every manifest it needs is read
        store.delete(key)
    assert [decided(p) for p in proposals] == answers


def test_a_toolchain_bump_says_the_serving_image_it_leaves_behind(built, tmp_path):
    _, store_uri, fleet_file = built
    doc = yaml.safe_load(fleet_file.read_text())
    doc["toolchains"]["trt-11.4"]["version"] = "11.5.0.20"
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(doc))
    decisions = plan_fleet(open_store(store_uri), load_fleet(fleet_file), load_fleet(tmp_path / "p.yaml"))
    assert decisions.serving == ["trt-11.4: serving image nvcr.io/nvidia/tritonserver:26.10-py3 carries TensorRT "
                                 "11.4.0.106, but the toolchain now builds 11.5.0.20: `trtfarm triton` and `pull` "
                                 "refuse its new plans; update serving_images"]
    assert decisions.triton == {"dedupe": ["h100-trt11.4"], "encoder": ["h100-trt11.4"]}


def test_estimates_come_from_the_build_times_the_manifests_record(built, tmp_path):
    _, store_uri, fleet_file = built
    doc = yaml.safe_load(fleet_file.read_text())
    doc["defaults"] = {"workspace_mib": 8192}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(doc))
    decisions = plan_fleet(open_store(store_uri), load_fleet(fleet_file), load_fleet(tmp_path / "p.yaml"),
                           ["encoder"])
    by = {d.target: d for d in decisions.decisions}
    recorded = {m.target.target_id: m.build.wall_s for m in _manifests(store_uri, "encoder")}
    assert by["rtx4090-rtx1.7"].estimate_s == recorded["rtx4090-rtx1.7"]
    assert by["rtx4090-rtx1.7"].basis.startswith("recorded: this model on rtx-4090 (tensorrt_rtx-1.7.1.116)")
    assert by["rtx5090-rtx1.7"].estimate_s == 0 and "built once with rtx4090-rtx1.7" in by["rtx5090-rtx1.7"].basis
    assert by["rtx3090-rtx1.7-o5"].estimate_s == recorded["rtx3090-rtx1.7-o5"]
    h100 = by["h100-trt11.4"]  # a TensorRT build: never estimated from TensorRT-RTX builds done ahead of time
    assert h100.basis_kind == "no basis" and h100.estimate_s is None, h100
    assert h100.basis.startswith("no basis: no tensorrt build of this model on any GPU"), h100.basis
    per_pool = decisions.pool_seconds()
    assert set(per_pool) >= {"rtx-4090", "rtx-3090"}  # the shared RTX 5090 build costs nothing of its own
    assert sum(per_pool.values()) == pytest.approx(sum(d.estimate_s or 0 for d in decisions.decisions))


def _manifests(store_uri: str, model: str):
    from trtfarm.publishing.catalog import manifests_in

    return [m for _, _, m in manifests_in(open_store(store_uri), model)]


def _cli(*args: str, cwd: Path, columns: int = 80) -> subprocess.CompletedProcess:
    env = {**__import__("os").environ, "COLUMNS": str(columns)}
    return forkcli.trtfarm(args, cwd=cwd, env=env, timeout=300)


def test_whatif_prints_json_one_object_per_pair_and_an_html_page_with_its_chart(built, tmp_path):
    _, store_uri, fleet_file = built
    doc = yaml.safe_load(fleet_file.read_text())
    doc["toolchains"]["rtx-1.7"]["version"] = "1.7.2.1"
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(doc))
    done = _cli("whatif", "--fleet", str(tmp_path / "p.yaml"), "--targets-file", str(fleet_file), "--store", store_uri,
                "--json", "--html", str(tmp_path / "page"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert all(list(r) == ["model", "target", "action", "reasons", "estimate_s", "basis", "channel"] for r in rows)
    assert {r["channel"] for r in rows} == {"stable"}  # no farm.yaml here declares promotion:
    # encoder's three RTX targets rebuild; dedupe's RTX target (its build failed) is new; both H100 targets unchanged
    assert Counter(r["action"] for r in rows) == Counter(rebuild=3, new=1, keep=2)
    assert [r["reasons"][:2] for r in rows if r["action"] == "new"] == [
        ["not built yet", "toolchain: tensorrt_rtx 1.7.1.116 -> tensorrt_rtx 1.7.2.1"]]
    page = (tmp_path / "page" / "whatif.html").read_text()
    assert 'alt="gpu_minutes" src="data:image/png;base64,' in page and "toolchain: tensorrt_rtx 1.7.1.116 -&gt; " \
        "tensorrt_rtx 1.7.2.1" in page
    table = _cli("whatif", "--fleet", str(tmp_path / "p.yaml"), "--targets-file", str(fleet_file), "--store", store_uri,
                 cwd=tmp_path)
    assert table.returncode == 0 and max(map(len, table.stdout.splitlines())) <= 80, table.stdout
    assert "3 rebuild, 1 new, 2 keep" in " ".join(table.stdout.split()) and "rtx-4090" in table.stdout


def test_farm_run_dry_run_lists_exactly_what_the_planner_would_send_out(own_store):
    work, store_uri, fleet_file = own_store
    export = encoder_export(work / "encoder-1", 1)  # a new export: all of it to build, released to candidate
    (export / "farm.yaml").write_text((export / "farm.yaml").read_text() + "promotion: {receipts: 1}\n")
    register_export(open_store(store_uri), export)
    done = _cli("farm", "run", "--dry-run", "--json", "--targets-file", str(fleet_file), "--store", store_uri,
                cwd=work)
    assert done.returncode == 0, done.stderr
    listed = {(r["model"], r["target"]): r for r in json.loads(done.stdout)}
    assert {(m, r["channel"]) for (m, _), r in listed.items()} == {("encoder", "candidate"), ("dedupe", "stable")}
    text = _cli("farm", "run", "--dry-run", "--targets-file", str(fleet_file), "--store", store_uri, cwd=work)
    assert "released to candidate, not stable (farm.yaml declares promotion:): encoder;" in " ".join(
        text.stdout.split()), text.stdout
    assert max(map(len, text.stdout.splitlines())) <= 80, text.stdout
    doc = yaml.safe_load(fleet_file.read_text())
    doc["toolchains"]["rtx-1.7"]["version"] = "1.7.2.1"
    (work / "p.yaml").write_text(yaml.safe_dump(doc))
    planned = _cli("whatif", "--fleet", str(work / "p.yaml"), "--targets-file", str(fleet_file), "--store", store_uri,
                   "--json", cwd=work)
    assert {(r["model"], r["channel"]) for r in json.loads(planned.stdout) if r["action"] != "keep"} == {
        ("encoder", "candidate"), ("dedupe", "stable")}, planned.stdout
    todo = {pair for pair, (_, published) in planner_prefixes(store_uri, fleet_file).items() if not published}
    assert {pair for pair, r in listed.items() if r["action"] != "keep"} == todo
    assert all(r["reasons"][0].startswith("export: ") for (m, t), r in listed.items() if m == "encoder"
               and t != "h100-trt11.4"), listed
    one = _cli("farm", "run", "encoder", "--target", "rtx3090-rtx1.7-o5", "--dry-run", "--json", "--targets-file",
               str(fleet_file), "--store", store_uri, cwd=work)
    assert [(r["target"], r["action"]) for r in json.loads(one.stdout)] == [("rtx3090-rtx1.7-o5", "rebuild")]


def _states(found) -> dict[tuple[str, str], str]:
    return {(c.model, c.target): c.state for c in found.cells}


@pytest.mark.parametrize("backend", ["file", "s3"])
def test_status_shows_released_pending_failed_missing_and_stale_before_a_new_export_is_built(
        own_store, backend, request):
    work, store_uri, fleet_file = own_store
    if backend == "s3":  # the same store on moto's S3 server: every object copied with its bytes
        store_uri = _copy_to_s3(store_uri, request.getfixturevalue("s3_uri"))
    fleet = load_fleet(fleet_file)
    found = status(open_store(store_uri), fleet)
    assert found.models == ["dedupe", "encoder"] and found.targets == [t.id for t in fleet.targets]
    assert _states(found) == {
        ("dedupe", "rtx4090-rtx1.7"): "failed", ("dedupe", "h100-trt11.4"): "missing",
        ("encoder", "rtx4090-rtx1.7"): "released", ("encoder", "rtx5090-rtx1.7"): "released",
        ("encoder", "rtx3090-rtx1.7-o5"): "pending", ("encoder", "h100-trt11.4"): "missing"}
    cell = {(c.model, c.target): c for c in found.cells}
    failed = cell["dedupe", "rtx4090-rtx1.7"]
    assert "UNSUPPORTED_NODE" in failed.reason and failed.since and found.cell("dedupe", "rtx5090-rtx1.7") is None
    released = cell["encoder", "rtx4090-rtx1.7"]
    assert released.precision == "fp32" and released.engine == "pending" and released.signed == "unsigned"
    assert 0 <= released.age_s < 3600 and released.released_at
    assert "engine check pending on NVIDIA GeForce RTX 3090" in cell["encoder", "rtx3090-rtx1.7-o5"].reason
    assert "tensorrt" in cell["encoder", "h100-trt11.4"].reason  # the run skipped it: the reason it gave

    register_export(open_store(store_uri), encoder_export(work / "encoder-2", 2))  # registered, not built yet
    stale = status(open_store(store_uri), fleet)
    assert {pair: s for pair, s in _states(stale).items() if pair[0] == "encoder"} == {
        ("encoder", "rtx4090-rtx1.7"): "stale", ("encoder", "rtx5090-rtx1.7"): "stale",
        ("encoder", "rtx3090-rtx1.7-o5"): "missing", ("encoder", "h100-trt11.4"): "missing"}
    reason = stale.cell("encoder", "rtx4090-rtx1.7").reason
    assert reason.startswith("export: ") and "is newer than the built onnx" in reason and "not built yet" in reason

    if backend == "file":  # built: released again (the cache of what was read before does not hide the change)
        build_all(store_uri, fleet_file)
        again = status(open_store(store_uri), fleet)
        assert again.cell("encoder", "rtx4090-rtx1.7").state == "released"
        assert again.cell("encoder", "rtx4090-rtx1.7").export != found.cell("encoder", "rtx4090-rtx1.7").export


def _copy_to_s3(file_uri: str, s3_uri: str) -> str:
    src, dst = open_store(file_uri), open_store(s3_uri)
    for key in src.list(""):
        dst.put_if_absent(key, src.get(key).data)
    return s3_uri


def test_status_reads_nothing_again_that_has_not_changed_and_writes_nothing(built, tmp_path, monkeypatch):
    _, store_uri, fleet_file = built
    monkeypatch.setenv("TRTFARM_CACHE_DIR", str(tmp_path / "cache"))  # a cache of its own
    fleet = load_fleet(fleet_file)
    cold, warm = Tally(), Tally()
    with counting(cold):
        first = status(_open(store_uri), fleet)
    with counting(warm):
        second = status(_open(store_uri), fleet)
    assert [c.to_json() | {"age_s": None} for c in first.cells] == [c.to_json() | {"age_s": None}
                                                                      for c in second.cells]
    for tally in (cold, warm):
        assert sum(tally.by_method().get(m, 0) for m in WRITES) == 0, tally.by_method()
    assert cold.by_method()["get"] > 0 and warm.by_method().get("get", 0) == 0, (cold.by_method(), warm.by_method())
    # the registry, plans, both channels' pointers, precision steps, runs and state records: one listing each
    assert warm.by_method() == {"list_versions": 7}
    # cold, each model's state as the runs recorded it is current: one object per model, nothing else
    assert cold.by_method() == {"list_versions": 7, "get": len(first.models)}, cold.by_method()
    assert first.notes == []


def test_status_fits_80_columns_and_folds_into_blocks_when_the_targets_do_not(built, tmp_path):
    _, store_uri, fleet_file = built
    done = _cli("status", "--targets-file", str(fleet_file), "--store", store_uri, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(map(len, lines)) <= 80, done.stdout
    assert any(line.startswith("┃ model") for line in lines) and "FAIL" in done.stdout
    doc = yaml.safe_load(fleet_file.read_text())  # eight targets: too wide for a matrix in 80 columns
    doc["gpus"].update({f"{k}-b": {**g, "pool": f"{g['pool']}-b"} for k, g in doc["gpus"].items()})
    doc["targets"] += [{**t, "id": f"{t['id']}-b", "gpu": f"{t['gpu']}-b"} for t in doc["targets"]]
    (tmp_path / "wide.yaml").write_text(yaml.safe_dump(doc))
    folded = _cli("status", "--targets-file", str(tmp_path / "wide.yaml"), "--store", store_uri, cwd=tmp_path)
    assert folded.returncode == 0 and max(map(len, folded.stdout.splitlines())) <= 80, folded.stdout
    assert "┃ model" not in folded.stdout and "\nencoder\n" in folded.stdout
    assert re.search(r"^ +rtx3090-rtx1\.7-o5-b +missing +no plan released", folded.stdout, re.M), folded.stdout
    rows = json.loads(_cli("status", "--json", "--targets-file", str(fleet_file), "--store", store_uri,
                           cwd=tmp_path).stdout)
    assert [list(r)[:5] for r in rows] == [["model", "target", "state", "reason", "released_at"]] * len(rows)
    assert len(rows) == len(DEDUPE_TARGETS) + len(select_targets(load_fleet(fleet_file)))


def test_an_unregistered_model_built_from_a_local_onnx_is_judged_by_its_released_plans(tmp_path, example_onnx):
    from trtfarm.pipeline import run_local
    from trtfarm.planning.requests import MatrixRequest

    from .fleet_store import FLEET

    (tmp_path / "gpu_targets.yaml").write_text(FLEET)
    store_uri = (tmp_path / "store").as_uri()
    run_local(MatrixRequest(model=str(example_onnx), store=store_uri, targets_file=str(tmp_path / "gpu_targets.yaml"),
                            dispatch="local"), report="none")
    fleet = load_fleet(tmp_path / "gpu_targets.yaml")
    found = status(open_store(store_uri), fleet)
    assert _states(found)["encoder", "rtx4090-rtx1.7"] == "released" and found.models == ["encoder"]
    doc = yaml.safe_load(FLEET)
    doc["defaults"] = {"tf32": False}
    proposed = Fleet.model_validate(doc)
    decisions = plan_fleet(open_store(store_uri), fleet, proposed)
    assert {d.target for d in decisions.changed()} == {t.id for t in fleet.targets}
    assert all("builder setting: tf32 True -> False" in d.reasons for d in decisions.changed())
