"""Find and import the TensorRT-family module of a flavour, lazily (``trtfarm --help`` needs neither)."""

from __future__ import annotations

import importlib
from functools import lru_cache
from types import ModuleType

from trtfarm.errors import UserInputError

MODULES = {"tensorrt": "tensorrt", "tensorrt_rtx": "tensorrt_rtx"}
INSTALL_HINT = {
    "tensorrt": "install tensorrt==VERSION on a GPU host (pip downloads NVIDIA's libraries), or use NVIDIA's "
                "TensorRT container of that version",
    "tensorrt_rtx": "pip install tensorrt-rtx-cu13==VERSION (trtfarm's [rtx] extra pins one: pip install "
                    "'trtfarm[rtx]')",
}


class ToolchainUnavailable(UserInputError):
    """The flavour's module does not import here; the message says how to install it. Retrying does not help."""


@lru_cache(maxsize=None)
def import_flavour(flavour: str) -> ModuleType:
    """Import ``tensorrt`` or ``tensorrt_rtx``; raise ``ToolchainUnavailable`` with the install hint."""
    try:
        return importlib.import_module(MODULES[flavour])
    except KeyError as err:
        raise ToolchainUnavailable(f"unknown toolchain flavour {flavour!r}; use one of {sorted(MODULES)}") from err
    except (ImportError, RuntimeError, OSError) as err:  # the stub wheels raise RuntimeError/OSError
        raise ToolchainUnavailable(f"`{MODULES[flavour]}` is not importable here ({type(err).__name__}: "
                                   f"{str(err).splitlines()[0] if str(err) else ''}); {INSTALL_HINT[flavour]}") from err


def installed_version(flavour: str) -> str | None:
    """The flavour's ``__version__`` when it imports, else None."""
    try:
        return str(import_flavour(flavour).__version__)
    except ToolchainUnavailable:
        return None
