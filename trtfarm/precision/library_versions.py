"""The ModelOpt, onnxruntime and Polygraphy the workarounds were compared with, and the ones installed here.

trtfarm's workarounds (``workarounds``, ``castindex``, ``deferred``) replace private functions of these three
libraries; each was read and compared, byte for byte, with the function it replaces on the versions in ``COMPARED``
(tests/precision/test_workarounds.py). On another version a replaced function may have changed, so the precision step
refuses to run there with one line naming the version it was compared with, unless the user passes
``--unchecked-modelopt``, which the step's record (and so the plan's manifest) then names: never a silent switch-off.

Versions are read from the installed distributions' metadata (``importlib.metadata``): nothing is imported. A library
that is not installed is not refused here: its import fails where the step needs it, naming the extra to install.
"""

from __future__ import annotations

from importlib import metadata

from trtfarm.errors import UserInputError

# distribution -> the version its functions were compared with; onnxruntime's GPU wheel carries the same Python code
COMPARED = {"nvidia-modelopt": "0.47.0", "onnxruntime": "1.32.0", "polygraphy": "0.53.6"}
WHEELS = {"onnxruntime": ("onnxruntime", "onnxruntime-gpu")}  # the wheels one import name comes from
FLAG = "--unchecked-modelopt"


def installed(distribution: str) -> str | None:
    """The installed version of ``distribution`` (or of another wheel of the same library), None when none is."""
    for wheel in WHEELS.get(distribution, (distribution,)):
        try:
            return metadata.version(wheel)
        except metadata.PackageNotFoundError:
            continue
    return None


def _release(version: str) -> tuple[int, ...] | str:
    """``1.32.0+cpu`` and ``1.32`` are release (1, 32, 0): a local label names the build, not the code."""
    public = version.split("+", 1)[0]
    parts = public.split(".")
    return tuple(int(p) for p in parts) + (0,) * (3 - len(parts)) if all(p.isdigit() for p in parts) else public


def unchecked_versions() -> dict[str, str]:
    """The installed libraries whose version is not the one compared: distribution -> installed version."""
    found = {name: installed(name) for name in COMPARED}
    return {name: version for name, version in found.items()
            if version and _release(version) != _release(COMPARED[name])}


def modelopt_compared() -> bool:
    """Whether the installed ModelOpt is the one the workarounds were compared with."""
    return "nvidia-modelopt" not in unchecked_versions()


def refuse_unchecked(allowed: bool) -> dict[str, str]:
    """``unchecked_versions()``, or ``UserInputError`` (one line) when there are some and ``allowed`` is False."""
    found = unchecked_versions()
    if found and not allowed:
        have = " and ".join(f"{name} {version}" for name, version in found.items())
        want = " ".join(f"'{name}=={COMPARED[name]}'" for name in found)
        compared = " and ".join(f"{name} {COMPARED[name]}" for name in found)
        raise UserInputError(f"{have} installed, but trtfarm's ModelOpt workarounds were compared with {compared}: "
                             f"`pip install {want}`, or pass {FLAG} to run them unchecked (the step's record and "
                             "the plan's manifest say so)")
    return found
