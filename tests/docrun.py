"""Run the docs' blocks as a user would: from the wheel, in a clone outside the repository, in venvs that hold
exactly what the text installs.

A block's install set is what its own ``pip install`` lines name (``'.[farm]'``, ``"$(ls ~/dist/trtfarm-*.whl)[rtx]"``)
and, for a block that does not make its own venv, what the quick start installed into ``.venv`` before it (the README
says each section follows the quick start). One venv per distinct set is made per test session, from the wheel built
from this checkout; a block's ``pip install -e '.[X]'`` is read as the wheel with ``[X]`` (already there: pip says so).
The wheel and the venvs are shared by the session's pytest-xdist workers (pytest-xdist's recipe: a folder beside the
workers' own and a file lock), so each is made once however many modules use them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from filelock import FileLock

from .docblocks import REPO, Block

PIP_EXTRAS = re.compile(r"""pip install (?:-q )?(?:-e )?['"]?(?:\.|\$\(ls [^)]*\))\[(?P<extras>[a-z,]+)\]['"]?""")
EDITABLE = re.compile(r"""pip install (?P<q>-q )?-e '\.\[(?P<extras>[a-z,]+)\]'""")


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

    def freeze(self, extras: frozenset[str]) -> set[str]:
        done = subprocess.run([str(self.get(extras) / "bin/pip"), "freeze"], capture_output=True, text=True,
                              check=True)
        return {line.split("==")[0].split(" @ ")[0].lower() for line in done.stdout.splitlines()}


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


def link_venv(folder: Path, venv: Path) -> None:
    """Make ``folder/.venv`` the given venv: a bind mount, so a block's own ``python3 -m venv .venv`` finds a folder
    (a symlink it refuses) and its scripts keep the venv's own paths."""
    link = folder / ".venv"
    unlink_venv(folder)
    link.mkdir(exist_ok=True)
    subprocess.run(["mount", "--bind", str(venv), str(link)], check=True)


def unlink_venv(folder: Path) -> None:
    """Undo ``link_venv``: every bind mount at ``folder/.venv`` (``Path.is_mount`` misses a bind mount of a folder on
    the same filesystem, so the mount table is asked)."""
    link = folder / ".venv"
    while subprocess.run(["mountpoint", "-q", str(link)]).returncode == 0:
        subprocess.run(["umount", str(link)], check=True)
