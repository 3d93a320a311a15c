"""The user's own cache folder: nothing is read from, or written to, a folder another local user could have made.

The folder is ``platformdirs.user_cache_path("trtfarm")`` (``$XDG_CACHE_HOME/trtfarm``, else ``~/.cache/trtfarm``
on Linux), or ``$TRTFARM_CACHE_DIR`` when set. It is made mode 0700 and checked before each use: it, and each folder
made below it, is a real folder (not a symbolic link), owned by this user, that no group or other user may write;
each folder above it is owned by this user or root and writable by nobody else unless it is sticky (as ``/tmp``
is). A folder that fails is not used: ``cache_dir`` gives None (the command goes on without a cache) and
``work_dir`` a private folder of this process (random name, mode 0700, removed at exit). One line on stderr says
so, once per process.

What is kept here is still content-addressed and checked when read by its reader (a fetched file against its
recorded sha256, a summary against the store's listing): a damaged file is read again, never trusted.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import stat
import sys
import tempfile
import threading
from pathlib import Path

import platformdirs

_LOCK = threading.Lock()
_VERDICTS: dict[str, str | None] = {}  # root folder -> its problem (None: usable), checked once per process
_PRIVATE: list[Path] = []  # this process's private stand-in for a refused root


def cache_root() -> Path:
    """Where the cache lives (not yet checked): ``$TRTFARM_CACHE_DIR``, else the platform's per-user cache folder."""
    given = os.environ.get("TRTFARM_CACHE_DIR")
    return Path(given).absolute() if given else platformdirs.user_cache_path("trtfarm").absolute()


def cache_dir(*parts: str) -> Path | None:
    """``<cache root>/<parts>``, made mode 0700 and checked; None when it may not be used (said once on stderr)."""
    path, root, problem = _checked(parts)
    if path is None:
        _say_once(f"note: not using the cache folder {root}: {problem}; going on without it")
    return path


def _checked(parts: tuple[str, ...]) -> tuple[Path | None, Path, str | None]:
    """The folder ``parts`` below the cache root when it may be used; else None, the root and the problem."""
    root = cache_root()
    problem = _root_verdict(root)
    if problem is None:
        path, problem = _below(root, parts)
        if problem is None:
            return path, root, None
    return None, root, problem


def work_dir(*parts: str) -> Path:
    """``cache_dir(*parts)``, or (when that may not be used) the same folder below a private one of this process."""
    path, root, problem = _checked(parts)
    if path is not None:
        return path
    _say_once(f"note: not using the cache folder {root}: {problem}; using a private folder of this run instead")
    path, problem = _below(_private_root(), parts)
    if path is None:  # only this process writes there: a failure is the disk's, and the caller's write says so
        path = _private_root().joinpath(*map(_plain, parts))
    return path


def folder_problem(path: Path) -> str | None:
    """Why ``path`` may not be used as this user's own folder (None: it may): checked without following links."""
    try:
        st = os.lstat(path)
    except OSError as err:
        return f"cannot be read ({err.strerror or err})"
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a folder"
    if st.st_uid != os.getuid():
        return f"it belongs to uid {st.st_uid}, not to you (uid {os.getuid()})"
    if st.st_mode & 0o022:
        return f"other users may write it (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _ancestor_problem(root: Path) -> str | None:
    """Why a folder above ``root`` (as given, and with links resolved) lets another user swap what is below it."""
    real = Path(os.path.realpath(root.parent))
    for folder in dict.fromkeys([*reversed(root.parents), *reversed(real.parents), real]):
        problem = _one_ancestor(folder)
        if problem:
            return problem
    return None


def _one_ancestor(folder: Path) -> str | None:
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return None  # made below by this user
    except OSError as err:
        return f"{folder} cannot be read ({err.strerror or err})"
    if st.st_uid not in (0, os.getuid()):
        return f"{folder} belongs to uid {st.st_uid}"
    if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        return f"other users may write {folder} (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _root_verdict(root: Path) -> str | None:
    """The root's problem, checked (and the root made, mode 0700) once per process and root."""
    key = str(root)
    with _LOCK:
        if key in _VERDICTS:
            return _VERDICTS[key]
    problem = _ancestor_problem(root)
    if problem is None:
        try:
            root.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            root.mkdir(mode=0o700, exist_ok=True)
        except FileExistsError:
            pass  # a file or a link: folder_problem names it
        except OSError as err:
            problem = f"it cannot be made ({err.strerror or err})"
        problem = problem or folder_problem(root)
    with _LOCK:
        _VERDICTS[key] = problem
    return problem


def _below(root: Path, parts: tuple[str, ...]) -> tuple[Path | None, str | None]:
    """``root/<parts>``, each folder made mode 0700 and checked as it is reached."""
    path = root
    for part in map(_plain, parts):
        path = path / part
        try:
            path.mkdir(mode=0o700, exist_ok=True)
        except FileExistsError:
            pass
        except OSError as err:
            return None, f"{path} cannot be made ({err.strerror or err})"
        problem = folder_problem(path)
        if problem:
            return None, f"{path}: {problem}"
    return path, None


def _plain(part: str) -> str:
    """``part`` as one folder name: a name with a separator, or a dot name, is replaced by its digest."""
    if part in ("", ".", "..") or "/" in part or os.sep in part or "\0" in part:
        return hashlib.sha256(part.encode()).hexdigest()[:16]
    return part


def _private_root() -> Path:
    """This process's private folder (``mkdtemp``: a random name, mode 0700), removed when the process exits."""
    with _LOCK:
        if not _PRIVATE:
            path = Path(tempfile.mkdtemp(prefix="trtfarm-cache-"))
            _PRIVATE.append(path)
            atexit.register(shutil.rmtree, path, ignore_errors=True)
        return _PRIVATE[0]


_SAID: set[str] = set()


def _say_once(line: str) -> None:
    with _LOCK:
        if line in _SAID:
            return
        _SAID.add(line)
    print(line, file=sys.stderr)
