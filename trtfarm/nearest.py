"""The nearest valid thing to a name a person typed: for "not found" messages that name the fix.

``did_you_mean`` picks the closest of the valid names (difflib's ratio, at least 0.6) and says it as the message's
tail; ``known`` lists valid names for a message, shortened past ``limit``; ``nearest_and_known`` says both. Every
command that takes a name a person types (a model, a target, a channel, a GPU key) says its "not found" through these.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice nearest to ``word`` (difflib, cutoff 0.6; case ignored), or None when none is near."""
    options = list(dict.fromkeys(choices))
    by_lower = {c.lower(): c for c in options}
    found = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[found[0]] if found else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``"did you mean 'x'? "`` for the nearest choice, else the empty string (a message's prefix to its list)."""
    near = closest(word, choices)
    return f"did you mean {near!r}? " if near and near != word else ""


def known(names: Iterable[str], limit: int = 20) -> str:
    """The names, comma-separated, at most ``limit`` of them (then how many more); ``none`` when there are none."""
    shown = list(dict.fromkeys(names))
    text = ", ".join(shown[:limit]) + (f" (and {len(shown) - limit} more)" if len(shown) > limit else "")
    return text or "none"


def nearest_and_known(word: str, choices: Iterable[str], label: str) -> str:
    """``"did you mean 'x'? known models: a, b"``: a not-found message's tail (``label``: ``known models``)."""
    names = sorted(dict.fromkeys(choices))
    return f"{did_you_mean(word, names)}{label}: {known(names)}"
