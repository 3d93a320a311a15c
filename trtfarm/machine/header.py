"""Read the plan header without loading the engine (no GPU needed).

The header is undocumented (trtexec ``--getPlanVersionOnly`` reads it): little-endian uint32 magic ``0x74727466``
(``b"ftrt"``) at byte 0 and the toolchain's major.minor.patch.build in bytes 24-27. TensorRT-RTX 1.7 plans (measured
here) use the same layout with magic ``0x74727476`` (``b"vtrt"``). A pre-check only: deserialisation on the target
remains the real check.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

MAGICS = {0x74727466: "tensorrt", 0x74727476: "tensorrt_rtx"}
HEADER_BYTES = 28


@dataclass(frozen=True)
class PlanHeader:
    """What the first bytes of a plan say."""

    magic_ok: bool
    flavour: str | None  # "tensorrt" / "tensorrt_rtx", from the magic
    version: str | None  # "11.4.0.106", or None when the magic is wrong


def read_plan_header(source: bytes | Path) -> PlanHeader:
    """Parse the header from plan bytes or a plan file."""
    if isinstance(source, (str, Path)):
        with open(source, "rb") as f:
            head = f.read(HEADER_BYTES)
    else:
        head = bytes(source[:HEADER_BYTES])
    flavour = MAGICS.get(struct.unpack_from("<I", head, 0)[0]) if len(head) >= HEADER_BYTES else None
    if flavour is None:
        return PlanHeader(False, None, None)
    return PlanHeader(True, flavour, ".".join(str(b) for b in head[24:28]))


def version_matches(header_version: str, toolchain_version: str) -> bool:
    """Compare a header's four numbers with a declared version (which may omit the build number)."""
    declared = toolchain_version.split(".")
    return header_version.split(".")[: len(declared)] == declared
