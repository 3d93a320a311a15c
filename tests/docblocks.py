"""The fenced blocks of README.md and docs/*.md, with the marker a block carries on the line before it.

``<!-- not run here: WHY -->`` marks a block that needs what this machine lacks (a GPU, AWS, Docker registries);
``<!-- run by PATH ... -->`` names the test module (one of tests/docs_blocks/) or CI script that runs it as written.
tests/test_doc_blocks.py holds every command block to one of the two.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[a-z]*)\n(?P<body>.*?)^(?P=indent)```$", re.S | re.M)
MARKER = re.compile(r"<!-- (?P<kind>not run here|run by) ?:? ?(?P<what>.*?) -->\s*$")
COMMANDS = ("bash", "sh", "python")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its text (dedented) and its marker."""

    doc: Path
    line: int
    lang: str
    text: str
    marker: str | None  # "not run here: ..." / "run by ..." / None

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}"


def blocks(doc: Path) -> list[Block]:
    text = doc.read_text()
    found = []
    for m in FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.search(before)
        indent = len(m.group("indent"))
        body = "".join(line[indent:] + "\n" for line in m.group("body").splitlines())
        found.append(Block(doc, text[:m.start()].count("\n") + 1, m.group("lang"), body,
                           f"{marker.group('kind')}: {marker.group('what')}" if marker else None))
    return found


def all_blocks() -> list[Block]:
    return [b for doc in DOCS for b in blocks(doc)]


def without_comments(text: str) -> list[str]:
    """The commands of a shell block: trailing ``# ...`` comments and blank lines removed."""
    return [re.sub(r"\s+#\s.*$", "", line).rstrip() for line in text.splitlines() if line.strip()]
