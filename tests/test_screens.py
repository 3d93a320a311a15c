"""What a user reads at 80 columns: tables that keep whole words, help that shows its defaults, user text as text.

Each command runs in a pseudo-terminal of 80x24 (as in tmux), so Rich renders as it does for people. A word is
split when a whitespace-separated token of the 80-column screen is not a token of the same screen rendered 400
columns wide (where nothing wraps); lines longer than 80 are cut at 80 first, as the terminal would.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import shutil
import struct
import subprocess
import sys
import termios

import pytest
from typer.testing import CliRunner

from trtfarm.cli.main import app

from .conftest import REPO

TRTFARM = [sys.executable, "-m", "trtfarm"]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
BOX = re.compile(r"[\u2500-\u257f]")
PROGRESS = re.compile(r"^\s*(build|upload) \S+.*\d+:\d\d:\d\d\s*$"  # a bar, redrawn in place
                      r"|^[\u2800-\u28ff] ")  # a spinner's frame (rich's status: redrawn, then erased)


def on_terminal(args: list[str], cwd, columns: int, rows: int = 24) -> str:
    """Run trtfarm in a pseudo-terminal of ``columns`` x ``rows``; everything it showed, colours stripped."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {**os.environ, "COLUMNS": str(columns), "LINES": str(rows), "TERM": "xterm-256color",
           "PREFECT_HOME": str(cwd / ".prefect")}
    env.pop("TRTFARM_TARGETS", None)
    proc = subprocess.Popen(TRTFARM + args, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=300) in (0, 1), b"".join(chunks).decode(errors="replace")[-3000:]
    return ANSI.sub("", b"".join(chunks).decode()).replace("\r\n", "\n").replace("\r", "\n")


def screen_lines(text: str, columns: int) -> list[str]:
    """The lines as the terminal shows them: a line longer than the terminal continues on the next one."""
    lines = []
    for line in text.splitlines():
        lines += [line[i:i + columns] for i in range(0, max(len(line), 1), columns)]
    return lines


def tokens(lines: list[str]) -> list[str]:
    """Whitespace-separated tokens, box drawing removed and the punctuation that joins a note to its row."""
    return [t.strip("():;,·") for line in lines for t in BOX.sub(" ", line).split() if t.strip("():;,·")]


def split_words(narrow: str, wide: str) -> list[str]:
    """Tokens of the 80-column screen that are not whole tokens of the wide one (numbers and times vary)."""
    whole = set(tokens(screen_lines(wide, 400)))
    shown = [line for line in screen_lines(narrow, 80) if not line.startswith("(--wide adds")  # only when narrow
             and not PROGRESS.match(line)]  # progress frames (redrawn in place; each shows the step of the moment)
    return [t for t in tokens(shown)
            if t not in whole and not re.fullmatch(r"[\d.,:–-]+", t)]


@pytest.fixture
def farm_dir(tmp_path, example_dir):
    """A project folder with the repository's fleet (four TensorRT targets this machine cannot build)."""
    shutil.copy(REPO / "gpu_targets.yaml", tmp_path / "gpu_targets.yaml")
    shutil.copytree(example_dir, tmp_path / "encoder")
    return tmp_path


@pytest.mark.integration
def test_build_targets_plans_and_report_keep_every_word_whole_at_80_columns(farm_dir, tmp_path_factory):
    wide_dir = tmp_path_factory.mktemp("wide")
    shutil.copy(farm_dir / "gpu_targets.yaml", wide_dir / "gpu_targets.yaml")
    shutil.copytree(farm_dir / "encoder", wide_dir / "encoder")
    build = ["build", "encoder/model.onnx"]
    screens = {"build": (on_terminal(build, farm_dir, 80), on_terminal(build, wide_dir, 400))}
    for args in (["targets"], ["plans"], ["report", "encoder", "--out", "rep"]):
        screens[args[0]] = (on_terminal(args, farm_dir, 80), on_terminal(args, farm_dir, 400))
    for name, (narrow, wide) in screens.items():
        assert max(len(line) for line in narrow.splitlines()) <= 80, (name, narrow)
        assert split_words(narrow, wide) == [], (name, split_words(narrow, wide), narrow, wide)
    assert "rtx-4090-rtx1.7" in screens["build"][0] and "built" in screens["build"][0]
    assert "precision" in screens["plans"][0] and "fp32" in screens["plans"][0]
    assert "released" in screens["plans"][0] and "yes" in screens["plans"][0]
    assert "tensorrt==11.4.0.106" in screens["targets"][0]  # the reason a target is not servable, whole
    assert "`" not in "".join(n for n, _ in screens.values())  # backticks are rendered, never shown


