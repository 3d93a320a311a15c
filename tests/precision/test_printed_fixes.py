"""A fix the precision step prints works: each failure that prints one is provoked, its fix read as the user reads
it, and each command in it run through the real command line to a verdict.

A fix is read from the text output (2,000 columns, so nothing wraps), after ``Fix:``; its alternatives are split at
"or". An alternative is a whole command (``trtfarm precision ...``: run as printed), options (``--mode fp16``,
``--max-memory 2GiB``: the provoking command with them set), or words (``use fp32``: not a command). An option whose
value is a placeholder (``--keep-fp32 REGEX``) is no command a user can paste. Each command must end in a verdict:
exit 0, 1 or 4 with a verdict line, never the failure it fixes again, never a traceback.

``test_every_site_that_prints_a_pin_fix_has_a_case`` reads the precision step's source for the functions that print a
fix naming ``--keep-fp32``, ``--keep-fp32-op`` or ``--auto-pin``: a new one fails it until it has a case here.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from ..conftest import write_overflow_model
from .test_way_forward import outlier_mlp  # the MLP whose outlier channel int8 loses

REPO = Path(__file__).resolve().parents[2]
VERDICT = re.compile(r"gate passed|accuracy gate failed|gate not judged|--auto-pin: no FP32 node set passes|"
                     r"--auto-pin: \w+ is not for this model")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]*$")  # REGEX, OP, MODEL


@dataclass(frozen=True)
class Case:
    """A failure that prints a fix: the model it is provoked on, the options that provoke it, where it is printed."""

    model: str  # "overflow" (fp16 overflows without pins) or "mlp" (int8 loses its outlier channel)
    args: tuple[str, ...]
    site: str  # module.function that prints the fix
    exit_code: int  # the provoking command's


CASES = {
    # AutoCast's data_max keeps the overflowing layers in FP32 by itself: without it, fp16 overflows in fc2
    "fp16 gate fails": Case("overflow", ("--mode", "fp16", "--data-max", "inf"), "step.PrecisionResult.summary", 1),
    "int8 gate fails": Case("mlp", ("--mode", "int8"), "step.PrecisionResult.summary", 1),
    "int8 auto-pin finds no set": Case("mlp", ("--mode", "int8", "--auto-pin", "--max-error", "0"),
                                       "autopin._no_passing_set", 1),
    "memory budget too small": Case("mlp", ("--mode", "fp16", "--max-memory", "1MiB"), "memory.plan_memory", 2),
}
# the fp16 search that finds no set prints only words and placeholders (``test_the_fp16_auto_pin_fix_...``)
FP16_NO_SET = Case("overflow", ("--mode", "fp16", "--auto-pin", "--max-error", "0"), "autopin._no_passing_set", 1)
# the sites that print a pin fix and that no command of the step can provoke today (a reason each)
UNPROVOKED = {"runs.infer": "onnxruntime cannot run a model the conversion wrote: the one ModelOpt 0.47 output known "
                            "to do so (int8 of silero-vad's If branches) is loaded by the adapter first and its main "
                            "graph converted alone (controlflow.refused_by_onnxruntime)"}


def precision(cwd: Path, args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "2000", "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "trtfarm", "precision", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def provoke(tmp_path: Path, case: Case) -> tuple[list[str], subprocess.CompletedProcess]:
    if case.model == "overflow":
        model, data = write_overflow_model(tmp_path)
        given = ["--heldout", str(data)]
    else:
        model, data = outlier_mlp(tmp_path)
        given = ["--calibration", str(data)] if "int8" in case.args else []
    args = [str(model), *given, *case.args]
    return args, precision(tmp_path, args)


def fix_text(done: subprocess.CompletedProcess) -> tuple[str, str]:
    """The failure (what comes before ``Fix:``) and its fix, from the line that prints it."""
    line = next(line for line in (done.stdout + done.stderr).splitlines() if "Fix:" in line)
    failure, _, fix = line.partition("Fix:")
    return failure.strip(), fix.split(". Note:")[0].split(". Warning:")[0].strip().rstrip(".")


def alternatives(fix: str) -> list[str]:
    """``a, or b`` / ``a or b``: each alternative the fix offers."""
    return [a.strip(" ,") for a in re.split(r",? or ", fix) if a.strip(" ,")]


def commands(fix: str, provoking: list[str]) -> tuple[list[list[str]], list[str]]:
    """The commands the fix prints (argument lists after ``trtfarm precision``), and its options with placeholders.

    A command is printed whole (``trtfarm precision MODEL ...``; the terminal shows it without its backticks), or as
    options for the command that failed.
    """
    found, placeholders = [], []
    for alternative in alternatives(fix):
        if "trtfarm precision " in alternative:
            found.append(shlex.split(alternative.split("trtfarm precision ", 1)[1].strip("`")))
            continue
        options = re.findall(r"(--[a-z0-9-]+)(?: ([^\s,()]+))?", alternative)
        if not options:
            continue  # words: "use fp32", "export the model for smaller inputs"
        if any(PLACEHOLDER.match(value) for _, value in options):
            placeholders.append(alternative)
            continue
        args = list(provoking)
        for option, value in options:
            if option in args:
                at = args.index(option)
                del args[at:at + (2 if value else 1)]
            args += [option, value] if value else [option]
        found.append(args)
    return found, placeholders


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_printed_fix_runs_to_a_verdict(tmp_path, name):
    case = CASES[name]
    provoking, done = provoke(tmp_path, case)
    assert done.returncode == case.exit_code, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    assert "Traceback" not in done.stdout + done.stderr
    failure, fix = fix_text(done)
    runnable, placeholders = commands(fix, provoking)
    assert runnable and placeholders == [], f"the fix is not all commands: {fix}"
    for args in runnable:
        fixed = precision(tmp_path, args)
        said = fixed.stdout + fixed.stderr
        assert "Traceback" not in said, said[-3000:]
        assert fixed.returncode in (0, 1, 4) and VERDICT.search(said), (args, fixed.returncode, said[-2000:])
        assert failure not in said, (args, failure)  # never the failure it fixes again


def test_the_fp16_auto_pin_fix_that_finds_no_set_prints_commands_that_run_to_a_verdict(tmp_path):
    """Its fix keeps the pinned nodes' op types in FP32 (options of the command that failed), or uses fp32."""
    provoking, done = provoke(tmp_path, FP16_NO_SET)
    assert done.returncode == FP16_NO_SET.exit_code, done.stderr[-2000:]
    failure, fix = fix_text(done)
    runnable, placeholders = commands(fix, provoking)
    assert len(runnable) == 2 and placeholders == [], fix
    for args in runnable:
        fixed = precision(tmp_path, args)
        said = fixed.stdout + fixed.stderr
        assert "Traceback" not in said and fixed.returncode in (0, 1, 4) and VERDICT.search(said), said[-2000:]
        assert failure not in said, (args, failure)


