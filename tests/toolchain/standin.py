"""A stand-in ``tensorrt`` module whose every object is specified by the real classes of one bindings version.

Built inside a process that imported NVIDIA's real ``tensorrt_bindings`` (on null entry points: nothing can run).
Enums are the real enums. Every other class becomes a stand-in class: constructing it, calling a method, reading or
writing a property is checked against the real class (``inspect.getattr_static``) and the overloads pybind11 wrote
into its ``__doc__`` (``tools.apicheck.surface.parse_signatures``), the way ``unittest.mock.create_autospec``
checks a spec, but
per overload and with pybind11's argument conversions (a ``str`` parameter refuses a ``Path``, an ``int`` one a
``str``, a TensorRT class parameter anything but that class). A method that does not exist raises AttributeError;
arguments no overload accepts raise TypeError; a read-only property refuses a write; a class without ``__dict__``
refuses a new attribute. Results have the declared return type (a stand-in instance, ``True`` for bool, ``0`` for
int, a buffer for ``IHostMemory``) unless the scenario scripts them. A Python subclass of a stand-in (a logger, a
progress monitor) is checked when it is defined: each public method must exist in the real base with an arity that
the base's declared signature fits; when a stand-in receives one, it calls those callbacks as TensorRT would.

This checks the API, not TensorRT's behaviour.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable

from tools.apicheck.check import binds, describe
from tools.apicheck.surface import parse_signatures
from tools.apicheck.uses import class_name

BUFFER_CLASSES = {"IHostMemory"}  # pybind11 classes with the buffer protocol


class StandInModule(types.ModuleType):
    """The stand-in ``tensorrt``: ``returns`` scripts results by ``"Class.member"``; ``calls`` records every call."""

    def __init__(self, real: types.ModuleType, returns: dict[str, object] | None = None) -> None:
        super().__init__("tensorrt")
        self._real, self.returns, self.calls = real, dict(returns or {}), []
        self._classes: dict[type, type] = {}
        self._surface = {n: o for n, o in vars(real).items() if isinstance(o, type)}
        for name in dir(real):
            obj = getattr(real, name)
            if isinstance(obj, type):
                setattr(self, name, obj if _is_enum(obj) else self.standin_class(obj))
            elif callable(obj) and not inspect.ismodule(obj):
                setattr(self, name, self._function(name, obj))
            elif not name.startswith("__") or name == "__version__":
                setattr(self, name, obj)

    # --- classes ---
    def standin_class(self, real_cls: type) -> type:
        """The stand-in class of a real class (one per class)."""
        if real_cls not in self._classes:
            module = self

            def init_subclass(cls, **kw):
                _check_callbacks(cls, real_cls)

            attrs = {"_real": real_cls, "_module": module, "__init_subclass__": classmethod(init_subclass),
                     "__qualname__": real_cls.__qualname__, "__doc__": real_cls.__doc__}
            self._classes[real_cls] = StandInMeta(real_cls.__name__, (StandIn,), attrs)
        return self._classes[real_cls]

    def value_of(self, type_text: str, key: str):
        """A value of a declared type (scripted by ``returns[key]`` when given)."""
        if key in self.returns:
            scripted = self.returns[key]
            return scripted() if callable(scripted) and not isinstance(scripted, type) else scripted
        text = type_text.strip()
        if text in ("bool",):
            return True
        if text in ("int", "typing.SupportsInt", "SupportsInt"):
            return 0
        if text in ("float", "typing.SupportsFloat"):
            return 0.0
        if text == "str":
            return ""
        if text.lower().startswith(("list[", "typing.list[")):
            return []
        name = class_name(text, self._surface)
        if name is None:
            return None
        cls = _resolve(self._real, name)
        if _is_enum(cls):
            return next(iter(cls.__members__.values()))
        if name in BUFFER_CLASSES:
            return buffer_standin(self, cls, b"")
        return self.standin_class(cls).__new__(self.standin_class(cls))

    def _function(self, name: str, real_fn) -> Callable:
        overloads = parse_signatures(name, real_fn.__doc__)

        def standin(*args, **kwargs):
            return self.invoke(f"tensorrt.{name}", overloads, args, kwargs, bound=False)

        standin.__name__ = name
        return standin

    def invoke(self, key: str, overloads: list[dict], args: tuple, kwargs: dict, *, bound: bool):
        """Check a call against the overloads, run the callbacks of any TensorRT interface passed, return."""
        chosen = next((o for o in overloads if binds(o, len(args) - (1 if bound else 0), tuple(kwargs), bound)
                       and _types_fit(self, o, args, kwargs)), None)
        if overloads and chosen is None:
            raise TypeError(f"{key}: no overload accepts {len(args) - bound} positional argument(s)"
                            f"{f' and keywords {sorted(kwargs)}' if kwargs else ''} of types "
                            f"{[type(a).__name__ for a in args[bound:]]}; declared: "
                            + " | ".join(describe(o) for o in overloads))
        self.calls.append((key, args[1:] if bound else args, kwargs))
        for value in (*args[1:], *kwargs.values()):
            if isinstance(value, StandIn) and type(value)._module is self and type(value) not in \
                    self._classes.values():
                _run_callbacks(self, value)
        return self.value_of(chosen["returns"] if chosen else "", key)


class StandInMeta(type):
    """Class-level attributes of a stand-in class come from the real class (``trt.Logger.WARNING``, methods)."""

    def __getattr__(cls, name: str):
        if name.startswith("__") or name in ("_real", "_module"):
            raise AttributeError(name)
        real = _real_base(cls)
        raw = inspect.getattr_static(real, name, None)
        if raw is None:
            raise AttributeError(f"type object '{real.__name__}' has no attribute '{name}'")
        if isinstance(raw, type):
            return raw if _is_enum(raw) else cls._module.standin_class(raw)
        if isinstance(raw, property) or not callable(raw):
            return getattr(real, name)  # a property object, or an enum value exported onto the class
        overloads, module = parse_signatures(name, getattr(real, name).__doc__), cls._module

        def unbound(*args, **kwargs):
            return module.invoke(f"{real.__name__}.{name}", overloads, args, kwargs, bound=True)

        return unbound


class StandIn(metaclass=StandInMeta):
    """Base of every stand-in class; attribute access goes through the real class."""

    _real: type
    _module: StandInModule

    def __init__(self, *args, **kwargs) -> None:
        real = type(self)._real if type(self) in type(self)._module._classes.values() else _real_base(type(self))
        overloads = parse_signatures("__init__", real.__init__.__doc__)
        type(self)._module.invoke(f"{real.__name__}.__init__", overloads, (self, *args), kwargs, bound=True)

    def __getattr__(self, name: str):
        real = _real_base(type(self))
        raw = inspect.getattr_static(real, name, None)
        module = type(self)._module
        key = f"{real.__name__}.{name}"
        if raw is None or name.startswith("__"):
            raise AttributeError(f"'{real.__name__}' object has no attribute '{name}' (TensorRT "
                                 f"{module._real.__version__})")
        if isinstance(raw, property):
            store = self.__dict__.get("_standin_props", {})
            if name in store:
                return store[name]
            head = (raw.fget.__doc__ or "").strip().splitlines()[:1] if raw.fget else []
            return module.value_of(head[0].rpartition("->")[2] if head else "", key)
        if isinstance(raw, type):
            return raw if _is_enum(raw) else module.standin_class(raw)
        overloads = parse_signatures(name, getattr(real, name).__doc__)

        def method(*args, **kwargs):
            return module.invoke(key, overloads, (self, *args), kwargs, bound=True)

        return method

    def __setattr__(self, name: str, value) -> None:
        real = _real_base(type(self))
        if type(self) not in type(self)._module._classes.values():  # a Python subclass has a __dict__
            object.__setattr__(self, name, value)
            return
        raw = inspect.getattr_static(real, name, None)
        if isinstance(raw, property):
            if raw.fset is None:
                raise AttributeError(f"{real.__name__}.{name} is read-only")
            self.__dict__.setdefault("_standin_props", {})[name] = value
            module = type(self)._module
            module.calls.append((f"{real.__name__}.{name}=", (value,), {}))
            if isinstance(value, StandIn) and type(value) not in module._classes.values():
                _run_callbacks(module, value)  # a monitor or recorder handed to TensorRT: it will be called
            return
        if real.__dictoffset__ == 0:
            raise AttributeError(f"'{real.__name__}' object has no attribute '{name}' and takes no new attributes")
        object.__setattr__(self, name, value)


def buffer_standin(module: StandInModule, real_cls: type, data: bytes):
    """An ``IHostMemory`` stand-in: a buffer (``memoryview``, ``bytes()`` work) exposing only the real names."""

    class Buffer(bytearray):
        def __getattribute__(self, name: str):
            if name.startswith("__"):
                return super().__getattribute__(name)
            if name == "nbytes":
                return len(self)
            if inspect.getattr_static(real_cls, name, None) is None:
                raise AttributeError(f"'{real_cls.__name__}' object has no attribute '{name}'")
            return module.value_of("", f"{real_cls.__name__}.{name}")

    return Buffer(data)


def _is_enum(cls: type) -> bool:
    return hasattr(cls, "__members__")


def _resolve(real: types.ModuleType, dotted: str) -> type:
    obj = real
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _real_base(cls: type) -> type:
    return next(c._real for c in cls.__mro__ if "_real" in vars(c))


def _types_fit(module: StandInModule, overload: dict, args: tuple, kwargs: dict) -> bool:
    """pybind11's conversions, loosely: TensorRT classes, str, int, float, bool, buffers."""
    params = overload["params"]
    pairs = list(zip(params, args, strict=False)) + [(p, kwargs[p["name"]]) for p in params if p["name"] in kwargs]
    return all(_fits(module, p["type"], v) for p, v in pairs if p["name"] != "self")


