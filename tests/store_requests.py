"""Count what a run asks of the store: a real store wrapped to count each request, and the runs that are counted.

``CountingStore`` delegates every call to a real backend (``LocalStore`` or ``S3Store``) and tallies it by method
and key; nothing is faked. ``scenarios`` runs a local build, its up-to-date rerun, a refit run and the farm's
planning against one, and counts too how often the ONNX is parsed and targets are selected. A module, not a
fixture: tests/test_store_requests.py bounds the counts and bench/store_requests.py prints them.
"""

from __future__ import annotations

import shutil
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import onnx

import trtfarm.store
from trtfarm.store import Store
from trtfarm.store.base import Blob, ListedObject, Progress, Uploaded

from .fleets import REFIT_FLEET, THREE_TARGETS

REPO = Path(__file__).resolve().parents[1]
REQUESTS = ("get", "etag", "size", "put_if_absent", "compare_and_swap", "upload_file", "download_file", "list",
            "list_sizes", "list_versions", "delete")
class CountingStore(Store):
    """A real store whose every request is counted by ``(method, key)`` (``url`` asks the store nothing)."""

    def __init__(self, inner: Store, calls: Counter) -> None:
        self.inner, self.calls, self.uri = inner, calls, inner.uri
        self.paged_listings, self.md5_versions = inner.paged_listings, inner.md5_versions
        self.waits_on_network = inner.waits_on_network

    def _count(self, method: str, key: str) -> None:
        self.calls[(method, key)] += 1

    def get(self, key: str) -> Blob | None:  # noqa: D102
        self._count("get", key)
        return self.inner.get(key)

    def etag(self, key: str) -> str | None:  # noqa: D102
        self._count("etag", key)
        return self.inner.etag(key)

    def size(self, key: str) -> int | None:  # noqa: D102
        self._count("size", key)
        return self.inner.size(key)

    def exists(self, key: str) -> bool:  # noqa: D102
        self._count("exists", key)
        return self.inner.exists(key)

    def put_if_absent(self, key: str, data: bytes) -> bool:  # noqa: D102
        self._count("put_if_absent", key)
        return self.inner.put_if_absent(key, data)

    def compare_and_swap(self, key: str, data: bytes, etag: str | None) -> str:  # noqa: D102
        self._count("compare_and_swap", key)
        return self.inner.compare_and_swap(key, data, etag)

    def upload_file(self, key: str, path: Path, progress: Progress | None = None) -> Uploaded:  # noqa: D102
        self._count("upload_file", key)
        return self.inner.upload_file(key, path, progress)

    def download_file(self, key: str, dest: Path, sha256: str | None = None,  # noqa: D102
                      progress: Progress | None = None) -> int:
        self._count("download_file", key)
        return self.inner.download_file(key, dest, sha256, progress)

    def list(self, prefix: str = "") -> Iterator[str]:  # noqa: D102
        self._count("list", prefix)
        return self.inner.list(prefix)

    def list_sizes(self, prefix: str = "") -> Iterator[tuple[str, int]]:  # noqa: D102
        self._count("list_sizes", prefix)
        return self.inner.list_sizes(prefix)

    def list_versions(self, prefix: str = "") -> Iterator[ListedObject]:  # noqa: D102
        self._count("list_versions", prefix)
        return self.inner.list_versions(prefix)

    def list_versions_between(self, prefix: str, after: str | None = None,  # noqa: D102
                              upto: str | None = None) -> Iterator[ListedObject]:
        self._count("list_versions", prefix)
        return self.inner.list_versions_between(prefix, after, upto)

    def delete(self, key: str) -> None:  # noqa: D102
        self._count("delete", key)
        self.inner.delete(key)

    def sweep_temporaries(self, prefix: str, older_than_s: float) -> int:  # noqa: D102
        return self.inner.sweep_temporaries(prefix, older_than_s)  # the file store's own folder walk, no request

    def url(self, key: str) -> str:  # noqa: D102
        return self.inner.url(key)


