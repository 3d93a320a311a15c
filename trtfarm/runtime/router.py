"""Route each request to an optimization profile and pad it to a bucket, at the API edge.

A shape outside every profile raises ``ShapeOutOfRange`` naming the input, the dimension and the accepted range,
before anything reaches TensorRT (where it would fail deep inside ``set_input_shape``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trtfarm.errors import UserInputError
from trtfarm.profiles.profile import Profile, load_profiles_file


class ShapeOutOfRange(UserInputError):
    """The request's shape fits no optimization profile."""


@dataclass(frozen=True)
class Route:
    """Which profile serves the request, and the padded shape to run it at."""

    profile: int
    shapes: dict[str, tuple[int, ...]]


class Router:
    """Picks the smallest profile that holds a request and pads each dimension up to its bucket inside it."""

    def __init__(self, profiles: Sequence[Profile], buckets: Mapping[str, Sequence[int]] | None = None) -> None:
        if not profiles:
            raise UserInputError("a router needs at least one optimization profile")
        self.profiles = list(profiles)
        self.buckets = {k: list(v) for k, v in (buckets or {}).items()}
        self.inputs = set(self.profiles[0].root)
        volume = [sum(int(np.prod(r.max)) for r in p.root.values()) for p in self.profiles]
        self._order = sorted(range(len(self.profiles)), key=volume.__getitem__)

    @classmethod
    def from_file(cls, path: str | Path) -> Router:
        """Load the profiles YAML that ``trtfarm profiles derive`` wrote."""
        doc = load_profiles_file(path)
        return cls(doc.profiles, doc.buckets)

    def _pad(self, index: int, shapes: Mapping[str, Sequence[int]]) -> dict[str, tuple[int, ...]] | None:
        padded = {}
        for name, shape in shapes.items():
            r = self.profiles[index].root[name]
            if len(shape) != len(r.min):
                return None
            grain = self.buckets.get(name, [1] * len(shape))
            out = []
            for d, v in enumerate(shape):
                g = grain[d] if d < len(grain) else 1
                p = max(-(-v // g) * g, r.min[d])
                if v > r.max[d]:
                    return None
                out.append(min(p, r.max[d]))
            padded[name] = tuple(out)
        return padded

    def route(self, shapes: Mapping[str, Sequence[int]]) -> Route:
        """Return the profile and padded shapes for a request; raise ``ShapeOutOfRange`` when none holds it."""
        missing, extra = self.inputs - set(shapes), set(shapes) - self.inputs
        if missing or extra:
            raise ShapeOutOfRange(f"request inputs {sorted(shapes)} do not match the engine's {sorted(self.inputs)}")
        for i in self._order:
            padded = self._pad(i, shapes)
            if padded is not None:
                return Route(i, padded)
        raise ShapeOutOfRange(self._explain(shapes))

    def _explain(self, shapes: Mapping[str, Sequence[int]]) -> str:
        def span(r) -> str:
            return f"{'x'.join(map(str, r.min))}..{'x'.join(map(str, r.max))}"

        accepted = "; ".join(f"profile {i}: " + ", ".join(f"{n} {span(r)}" for n, r in p.root.items())
                             for i, p in enumerate(self.profiles))
        worst = []
        for name, shape in shapes.items():
            ranks = {len(p.root[name].max) for p in self.profiles}
            if len(shape) not in ranks:
                worst.append(f"{name} has rank {len(shape)}, the engine takes rank {sorted(ranks)[0]}")
                continue
            for d, v in enumerate(shape):
                top = max(p.root[name].max[d] for p in self.profiles)
                if v > top:
                    worst.append(f"{name} dim {d} = {v} exceeds the largest maximum {top}")
        reason = "; ".join(worst) or "no single profile holds every dimension at once"
        shown = ", ".join(f"{n}={list(s)}" for n, s in shapes.items())
        return (f"request shape {shown} is outside every optimization profile ({reason}). Accepted: {accepted}. "
                "Reject, split or truncate such requests at the API edge, or rebuild with wider profiles.")
