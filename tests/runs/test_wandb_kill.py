"""W&B after a kill -9: W&B writes its ``.wandb`` file in batches, so a killed run's W&B record
lacks its last rows (all of them for a short run); a resume replays into its new W&B run the rows
of metrics.jsonl that no W&B run since the folder's last fresh start holds. Checked with the real
wandb in a killed subprocess (skipped without wandb) and with a stand-in wandb module."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import struct
import subprocess
import sys
import time
import types
import warnings
import zlib
from pathlib import Path

import pytest

from sgi_lab.base.files import read_jsonl
from sgi_lab.runs import tracking
from sgi_lab.runs.folder import MetricsLogger
from sgi_lab.runs.tracking import (
    TENSORBOARD_ENV,
    WANDB_ENV,
    WANDB_RUNS_FILE,
    WandbFileError,
    wandb_history,
    wandb_history_steps,
    wandb_records,
)


@pytest.fixture(autouse=True)
def wandb_offline(monkeypatch):
    monkeypatch.setenv(WANDB_ENV, "offline")
    monkeypatch.setenv(TENSORBOARD_ENV, "0")
    monkeypatch.setenv("WANDB_SILENT", "true")


def held_steps(folder: Path) -> list[list[int]]:
    """The steps each W&B run of the folder's current history holds, oldest run first."""
    runs = wandb_history(folder)
    return [sorted(wandb_history_steps(folder / "wandb" / name)) for name, _ in runs]


# -- the real wandb, killed --------------------------------------------------------------------

CHILD = """
import sys, time
from sgi_lab.runs.folder import MetricsLogger
log = MetricsLogger(sys.argv[1], resume_step=None)
for step in (3, 6, 9):
    log.log(step, **{"losses/total": step / 2})
print("logged", flush=True)
time.sleep(120)
"""


def test_a_kill_9_loses_no_wandb_step_once_the_run_resumes(tmp_path):
    """Steps 3, 6, 9 logged, then kill -9 (before W&B's next write of its file): W&B's file
    lacks them (9 at least: W&B holds a step back until a later one comes); the resume at step 9
    replays exactly the missing ones into the new W&B run, which then goes on at 12."""
    if importlib.util.find_spec("wandb") is None:
        pytest.skip("wandb is not installed (pip install 'sgi-lab[wandb]')")
    metrics = tmp_path / "metrics.jsonl"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(metrics)],
        stdout=subprocess.PIPE,
        env=env,
        start_new_session=True,  # its wandb-core too, to end it whatever happens
    )
    try:
        assert child.stdout.readline() == b"logged\n"
        child.send_signal(signal.SIGKILL)
        child.wait()
    finally:
        time.sleep(0.5)  # wandb-core notices its parent's death by itself; if not, it ends here
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        child.stdout.close()
    assert [r["step"] for r in read_jsonl(metrics)] == [3, 6, 9]
    (first,) = held_steps(tmp_path)
    assert 9 not in first and set(first) <= {3, 6}  # the defect as seen: steps lost to W&B

    with pytest.warns(UserWarning, match=r"W&B: replayed .* lack") as said:
        log = MetricsLogger(metrics, resume_step=9)
    missing = sorted({3, 6, 9} - set(first))
    (line,) = [str(w.message) for w in said if str(w.message).startswith("W&B: replayed")]
    assert f"({', '.join(map(str, missing))})" in line
    (mirror,) = log.trackers.mirrors
    assert mirror.replayed == missing
    log.log(12, **{"losses/total": 6.0})
    log.close()
    deadline = time.monotonic() + 15  # finish() may return before wandb-core writes the file
    while 12 not in held_steps(tmp_path)[1] and time.monotonic() < deadline:
        time.sleep(0.1)
    earlier, resumed = held_steps(tmp_path)
    assert earlier == first and resumed == [*missing, 12]
    assert sorted(earlier + resumed) == [3, 6, 9, 12]  # every step once, across the two runs


# -- a stand-in wandb: the replay logic without the package ------------------------------------

_CRC = [zlib.crc32(bytes([kind])) for kind in range(5)]


def leveldb_log(records: list[bytes]) -> bytes:
    """``records`` in the .wandb layout (header, then 32 KiB blocks of crc-checked chunks)."""
    out = bytearray(struct.pack("<4sHB", b":W&B", 0xBEE1, 0))
    for record in records:
        first = True
        while True:
            left = 32768 - len(out) % 32768
            if left < 7:
                out += b"\0" * left
                left = 32768
            chunk, record = record[: left - 7], record[left - 7 :]
            kind = (1 if not record else 2) if first else (4 if not record else 3)
            out += struct.pack("<IHB", zlib.crc32(chunk, _CRC[kind]), len(chunk), kind) + chunk
            first = False
            if not record:
                break
    return bytes(out)


class FakeRecord:
    """Parses the stand-in records: JSON ``{"step": n}`` (a history row) or anything else."""

    def ParseFromString(self, raw: bytes) -> None:
        self.payload = json.loads(raw)
        self.history = types.SimpleNamespace(
            HasField=lambda name: True, step=types.SimpleNamespace(num=self.payload.get("step"))
        )

    def WhichOneof(self, name: str) -> str:
        return "history" if "step" in self.payload else "stats"


