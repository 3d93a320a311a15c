"""Modules ModelOpt imports that a precision step seldom or never reads, loaded only when something reads them.

Two of ModelOpt's imports cost up to 2 s of a precision step that must finish in 10 s, on every conversion, for
functions the step seldom or never calls:

- ``modelopt.onnx.trt_utils`` imports lief at its top, for one function: telling whether a TensorRT plugin library
  is linked statically (``_is_static_plugin``), which only a build that loads plugins calls (0.3-0.6 s).
- ``modelopt.onnx.quantization.qdq_utils`` imports torch at its top, for one function: packing FP8 weights
  (``_cast_fp8``), which only fp8 quantization calls (1.0-1.4 s).

``import_modelopt`` imports ModelOpt's ONNX packages with a stand-in for each such module in ``sys.modules``: the
import statement gets the stand-in (the import system reads only its ``__spec__``, ``inspect`` its ``__file__``,
which the stand-in holds), and the first other attribute read through it imports the real module, which it then
forwards every read to. Once ModelOpt is imported, the stand-ins not read are taken out of ``sys.modules``: a later
``import torch`` (or ``import torch.nn``, which a stand-in cannot serve as a parent package) gets the real module, as
it would have without them. Only the ModelOpt version the stand-ins were compared with gets them
(``library_versions.COMPARED``): another version's import may read these modules at its top, or import their
submodules, so one run with ``--unchecked-modelopt`` imports them as it would without trtfarm (slower, never wrong).

The standard library's ``importlib.util.LazyLoader`` is not used: on Python 3.11 an import statement reads the
module's ``__spec__`` through ``__getattribute__`` (to see whether it is still initialising), which makes a lazy
module load at once.

Polygraphy asks of each array it is given whether it is a torch tensor (``polygraphy.util.array.is_torch``,
polygraphy 0.53.6): its answer imports torch to ask. An object can only be a torch tensor once torch is imported, so
while a precision step runs (``torch_unasked``) the question is put to the torch module in ``sys.modules``, and
answered no, without an import, when there is none: the same answer for every object.

Both happen only in the precision step's own process (``child``), and end with it.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types

from trtfarm.precision.held import HeldWhileAny

UNUSED = ("lief", "torch")
MODELOPT = ("modelopt.onnx.quantization", "modelopt.onnx.autocast")  # what the precision step imports of ModelOpt
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


def import_modelopt() -> None:
    """Import ModelOpt's ONNX packages (``MODELOPT``) with ``UNUSED`` loaded only when read (see the module)."""
    from trtfarm.precision.library_versions import modelopt_compared

    with _LOCK:
        if all(name in sys.modules for name in MODELOPT):
            return
        placed = {}
        if modelopt_compared():
            for name in UNUSED:
                if name not in sys.modules and (spec := importlib.util.find_spec(name)) is not None:
                    placed[name] = sys.modules[name] = DeferredModule(spec)
        try:
            for name in MODELOPT:
                importlib.import_module(name)
        finally:
            for name, stand_in in placed.items():
                if sys.modules.get(name) is stand_in:
                    del sys.modules[name]


def loaded(name: str) -> types.ModuleType | None:
    """The module ``name`` if it is really imported (not a stand-in not read yet), else None; imports nothing."""
    module = sys.modules.get(name)
    if isinstance(module, DeferredModule):
        return module._real
    return module


def _is_torch(obj) -> bool:
    """Polygraphy's question, put to the torch module already imported (none: no object is a torch tensor)."""
    torch = loaded("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def _ask_loaded_torch():
    """Polygraphy's ``is_torch`` replaced by ``_is_torch``; what to put back (None: no Polygraphy)."""
    try:
        from polygraphy.util import array
    except ImportError:  # no Polygraphy: nothing asks
        return None
    saved = array.__dict__["is_torch"]
    array.is_torch = _is_torch
    return array, saved


def _put_back(made) -> None:
    if made is not None:
        array, saved = made
        array.is_torch = saved


_UNASKED = HeldWhileAny(_ask_loaded_torch, _put_back)  # one for every thread of the process


def torch_unasked():
    """A block in which Polygraphy's ``is_torch`` imports nothing (see the module)."""
    return _UNASKED.held()
