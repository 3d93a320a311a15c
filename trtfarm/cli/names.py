"""Names a person types, checked before a command does any work: one ``error:`` line naming the nearest (exit 2).

A model is known when the store holds anything of it: a stable or a candidate pointer, a plan, a registered export.
Every command that takes a model name checks it here, so a typo gets one answer everywhere: the nearest name from
every channel (``nearest.py`` picks it). ``farm run`` builds registered exports only, so it names the nearest
registered model. A channel's name is checked the same way.
"""

from __future__ import annotations

from collections.abc import Iterable

from trtfarm.errors import UserInputError
from trtfarm.nearest import did_you_mean, nearest_and_known

CHANNELS = ("stable", "candidate")


def _prefixes(model: str | None = None) -> list[str]:
    """Where the store keeps anything of ``model`` (of every model): each channel, the plans, the registry."""
    from trtfarm.layout import CHANNEL_ROOTS, channel_prefix, exports_prefix, plans_prefix

    return [channel_prefix(c, model) for c in CHANNEL_ROOTS] + [plans_prefix(model), exports_prefix(model)]


def known_models(store) -> list[str]:
    """Every model name the store holds anything of (a pointer of either channel, a plan, an export), sorted."""
    from trtfarm.layout import parse_model

    return sorted({m for prefix in _prefixes() for key in store.list(prefix) if (m := parse_model(key))})


def has_model(store, model: str) -> bool:
    """True when the store holds anything of ``model`` (one listing per place, stopping at its first key)."""
    from trtfarm.layout import is_name

    return is_name(model) and any(next(iter(store.list(p)), None) is not None for p in _prefixes(model))


def check_models(store, models: Iterable[str]) -> None:
    """Refuse (exit 2) a model name the store holds nothing of, naming the nearest known one and the known ones."""
    unknown = [m for m in dict.fromkeys(models) if not has_model(store, m)]
    if unknown:
        raise UserInputError(f"no model {', '.join(map(repr, unknown))} in {store.location}; "
                             f"{nearest_and_known(unknown[0], known_models(store), 'known models')}")


def check_registered(store, ref: str | None) -> None:
    """Refuse (exit 2) ``farm run``'s ``name`` or ``name@export`` when no export of that name is registered.

    An export folder URI and no model at all (every registered model) pass: the run resolves them.
    """
    from trtfarm.layout import exports_prefix
    from trtfarm.publishing.registry import registered_models
    from trtfarm.store import is_uri

    if ref is None or is_uri(ref):
        return
    name = ref.partition("@")[0]
    registered = registered_models(store)
    if name in registered:
        return
    built = " (it has plans or releases, built by `trtfarm build`, but no registered export)" \
        if has_model(store, name) else ""
    raise UserInputError(f"model {name!r} is not registered in {store.url(exports_prefix())}{built}; "
                         f"{nearest_and_known(name, registered, 'registered')}. Fix: `trtfarm models push "
                         "FOLDER`, or give an export folder URI")


def check_channel(value: str, option: str = "--channel") -> str:
    """``value`` when it names a channel; else exit 2 naming the nearest one."""
    if value not in CHANNELS:
        raise UserInputError(f"{option} {value!r}: {did_you_mean(value, CHANNELS)}use stable or candidate")
    return value


def other_channel_note(store, keys: Iterable[tuple], channel: str, *, promote: bool = False) -> str:
    """For a channel that has no pointer at ``keys`` (``(model, gpu, toolchain)``): what the other channel holds.

    ``"; its candidate channel has one: pass --channel candidate"`` (with ``promote``, and ``, or `trtfarm promote
    MODEL` moves it to stable once its gates hold``), or the empty string when the other channel has none either.
    """
    from trtfarm.layout import channel_key

    other = "candidate" if channel == "stable" else "stable"
    names = [n for n in keys if store.get(channel_key(*n, other)) is not None]
    if not names:
        return ""
    then = f", or `trtfarm promote {names[0][0]}` moves it to stable once its gates hold" \
        if promote and other == "candidate" else ""
    return f"; its {other} channel has one: pass --channel {other}{then}"
