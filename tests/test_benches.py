"""Every bench/*.py runs at its smallest scale and prints its figures, so no bench can rot unseen.

The benches are found in the folder (private ``_*.py`` helpers aside); each needs a row of ``SMALLEST``: the
arguments of its smallest scale and a check of what it printed (its ``--json`` parsed where it has one). A new bench
without a row fails ``test_every_bench_has_a_smallest_scale``. Each runs as its own process with this Python,
as a user runs it, from the repository root. Three modules run them side by side: the farm benches
(``ON_SHARED_SERVER``) on one Postgres and Prefect server (tests/test_benches_farm.py), the benches that install
venvs or run ModelOpt (``INSTALLS``, tests/test_benches_installs.py), and the rest here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from .conftest import REPO

pytestmark = pytest.mark.integration

BENCH = REPO / "bench"
TIMES: dict[str, float] = {}


def _fleet_views(out: str) -> None:
    doc = json.loads(out)
    rows = {(r["view"], r["cache"], r["backend"]): r for r in doc["rows"]}
    for backend in ("file", "s3"):
        cold, warm = rows[("status", "cold", backend)], rows[("status", "warm", backend)]
        assert cold["requests"] > warm["requests"] >= 1 and cold["gets"] >= 3 * 20, (cold, warm)
        assert cold["cache_files"] >= 1, cold  # the cold run's cache went to the fresh folder the bench gave it
        assert cold["result"] == warm["result"] and sum(cold["result"].values()) == 3 * 20, (cold, warm)
        whatif = rows[("plan: TensorRT 11.5", "cold", backend)]
        assert whatif["cpu_s"] > 0 and whatif["wall_s"] > 0 and whatif["requests"] > 0, whatif
        again = rows[("plan: TensorRT 11.5", "cold, recorded", backend)]  # each model's state record, not its spec
        assert again["result"] == whatif["result"] and again["requests"] < whatif["requests"], (again, whatif)
    bare, indexed = rows[("status", "cold, recorded, no index", "s3")], rows[("status", "cold, recorded", "s3")]
    assert bare["result"] == indexed["result"] and bare["gets"] >= 3, (bare, indexed)  # each record read again


def _store_requests(out: str) -> None:
    doc = json.loads(out)
    assert doc["local build"]["requests"] > 0 and doc["farm run, up to date"]["requests"] > 0, doc


def _nightly(out: str) -> None:
    doc = json.loads(out[out.index("{"):])
    assert doc["models"] == 1 and doc["flow_s"] > 0 and doc["core_s"] > 0, doc


def _derive(out: str) -> None:
    doc = json.loads(out)
    assert [r["records"] for r in doc["sizes"]] == [1000] and doc["sizes"][0]["profiles"] >= 1, doc


def _precision_gate(out: str) -> None:
    doc = json.loads(out)
    assert [r["mode"] for r in doc["results"]] == ["fp16"] and doc["results"][0]["convert_and_gate_s"] > 0, doc


def _conformance(out: str) -> None:
    doc = json.loads(out)
    assert doc["families"]["onnx-simple"]["models"] == 1 and doc["families"]["onnx-simple"]["wrong"] == 0, doc


def _conformance_matrix(out: str) -> None:
    doc = json.loads(out)
    cells = doc["rows"]["ppocr-cls"]["cells"]
    assert list(cells) == ["precheck"] and doc["mismatches"] == 0, doc


def _local_vs_direct(out: str) -> None:
    doc = json.loads(out)
    assert doc["repeat"] == 1 and doc["direct_s"] > 0 and doc["trtfarm_s"] > 0, doc


def _tensorrt_api(out: str) -> None:
    doc = json.loads(out)
    assert doc["versions"] and all(v["checked"] > 0 for v in doc["versions"].values()), doc


def _dispatch(out: str) -> None:
    doc = json.loads(out)
    path = doc["paths"]["task-worker"]
    assert path["n"] == 1 and path["states"] == ["Completed"] and path["e2e_s"] > 0, doc


def _export_to_release(out: str) -> None:
    doc = json.loads(out)
    landing, summary = doc["landings"][0], doc["summary"]
    assert doc["n"] == 1 and summary["states"] == ["COMPLETED"] and landing["build_s"] > 0, doc
    assert None not in summary["marks"].values(), summary  # every phase was read back from the farm
    assert 0 < summary["marks"]["accepted"] < summary["marks"]["released"] < summary["marks"]["parent_end"], summary


def _install(out: str) -> None:
    rows = json.loads(out)
    assert [r["extra"] for r in rows] == ["base"] and rows[0]["mib"] > 0 and rows[0]["install_s"] > 0, rows


def _fanout(out: str) -> None:
    doc = json.loads(out)
    assert doc["state"] == "COMPLETED" and doc["targets_built"] == doc["targets"] == 4 and doc["builds"] == 2, doc


def _soak(out: str) -> None:
    doc = json.loads(out)
    assert doc["faults"] == "none" and doc["run_state"] == "COMPLETED" and doc["completed_jobs"] == 4, doc
    assert doc["lost"] == doc["stuck"] == doc["crashed"] == 0 and doc["targets_outcomes"]["built"] == 4, doc
    store = doc["store"]  # checked object by object: each plan's sha256 against its manifest, each pointer's manifest
    assert store["manifests"] == store["pointers"] == 4 and store["plans_bad"] == store["pointers_bad"] == 0, doc


def _mutation(out: str) -> None:
    row = next(line.split() for line in out.splitlines() if line.startswith("signing/accepted.py"))
    mutants, killed, survived, untested = map(int, row[1:5])  # one mutant of each function, each run by mutmut
    assert mutants >= 5 and killed + survived + untested <= mutants and killed >= 1, out


def _table(*words: str) -> Callable[[str], None]:
    def check(out: str) -> None:
        missing = [w for w in words if w not in out]
        assert not missing, f"{missing} not printed:\n{out[-2000:]}"
    return check


def _s3_listing_floor(out: str) -> None:
    doc = json.loads(out)
    assert doc["objects"] == 3 * 64 + 3 and [r["keys"] for r in doc["rows"]] == [doc["objects"]] * 3 + [0], doc
    assert all(r["wall_s"] > 0 for r in doc["rows"]) and doc["rows"][1]["pages"] >= 7, doc


# bench -> (the arguments of its smallest scale, a check of its standard output)
def _extras_agree(out: str) -> None:
    doc = json.loads(out)  # [triton] into [rtx]'s venv: protobuf and ml_dtypes were downgraded before the base pins
    assert doc["extras"] == ["rtx", "triton"] and doc["packages_together"] > 30 and doc["differences"] == [], doc


SMALLEST: dict[str, tuple[list[str], Callable[[str], None]]] = {
    "fleet_views.py": (["--smoke", "--json"], _fleet_views),
    "store_requests.py": (["--json"], _store_requests),
    "s3_listing_floor.py": (["--smoke", "--json"], _s3_listing_floor),
    "nightly_up_to_date.py": (["--models", "1", "--json"], _nightly),
    "derive_10m.py": (["--records", "1000", "--json"], _derive),
    "precision_gate.py": (["--width", "4", "--sizes", "0", "--modes", "fp16", "--json"], _precision_gate),
    "conformance.py": (["--families", "onnx-simple", "--names", "single_relu_model", "--json"], _conformance),
    "conformance_matrix.py": (["--rows", "ppocr-cls", "--steps", "precheck", "--json"], _conformance_matrix),
    "local_vs_direct.py": (["--repeat", "1", "--model", "conv", "--json"], _local_vs_direct),
    "store_contention_and_pull.py": (["--writers", "2", "--merges", "2", "--plan-gib", "0.001",
                                      "--s3-plan-gib", "0.001"], _table("file://", "s3 (moto)", "pull")),
    "tensorrt_api.py": (["--json"], _tensorrt_api),
    "dispatch_latency.py": (["--n", "1", "--sleep", "0", "--modes", "task-worker", "--no-crash", "--json"],
                            _dispatch),
    "export_to_release.py": (["--n", "1", "--json"], _export_to_release),
    "install_sizes.py": (["--extras", "base", "--no-deps", "--json"], _install),
    "extras_agree.py": (["--extras", "rtx,triton", "--json"], _extras_agree),
    "precision_speed.py": (["--smoke"], _table("| encoder |", "passed / passed", "over the target")),
    "farm_fanout.py": (["--models", "1", "--json"], _fanout),
    "farm_soak.py": (["--models", "1", "--workers-per-pool", "1", "--faults", "none", "--json"], _soak),
    "mutation_score.py": (["trtfarm/signing/accepted.py", "--per-function", "1", "--survivors", "/dev/null"],
                          _mutation),
}
ON_SHARED_SERVER = {"dispatch_latency.py", "export_to_release.py", "farm_fanout.py", "farm_soak.py",
                    "nightly_up_to_date.py"}
# The benches run by three modules, side by side on the suite's workers: the farm benches on their shared server
# (tests/test_benches_farm.py), those that install venvs or run ModelOpt (tests/test_benches_installs.py), the rest here
INSTALLS = {"install_sizes.py", "extras_agree.py", "precision_speed.py", "mutation_score.py"}
HERE = sorted(set(SMALLEST) - ON_SHARED_SERVER - INSTALLS)


def test_every_bench_has_a_smallest_scale():
    """A bench added to bench/ without a row of SMALLEST fails here (and a row whose bench is gone)."""
    benches = sorted(p.name for p in BENCH.glob("*.py") if not p.name.startswith("_"))
    assert benches and sorted(SMALLEST) == benches


@pytest.mark.parametrize("bench", HERE)
def test_bench_runs_at_its_smallest_scale(bench):
    """The bench exits 0 at its smallest scale and prints its figures."""
    run_bench(bench)


def run_bench(bench: str, *extra: str) -> None:
    """``bench`` at its smallest scale (and ``extra`` arguments): it exits 0 and prints what its check asks."""
    args, check = SMALLEST[bench]
    args = [*args, *extra]
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "80"}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, str(BENCH / bench), *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    TIMES[bench] = time.perf_counter() - start
    print(f"{bench}: {TIMES[bench]:.1f} s")
    assert done.returncode == 0, f"{bench} exited {done.returncode}:\n{done.stderr[-3000:]}"
    check(done.stdout)