class FakeRun:
    """Keeps what is logged; `write` saves some of its steps as W&B would have by then."""

    count = 0

    def __init__(self, dir: str, name: str, **kwargs) -> None:
        FakeRun.count += 1
        self.id, self.name, self.logged = f"fake{FakeRun.count}", name, []
        self.sync_dir = Path(dir) / "wandb" / f"offline-run-20261129_000000-{self.id}"
        self.dir = str(self.sync_dir / "files")
        Path(self.dir).mkdir(parents=True)

    def log(self, values: dict, step: int) -> None:
        self.logged.append((step, values))

    def write(self, steps, cut: int = 0) -> None:
        """The .wandb file holding ``steps`` (after a record that crosses a block's end), its
        last ``cut`` bytes torn off as a kill leaves it."""
        records = [json.dumps({"step": s}).encode() for s in steps]
        data = leveldb_log([b"{}", json.dumps({"pad": "x" * 40000}).encode(), *records])
        (self.sync_dir / f"run-{self.id}.wandb").write_bytes(data[: len(data) - cut])

    def finish(self) -> None:
        self.write(sorted({step for step, _ in self.logged}))


@pytest.fixture
def fake_wandb(monkeypatch):
    """``import wandb`` gives the stand-in; returns the runs it made, oldest first."""
    runs: list[FakeRun] = []

    def init(**kwargs):
        runs.append(FakeRun(**kwargs))
        return runs[-1]

    proto = types.ModuleType("wandb.proto.wandb_internal_pb2")
    proto.Record = FakeRecord
    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init))
    monkeypatch.setitem(sys.modules, "wandb.proto", types.ModuleType("wandb.proto"))
    monkeypatch.setitem(sys.modules, "wandb.proto.wandb_internal_pb2", proto)
    return runs


def killed(log: MetricsLogger) -> None:
    """What a kill -9 leaves: metrics.jsonl flushed, the W&B run never finished."""
    log.flush()
    log._fh.close()


def test_a_resume_replays_only_the_steps_no_earlier_wandb_run_holds(tmp_path, fake_wandb):
    """Three lives: killed with W&B holding 1-2 of 1-6, resumed at 5 and killed again with
    the second run holding only what it replayed, resumed at 7. Each resume replays exactly the
    rows up to its step that the earlier runs lack, in step order, then goes on."""
    metrics = tmp_path / "metrics.jsonl"
    log = MetricsLogger(metrics)
    for step in range(1, 7):
        log.log(step, loss=float(step), note="text is not plotted")
    killed(log)
    fake_wandb[0].write([1, 2, 3], cut=3)  # the record of 3 torn: holds 1, 2

    with pytest.warns(UserWarning, match=r"replayed 3 row\(s\) .* \(3, 4, 5\) .* into .*@5$"):
        log = MetricsLogger(metrics, resume_step=5)
    assert fake_wandb[1].logged == [(s, {"loss": float(s)}) for s in (3, 4, 5)]
    assert log.trackers.mirrors[0].replayed == [3, 4, 5]
    log.log(6, loss=60.0)
    log.log(7, loss=70.0)
    log.log(7, extra=7.5)
    killed(log)
    fake_wandb[1].write([3, 4])  # 5, 6, 7 not yet written when killed

    with pytest.warns(UserWarning, match=r"\(5, 6, 7\)"):
        log = MetricsLogger(metrics, resume_step=7)
    log.log(8, loss=80.0)
    log.close()
    assert fake_wandb[2].logged == [
        (5, {"loss": 5.0}),
        (6, {"loss": 60.0}),
        (7, {"loss": 70.0}),
        (7, {"extra": 7.5}),
        (8, {"loss": 80.0}),
    ]
    names = [Path(r.dir).parent.name for r in fake_wandb]
    assert wandb_history(tmp_path) == list(zip(names, [None, 5, 7]))
    assert held_steps(tmp_path) == [[1, 2], [3, 4], [5, 6, 7, 8]]


def test_rows_a_run_logged_past_a_later_resume_do_not_count(tmp_path, fake_wandb):
    """The first run wrote steps 1-11 to W&B, but the resume was at 9: its 10 and 11 are of
    rows metrics.jsonl dropped. The second run, killed before writing any, redid 10-12; the
    resume at 12 replays those three, not only 12."""
    metrics = tmp_path / "metrics.jsonl"
    log = MetricsLogger(metrics)
    for step in range(1, 13):
        log.log(step, loss=-float(step))
    killed(log)
    fake_wandb[0].write(range(1, 12))
    log = MetricsLogger(metrics, resume_step=9)
    assert fake_wandb[1].logged == []  # 1-9 held
    for step in (10, 11, 12):
        log.log(step, loss=float(step))
    killed(log)
    with pytest.warns(UserWarning, match=r"\(10, 11, 12\)"):
        MetricsLogger(metrics, resume_step=12).close()
    assert fake_wandb[2].logged == [(s, {"loss": float(s)}) for s in (10, 11, 12)]


