"""Mutation score of the modules that refuse: how many of mutmut's mutants each module's own fast tests kill.

    .venv/bin/python bench/mutation_score.py                      # every module that refuses (about 40 min)
    .venv/bin/python bench/mutation_score.py trtfarm/signing/accepted.py
    .venv/bin/python bench/mutation_score.py trtfarm/signing/accepted.py --per-function 1   # smallest scale

Each module runs in a copy of the checkout (tracked files) with mutmut 3 told to mutate that module alone and to
run only its tests (``SUITES``). mutmut runs, for each mutant, the tests that call the mutated function, so the
suites are fast in-process tests (tests that go through a subprocess would not count). Prints one row per module:
mutants, killed (or timed out), survived, untested (no test of the set calls the function), and the score (killed
over all); writes each survivor's diff to ``mutation-survivors.txt`` for the triage docs/signing.md records.
mutmut is a test dependency (``pip install -e '.[test]'``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MUTMUT = Path(sys.executable).with_name("mutmut")
CHAIN = ["tests/test_chain_fast.py", "tests/test_chain_loader.py", "tests/test_chain_pull.py",
         "tests/test_chain_publish.py", "tests/test_release_pointer.py"]  # the chain's fast tests (tests/chain_farm.py)
STATE = ["tests/test_state_fast.py"]  # status, its state records (tests/fleet_store.py, tests/signed_farm.py)
GC = ["tests/test_gc.py"]  # gc on generated store states (tests/chain_farm.py), held to pull and status
LEDGER = ["tests/releases/test_ledger_model.py", "tests/releases/test_ledger_cases.py"]  # the ledger and its model
SUITES = {
    "trtfarm/releases/rules.py": LEDGER,
    "trtfarm/releases/ledger.py": LEDGER,
    "trtfarm/releases/moves.py": LEDGER,
    "trtfarm/releases/receipts.py": LEDGER,
    "trtfarm/releases/gates.py": LEDGER,
    "trtfarm/releases/channels.py": LEDGER,
    "trtfarm/signing/bundle.py": ["tests/test_refusals.py"],
    "trtfarm/signing/verdict.py": ["tests/test_refusals.py"],
    "trtfarm/signing/release_claim.py": ["tests/test_refusals.py"],
    "trtfarm/signing/accepted.py": ["tests/test_refusals.py"],
    "trtfarm/triggers/webhook.py": ["tests/test_webhook.py"],
    "trtfarm/publishing/release_check.py": CHAIN,
    "trtfarm/publishing/release.py": CHAIN,
    "trtfarm/publishing/sign_store.py": CHAIN,
    "trtfarm/publishing/publish.py": CHAIN,
    "trtfarm/runtime/pull.py": CHAIN,
    "trtfarm/runtime/loader.py": CHAIN,
    "trtfarm/runtime/plan_files.py": CHAIN,
    # the state model and the views (issue 46): in-process stores built once per module, copied per test
    "trtfarm/state/status.py": STATE,
    "trtfarm/state/cells.py": STATE,
    "trtfarm/state/served.py": [*STATE, *GC],  # what hosts say of a release, and what each pointer references
    "trtfarm/state/views.py": [*STATE, *GC],
    "trtfarm/publishing/gc.py": GC,
    "trtfarm/state/record.py": STATE,
    "trtfarm/state/whatif.py": ["tests/test_whatif_actions.py"],
    "trtfarm/serving/versions.py": ["tests/test_versions_fast.py"],
    "flows/dispatch.py": ["tests/flows/test_heartbeats.py"],
}
COLLECT = """
import json
from mutmut.__main__ import SourceFileMutationData, status_by_exit_code
from mutmut.mutation.diff_apply import get_diff_for_mutant
from mutmut.utils.file_utils import walk_mutatable_files
out = {}
for path in walk_mutatable_files():
    m = SourceFileMutationData(path=path)
    m.load()
    for name, code in m.exit_code_by_key.items():
        status = status_by_exit_code[code]
        out[name] = [status, get_diff_for_mutant(name, path=m.path) if status == "survived" else ""]
print(json.dumps(out))
"""  # every mutant's status, and each survivor's diff, read in one process (``mutmut show`` is one per call)


def _copy(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, (f.decode() for f in files)):
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, dest / name)


def score(module: str, tests: list[str], survivors: list[str], per_function: int | None = None) -> dict:
    """Run mutmut on ``module`` with ``tests``; the counts by status. ``per_function``: only the first mutants of
    each function (mutmut numbers each function's mutants from 1)."""
    with tempfile.TemporaryDirectory(prefix="trtfarm-mutation-") as tmp:
        work = Path(tmp)
        _copy(work)
        top = module.split("/")[0]  # trtfarm/ or flows/
        others = [str(p.relative_to(work)) for p in sorted((work / top).rglob("*.py"))
                  if str(p.relative_to(work)) != module]
        (work / "setup.cfg").write_text(
            f"[mutmut]\nsource_paths={top}/\nalso_copy=examples\n" + ("    trtfarm\n" if top != "trtfarm" else "") +
            "pytest_add_cli_args=\n    -n\n    0\n" +  # in mutmut's own process: the suite's xdist workers off
            "pytest_add_cli_args_test_selection=\n" + "".join(f"    {t}\n" for t in tests) +
            "do_not_mutate=\n" + "".join(f"    {o}\n" for o in others))
        started = time.perf_counter()
        only = [f"*__mutmut_{i}" for i in range(1, per_function + 1)] if per_function else []
        run = subprocess.run([str(MUTMUT), "run", *only], cwd=work, capture_output=True, text=True)
        listed = subprocess.run([sys.executable, "-c", COLLECT], cwd=work, capture_output=True, text=True)
        counts: dict[str, int] = {}
        for name, (status, diff) in (json.loads(listed.stdout) if listed.returncode == 0 else {}).items():
            if status == "not checked":
                continue  # a mutant left out (--per-function): not run, not counted
            counts[status] = counts.get(status, 0) + 1
            if status == "survived":
                survivors.append(f"## {name}\n" + "\n".join(
                    d for d in diff.splitlines() if d.startswith(("-", "+")) and not d.startswith(("---", "+++"))))
        counts["seconds"] = round(time.perf_counter() - started)
        if not counts.get("killed") and run.returncode:
            print(f"{module}: mutmut failed: {run.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="modules (paths) to mutate [default: the fast set]")
    parser.add_argument("--survivors", type=Path, default=Path("mutation-survivors.txt"))
    parser.add_argument("--per-function", type=int, metavar="N",
                        help="run only the first N mutants of each function (the smallest scale: N=1)")
    args = parser.parse_args()
    modules = args.modules or list(SUITES)
    survivors: list[str] = []
    print(f"{'module':30} {'mutants':>7} {'killed':>6} {'surv.':>5} {'untested':>8} {'score':>6} {'s':>5}")
    for module in modules:
        c = score(module, SUITES.get(module, ["tests/test_refusals.py"]), survivors, args.per_function)
        total = sum(v for k, v in c.items() if k != "seconds")
        killed = c.get("killed", 0) + c.get("timeout", 0)
        print(f"{module.removeprefix('trtfarm/'):30} {total:>7} {killed:>6} {c.get('survived', 0):>5} "
              f"{c.get('no tests', 0):>8} {100 * killed / max(total, 1):>5.1f}% {c['seconds']:>5}", flush=True)
        args.survivors.write_text("\n\n".join(survivors) + "\n")  # after each module: a long run shows its way
    print(f"survivors' diffs: {args.survivors}")


if __name__ == "__main__":
    main()
