"""Run the docs' blocks as a user would: from the wheel, in a clone outside the repository, in venvs that hold
exactly what the text installs.

A block's install set is what its own ``pip install`` lines name (``'.[farm]'``, ``"$(ls ~/dist/trtfarm-*.whl)[rtx]"``)
and, for a block that does not make its own venv, what the quick start installed into ``.venv`` before it (the README
says each section follows the quick start). One venv per distinct set is made per test session, from the wheel built
from this checkout; a block's ``pip install -e '.[X]'`` is read as the wheel with ``[X]`` (already there: pip says so).
The wheel and the venvs are shared by the session's pytest-xdist workers (pytest-xdist's recipe: a folder beside the
workers' own and a file lock), so each is made once while the modules of tests/docs_blocks/ run side by side.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from .docblocks import COMMANDS, REPO, Block, all_blocks, blocks
from .farm_server import free_port
from .models import write_small_cnn

RUNNERS = "tests/docs_blocks/"  # the modules that run the docs' blocks, a clone each
DOCS_DB, DOCS_PORT = "/var/tmp/trtfarm-db", "4200"  # what the docs tell users to use: never touched here
RUNS = 2
PIP_EXTRAS = re.compile(r"""pip install (?:-q )?(?:-e )?['"]?(?:\.|\$\(ls [^)]*\))\[(?P<extras>[a-z,]+)\]['"]?""")
EDITABLE = re.compile(r"""pip install (?P<q>-q )?-e '\.\[(?P<extras>[a-z,]+)\]'""")


def times(block: Block) -> int:
    """How many times in a row a block runs: RUNS; once when its marker says ``once: WHY`` (a later block of the same
    module runs its steps again in the same clone, so that block's runs are this one's rerun)."""
    return 1 if block.marker and ", once: " in block.marker else RUNS


def runner(block: Block) -> str | None:
    """The path a ``<!-- run by PATH ... -->`` marker names."""
    return block.marker.split()[2].rstrip(",") if block.marker and block.marker.startswith("run by") else None


def run_by(prefix: str) -> list[Block]:
    """The command blocks marked as run by the module PREFIX (or by any module under the folder PREFIX), in document
    order: README.md, then docs/*.md by name. docs/farm.md's copy of the README's farm block runs as the README's."""
    return [b for b in all_blocks() if b.lang in COMMANDS and (runner(b) or "").startswith(prefix)
            and "the README's farm block" not in b.marker]


def quick_start() -> Block:
    """The README's first block: every other section follows it."""
    return blocks(REPO / "README.md")[0]


def own_venv(block: Block) -> bool:
    """The block makes the venv it runs in (the quick start, the wheel block)."""
    return "python3 -m venv" in block.text


def installs(block: Block) -> frozenset[str]:
    """The extras the block's own pip lines install."""
    return frozenset(x for m in PIP_EXTRAS.finditer(block.text) for x in m.group("extras").split(","))


def install_set(block: Block, quick_start: Block) -> frozenset[str]:
    """What the venv a block runs in holds: its own installs, on top of the quick start's unless it makes its own."""
    return installs(block) if own_venv(block) else installs(quick_start) | installs(block)


def from_wheel(text: str, wheel: Path) -> str:
    """``pip install -e '.[X]'`` read as the wheel built from this checkout, with ``[X]``."""
    return EDITABLE.sub(lambda m: f"pip install {m.group('q') or ''}'{wheel}[{m.group('extras')}]'", text)


def build_wheel(out: Path) -> Path:
    """The wheel of this checkout's tracked files, built from a copy of them: setuptools writes build/ and
    *.egg-info beside the sources, so two builds in one tree (the suite's workers) would clash."""
    source = out / "source"
    for name in subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                               check=True).stdout.split():
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-q", "-w", str(out)],
                   check=True, capture_output=True)
    return next(out.glob("trtfarm-*.whl"))


