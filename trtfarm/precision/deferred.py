"""Modules ModelOpt imports but the precision step never calls, loaded only when something reads them.

``modelopt.onnx.trt_utils`` imports lief at its top, for one function: telling whether a TensorRT plugin library is
linked statically (``_is_static_plugin``), which only a build that loads plugins calls. Loading lief's native
module takes 0.5 s of a precision step that must finish in 10 s, on every conversion.

``defer_unused_imports`` puts a stand-in for each such module in ``sys.modules``, before ModelOpt is imported: the
import statement gets the stand-in (the import system reads only its ``__spec__``, and ``inspect`` its ``__file__``,
which the stand-in holds), and the first other attribute read through it imports the real module, which replaces
the stand-in in ``sys.modules``; the stand-in forwards every later read. The standard library's
``importlib.util.LazyLoader`` is not used: on Python 3.11 an import statement reads the module's ``__spec__``
through ``__getattribute__`` (to see whether it is still initialising), which makes a lazy module load at once.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types

UNUSED = ("lief",)
_LOCK = threading.RLock()  # an import the first read sets off may read another stand-in


class DeferredModule(types.ModuleType):
    """Stands for a module not yet executed; the first attribute read through it imports the module."""

    def __init__(self, spec) -> None:
        super().__init__(spec.name)
        self.__spec__ = spec  # in the instance: the import system reads it without loading anything
        self.__loader__ = spec.loader
        self.__package__ = spec.parent
        # what inspect.getmodule reads of every module in sys.modules (torch's import calls it): held here too
        self.__file__ = spec.origin
        if spec.submodule_search_locations is not None:
            self.__path__ = list(spec.submodule_search_locations)
        self._real: types.ModuleType | None = None

    def __getattr__(self, attr: str):  # called only for what the stand-in itself does not hold
        if attr == "_real":
            raise AttributeError(attr)
        return getattr(self.load(), attr)

    def load(self) -> types.ModuleType:
        """The real module, imported now if it is not yet."""
        with _LOCK:
            if self._real is None:
                if sys.modules.get(self.__name__) is self:
                    del sys.modules[self.__name__]
                self._real = importlib.import_module(self.__name__)
            return self._real


def defer_unused_imports() -> None:
    """Put a stand-in for each module of ``UNUSED`` not imported yet (and installed) in ``sys.modules``."""
    with _LOCK:
        for name in UNUSED:
            if name in sys.modules:
                continue
            spec = importlib.util.find_spec(name)
            if spec is not None:
                sys.modules[name] = DeferredModule(spec)


def loaded(name: str) -> types.ModuleType | None:
    """The module ``name`` if it is really imported (not a stand-in not read yet), else None; imports nothing."""
    module = sys.modules.get(name)
    if isinstance(module, DeferredModule):
        return module._real
    return module
