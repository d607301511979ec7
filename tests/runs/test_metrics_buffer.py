"""Buffered metrics (`MetricsLogger(buffered=True)`, the finetuning loop's): rows wait in memory
and are written together, the file and the trackers end up with what an unbuffered logger
writes, and a flush before a checkpoint leaves every row up to its step on disk."""

from __future__ import annotations

import pytest

from sgi_lab.base.files import read_jsonl
from sgi_lab.runs.folder import MetricsLogger
from sgi_lab.runs.tracking import TENSORBOARD_ENV, WANDB_ENV


@pytest.fixture(autouse=True)
def no_trackers(monkeypatch):
    monkeypatch.setenv(TENSORBOARD_ENV, "0")
    monkeypatch.delenv(WANDB_ENV, raising=False)


def test_buffered_rows_wait_for_a_flush_and_end_up_as_unbuffered_ones(tmp_path, monkeypatch):
    monkeypatch.setattr(MetricsLogger, "FLUSH_SECONDS", 3600.0)  # only explicit flushes
    rows = [(s, {"episode/return": float(s), "charts/sps": 2.5}) for s in (3, 7, 7, 12)]
    with MetricsLogger(tmp_path / "plain.jsonl") as plain:
        for step, values in rows:
            plain.log(step, **values)
    buffered = MetricsLogger(tmp_path / "buffered.jsonl", buffered=True)
    written = []
    buffered.trackers.log = written.append  # what the trackers are handed, in order
    for step, values in rows[:3]:
        buffered.log(step, **values)
    assert read_jsonl(tmp_path / "buffered.jsonl") == [] and written == []
    buffered.flush()  # the loop's flush before a checkpoint at step 7
    assert [r["step"] for r in read_jsonl(tmp_path / "buffered.jsonl")] == [3, 7, 7]
    buffered.log(rows[3][0], **rows[3][1])
    buffered.close()  # closing flushes the rest
    assert read_jsonl(tmp_path / "buffered.jsonl") == read_jsonl(tmp_path / "plain.jsonl")
    assert written == read_jsonl(tmp_path / "plain.jsonl")


def test_a_buffered_logger_flushes_on_its_own_after_a_while(tmp_path, monkeypatch):
    """Notebooks and `sgi-lab status` poll metrics.jsonl: rows are never held longer than
    FLUSH_SECONDS."""
    clock = iter([0.0, 0.5, 1.0, 2.5, 2.6])  # construction, then one reading per log
    monkeypatch.setattr("sgi_lab.runs.folder.time.monotonic", lambda: next(clock))
    log = MetricsLogger(tmp_path / "m.jsonl", buffered=True)
    log.log(1, x=1.0)
    log.log(2, x=2.0)
    assert read_jsonl(tmp_path / "m.jsonl") == []
    log.log(3, x=3.0)  # 2.5 s after the last flush: all three written
    assert [r["step"] for r in read_jsonl(tmp_path / "m.jsonl")] == [1, 2, 3]
    log._fh.close()