def _fits(module: StandInModule, text: str, value) -> bool:  # noqa: C901 - one branch per converted type
    text = text.strip()
    if text == "str":
        return isinstance(value, str)
    if text in ("int", "typing.SupportsInt"):
        return not isinstance(value, (str, bytes)) and (hasattr(value, "__index__") or hasattr(value, "__int__"))
    if text in ("float", "typing.SupportsFloat"):
        return isinstance(value, (int, float))
    if text == "bool":
        return isinstance(value, (bool, int))
    if text in ("typing_extensions.Buffer", "buffer"):
        try:
            memoryview(value)
        except TypeError:
            return False
        return True
    name = class_name(text, module._surface)
    if name is None:
        return True
    cls = _resolve(module._real, name)
    if _is_enum(cls):
        return isinstance(value, cls)
    if name == "Dims" or name.startswith("Dims"):
        return isinstance(value, (tuple, list)) and all(isinstance(d, int) for d in value) or \
            isinstance(value, StandIn)
    # pybind11 accepts an instance of the class or of a subclass (a ``Logger`` where an ``ILogger`` is declared)
    return isinstance(value, StandIn) and issubclass(_real_base(type(value)), cls)


def _declared(real_base: type, name: str) -> list[dict]:
    fn = getattr(real_base, name, None)
    return parse_signatures(name, fn.__doc__) if fn is not None else []