def test_a_resume_after_a_clean_end_replays_nothing(tmp_path, fake_wandb):
    metrics = tmp_path / "metrics.jsonl"
    with MetricsLogger(metrics) as log:
        for step in (1, 2, 3):
            log.log(step, loss=float(step))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        log = MetricsLogger(metrics, resume_step=3)
    assert log.trackers.mirrors[0].replayed == [] and fake_wandb[1].logged == []
    log.close()


def test_a_fresh_start_forgets_the_earlier_wandb_runs(tmp_path, fake_wandb):
    """An --overwrite's W&B run holds new rows at the old steps: the old run's file, still in
    the folder, must not count as holding them."""
    metrics = tmp_path / "metrics.jsonl"
    with MetricsLogger(metrics) as log:
        for step in (1, 2, 3):
            log.log(step, loss=-1.0)
    log = MetricsLogger(metrics)  # a fresh start over the same folder
    assert wandb_history(tmp_path) == [(Path(fake_wandb[1].dir).parent.name, None)]
    for step in (1, 2, 3):
        log.log(step, loss=float(step))
    killed(log)
    with pytest.warns(UserWarning, match=r"\(1, 2, 3\)"):
        MetricsLogger(metrics, resume_step=3).close()
    assert fake_wandb[2].logged == [(s, {"loss": float(s)}) for s in (1, 2, 3)]


def test_without_the_list_of_runs_a_resume_replays_every_row(tmp_path, fake_wandb, monkeypatch):
    """A folder written before the list existed, or with W&B switched on only now."""
    monkeypatch.setenv(WANDB_ENV, "0")
    metrics = tmp_path / "metrics.jsonl"
    with MetricsLogger(metrics) as log:
        for step in (1, 2, 3, 4):
            log.log(step, loss=float(step))
    monkeypatch.setenv(WANDB_ENV, "offline")
    with pytest.warns(UserWarning, match=rf"\(1, 2, 3\) \(no {WANDB_RUNS_FILE} names"):
        MetricsLogger(metrics, resume_step=3).close()
    assert fake_wandb[0].logged == [(s, {"loss": float(s)}) for s in (1, 2, 3)]


def test_an_unreadable_wandb_file_has_its_steps_replayed(tmp_path, fake_wandb):
    metrics = tmp_path / "metrics.jsonl"
    log = MetricsLogger(metrics)
    log.log(1, loss=1.0)
    killed(log)
    (fake_wandb[0].sync_dir / f"run-{fake_wandb[0].id}.wandb").write_bytes(
        b"PK\x03\x04 something else"
    )
    with pytest.warns(UserWarning) as said:
        MetricsLogger(metrics, resume_step=1).close()
    assert any("not a W&B transaction log" in str(w.message) for w in said)
    assert fake_wandb[1].logged == [(1, {"loss": 1.0})]


# -- the .wandb reader ----------------------------------------------------------------------


@pytest.mark.parametrize("cut", [0, 1, 7, 20000, 40000, 70000])
def test_wandb_records_reads_every_whole_record_before_a_cut(tmp_path, cut):
    """Records spanning blocks (a 50 kB one crosses two block ends), the file cut anywhere:
    exactly the records that end before the cut come back."""
    records = [b"a" * 10, b"b" * 50000, b"c" * 32740, b"d" * 3, b"e" * 9000]
    data = leveldb_log(records)
    path = tmp_path / "run-x.wandb"
    path.write_bytes(data[: len(data) - cut])
    ends = [len(leveldb_log(records[:k])) for k in range(1, len(records) + 1)]
    assert wandb_records(path) == [r for r, end in zip(records, ends) if end <= len(data) - cut]


def test_wandb_records_stops_at_a_damaged_chunk_and_refuses_another_format(tmp_path, fake_wandb):
    data = bytearray(leveldb_log([b"one", b"two", b"three"]))
    data[7 + 7 + 3 + 7] ^= 0xFF  # a byte of "two"
    path = tmp_path / "run-x.wandb"
    path.write_bytes(bytes(data))
    assert wandb_records(path) == [b"one"]
    path.write_bytes(b"\x00" * 40)
    with pytest.raises(WandbFileError, match="run-x.wandb: not a W&B transaction log"):
        wandb_records(path)
    assert tracking.wandb_history_steps(tmp_path / "missing") == set()  # nothing written yet


def test_a_fresh_start_with_wandb_off_forgets_them_too(tmp_path, fake_wandb, monkeypatch):
    """W&B on, then an --overwrite with it off, then a resume with it on: the first W&B run
    holds other rows at the same steps, so everything up to the resume is replayed."""
    metrics = tmp_path / "metrics.jsonl"
    with MetricsLogger(metrics) as log:
        log.log(1, loss=-1.0)
    monkeypatch.setenv(WANDB_ENV, "0")
    with MetricsLogger(metrics) as log:
        log.log(1, loss=1.0)
    assert wandb_history(tmp_path) is None
    monkeypatch.setenv(WANDB_ENV, "offline")
    with pytest.warns(UserWarning, match=r"\(1\) \(no "):
        MetricsLogger(metrics, resume_step=1).close()
    assert fake_wandb[1].logged == [(1, {"loss": 1.0})]