def test_the_splitting_check_finds_a_word_broken_across_lines():
    wide = "│ toolchain │ tensorrt_rtx 1.7.1.116 │"
    assert split_words("│ toolcha │\n│ in      │", wide) == ["toolcha", "in"]
    assert split_words("x" * 75 + " tensorrt_rtx", "x" * 75 + " tensorrt_rtx") == ["tens", "orrt_rtx"]
    assert split_words("│ toolchain │", wide) == []


def test_help_shows_defaults_and_no_type_names():
    runner = CliRunner()
    commands = [[], ["farm"], ["pools"], ["build"], ["plans"], ["targets"], ["pull"], ["verify"], ["report"],
                ["init"], ["farm", "run"], ["farm", "deploy"], ["pools", "sync"], ["gc"], ["triton"], ["precision"],
                ["profiles", "derive"], ["models", "push"]]
    for command in commands:
        result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "80", "NO_COLOR": "1"})
        assert result.exit_code == 0, result.output
        options = result.output.split("Options", 1)[1]
        assert not re.search(r"<[a-z]+(\[[a-z]+\])?>", options), (command, options)
        assert "MarkupError" not in result.output
    build = runner.invoke(app, ["build", "--help"], env={"COLUMNS": "200"}).output
    assert "[default: $TRTFARM_STORE or ./trtfarm-store]" in build and "--calibration" in build
    assert "[default: farm.yaml's, else calib.npz beside the model]" in build
    pull = runner.invoke(app, ["pull", "--help"], env={"COLUMNS": "200"}).output
    assert "[default: ./MODEL.plan]" in pull  # written unescaped in its help: escaped for Rich by the CLI


def test_a_store_or_path_with_brackets_is_text_not_markup(tmp_path):
    result = subprocess.run([*TRTFARM, "plans", "--store", "s3://[bold]bucket[/bold]"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr and "MarkupError" not in result.stderr
    assert "[bold]bucket[/bold]" in result.stderr
    missing = subprocess.run([*TRTFARM, "build", "[red]x[/].onnx"], cwd=tmp_path, capture_output=True, text=True,
                             timeout=60)
    assert missing.returncode == 2 and "[red]x[/].onnx: no such ONNX file" in missing.stderr


@pytest.mark.parametrize("fleet, device", [("SIBLINGS", "NVIDIA H100 NVL:9.0:93.6"),
                                           ("WHOLE_AND_SLICE", "NVIDIA A100-SXM4-80GB:8.0:79.2:mig=1g.10gb")])
def test_targets_on_a_gpu_machine_keeps_every_word_whole_and_its_identity_beside_its_label(tmp_path, monkeypatch,
                                                                                          fleet, device):
    """The stand-in NVML's device (tests/fake_nvml): its identity line wraps beside ``this machine:``, never under
    it, and the table (device column, MIG classes, long target ids) breaks no word at 80 columns."""
    from . import test_gpu_identity

    (tmp_path / "gpu_targets.yaml").write_text(getattr(test_gpu_identity, fleet))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO / "tests/fake_nvml"), str(REPO)]))
    monkeypatch.setenv("FAKE_NVML_GPUS", device)
    narrow, wide = on_terminal(["targets"], tmp_path, 80), on_terminal(["targets"], tmp_path, 400)
    assert max(len(line) for line in narrow.splitlines()) <= 80, narrow
    assert split_words(narrow, wide) == [], (split_words(narrow, wide), narrow)
    first, second = narrow.splitlines()[:2]
    assert first.startswith("this machine: NVIDIA ") and second.startswith(" " * len("this machine: ")), narrow
    assert second.strip() and "ECC on" in first + second


