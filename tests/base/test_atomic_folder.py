"""`atomic_folder`: a folder appears whole or not at all, and a folder with files is never
replaced."""

from __future__ import annotations

import os

import pytest

from sgi_lab.base.files import atomic_folder


def test_the_folder_appears_whole_only_when_the_block_ends(tmp_path):
    out = tmp_path / "made"
    with atomic_folder(out) as temp:
        (temp / "a.txt").write_text("1")
        (temp / "sub").mkdir()
        (temp / "sub" / "b.txt").write_text("2")
        assert not out.exists()  # a reader sees nothing yet
        assert temp.is_absolute() and temp.parent == out.absolute().parent
        assert temp.name == f".made.{os.getpid()}.partial"
    assert (out / "a.txt").read_text() == "1" and (out / "sub" / "b.txt").read_text() == "2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["made"]  # no temp folder left


def test_an_empty_folder_is_replaced(tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    with atomic_folder(out) as temp:
        (temp / "x").write_text("x")
    assert [p.name for p in out.iterdir()] == ["x"]


def test_an_error_leaves_nothing_and_the_old_folder_as_it_was(tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    with pytest.raises(RuntimeError, match="half way"), atomic_folder(out) as temp:
        (temp / "half.txt").write_text("half")
        raise RuntimeError("half way")
    assert out.is_dir() and not any(out.iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]


def test_a_folder_with_files_is_never_replaced(tmp_path):
    out = tmp_path / "theirs"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(OSError), atomic_folder(out) as temp:
        (temp / "new.txt").write_text("new")
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert (out / "keep.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["theirs"]


def test_a_leftover_of_this_process_is_cleared_first(tmp_path):
    out = tmp_path / "made"
    stale = tmp_path / f".made.{os.getpid()}.partial"
    stale.mkdir()
    (stale / "old.txt").write_text("old")
    with atomic_folder(out) as temp:
        (temp / "new.txt").write_text("new")
    assert [p.name for p in out.iterdir()] == ["new.txt"]
