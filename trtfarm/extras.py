"""Which pip extra brings each optional module, so a missing one is one line naming the extra to install.

The base install serves ``build`` (with a toolchain), ``pull``, ``verify``, ``show``, ``plans``, ``targets``, ``init``
and ``trtfarm.runtime``. The rest comes with extras (pyproject.toml's ``[project.optional-dependencies]``, kept in
step with ``EXTRAS`` by a test).
"""

from __future__ import annotations

from trtfarm.errors import UserInputError

# top-level module -> (extra, what it is for)
EXTRAS: dict[str, tuple[str, str]] = {
    "tensorrt_rtx": ("rtx", "TensorRT-RTX builds"),
    "torch": ("precision", "precision conversion"),
    "modelopt": ("precision", "precision conversion"),
    "onnxruntime": ("precision", "the accuracy gate"),
    "polygraphy": ("precision", "the accuracy gate and engine checks"),
    "onnx_graphsurgeon": ("precision", "precision conversion"),
    "pyarrow": ("profiles", "reading shape logs"),
    "prefect": ("farm", "the farm commands"),
    "docker": ("farm", "building worker images"),
    "httpx": ("farm", "talking to the Prefect server"),
    "fastapi": ("webhook", "the webhook receiver"),
    "uvicorn": ("webhook", "the webhook receiver"),
    "matplotlib": ("reports", "report charts"),
    "tritonclient": ("triton", "Triton model repositories"),
}


class MissingExtra(UserInputError):
    """An optional module is not installed; the message names the extra that brings it."""


def missing_extra(err: ModuleNotFoundError) -> MissingExtra | None:
    """The one-line error for a module that an extra brings, or None when ``err`` is about another module."""
    root = (err.name or "").split(".")[0]
    if root not in EXTRAS:
        return None
    extra, purpose = EXTRAS[root]
    return MissingExtra(f"{root} is not installed ({purpose}): pip install 'trtfarm[{extra}]' "
                        "(or 'trtfarm[all]' for everything)")


def require(*modules: str, extra: str | None = None, purpose: str = "") -> None:
    """Raise ``MissingExtra`` when one of ``modules`` (keys of ``EXTRAS``) does not import.

    ``extra`` names the extra a command documents when a module is in several (httpx: ``[farm]`` and ``[webhook]``).
    """
    import importlib.util

    for module in modules:
        if importlib.util.find_spec(module) is None:
            if extra is None:
                raise missing_extra(ModuleNotFoundError(name=module)) or ModuleNotFoundError(name=module)
            raise MissingExtra(f"{module} is not installed ({purpose or EXTRAS[module][1]}): pip install "
                               f"'trtfarm[{extra}]' (or 'trtfarm[all]' for everything)")
