"""Scratch folders and files are gone on every way out, even when a stop lands inside their own cleanup."""

from __future__ import annotations

import pytest

from trtfarm import interrupt, scratch


def test_a_scratch_folder_is_removed_with_its_contents(tmp_path):
    with scratch.scratch_dir("trtfarm-x-", tmp_path) as d:
        (d / "sub").mkdir()
        (d / "sub" / "f").write_bytes(b"x")
    assert not list(tmp_path.iterdir())
    assert scratch.remove_all() == 0  # nothing left recorded


def test_a_stop_inside_the_cleanup_leaves_it_to_remove_all(tmp_path, monkeypatch):
    real = scratch.shutil.rmtree

    def interrupted_rmtree(path, ignore_errors=False):  # the signal lands as the folder is being removed
        raise interrupt.Interrupted(143)

    monkeypatch.setattr(scratch.shutil, "rmtree", interrupted_rmtree)
    with pytest.raises(interrupt.Interrupted):
        with scratch.scratch_dir("trtfarm-x-", tmp_path) as d:
            (d / "plan").write_bytes(b"half")
    assert list(tmp_path.iterdir()) == [d]  # what TemporaryDirectory would leave behind
    monkeypatch.setattr(scratch.shutil, "rmtree", real)
    assert scratch.remove_all() == 1
    assert not list(tmp_path.iterdir())


def test_a_scratch_file_left_by_a_stop_is_removed_by_remove_all(tmp_path, monkeypatch):
    def interrupted_unlink(self, missing_ok=False):
        raise interrupt.Interrupted(130)

    with pytest.raises(interrupt.Interrupted):
        with scratch.scratch_file(tmp_path) as f:
            f.write_bytes(b"in flight")
            monkeypatch.setattr(scratch.Path, "unlink", interrupted_unlink)
    monkeypatch.undo()
    assert [p.name.startswith(".tmp-") for p in tmp_path.iterdir()] == [True]
    assert scratch.remove_all() == 1
    assert not list(tmp_path.iterdir())
