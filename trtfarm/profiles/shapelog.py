"""Read request-shape logs (JSONL or CSV) of any size into a weighted table of distinct shapes.

JSONL: one ``{"input_ids": [16, 87], "attention_mask": [16, 87]}`` per request or batch. CSV: a header of input
names and cells like ``16x87``.

The fast path is columnar (``distinct.distinct_lines``): the log is read in blocks, Apache Arrow's multi-threaded
CSV reader splits each into lines and counts the distinct ones, the counts are folded as they come, and only the
distinct lines (a few thousand for real traffic) are parsed and checked in Python, with exactly the checks of the
line-by-line reader. A log in which any distinct line is malformed, or with more than ``MAX_DISTINCT_LINES``
distinct lines, is read again line by line: in chunks, a chunk whose lines share the first line's layout parsed in
bulk by NumPy, any other chunk line by line to name the bad lines by number. Either way memory stays bounded by the
number of *distinct* shapes, not records, and both give the same table.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trtfarm.errors import UserInputError
from trtfarm.profiles.distinct import distinct_lines
from trtfarm.profiles.profile import MAX_DIM

CHUNK_BYTES = 16 << 20
MAX_DISTINCT_LINES = 1_000_000
MAX_REPORTED = 10
_NUM = re.compile(rb"-?\d+")
_CSV_CELL = re.compile(rb"\d+(x\d+)*")
_DIGITS = b"0123456789"
_TO_NUMBERS = bytes(c if chr(c) in "0123456789-" else 32 for c in range(256))  # everything else -> space


@dataclass(frozen=True)
class ShapeTable:
    """Distinct shapes and how often each was seen. ``columns`` are (input, dim) pairs; ``rows`` are int64."""

    columns: tuple[tuple[str, int], ...]
    rows: np.ndarray  # (distinct, len(columns))
    counts: np.ndarray  # (distinct,)

    @property
    def records(self) -> int:
        """Total records read."""
        return int(self.counts.sum())

    @property
    def inputs(self) -> dict[str, int]:
        """Input name -> rank, in log order."""
        ranks: dict[str, int] = {}
        for name, dim in self.columns:
            ranks[name] = dim + 1
        return ranks


class ShapeLogError(UserInputError):
    """The log has malformed lines; the message lists them by line number."""


class _Layout:
    """The first record's layout: input names, ranks, and where its numbers sit in a line."""

    def __init__(self, record: dict, first_line: bytes) -> None:
        self.names = list(record)
        self.ranks = {k: len(v) for k, v in record.items()}
        self.columns = tuple((k, d) for k in self.names for d in range(self.ranks[k]))
        self.skeleton = first_line.strip().translate(None, _DIGITS)  # the line without its digits
        in_string = [_inside_string(first_line, m.start()) for m in _NUM.finditer(first_line)]
        self.keep = np.array([not s for s in in_string])  # numbers inside key strings are not dims


def _inside_string(line: bytes, pos: int) -> bool:
    return line[:pos].count(b'"') % 2 == 1


def _check_record(record: object, layout: _Layout | None, lineno: int) -> list[str]:
    if not isinstance(record, dict) or not record:
        return [f"line {lineno}: expected an object of input name -> shape list"]
    problems = []
    for name, shape in record.items():
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
            problems.append(f"line {lineno}: {name}: shape must be a list of integers, got {shape!r}")
        elif any(d < 0 for d in shape):
            problems.append(f"line {lineno}: {name}: negative dimension in {shape}")
        elif any(d > MAX_DIM for d in shape):
            problems.append(f"line {lineno}: {name}: dimension {max(shape)} in {shape} is beyond the largest TensorRT "
                            f"builds ({MAX_DIM}); drop the line or fix the logger")
        elif layout and name in layout.ranks and len(shape) != layout.ranks[name]:
            problems.append(f"line {lineno}: {name}: rank {len(shape)} but line 1 has rank {layout.ranks[name]} "
                            "(mixed ranks: log one input layout per file)")
    if layout and set(record) != set(layout.names):
        problems.append(f"line {lineno}: inputs {sorted(record)} differ from line 1's {sorted(layout.names)}")
    return problems


