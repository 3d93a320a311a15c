"""Shape logs: JSONL and CSV, read columnar (Arrow) or streamed in chunks, malformed lines reported by number."""

from __future__ import annotations

import numpy as np
import pytest

from trtfarm.profiles import distinct, shapelog
from trtfarm.profiles.shapelog import ShapeLogError, read_columnar, read_line_by_line, read_shape_log


def table_dict(t):
    return {tuple(r): int(c) for r, c in zip(t.rows.tolist(), t.counts.tolist(), strict=True)}


def test_jsonl_folds_records_into_distinct_shapes(tmp_path):
    p = tmp_path / "s.jsonl"
    p.write_text('{"input_ids": [16, 87], "attention_mask": [16, 87]}\n'
                 '{"input_ids": [4, 87], "attention_mask": [4, 87]}\n\n'
                 '{"input_ids": [16, 87], "attention_mask": [16, 87]}\n')
    t = read_shape_log(p)
    assert t.columns == (("input_ids", 0), ("input_ids", 1), ("attention_mask", 0), ("attention_mask", 1))
    assert table_dict(t) == {(4, 87, 4, 87): 1, (16, 87, 16, 87): 2} and t.records == 3


def test_csv_gives_the_same_table_as_jsonl(tmp_path):
    j, c = tmp_path / "s.jsonl", tmp_path / "s.csv"
    j.write_text('{"ids": [2, 9], "img": [2, 3, 8, 8]}\n{"ids": [1, 12], "img": [1, 3, 8, 8]}\n')
    c.write_text("ids,img\n2x9,2x3x8x8\n1x12,1x3x8x8\n")
    assert table_dict(read_shape_log(j)) == table_dict(read_shape_log(c))


def test_small_chunks_give_the_same_result_and_exact_line_numbers(tmp_path, monkeypatch, textbook_log):
    lines = textbook_log.read_text().splitlines()[:5000]
    lines[4321] = '{"input_ids": [3, -1], "attention_mask": [3, -1]}'
    p = tmp_path / "s.jsonl"
    p.write_text("\n".join(lines[:4321] + [lines[4321]]) + "\n")
    ok = tmp_path / "ok.jsonl"
    ok.write_text("\n".join(lines[:4321]) + "\n")
    whole = table_dict(read_shape_log(ok))
    monkeypatch.setattr(shapelog, "CHUNK_BYTES", 777)
    assert table_dict(read_line_by_line(ok)) == whole
    with pytest.raises(ShapeLogError, match=r"line 4322: input_ids: negative dimension"):
        read_shape_log(p)


def test_malformed_lines_are_all_named_by_number(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"input_ids": [16, 87], "attention_mask": [16, 87]}\n'
                 '{"input_ids": [4, 87], "attention_mask": [4, 87]\n'
                 '{"input_ids": [4, -3], "attention_mask": [4, 87]}\n'
                 '{"input_ids": [4, 3, 1], "attention_mask": [4, 87]}\n'
                 '{"input_ids": ["4", 3], "attention_mask": [4, 87]}\n'
                 '\n'
                 '{"input_ids": [4, 3]}\n')
    with pytest.raises(ShapeLogError) as err:
        read_shape_log(p)
    msg = str(err.value)
    for expected in ("5 malformed line(s)", "line 2: not valid JSON", "line 3: input_ids: negative dimension",
                     "line 4: input_ids: rank 3 but line 1 has rank 2", "line 5: input_ids: shape must be a list of "
                     "integers", "line 7: inputs ['input_ids'] differ", "nothing was written"):
        assert expected in msg, msg