@dataclass
class Tally:
    """What one scenario asked: store requests by ``(method, key)``, and calls of the counted functions."""

    requests: Counter = field(default_factory=Counter)
    calls: Counter = field(default_factory=Counter)

    def by_method(self) -> dict[str, int]:
        """Requests per store method."""
        out: Counter = Counter()
        for (method, _), n in self.requests.items():
            out[method] += n
        return dict(out)

    def of(self, method: str, key_part: str) -> int:
        """Requests of ``method`` on keys containing ``key_part``."""
        return sum(n for (m, k), n in self.requests.items() if m == method and key_part in k)

    @property
    def total(self) -> int:
        """Every store request."""
        return sum(self.requests.values())

    def figures(self) -> dict:
        """The tally as JSON: per method, release pointer and manifest reads, function calls, the total."""
        calls = dict(self.calls)
        parses = calls.pop("onnx.load", 0) + calls.pop("onnxfile.load_model", 0)  # onnx's own, or trtfarm's seam
        checks = calls.pop("onnx.checker.check_model", 0) + calls.pop("onnxfile.check_model", 0)
        return {"requests": self.total, "by_method": self.by_method(),
                "pointer_reads": self.of("get", "releases/"), "manifest_reads": self.of("get", "manifest.json"),
                "onnx_parses": parses, "onnx_checks": checks, **calls}


COUNTED = {"onnx.load": (onnx, "load"), "onnx.checker.check_model": (onnx.checker, "check_model")}
PRELOADED = ("trtfarm.pipeline", "trtfarm.building.run_job", "trtfarm.building.refit", "trtfarm.building.build",
             "trtfarm.precision.step", "trtfarm.publishing.registry", "trtfarm.cli.farm", "trtfarm.toolchain.refitter")
COUNTED_CORE = {"select_targets": "trtfarm.vocabulary.fleet", "precision_key": "trtfarm.precision.step",
                "onnxfile.load_model": "trtfarm.onnxfile", "onnxfile.check_model": "trtfarm.onnxfile"}


@contextmanager
def counting(tally: Tally):
    """Route every ``open_store`` through ``CountingStore`` and count the ONNX parses and target selections.

    Test-only patching: each module that bound the original function gets the counting one, and back after.
    """
    import importlib

    for name in PRELOADED:  # imported now, so none binds a counting function for good by being imported meanwhile
        importlib.import_module(name)
    patched: list[tuple[object, str, object]] = []

    def swap(owner, name: str, new) -> None:
        patched.append((owner, name, getattr(owner, name)))
        setattr(owner, name, new)

    def counted(label: str, fn: Callable) -> Callable:
        def wrapper(*args, **kwargs):
            tally.calls[label] += 1
            return fn(*args, **kwargs)
        return wrapper

    targets = {label: getattr(owner, name) for label, (owner, name) in COUNTED.items()}
    for label, module in COUNTED_CORE.items():
        targets[label] = getattr(importlib.import_module(module), label.rsplit(".", 1)[-1])
    real_open = trtfarm.store.open_store
    targets["open_store"] = real_open
    replacement = {label: counted(label, fn) for label, fn in targets.items() if label != "open_store"}
    replacement["open_store"] = lambda uri, *a, **kw: CountingStore(real_open(uri, *a, **kw), tally.requests)
    try:
        for label, (owner, name) in COUNTED.items():
            swap(owner, name, replacement[label])
        for mod in [m for n, m in list(sys.modules.items()) if n.startswith(("trtfarm", "tasks", "flows"))]:
            for label, original in targets.items():
                for attr, value in list(vars(mod).items()):
                    if value is original:
                        swap(mod, attr, replacement[label])
        yield tally
    finally:
        for owner, name, old in reversed(patched):
            setattr(owner, name, old)


def _open(uri: str) -> Store:
    return trtfarm.store.open_store(uri)  # looked up at each call: counted inside ``counting``


def export_at(folder: Path, seed: int) -> Path:
    """The example encoder with weights ``seed`` and its farm.yaml in ``folder``; returns its model.onnx."""
    sys.path.insert(0, str(REPO))
    from examples.encoder import make_model

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.onnx").write_bytes(make_model.encoder_model(seed).SerializeToString(deterministic=True))
    shutil.copy(REPO / "examples/encoder/farm.yaml", folder / "farm.yaml")
    return folder / "model.onnx"


def request_for(model: str, store: str, fleet: Path, **kw):
    """A local run's request."""
    from trtfarm.planning.requests import MatrixRequest

    return MatrixRequest(model=model, store=store, targets_file=str(fleet), dispatch="local", **kw)


def _counted(run: Callable[[], object]) -> tuple[Tally, object]:
    tally = Tally()
    with counting(tally):
        out = run()
    return tally, out


