"""Per-layer tactics from the engine inspector (TensorRT 11.x JSON), a digest of them, and their diff."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from trtfarm.identity import canonical_json


def tactics_from_inspector(info: str | dict) -> dict[str, str]:
    """``get_engine_information(LayerInformationFormat.JSON)`` -> {layer name: tactic}.

    With DETAILED profiling verbosity each layer is an object with ``Name``, ``LayerType``, ``TacticName`` and
    ``TacticValue``; with LAYER_NAMES_ONLY the layers are bare names (tactic unknown).
    """
    doc = json.loads(info) if isinstance(info, str) else info
    out = {}
    for layer in doc.get("Layers", []):
        if isinstance(layer, str):
            out[layer] = "?"
            continue
        name = layer.get("Name", "?")
        tactic = layer.get("TacticName") or layer.get("TacticValue") or layer.get("LayerType") or "?"
        value = layer.get("TacticValue")
        out[name] = f"{tactic} ({value})" if value not in (None, "", tactic) else str(tactic)
    return out


def tactics_digest(tactics: dict[str, str]) -> str:
    """Sha256 of the layer -> tactic map (equal digests: the same kernels were chosen)."""
    return hashlib.sha256(canonical_json(tactics)).hexdigest()


@dataclass
class TacticDiff:
    """How the tactics of two builds differ."""

    changed: list[tuple[str, str, str]] = field(default_factory=list)  # layer, before, after
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)  # fused away or renamed

    @property
    def empty(self) -> bool:
        """True when nothing changed."""
        return not (self.changed or self.added or self.removed)

    def describe(self) -> str:
        """``2 tactics changed, 1 layer added, 3 fused away``."""
        if self.empty:
            return "same tactics"
        parts = [f"{len(self.changed)} tactic(s) changed" if self.changed else "",
                 f"{len(self.added)} layer(s) added" if self.added else "",
                 f"{len(self.removed)} layer(s) fused away" if self.removed else ""]
        return ", ".join(p for p in parts if p)


def diff_tactics(before: dict[str, str], after: dict[str, str]) -> TacticDiff:
    """Compare the previous release's tactics with this build's."""
    return TacticDiff(changed=[(k, before[k], after[k]) for k in sorted(before.keys() & after.keys())
                               if before[k] != after[k]],
                      added=sorted(after.keys() - before.keys()), removed=sorted(before.keys() - after.keys()))
