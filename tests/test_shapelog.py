"""Shape logs: JSONL and CSV, streamed in chunks, malformed lines reported by number."""

from __future__ import annotations

import numpy as np
import pytest

from trtfarm.profiles import shapelog
from trtfarm.profiles.shapelog import ShapeLogError, read_shape_log


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
    assert table_dict(read_shape_log(ok)) == whole
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