def shown_lines(screen: str) -> list[str]:
    """The screen's lines without the progress frames (redrawn in place) and the blank ones."""
    return [line.rstrip() for line in screen_lines(screen, 80) if line.strip() and not PROGRESS.match(line)]


@pytest.mark.integration
def test_a_build_of_the_readme_fleet_is_at_most_20_lines_at_80_columns(farm_dir):
    """2 built and 4 skipped targets: the table, a one-line caption, one line for the 4 skipped (by reason), the two
    releases in one line each, the summary: 19 lines (26 before). ``--verbose`` names each skipped target."""
    lines = shown_lines(on_terminal(["build", "encoder/model.onnx"], farm_dir, 80))
    assert len(lines) <= 20, "\n".join(lines)
    assert [line for line in lines if "skipped:" in line] == ["  4 skipped: tensorrt is not installed here"], lines
    released = [line for line in lines if line.startswith("released: ")]
    assert len(released) == 2 and all(line.endswith(" -> " + line.split()[-1]) for line in released), lines
    assert all(line.split()[-1] in " ".join(lines) for line in released)
    [caption] = [line for line in lines if "checks:" in line]
    assert caption.strip().endswith("(… = pending on the target GPU)"), lines
    verbose = shown_lines(on_terminal(["build", "encoder/model.onnx", "--verbose"], farm_dir, 80))
    for target in ("h100-trt11.4", "h100-trt10.16", "l4-trt11.4", "l4-trt10.16"):
        assert any(target in line for line in verbose), (target, verbose)
    for name, screen in (("targets", ["targets"]), ("status", ["status"]), ("whatif --fleet", ["whatif", "--fleet",
                                                                                              "gpu_targets.yaml"])):
        shown = shown_lines(on_terminal(screen, farm_dir, 80))
        assert max(len(line) for line in shown) <= 80 and len(shown) <= 24, (name, len(shown), shown)
        if name == "status":  # one model built: counted in the singular
            assert "1 model x 6 targets" in " ".join(shown) and "1 models" not in " ".join(shown), shown


@pytest.mark.integration
def test_the_day_to_day_screens_fit_80_columns_in_the_lines_stated(farm_dir, monkeypatch):
    """After a build of the README's fleet, at 80 columns: ``targets`` 24 lines, ``status`` 23 (the folded view:
    each skipped target's reason in full), ``whatif --fleet`` of the same fleet 7, ``sign`` 5 (a line per plan and
    release signed, then the count). Each fits 80 columns, words whole. The counts are what they are today: a
    screen that grows fails here."""
    from .test_signing import key_pair

    subprocess.run(TRTFARM + ["build", "encoder/model.onnx"], cwd=farm_dir, capture_output=True, check=True,
                   timeout=300, env={**os.environ, "TRTFARM_SIGNING_KEY": ""})
    monkeypatch.setenv("TRTFARM_SIGNING_KEY", str(key_pair(farm_dir, "screens")[0]))
    stated = {("targets",): 24, ("status",): 23, ("whatif", "--fleet", "gpu_targets.yaml"): 7, ("sign",): 5}
    for args, most in stated.items():
        screen = on_terminal(list(args), farm_dir, 80)
        lines = shown_lines(screen)
        assert max(map(len, lines)) <= 80 and len(lines) <= most, (args, len(lines), screen)
        if args[0] not in ("status", "sign"):  # ages move between two renderings; sign's second run signs nothing
            wide = on_terminal(list(args), farm_dir, 400)
            assert split_words(screen, wide) == [], (args, split_words(screen, wide))