def _prints_a_pin_fix(source: str, function: ast.AST) -> bool:
    text = ast.get_source_segment(source, function) or ""
    return "Fix:" in text and any(option in text for option in ("--keep-fp32", "--auto-pin"))


def pin_fix_sites() -> set[str]:
    """``module.function`` (``module.Class.method``) of every function in the precision step that prints a fix
    naming ``--keep-fp32``/``--keep-fp32-op``/``--auto-pin``."""
    files = sorted((REPO / "trtfarm" / "precision").glob("*.py")) + [REPO / "trtfarm" / "cli" / "quality.py"]
    sites = set()
    for path in files:
        source = path.read_text()
        tree = ast.parse(source)
        for owner in [tree, *(n for n in tree.body if isinstance(n, ast.ClassDef))]:
            prefix = path.stem if owner is tree else f"{path.stem}.{owner.name}"
            for node in owner.body:
                if isinstance(node, ast.FunctionDef) and _prints_a_pin_fix(source, node):
                    sites.add(f"{prefix}.{node.name}")
    return sites


def test_every_site_that_prints_a_pin_fix_has_a_case():
    covered = {c.site for c in CASES.values()} | set(UNPROVOKED)
    assert pin_fix_sites() - covered == set()
    assert {c.site for c in CASES.values() if "--max-memory" not in c.args} | set(UNPROVOKED) <= pin_fix_sites()