def _check_callbacks(cls: type, real_base: type) -> None:
    """A Python subclass: each public method overrides a real one, with an arity its declaration fits."""
    for name, fn in vars(cls).items():
        if name.startswith("_") or not inspect.isfunction(fn):
            continue
        declared = _declared(real_base, name)
        if not declared:
            raise AttributeError(f"{cls.__name__}.{name}: {real_base.__name__} has no method {name!r} to override, "
                                 "so TensorRT never calls it")
        sig = inspect.signature(fn)
        if not any(_accepts(sig, len(o["params"])) for o in declared):
            raise TypeError(f"{cls.__name__}.{name}{sig}: TensorRT calls it as " +
                            " | ".join(describe(o) for o in declared))


def _accepts(sig: inspect.Signature, count: int) -> bool:
    try:
        sig.bind(*([None] * count))
    except TypeError:
        return False
    return True


def _run_callbacks(module: StandInModule, obj: StandIn) -> None:
    """Call each callback ``obj`` overrides, with arguments of the types its real base declares."""
    base = _real_base(type(obj))
    for name, fn in vars(type(obj)).items():
        if name.startswith("_") or not inspect.isfunction(fn):
            continue
        overload = _declared(base, name)[0]
        args = [_sample(module, p["type"]) for p in overload["params"][1:]]
        result = getattr(obj, name)(*args)
        if overload["returns"] == "bool" and not isinstance(result, bool):
            raise TypeError(f"{type(obj).__name__}.{name} returned {result!r}; TensorRT expects a bool")
        module.calls.append((f"callback {base.__name__}.{name}", tuple(args), {}))


def _sample(module: StandInModule, text: str):
    """An argument of a declared type, as TensorRT passes it to a callback (an enum's last member: VERBOSE)."""
    if text.strip() == "str":
        return "standin"
    if text.strip() in ("int", "typing.SupportsInt"):
        return 1
    name = class_name(text, module._surface)
    cls = _resolve(module._real, name) if name else None
    if cls is not None and _is_enum(cls):
        return list(cls.__members__.values())[-1]
    return module.value_of(text, "")
