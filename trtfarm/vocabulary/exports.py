"""A model export as a run names it: the folder's URI, the model name, and its id in the registry."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ExportRef:
    """One model export: the folder's URI, the model name, and its id in the registry (None: not registered)."""

    uri: str
    name: str
    export_id: str | None = None

    def to_json(self) -> dict:
        """``{uri, name, export_id}``."""
        return {"uri": self.uri, "name": self.name, "export_id": self.export_id}