def shared_folder(tmp_path_factory) -> Path:
    """A folder that every pytest-xdist worker of this session shares (the parent of the workers' own base folders);
    without xdist, the session's base folder (its parent is shared by every session)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def session_wheel(tmp_path_factory) -> Path:
    """The wheel of this checkout, built once per session: the first worker to ask builds it, the others wait."""
    out = shared_folder(tmp_path_factory) / "wheel"
    with FileLock(f"{out}.lock"):
        return next(out.glob("trtfarm-*.whl"), None) or build_wheel(out)


class Venvs:
    """One venv per install set, made once per session from the wheel, outside the repository, shared by the
    session's workers: the first to ask for a set makes its venv under a lock, the others wait for it."""

    def __init__(self, root: Path, wheel: Path) -> None:
        self.root, self.wheel, self.made = root, wheel, {}

    def get(self, extras: frozenset[str]) -> Path:
        if extras not in self.made:
            venv = self.root / ("-".join(sorted(extras)) or "base")
            with FileLock(f"{venv}.lock"):
                if not Path(f"{venv}.made").exists():
                    shutil.rmtree(venv, ignore_errors=True)  # half made by a worker that failed
                    self._make(venv, extras)
                    Path(f"{venv}.made").touch()
            self.made[extras] = venv
        return self.made[extras]

    def _make(self, venv: Path, extras: frozenset[str]) -> None:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        spec = f"{self.wheel}[{','.join(sorted(extras))}]" if extras else str(self.wheel)
        # --no-compile: pip would byte-compile every module of torch and TensorRT-RTX (half the install's time); the
        # blocks compile the few they import, atomically, whichever worker imports first
        done = subprocess.run([str(venv / "bin/pip"), "install", "-q", "--no-compile", spec], capture_output=True,
                              text=True, timeout=1800)
        assert done.returncode == 0, f"pip install {spec}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"


def clone(dest: Path) -> Path:
    """The repository's tracked files in a git repository of their own, as ``git clone`` leaves them."""
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        if (REPO / name).is_file() or (REPO / name).is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name, follow_symlinks=False)
    git = ["git", "-c", "user.name=docs", "-c", "user.email=docs@localhost"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "clone"]):
        subprocess.run([*git, *args], cwd=dest, check=True, capture_output=True)
    return dest


def user_env(home: Path) -> dict[str, str]:
    """A user's environment: no trtfarm or Prefect settings of ours, a home of its own, pip's cache kept warm."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRTFARM_", "PREFECT_", "VIRTUAL_ENV"))}
    env.update(HOME=str(home), PREFECT_HOME=str(home / ".prefect"), COLUMNS="80",
               PIP_CACHE_DIR=os.environ.get("PIP_CACHE_DIR", str(Path.home() / ".cache/pip")))
    return env


def link_venv(folder: Path, venv: Path, changes: Path | None = None) -> None:
    """Make ``folder/.venv`` the given venv: a bind mount, so a block's own ``python3 -m venv .venv`` finds a folder
    (a symlink it refuses) and its scripts keep the venv's own paths. With ``changes``, an overlay of the venv whose
    writes land in that folder, for a block that remakes the venv (the quick start): ``python3 -m venv .venv`` over
    an existing venv rewrites its pyvenv.cfg, which a Python starting in the shared venv at that moment (another
    worker's block) would read empty; on the overlay the shared venv stays as made, so no block waits for another."""
    link = folder / ".venv"
    unlink_venv(folder)
    link.mkdir(exist_ok=True)
    if changes is None:
        subprocess.run(["mount", "--bind", str(venv), str(link)], check=True)
        return
    (changes / "upper").mkdir(parents=True, exist_ok=True)
    (changes / "work").mkdir(exist_ok=True)
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                    f"lowerdir={venv},upperdir={changes / 'upper'},workdir={changes / 'work'}", str(link)], check=True)


def unlink_venv(folder: Path) -> None:
    """Undo ``link_venv``: every mount at ``folder/.venv`` (``Path.is_mount`` misses a bind mount of a folder on the
    same filesystem, so the mount table is asked)."""
    link = folder / ".venv"
    while subprocess.run(["mountpoint", "-q", str(link)]).returncode == 0:
        subprocess.run(["umount", str(link)], check=True)


@dataclass(frozen=True)
class Ran:
    """What a module's blocks said, run by run, and where they ran."""

    outputs: dict[str, list[str]]  # Block.where -> the output of each run
    work: Path  # the clone
    home: Path  # the user's home: the clone is home/trtfarm

    def of(self, text: str) -> list[str]:
        """The runs of the block whose text holds TEXT."""
        return self.outputs[next(b.where for b in run_by(RUNNERS) if text in b.text)]


