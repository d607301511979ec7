"""A folder's lock file is opened without following a symbolic link, and only
when it is a regular file (a `cp -rs` copy of a run, or a planted link, must not have a PID
written into the file it points at); `lock_holder` tells a held lock from a free one."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from sgi_lab.base.files import LOCK_FILE, FolderLock, RunFolderError, lock_holder
from sgi_lab.runs.folder import RunDir


def test_a_lock_file_that_is_a_link_is_refused_and_its_target_untouched(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    run = tmp_path / "run"
    RunDir.open(run, "pretrain", {"steps": 1}).start()
    RunDir(run).unlock()
    (run / LOCK_FILE).unlink(missing_ok=True)
    (run / LOCK_FILE).symlink_to(notes)
    with pytest.raises(RunFolderError, match=r"lock file is not a regular file"):
        FolderLock(run, "a test")
    assert notes.read_text() == "my notes\n"
    # A run resumed or started over in that folder is refused before anything is written.
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    for overwrite in (False, True):
        with pytest.raises(RunFolderError, match=str(run / LOCK_FILE)):
            RunDir.open(run, "pretrain", {"steps": 1}, overwrite=overwrite)
    assert notes.read_text() == "my notes\n"
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_lock_file_that_is_not_a_regular_file_is_refused(tmp_path, kind):
    folder = tmp_path / "run"
    folder.mkdir()
    if kind == "folder":
        (folder / LOCK_FILE).mkdir()
    else:
        os.mkfifo(folder / LOCK_FILE)
    with pytest.raises(RunFolderError, match=LOCK_FILE):
        FolderLock(folder, "a test", wait=0)
    assert lock_holder(folder) is None


def test_lock_holder_tells_a_live_holder_from_a_killed_one(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    assert lock_holder(folder) is None  # no lock file
    code = (
        "import sys, time; from sgi_lab.base.files import FolderLock; "
        f"lock = FolderLock({str(folder)!r}, 'a test'); print('held', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        assert lock_holder(folder) == proc.pid
        with pytest.raises(RunFolderError, match=f"PID {proc.pid}"):
            FolderLock(folder, "a test", wait=0)
    finally:
        proc.kill()  # kill -9: the kernel frees the flock
        proc.wait()
    time.sleep(0.1)
    assert (folder / LOCK_FILE).read_text().strip() == str(proc.pid)  # the file stays...
    assert lock_holder(folder) is None  # ...but no one holds it
    lock = FolderLock(folder, "a test", wait=0)
    assert lock_holder(folder) == os.getpid()
    lock.release()


def test_foreign_model_problem_names_the_keys_and_ignores_runtime_ones(tmp_path):
    from sgi_lab.runs.folder import foreign_model_problem

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("steps: 10\nspr_coefficient: 2.0\ndevice: cpu\n")
    model = run / "model.pt"
    assert (
        foreign_model_problem(run, model, {"steps": 10, "spr_coefficient": 2.0, "device": "cuda"})
        is None
    )
    assert foreign_model_problem(run, model, None) is None  # an older file records none
    problem = foreign_model_problem(run, model, {"steps": 10, "spr_coefficient": 0.0})
    assert problem == (
        f"{model}: not this run's model: its config differs from {run / 'config.yaml'} in "
        "['spr_coefficient'] (spr_coefficient: 2.0 vs 0.0)"
    )
