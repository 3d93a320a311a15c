"""The distinct lines of a log of any length and how often each occurs, in memory bounded by a block and them.

The log is read in blocks of ``ARROW_BLOCK_BYTES`` cut at line ends, into one buffer read into again and again.
Apache Arrow's multi-threaded CSV reader splits each block into lines (one column, no delimiter: a raw 0x1F byte
cannot occur in valid JSON) and counts the distinct ones; the counts are folded into one table as they come (Arrow's
hash kernel numbers the distinct lines, NumPy adds up their counts). Arrow's streaming reader, which this replaced,
buffered up to 32 blocks ahead, and keeping every block's counts to the end grew with the log too.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

ARROW_BLOCK_BYTES = 4 << 20  # a block of the log split and counted by Arrow at a time


def distinct_lines(path: Path, csv: bool, most: int) -> dict[bytes, int] | None:
    """Distinct lines of the file (the CSV header skipped) with their counts; None past ``most`` of them.

    None too when Arrow cannot split the file (the line reader says what is wrong). Memory holds a block and the
    distinct lines, whatever the log's length.
    """
    import pyarrow as pa
    from pyarrow import csv as pacsv

    read = pacsv.ReadOptions(column_names=["line"])
    parse = pacsv.ParseOptions(delimiter="\x1f", quote_char=False, double_quote=False, escape_char=False,
                               newlines_in_values=False, ignore_empty_lines=not csv)  # CSV: a blank line is an error
    convert = pacsv.ConvertOptions(column_types={"line": pa.binary()}, strings_can_be_null=False)
    counted = _LineCounts()
    try:
        for block in _line_blocks(path, csv):
            counted.add(pacsv.read_csv(pa.py_buffer(block), read_options=read, parse_options=parse,
                                       convert_options=convert).column(0))
            if counted.distinct > most:
                return None
    except pa.ArrowInvalid:  # a 0x1F byte: the line reader says what is wrong
        return None
    lines = counted.table()
    return None if lines is None or len(lines) > most else lines


def _line_blocks(path: Path, csv: bool) -> Iterator[memoryview]:
    """The file (after a CSV's header line) in blocks of about ``ARROW_BLOCK_BYTES``, each ending at a line end.

    One buffer is read into again and again (a line longer than it doubles it), so the reading allocates nothing
    per block; a block is valid until the next one is asked for.
    """
    buf, filled = bytearray(ARROW_BLOCK_BYTES), 0  # filled: the bytes of an unfinished line carried to the front
    with open(path, "rb") as f:
        if csv:
            f.readline()
        while n := f.readinto(memoryview(buf)[filled:]):
            end = filled + n
            cut = buf.rfind(b"\n", 0, end) + 1
            if cut:
                yield memoryview(buf)[:cut]
                buf[:end - cut] = buf[cut:end]
                filled = end - cut
            else:
                filled = end
                if filled == len(buf):  # one line longer than the buffer
                    buf = buf + bytes(len(buf))
    if buf[:filled].strip(b"\r\n"):
        yield memoryview(buf)[:filled]


class _LineCounts:
    """Distinct lines and their counts, folded block by block (a few blocks' counts held at a time)."""

    FOLD_ROWS = 1 << 16  # distinct lines held unfolded before they are merged into the table

    def __init__(self) -> None:
        self.parts: list = []
        self.held = 0
        self.folded = None  # (distinct lines, their counts): two pyarrow arrays

    @property
    def distinct(self) -> int:
        """Distinct lines in the folded table (a lower bound of the file's)."""
        return len(self.folded[0]) if self.folded is not None else 0

    def add(self, lines) -> None:
        """Count one block's lines."""
        import pyarrow.compute as pc

        counts = pc.value_counts(lines)
        self.parts.append((counts.field("values"), counts.field("counts")))
        self.held += len(counts)
        if self.held > self.FOLD_ROWS:
            self._fold()

    def _fold(self) -> None:
        """Merge the held counts into the table: Arrow's hash kernel numbers the distinct lines, NumPy adds up."""
        import pyarrow as pa
        import pyarrow.compute as pc

        values = [v for v, _ in self.parts] + ([self.folded[0]] if self.folded is not None else [])
        counts = [c for _, c in self.parts] + ([self.folded[1]] if self.folded is not None else [])
        encoded = pc.dictionary_encode(pa.concat_arrays(values))
        sums = np.bincount(encoded.indices.to_numpy(), minlength=len(encoded.dictionary),
                           weights=np.concatenate([c.to_numpy() for c in counts]).astype(np.float64))
        self.folded = (encoded.dictionary, pa.array(sums.round().astype(np.int64)))
        self.parts, self.held = [], 0

    def table(self) -> dict[bytes, int] | None:
        """The distinct lines with their counts; None for a file without lines."""
        if self.parts:
            self._fold()
        if self.folded is None:
            return None
        return dict(zip(self.folded[0].to_pylist(), self.folded[1].to_pylist(), strict=True))