def run_marked_blocks(request, venvs: Venvs, tmp_path: Path, farm_folder: Path | None = None) -> Ran:
    """In a clone of its own: the README's quick start (once, unless it is one of them), then every block marked as
    run by the calling test's module, each ``times`` in a row; after them the clone has nothing to commit. The venvs
    that later blocks need are made behind the blocks that can already run (pip waits on the index, a block on the
    CPU)."""
    here = Path(request.node.path).relative_to(REPO).as_posix()
    mine, quick = run_by(here), quick_start()
    assert mine, f"no block is marked <!-- run by {here} -->"
    home = tmp_path / "home"
    home.mkdir()
    work = clone(home / "trtfarm")
    write_small_cnn(home / "myproject" / "model.onnx")  # your model: not the encoder
    plan = ([] if quick in mine else [(quick, 1)]) + [(b, times(b)) for b in mine]
    # in the order the blocks need them, the module's own sets first: meanwhile another worker makes the one they
    # all need (the quick start's), or this one's blocks ask for it and make it
    sets = sorted(dict.fromkeys(install_set(b, quick) for b, _ in plan), key=lambda s: s == install_set(quick, quick))
    outputs: dict[str, list[str]] = {}
    stop = threading.Event()
    with ThreadPoolExecutor(max_workers=1) as behind:
        made = behind.submit(lambda: [venvs.get(extras) for extras in sets if not stop.is_set()])
        try:
            for block, runs in plan:
                outputs[block.where] = _runs(block, runs, venvs, work, user_env(home), tmp_path, farm_folder)
        finally:
            stop.set()  # after a failure: the set being made is finished (another test may wait for it), no more
            unlink_venv(work)
        made.result()
    leftover = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=work, capture_output=True,
                              text=True, check=True).stdout
    assert leftover == "", f"the blocks left files that .gitignore does not cover:\n{leftover}"
    return Ran({b.where: outputs[b.where] for b in mine}, work, home)


def _runs(block: Block, runs: int, venvs: Venvs, work: Path, env: dict, logs: Path, farm: Path | None) -> list[str]:
    """A block's runs in a row, in the venv of its install set."""
    quick = quick_start()
    extras = install_set(block, quick)
    script = from_wheel(block.text, venvs.wheel)
    link_venv(work, venvs.get(extras), logs / "quick-start-venv" if block == quick else None)
    return [_run(block, _on_a_farm_of_its_own(block, script, work, farm), work, env,
                 logs / f"{block.doc.stem}-{block.line}-{run}.log") for run in range(runs)]


def _on_a_farm_of_its_own(block: Block, script: str, work: Path, farm: Path | None) -> str:
    """The farm block, on a free port and the test's cluster folder; the previous run's cluster stopped first, as a
    user stops it before starting again."""
    if DOCS_DB not in block.text:
        return script
    assert farm is not None, f"{block.where} runs a farm: the test needs the farm_folder fixture"
    subprocess.run(["bash", "infra/local-farm/postgres.sh", "stop", str(farm)], cwd=work, capture_output=True)
    port = str(free_port())
    script = script.replace(DOCS_DB, str(farm)).replace(f"--port {DOCS_PORT}", f"--port {port}")
    return script.replace(f"127.0.0.1:{DOCS_PORT}", f"127.0.0.1:{port}")


def _run(block: Block, script: str, cwd: Path, env: dict, log: Path, timeout: int = 1200) -> str:
    """One run of a block: exit 0 (else the test fails with its output); its background jobs are stopped after."""
    script = script if block.lang != "python" else f".venv/bin/python - <<'EOF'\n{script}EOF\n"
    trace = f"exec 9>'{log}.trace'; BASH_XTRACEFD=9; PS4='+ $EPOCHREALTIME '; set -x\n"  # each command's start
    (log.parent / f"{log.name}.sh").write_text("set -euo pipefail\n" + trace + script)
    with open(log, "w") as out, open(f"{log}.err", "w") as errs:  # files: background jobs keep pipes open
        proc = subprocess.Popen(["bash", f"{log}.sh"], cwd=cwd, env=env, stdout=out, stderr=errs,
                                start_new_session=True)
        try:
            proc.wait(timeout=timeout)
        finally:
            for sig in (signal.SIGTERM, signal.SIGKILL):  # the block's server and workers share its process group
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
    stdout, stderr = log.read_text(), Path(f"{log}.err").read_text()
    assert proc.returncode == 0, f"{block.where} exit {proc.returncode}\n{script}\n{stdout[-3000:]}\n{stderr[-4000:]}"
    assert "Traceback" not in stdout + stderr, f"{block.where}\n{stderr[-4000:]}"
    return stdout + "\n--- stderr ---\n" + stderr
