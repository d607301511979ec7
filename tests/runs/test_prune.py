"""`sgi-lab prune`: a finished run's checkpoints go, nothing else does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sgi_lab.launch.cli import main
from sgi_lab.runs.prune import prune_checkpoints


def run_folder(
    root: Path, name: str, state: str, model: bool = True, steps=(250, 500), kind="pretrain"
) -> Path:
    folder = root / name
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "status.json").write_text(json.dumps({"state": state, "kind": kind}))
    if model:
        (folder / "model.pt").write_bytes(b"m" * 10)
    for step in steps:
        (folder / "checkpoints" / f"ckpt_{step:08d}.pt").write_bytes(b"c" * 100)
    return folder


def test_only_finished_runs_lose_their_checkpoints_and_only_their_checkpoints(tmp_path):
    study = tmp_path / "study"
    done = run_folder(study / "pretrain", "sgi__Pong", "finished")
    mine = run_folder(study / "pretrain", "s__Pong", "finished")
    (mine / "checkpoints" / "my_notes.txt").write_text("keep me")
    running = run_folder(study / "pretrain", "g__Pong", "running", model=False)
    claimed = run_folder(study / "pretrain", "i__Pong", "finished", model=False)  # no model.pt
    agent = run_folder(
        study / "finetune" / "reduced_lr__sgi", "Pong__s0", "finished", kind="finetune"
    )
    notebook = run_folder(study / "runs", "pretrain__nb", "finished", kind="notebook")

    dry = {r.folder.name: r for r in prune_checkpoints([study], dry_run=True)}
    assert set(dry) == {"sgi__Pong", "s__Pong", "g__Pong", "i__Pong", "Pong__s0"}
    assert len(list(study.rglob("ckpt_*.pt"))) == 12  # a dry run deletes nothing

    results = {r.folder.name: r for r in prune_checkpoints([study])}
    assert (results["g__Pong"].kept, results["i__Pong"].kept) == ("unfinished", "unfinished")
    assert results["sgi__Pong"].size == 200 and not results["sgi__Pong"].kept
    assert not (done / "checkpoints").exists() and (done / "model.pt").exists()
    assert sorted(p.name for p in (mine / "checkpoints").iterdir()) == ["my_notes.txt"]
    assert len(list((running / "checkpoints").iterdir())) == 2  # it resumes from them
    assert len(list((claimed / "checkpoints").iterdir())) == 2
    assert not (agent / "checkpoints").exists()
    assert len(list((notebook / "checkpoints").iterdir())) == 2  # not a training run's
    assert prune_checkpoints([study]) == [r for r in results.values() if r.kept]


def test_a_folder_in_use_is_kept_and_the_cli_says_what_it_freed(tmp_path, capsys):
    held = run_folder(tmp_path, "held", "finished")
    free = run_folder(tmp_path, "free", "finished")
    holder = subprocess.Popen(  # another sgi-lab process holding the folder's lock
        [sys.executable, "-c", HOLD, str(held)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(["prune", str(tmp_path)]) == 0
    finally:
        holder.kill()
        holder.wait()
    out = capsys.readouterr().out
    assert f"kept     {held}: 2 checkpoint(s)" in out and "(in use)" in out
    assert f"removed {free}: 2 checkpoint(s)" in out
    assert "freed 0.00 GB from 1 finished run(s); kept 1" in out
    assert len(list((held / "checkpoints").iterdir())) == 2
    assert main(["prune", str(tmp_path / "missing")]) == 2
    assert "no such file or folder" in capsys.readouterr().err


HOLD = """
import sys, time
from sgi_lab.base.files import FolderLock
lock = FolderLock(sys.argv[1], "a run")
print("held", flush=True)
time.sleep(120)
"""
