"""A model export as a run names it (the folder's URI, the model name, its id in the registry), and its record."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, ValidationError

from trtfarm.errors import CorruptObject
from trtfarm.vocabulary.manifest import validation_problems


@dataclass(frozen=True)
class ExportRef:
    """One model export: the folder's URI, the model name, and its id in the registry (None: not registered).

    ``named``: the name is the export's own (the registry's, or a hook's ``name``); False when it is only the folder's
    default, which the export's farm.yaml ``name:`` overrides (``planning.plan.model_name``).
    """

    uri: str
    name: str
    export_id: str | None = None
    named: bool = True

    def to_json(self) -> dict:
        """``{uri, name, export_id}``."""
        return {"uri": self.uri, "name": self.name, "export_id": self.export_id}


class ExportFile(BaseModel):
    """One file of a registered export as registration uploaded it."""

    model_config = ConfigDict(frozen=True)
    sha256: str
    bytes: int


class ExportRecord(BaseModel):
    """A registered export's ``export.json``: what registration uploaded, with the model's digests.

    Written last and create-only, so an export without one is invisible; planning trusts its digests and a fetch
    checks each file against it.
    """

    model_config = ConfigDict(frozen=True, defer_build=True)  # (built where first read: a build reads none)
    name: str
    export_id: str
    registered_at: str
    source: str = ""
    onnx_digest: str
    graph_digest: str
    files: dict[str, ExportFile] = {}
    model_files: list[str] = []  # the ONNX file and its external data, as the folder names them

    def to_bytes(self) -> bytes:
        """The stored form."""
        return self.model_dump_json(indent=2).encode()

    @classmethod
    def from_bytes(cls, data: bytes | str, where: str) -> ExportRecord:
        """Parse a stored record; a damaged one is ``CorruptObject`` naming ``where`` (its URL) and the problem."""
        try:
            return cls.model_validate_json(data)
        except ValidationError as err:
            raise CorruptObject(f"{where}: not an export record ({validation_problems(err)}); register the export "
                                "again (`trtfarm models push FOLDER`)") from err