def test_many_bad_lines_are_summarised(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text("\n".join(["{nope"] * 25) + "\n")
    with pytest.raises(ShapeLogError, match=r"(?s)25 malformed line\(s\).*line 10:.*and 15 more"):
        read_shape_log(p)


def test_empty_and_missing_logs_are_clear_errors(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(ShapeLogError, match="no records"):
        read_shape_log(tmp_path / "empty.jsonl")
    with pytest.raises(ShapeLogError, match="no such shape log"):
        read_shape_log(tmp_path / "missing.jsonl")


def test_distinct_shapes_bound_memory_not_records(textbook_log):
    t = read_shape_log(textbook_log)
    assert t.records == 200_000 and len(t.rows) < 10_000
    assert t.rows.dtype == np.int64


def same_table(a, b):
    return a.columns == b.columns and np.array_equal(a.rows, b.rows) and np.array_equal(a.counts, b.counts)


def test_the_columnar_reader_gives_the_line_readers_table(textbook_log):
    fast = read_columnar(textbook_log)
    assert fast is not None and same_table(fast, read_line_by_line(textbook_log))


def test_layout_variants_read_columnar_like_line_by_line(tmp_path):
    # key order from line 1, other key orders, spacing, CRLF, blank and whitespace-only lines, no final newline
    p = tmp_path / "v.jsonl"
    p.write_bytes(b'{"mask": [2, 7], "ids": [2, 7]}\r\n'
                  b'{"ids": [4, 9], "mask": [4, 9]}\n\n   \n'
                  b'{"ids":[4,9],"mask":[4,9]}\n'
                  b'{ "mask" : [ 2 , 7 ] , "ids" : [ 2 , 7 ] }')
    fast = read_columnar(p)
    assert fast is not None and same_table(fast, read_line_by_line(p))
    assert fast.columns[0] == ("mask", 0) and table_dict(fast) == {(2, 7, 2, 7): 2, (4, 9, 4, 9): 2}


def test_csv_reads_columnar_and_a_blank_csv_line_is_still_an_error(tmp_path):
    c = tmp_path / "s.csv"
    c.write_text("ids, img\n2x9, 2x3x8x8\r\n1x12,1x3x8x8\n2x9,2x3x8x8\n")
    fast = read_columnar(c)
    assert fast is not None and same_table(fast, read_line_by_line(c)) and fast.records == 3
    c.write_text("ids,img\n2x9,2x3x8x8\n\n1x12,1x3x8x8\n")
    assert read_columnar(c) is None
    with pytest.raises(ShapeLogError, match="line 3: not valid JSON"):
        read_shape_log(c)


@pytest.mark.parametrize("line, message", [
    (b'{"input_ids": [4, 87], "attention_mask": [4, 8\x1f7]}', "line 3: not valid JSON"),
    (b'{"input_ids": [4, 87], "attention_mask": [4, 87], "x": [1]}', "line 3: inputs"),
    (b'{"input_ids": [4, 87.0], "attention_mask": [4, 87]}', "line 3: input_ids: shape must be a list of integers"),
    (b'{"input_ids": [4, true], "attention_mask": [4, 87]}', "line 3: input_ids: shape must be a list of integers"),
])
def test_a_bad_line_anywhere_sends_the_log_to_the_line_reader_which_names_it(tmp_path, line, message):
    good = b'{"input_ids": [16, 87], "attention_mask": [16, 87]}\n'
    p = tmp_path / "bad.jsonl"
    p.write_bytes(good * 2 + line + b"\n" + good)
    assert read_columnar(p) is None
    with pytest.raises(ShapeLogError, match=message):
        read_shape_log(p)


def test_too_many_distinct_lines_fall_back_to_the_chunked_reader(tmp_path, monkeypatch, textbook_log):
    monkeypatch.setattr(shapelog, "MAX_DISTINCT_LINES", 100)
    assert read_columnar(textbook_log) is None
    t = read_shape_log(textbook_log)
    assert t.records == 200_000


@pytest.mark.parametrize("block", [7, 51, 52, 53, 200, 4096])
def test_blocks_of_any_size_cut_at_any_line_give_the_line_readers_table(tmp_path, monkeypatch, block):
    """Blocks smaller than a line, ending exactly at one, or holding many; folded after every block or two."""
    monkeypatch.setattr(distinct, "ARROW_BLOCK_BYTES", block)
    monkeypatch.setattr(distinct._LineCounts, "FOLD_ROWS", 2)
    rng = np.random.default_rng(block)
    lines = [f'{{"ids": [{b}, {s}], "mask": [{b}, {s}]}}'.encode() for b, s in rng.integers(1, 40, (300, 2))]
    ends = [b"\n", b"\r\n", b"\n\n", b"\n   \n"]
    j = tmp_path / "v.jsonl"
    j.write_bytes(b"".join(line + ends[i % len(ends)] for i, line in enumerate(lines)).rstrip())  # no final newline
    c = tmp_path / "v.csv"
    c.write_bytes(b"ids,mask\n" + b"".join(f"{b}x{s},{b}x{s}\n".encode() for b, s in rng.integers(1, 40, (300, 2))))
    for path in (j, c):
        fast = read_columnar(path)
        assert fast is not None and same_table(fast, read_line_by_line(path)), path.name
    assert fast.records == 300


# Reads a shape log columnar in a fresh process and prints the Arrow memory pool's peak (MiB) and the records read.
POOL_PEAK = """
import sys
from pathlib import Path
import pyarrow as pa
from trtfarm.profiles.shapelog import read_columnar
table = read_columnar(Path(sys.argv[1]))
print(pa.default_memory_pool().max_memory() >> 20, table.records)
"""


def test_the_columnar_readers_memory_does_not_grow_with_the_logs_length(tmp_path):
    """Arrow holds a block and the distinct lines: a log five times longer peaks at about the same memory."""
    import subprocess
    import sys

    from .conftest import make_traffic

    peaks = []
    for records in (300_000, 1_500_000):
        log = tmp_path / f"{records}.jsonl"
        make_traffic.write_jsonl(log, *make_traffic.synthetic_traffic(records, seed=1))
        proc = subprocess.run([sys.executable, "-c", POOL_PEAK, str(log)], capture_output=True, text=True,
                              timeout=300, check=True)
        peak, read = map(int, proc.stdout.split())
        assert read == records
        peaks.append(peak)
        log.unlink()
    assert peaks[1] <= peaks[0] + 8 and peaks[1] < 32, peaks  # MiB