def local_build(work: Path, store: str) -> dict[str, Tally]:
    """``trtfarm build model.onnx`` for three targets (two share a build), then its up-to-date rerun."""
    from trtfarm.pipeline import run_local

    fleet = work / "gpu_targets.yaml"
    fleet.write_text(THREE_TARGETS)
    onnx_path = export_at(work / "encoder", 0)
    first, rows = _counted(lambda: run_local(request_for(str(onnx_path), store, fleet), report="none"))
    assert [r.outcome.status for r in rows] == ["built"] * 3, rows
    again, rows = _counted(lambda: run_local(request_for(str(onnx_path), store, fleet), report="none"))
    assert [r.outcome.status for r in rows] == ["up-to-date"] * 3, rows
    reported, rows = _counted(lambda: run_local(request_for(str(onnx_path), f"{store}-reported", fleet),
                                                report="full"))
    assert [r.outcome.status for r in rows] == ["built"] * 3, rows
    return {"local build": first, "local build, up to date": again, "local build with its full report": reported}


def refit_run(work: Path, store: str) -> dict[str, Tally]:
    """A refit run of new weights: one released plan refitted (the GPU-only seam keeps the bytes), one rebuilt."""
    import trtfarm.toolchain.refitter as refitter
    from trtfarm.pipeline import run_local

    fleet = work / "refit_targets.yaml"
    fleet.write_text(REFIT_FLEET)
    run_local(request_for(str(export_at(work / "v1", 0)), store, fleet), report="none")
    v2 = export_at(work / "v2", 7)
    real = refitter.refit_plan
    refitter.refit_plan = lambda trt, data, onnx_path: data  # the refit needs a GPU: keep the parent's bytes
    try:
        tally, rows = _counted(lambda: run_local(request_for(str(v2), store, fleet, refit=True), report="none"))
    finally:
        refitter.refit_plan = real
    assert [r.outcome.status for r in rows] == ["built", "built"] and "refitted from" in rows[0].outcome.reason, rows
    return {"refit run": tally}


def farm_run(work: Path, store: str) -> dict[str, Tally]:
    """The farm: planning a registered model with builds to do, its jobs on a worker, and the up-to-date rerun.

    ``farm run``'s preview (``trtfarm.cli.farm``) and the flow's ``plan_run`` both count, as a farm run does both.
    """
    from trtfarm.building.run_job import run_job
    from trtfarm.cli.farm import _published_already
    from trtfarm.pipeline import plan_run
    from trtfarm.publishing.registry import register_export
    from trtfarm.run_setup import find_exports
    from trtfarm.scratch import scratch_dir

    fleet = work / "farm_targets.yaml"
    fleet.write_text(THREE_TARGETS)
    register_export(_open(store), export_at(work / "registered", 3).parent, "encoder")
    request = request_for("encoder", store, fleet)

    def plan():
        assert _published_already(request, *request.check_targets()) is None
        s = _open(store)
        return plan_run(request, s, find_exports(s, "encoder"), farm=True)

    planning, plans = _counted(plan)
    jobs = [j for p in plans for j in p.jobs]
    assert len(jobs) == 2, jobs

    def build():
        with scratch_dir("trtfarm-build-") as tmp:
            return [run_job(_open(store), j, tmp / j.job_id) for j in jobs]

    building, results = _counted(build)
    assert [o.status for r in results for o in r.outcomes] == ["built"] * 3, results
    from trtfarm.state.recorder import record_states

    record_states(_open(store), request.check_targets()[0], ["encoder"], by="test")  # as the flow does after a run

    def rerun():
        rows = _published_already(request, *request.check_targets())
        assert rows is not None and {r.outcome.status for r in rows} == {"up-to-date"}, rows
        return rows

    up_to_date, _ = _counted(rerun)
    return {"farm run: planning": planning, "farm run: jobs on workers": building,
            "farm run, up to date": up_to_date}


def scenarios(work: Path, store_uri: Callable[[str], str]) -> dict[str, Tally]:
    """Every scenario, each on its own store (``store_uri(name)``) under ``work``."""
    out: dict[str, Tally] = {}
    for name, run in (("local", local_build), ("refit", refit_run), ("farm", farm_run)):
        (work / name).mkdir(parents=True, exist_ok=True)
        out.update(run(work / name, store_uri(name)))
    return out