class _Reader:
    """Accumulates distinct rows across chunks."""

    def __init__(self, path: Path) -> None:
        self.path, self.layout = path, None
        self.errors: list[str] = []
        self.error_count = 0
        self.parts: list[tuple[np.ndarray, np.ndarray]] = []

    def _error(self, problems: list[str]) -> None:
        self.error_count += len(problems)
        self.errors.extend(problems[: MAX_REPORTED - len(self.errors)])

    def _fold(self, rows: np.ndarray, counts: np.ndarray | None = None) -> None:
        """Fold rows into distinct rows with counts (a mixed-radix 1-D key when it fits in int64)."""
        radix = rows.max(axis=0) + 1 if len(rows) else np.ones(rows.shape[1], np.int64)
        if np.sum(np.log2(radix.astype(np.float64))) < 62:
            scale = np.concatenate([np.cumprod(radix[::-1])[::-1][1:], [1]]).astype(np.int64)
            keys, inverse = np.unique(rows @ scale, return_inverse=True)
            uniq = (keys[:, None] // scale) % radix
        else:
            uniq, inverse = np.unique(rows, axis=0, return_inverse=True)
        weights = np.bincount(inverse.ravel(), weights=counts, minlength=len(uniq)).astype(np.int64)
        self.parts.append((uniq, weights))
        if len(self.parts) > 64:
            self._compact()

    def _compact(self) -> None:
        rows = np.concatenate([p[0] for p in self.parts])
        counts = np.concatenate([p[1] for p in self.parts])
        self.parts = []
        self._fold(rows, counts)

    def bulk(self, lines: list[bytes], first_lineno: int) -> bool:
        """Parse lines that all match the layout template in one go; False when they do not."""
        joined = b"\n".join(lines)
        if joined.translate(None, _DIGITS) != b"\n".join([self.layout.skeleton] * len(lines)):
            return False  # some line differs in more than its digits: find it line by line
        flat = np.fromstring(joined.translate(_TO_NUMBERS), dtype=np.int64, sep=" ")
        if flat.size != len(lines) * self.layout.keep.size:
            return False
        numbers = flat.reshape(len(lines), -1)[:, self.layout.keep]
        wrong = (numbers < 0) | (numbers > MAX_DIM)  # int64 overflow reads as its maximum: beyond MAX_DIM too
        bad = np.flatnonzero(wrong.any(axis=1))
        for i in bad[:MAX_REPORTED]:
            what = "negative dimension" if (numbers[i] < 0).any() else f"dimension beyond {MAX_DIM} (TensorRT's max)"
            self._error([f"line {first_lineno + int(i)}: {what} in {lines[i].decode(errors='replace')}"])
        self.error_count += max(0, len(bad) - MAX_REPORTED)
        self._fold(numbers[~wrong.any(axis=1)])
        return True

    def slow(self, lines: list[bytes], first_lineno: int) -> None:
        """Parse line by line, collecting every problem with its line number."""
        rows = []
        for i, line in enumerate(lines):
            lineno = first_lineno + i
            try:
                record = json.loads(line)
            except UnicodeDecodeError as err:
                self._error([f"line {lineno}: not UTF-8 text (byte 0x{err.object[err.start]:02x} at column "
                             f"{err.start + 1}); is this a shape log?"])
                continue
            except ValueError as err:
                self._error([f"line {lineno}: not valid JSON ({err.msg} at column {err.colno})"])
                continue
            if self.layout is None and isinstance(record, dict) and not _check_record(record, None, lineno):
                self.layout = _Layout(record, line)
            problems = _check_record(record, self.layout, lineno)
            if problems:
                self._error(problems)
            else:
                rows.append([record[k][d] for k, d in self.layout.columns])
        if rows:
            self._fold(np.array(rows, dtype=np.int64))

    def table(self) -> ShapeTable:
        if self.errors:
            more = f"\n  ... and {self.error_count - len(self.errors)} more" if self.error_count > len(self.errors) \
                else ""
            raise ShapeLogError(f"{self.path}: {self.error_count} malformed line(s):\n  " + "\n  ".join(self.errors)
                                + more + "\nFix those lines (or drop them) and run again; nothing was written.")
        if not self.parts:
            raise ShapeLogError(f"{self.path}: no records; expected one JSON object (or CSV row) per line")
        self._compact()
        rows, counts = self.parts[0]
        return ShapeTable(self.layout.columns, rows, counts)


def _line_chunks(path: Path) -> Iterator[tuple[list[bytes], int]]:
    """Yield (non-empty lines, line number of the first) in ~16 MiB chunks. Blank lines keep their numbers."""
    lineno, tail = 1, b""
    with open(path, "rb") as f:
        while True:
            block = f.read(CHUNK_BYTES)
            data = tail + block
            if not block:
                cut = len(data)
            else:
                cut = data.rfind(b"\n") + 1
                if cut == 0:
                    tail = data
                    continue
            lines, tail = data[:cut].split(b"\n"), data[cut:]
            if lines and lines[-1] == b"":
                lines.pop()
            while lines:  # split at blank lines so line numbers stay exact
                try:
                    blank = next(i for i, ln in enumerate(lines) if not ln.strip())
                except StopIteration:
                    blank = len(lines)
                if blank:
                    yield lines[:blank], lineno
                lineno += blank + (blank < len(lines))
                lines = lines[blank + 1:]
            if not block:
                return


def _csv_as_jsonl(path: Path) -> Iterator[tuple[list[bytes], int]]:
    with open(path, "rb") as f:
        header = [h.strip().decode() for h in f.readline().split(b",")]
        if not header or not all(header):
            raise ShapeLogError(f"{path}: line 1: the CSV header must name the inputs, e.g. input_ids,attention_mask")
        batch, first = [], 2
        for i, line in enumerate(f, start=2):
            cells = line.strip().split(b",")
            if len(cells) != len(header) or not all(_CSV_CELL.fullmatch(c.strip()) for c in cells):
                batch.append(b"{bad}")  # becomes a JSON error on this line number
            else:
                shapes = ", ".join(f'"{h}": [{c.strip().decode().replace("x", ", ")}]' for h, c in zip(
                    header, cells, strict=True))
                batch.append(("{" + shapes + "}").encode())
            if len(batch) >= 200_000:
                yield batch, first
                batch, first = [], i + 1
        if batch:
            yield batch, first


def read_shape_log(path: str | Path) -> ShapeTable:
    """Read a JSONL or CSV shape log; raise ``ShapeLogError`` listing malformed lines by number."""
    path = Path(path)
    if not path.is_file():
        raise ShapeLogError(f"{path}: no such shape log")
    table = read_columnar(path)
    return table if table is not None else read_line_by_line(path)


def read_line_by_line(path: Path) -> ShapeTable:
    """The chunked reader: bulk NumPy parsing where lines share a layout, exact line numbers for bad lines."""
    reader = _Reader(path)
    chunks = _csv_as_jsonl(path) if path.suffix.lower() == ".csv" else _line_chunks(path)
    for lines, first in chunks:
        if reader.layout is None:
            reader.slow(lines[:1], first)
            lines, first = lines[1:], first + 1
        if lines and not (reader.layout and reader.bulk(lines, first)):
            reader.slow(lines, first)
    return reader.table()


def _csv_record(header: list[str], line: bytes) -> dict | None:
    """One CSV row as a record (None when malformed), with the line reader's rules."""
    cells = line.strip().split(b",")
    if len(cells) != len(header) or not all(_CSV_CELL.fullmatch(c.strip()) for c in cells):
        return None
    return {h: [int(x) for x in c.strip().split(b"x")] for h, c in zip(header, cells, strict=True)}


def _first_line(path: Path, csv: bool) -> bytes | None:
    """The first record's line (CSV: the first row after the header): its layout orders the columns."""
    with open(path, "rb") as f:
        if csv:
            f.readline()
        for line in f:
            if csv or line.strip():
                return line.rstrip(b"\r\n")
    return None


def read_columnar(path: Path) -> ShapeTable | None:
    """The table from the distinct lines, or None when the line-by-line reader must run (it names bad lines)."""
    csv = path.suffix.lower() == ".csv"
    header = None
    if csv:
        with open(path, "rb") as f:
            header = [h.strip().decode(errors="replace") for h in f.readline().split(b",")]
        if not all(header) or len(set(header)) != len(header) or any(set(h) & set('"\\') for h in header):
            return None
    first = _first_line(path, csv)
    lines = distinct_lines(path, csv, MAX_DISTINCT_LINES) if first else None
    if not lines:
        return None
    try:
        records = {line: _csv_record(header, line) if csv else json.loads(line) for line in [first, *lines]
                   if csv or line.strip()}  # whitespace-only JSONL lines are skipped like blank ones
    except ValueError:
        return None
    if records[first] is None or _check_record(records[first], None, 1):
        return None
    layout, rows, counts = _Layout(records[first], first), [], []
    for line, count in lines.items():
        if not csv and not line.strip():
            continue
        record = records[line]
        if record is None or _check_record(record, layout, 0):
            return None
        rows.append([record[k][d] for k, d in layout.columns])
        counts.append(count)
    if not layout.columns or not rows:
        return None
    reader = _Reader(path)
    reader.layout = layout
    reader._fold(np.array(rows, dtype=np.int64), np.array(counts, dtype=np.int64))
    return reader.table()
