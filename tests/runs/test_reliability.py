"""Nothing lost, nothing misread: each case asserts the exit code, a message naming
the culprit, no traceback, and that every file outside the run's own is untouched.

CLI commands run in-process (`sgi_lab.launch.cli.main`); runs are built by hand where the
training itself does not matter, so every test takes seconds.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
import yaml

from sgi_lab.config import FinetuneConfig, load_config, to_dict
from sgi_lab.launch.cli import main
from sgi_lab.runs.folder import FinetuneRun, RunDir

FINETUNE_SMOKE = "params/finetune/smoke.yaml"


def snapshot(root: Path) -> dict[str, str | None]:
    """Every path under ``root`` with its content hash (None for folders)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        if p.is_file()
        else None
        for p in sorted(root.rglob("*"))
    }


def run_cli(capsys, argv: list[str]) -> tuple[int, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, err


# -- item 4: an unfinished run never reads as finished ------------------------------------------


def stopped_finetune_run(path: Path, step: int = 150) -> RunDir:
    """A finetuning run of the smoke config stopped at ``step`` of 300: config, status, a
    checkpoint (a stand-in payload: nothing here loads its weights), metrics."""
    config = to_dict(load_config(FinetuneConfig, FINETUNE_SMOKE))
    run = FinetuneRun.open(path, "finetune", config)
    run.start(0, params="smoke")
    run.save_checkpoint(step, {"model": {"w": torch.zeros(2)}}, "finetune")
    with run.metrics_logger() as metrics:
        metrics.log(step, **{"losses/total": 1.0})
    run.fail("interrupted (re-run the same command to resume)", step=step)
    return run


@pytest.mark.parametrize("damage", ["deleted", "torn"])
def test_a_run_without_a_readable_status_is_interrupted_not_finished(tmp_path, capsys, damage):
    run = stopped_finetune_run(tmp_path / "ft")
    status = run.path / "status.json"
    if damage == "deleted":
        status.unlink()
    else:
        status.write_text(status.read_text()[: len(status.read_text()) // 2])
    before = snapshot(tmp_path)

    rc, err = run_cli(capsys, ["evaluate", run.path, "--no-progress"])
    assert rc == 2 and str(run.path) in err and "status.json" in err, err
    assert "unfinished" in err and "--allow-unfinished" in err
    rc, err = run_cli(capsys, ["report", run.path])
    assert rc == 2 and str(run.path) in err and "unfinished" in err, err
    assert snapshot(tmp_path) == before  # no eval.json, nothing else

    # The finetune command recognises the folder as its own interrupted run and resumes it.
    config = to_dict(load_config(FinetuneConfig, FINETUNE_SMOKE))
    reopened = FinetuneRun.open(run.path, "finetune", config)
    assert not reopened.finished and reopened.resuming
    assert snapshot(tmp_path) == before


def test_a_finished_status_without_the_final_model_is_not_a_result(tmp_path, capsys):
    run = stopped_finetune_run(tmp_path / "ft", step=300)
    (run.path / "eval.json").write_text(json.dumps({"game": "Pong", "mean": 1.0, "step": 300}))
    run.finish(300)  # but model.pt is missing: not positive evidence
    before = snapshot(tmp_path)
    rc, err = run_cli(capsys, ["evaluate", run.path, "--no-progress"])
    assert rc == 2 and str(run.path) in err and "model.pt" in err, err
    rc, err = run_cli(capsys, ["report", run.path])
    assert rc == 2 and "model.pt" in err, err
    assert not RunDir(run.path, create=False).finished
    assert snapshot(tmp_path) == before


# -- item 1: an experiment never writes over a folder that is not its own ----------------------

EXPERIMENT_SMOKE = "params/experiments/smoke.yaml"


def users_results_folder(path: Path) -> Path:
    """What a user keeps: an experiment file, results, a report, params of their own."""
    (path / "params" / "pretrain").mkdir(parents=True)
    (path / "experiment.yaml").write_text("name: my_thesis_table\n")
    (path / "results.csv").write_text("game,hns\nPong,0.3\n")
    (path / "results.aggregates.csv").write_text("metric,value\niqm,0.3\n")
    (path / "report.html").write_text("<html>my report</html>")
    (path / "params" / "pretrain__sgi_m.yaml").write_text("config: {lr: 0.1}\n")
    (path / "params" / "pretrain" / "mine.yaml").write_text("config: {}\n")
    return path


@pytest.mark.parametrize("extra", [[], ["--report-only"]])
def test_experiment_refuses_a_folder_that_is_not_its_own(tmp_path, capsys, extra):
    out = users_results_folder(tmp_path / "thesis")
    before = snapshot(tmp_path)
    argv = ["experiment", EXPERIMENT_SMOKE, "--out", out, "--no-progress", *extra]
    rc, err = run_cli(capsys, argv)
    assert rc == 2 and str(out) in err and "not an sgi-lab experiment folder" in err, err
    assert snapshot(tmp_path) == before


def test_experiment_refuses_another_experiments_folder(tmp_path, capsys):
    from sgi_lab import experiments as ex

    out = tmp_path / "exp"
    out.mkdir()
    (out / ex.STATE_FILE).write_text(json.dumps({"name": "hns", "tasks": {}}))
    before = snapshot(tmp_path)
    rc, err = run_cli(capsys, ["experiment", EXPERIMENT_SMOKE, "--out", out, "--no-progress"])
    assert rc == 2 and str(out) in err and "'hns'" in err, err
    assert snapshot(tmp_path) == before
    # Its own folder, even one a kill left with nothing but the marker, is resumed.
    ex.check_experiment_folder(out, "hns")


# -- item 3: --overwrite removes only what the run wrote ---------------------------------------

TINY_PRETRAIN = ["--set", "steps=2", "--set", "checkpoint_every=1", "--set", "log_every=1"]
TINY_PRETRAIN += ["--set", "batch_size=4", "--no-progress"]


def add_user_files(folder: Path, subfolders: list[str]) -> dict[str, bytes]:
    """A user's file at the top of ``folder`` and in each of ``subfolders``."""
    files = {"notes.txt": b"my notes"}
    for sub in subfolders:
        files[f"{sub}/mine_{sub}.bin"] = f"kept in {sub}".encode()
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return files


def test_pretrain_overwrite_keeps_a_users_files_in_every_sub_folder(tmp_path, capsys, one_thread):
    from conftest import build_store

    store = build_store(tmp_path / "store", [{"length": 30, "terminal": True}], chunk_size=16)
    out = tmp_path / "run"
    argv = ["pretrain", "--params", "params/pretrain/smoke.yaml", "--data", store.path]
    argv += ["--out", out, *TINY_PRETRAIN]
    assert run_cli(capsys, argv)[0] == 0
    first = (out / "model.pt").read_bytes()
    mine = add_user_files(out, ["checkpoints", "figures", "figures/deep"])
    before_store = snapshot(store.path)
    rc, err = run_cli(capsys, [*argv, "--overwrite", "--set", "lr=0.001"])
    assert rc == 0, err
    assert {name: (out / name).read_bytes() for name in mine} == mine
    assert (out / "model.pt").read_bytes() != first  # the run itself did start over
    # the new run's own checkpoint; none at its last step (model.pt holds that state)
    assert sorted(p.name for p in (out / "checkpoints").glob("ckpt_*.pt")) == ["ckpt_00000001.pt"]
    assert snapshot(store.path) == before_store


def test_collect_overwrite_keeps_a_users_files_in_the_store(tmp_path, capsys):
    from sgi_lab.data import TransitionStore

    out = tmp_path / "store"
    argv = ["collect", "random", "--game", "pong", "--steps", "20", "--out", out]
    argv += ["--chunk-size", "8", "--no-progress"]
    assert run_cli(capsys, argv)[0] == 0
    mine = add_user_files(out, ["chunks", "plots"])
    rc, err = run_cli(capsys, [*argv, "--seed", "3", "--overwrite"])
    assert rc == 0, err
    assert {name: (out / name).read_bytes() for name in mine} == mine
    store = TransitionStore(out)
    assert store.manifest.params["seed"] == 3 and store.verify() == []
    assert not out.with_name("store.partial").exists()


# -- item 2: a damaged metrics line costs that line only ---------------------------------------


def test_resume_keeps_every_valid_metrics_row_after_a_torn_line(tmp_path, one_thread):
    from conftest import build_store

    from sgi_lab.base.files import read_jsonl
    from sgi_lab.config import PretrainConfig, build_config
    from sgi_lab.runs.stopping import Deadline, RunStopped
    from sgi_lab.train.pretrain import pretrain

    store = build_store(tmp_path / "store", [{"length": 30, "terminal": True}], chunk_size=16)
    values = dict(encoder="nature", batch_size=4, steps=8, log_every=1, checkpoint_every=2)
    config = build_config(PretrainConfig, {**values, "prefetch": 0})
    out = tmp_path / "run"
    stop = Deadline()

    def stop_at_6(row):
        if row["step"] == 6:
            stop.request_stop("test")

    with pytest.raises(RunStopped):
        pretrain(config, store, out, progress=False, callback=stop_at_6, stop=stop)
    metrics = out / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2, 3, 4, 5, 6]
    lines[1] = lines[1][: len(lines[1]) // 2]  # step 2 torn in the middle of the file
    lines.append('{"step": 7, "losses/total": 1.0}')  # logged after the checkpoint at 6
    metrics.write_text("\n".join(lines) + "\n")
    with pytest.warns(UserWarning, match=r"metrics.jsonl.*kept 5.*1 unreadable.*1 row"):
        pretrain(config, store, out, progress=False)
    assert [r["step"] for r in read_jsonl(metrics)] == [1, 3, 4, 5, 6, 7, 8]
    assert read_jsonl(metrics)[-2]["losses/total"] != 1.0  # step 7 is the resumed run's


# -- items 5, 6, 10: damaged, pickled and wrong files are named, never used ---------------------


def flip_middle(path: Path, count: int = 4096) -> None:
    """Flip ``count`` bytes in the middle of a file (inside a large tensor's record)."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    for i in range(middle - count // 2, middle + count // 2):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_flipped_model_is_refused_by_evaluate(tmp_path, capsys):
    from sgi_lab.base.files import atomic_torch_save

    run = stopped_finetune_run(tmp_path / "ft", step=300)
    model = {"format": "sgi-lab", "kind": "finetuned_model", "model": {"w": torch.randn(10**5)}}
    atomic_torch_save(model, run.path / "model.pt")
    run.finish(300)
    flip_middle(run.path / "model.pt")
    before = snapshot(tmp_path)
    rc, err = run_cli(capsys, ["evaluate", run.path, "--no-progress"])
    assert rc == 2 and str(run.path / "model.pt") in err and "damaged" in err, err
    assert snapshot(tmp_path) == before


def test_a_flipped_newest_checkpoint_falls_back_to_the_previous_one(tmp_path):
    run = RunDir(tmp_path / "run")
    for step in (2, 4):
        run.save_checkpoint(step, {"w": torch.full((10**5,), float(step))}, "pretrain")
    flip_middle(run.checkpoints_dir / "ckpt_00000004.pt")
    with pytest.warns(UserWarning, match=r"ckpt_00000004.pt: damaged.*resuming from ckpt_00000002"):
        payload = run.load_latest("pretrain")
    assert payload["step"] == 2 and torch.equal(payload["w"], torch.full((10**5,), 2.0))


def test_finetuning_from_a_flipped_pretrained_model_is_refused(tmp_path, capsys):
    from sgi_lab.base.files import atomic_torch_save

    pretrained = tmp_path / "model.pt"
    payload = {"format": "sgi-lab", "kind": "pretrained_model", "model": {"w": torch.randn(10**5)}}
    atomic_torch_save(payload, pretrained)
    flip_middle(pretrained)
    before = snapshot(tmp_path)
    argv = ["finetune", "--params", FINETUNE_SMOKE, "--pretrained", pretrained]
    rc, err = run_cli(capsys, [*argv, "--out", tmp_path / "ft", "--no-progress"])
    assert rc == 2 and str(pretrained) in err and "damaged" in err, err
    assert snapshot(tmp_path) == before


def test_a_pickled_file_is_refused_in_one_line(tmp_path, capsys):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    pickled = tmp_path / "evil.pt"
    torch.save({"model": Evil()}, pickled)
    before = snapshot(tmp_path)
    argv = ["finetune", "--params", FINETUNE_SMOKE, "--pretrained", pickled]
    rc, err = run_cli(capsys, [*argv, "--out", tmp_path / "ft", "--no-progress"])
    assert rc == 2 and "pwned" not in err
    message = err.strip()
    assert len(message.splitlines()) == 1, message
    assert str(pickled) in message and "Python objects" in message and "refuses" in message
    assert "weights_only" not in message and "\x1b" not in message  # no unsafe advice, no ANSI
    assert snapshot(tmp_path) == before


# -- item 7: one writer per folder; an experiment's tasks die with its driver ------------------


def wait_for(predicate, timeout: float = 60.0, what: str = "") -> None:
    import time

    deadline = time.time() + timeout
    while not predicate():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def lock_holder(path: Path) -> int | None:
    from sgi_lab.base.files import LOCK_FILE

    try:
        return int((path / LOCK_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "\tZ" in status.read_text())  # a zombie has ended


def start_cli(*argv):
    import subprocess
    import sys

    command = [sys.executable, "-m", "sgi_lab.launch.cli", *map(str, argv)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop(proc) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_a_second_pretrain_into_a_running_runs_folder_is_refused(tmp_path, capsys):
    from conftest import build_store

    from sgi_lab.base.files import FolderLock

    store = build_store(tmp_path / "store", [{"length": 30, "terminal": True}], chunk_size=16)
    out = tmp_path / "run"
    argv = ["pretrain", "--params", "params/pretrain/smoke.yaml", "--data", store.path]
    argv += ["--out", out, "--set", "steps=100000", "--set", "batch_size=4", "--no-progress"]
    first = start_cli(*argv)
    try:
        wait_for(lambda: (out / "status.json").exists(), what="the first run to start")
        rc, err = run_cli(capsys, argv)
        assert rc == 2 and str(out) in err and f"PID {first.pid}" in err, err
        assert lock_holder(out) == first.pid and first.poll() is None  # the first goes on
    finally:
        stop(first)  # kill -9: a stale lock file stays behind
    assert lock_holder(out) == first.pid
    FolderLock(out, "a test").release()  # the kernel freed the dead holder's lock


def test_a_second_collect_into_a_store_being_written_is_refused(tmp_path, capsys):
    out = tmp_path / "store"
    partial = tmp_path / "store.partial"
    argv = ["collect", "random", "--game", "pong", "--steps", "100000", "--out", out]
    argv += ["--chunk-size", "200", "--no-progress"]
    first = start_cli(*argv)
    try:
        wait_for(lambda: lock_holder(partial) == first.pid, what="the first collect")
        rc, err = run_cli(capsys, argv)
        assert rc == 2 and "store.partial" in err and f"PID {first.pid}" in err, err
        assert first.poll() is None  # the first goes on
    finally:
        stop(first)
    assert not out.exists()


def test_an_experiments_task_dies_with_its_driver(tmp_path, capsys):
    import signal
    import subprocess
    import sys

    exp = tmp_path / "long.yaml"
    exp.write_text(
        Path(EXPERIMENT_SMOKE)
        .read_text()
        .replace("games: [Pong, Breakout]", "games: [Pong]")
        .replace("steps: 300", "steps: 1000000")
    )
    out = tmp_path / "exp"
    command = [sys.executable, "-m", "sgi_lab.launch.cli", "experiment", str(exp)]
    driver = subprocess.Popen(
        [*command, "--out", str(out), "--no-progress"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    partial = out / "data" / "random__Pong.partial"
    task = None
    try:
        wait_for(lambda: lock_holder(partial) is not None, what="the data task to start")
        task = lock_holder(partial)
        assert lock_holder(out) == driver.pid
        # A second driver into the same folder is refused while the first lives.
        rc, err = run_cli(capsys, ["experiment", exp, "--out", out, "--no-progress"])
        assert rc == 2 and f"PID {driver.pid}" in err, err
        driver.send_signal(signal.SIGKILL)  # the driver only, not its process group
        driver.wait()
        wait_for(lambda: not alive(task), timeout=30, what="the task to die with its driver")
    finally:
        stop(driver)
        if task is not None and alive(task):
            import os

            os.kill(task, signal.SIGKILL)


# -- item 8: a full disk is named, the run is resumable, and no temp file is left ---------------


@pytest.fixture
def tiny_disk(tmp_path):
    """A 40 MB tmpfs mounted in ``tmp_path`` (needs root, as in CI); skipped elsewhere."""
    import subprocess

    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=40m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({done.stderr.decode().strip()})")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_is_named_and_the_run_stays_resumable(tmp_path, tiny_disk, capsys):
    from conftest import build_store

    store = build_store(tmp_path / "store", [{"length": 30, "terminal": True}], chunk_size=16)
    out = tiny_disk / "run"  # a Nature checkpoint (~100 MB with Adam's state) cannot fit
    argv = ["pretrain", "--params", "params/pretrain/smoke.yaml", "--data", store.path]
    rc, err = run_cli(capsys, [*argv, "--out", out, *TINY_PRETRAIN])
    checkpoint = out / "checkpoints" / "ckpt_00000001.pt"
    assert rc == 2 and f"no space left on device while writing {checkpoint}" in err, err
    assert "enforce fail" not in err and "unexpected pos" not in err
    assert not list(out.rglob("*.tmp"))  # the temp checkpoint is gone, its space free again
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "failed" and "re-run the same command" in status["message"]
    # Resumable: the same command opens the folder as its own, unfinished run.
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert not RunDir.open(out, "pretrain", saved).finished


# -- item 9: an experiment's set: errors name the experiment file and the entry ----------------


@pytest.mark.parametrize(
    "entry, override, culprit",
    [
        ("pretrain", "{bogus: 1}", "pretrain[0].set.bogus: unknown key for PretrainConfig"),
        ("pretrain", "{steps: many}", "pretrain[0].set.steps: expected an integer"),
        ("finetune", "{lr: -1.0}", "finetune[0].set.lr: must be positive"),
    ],
)
def test_experiment_set_errors_name_the_experiment_file_and_entry(
    tmp_path, capsys, entry, override, culprit
):
    text = Path(EXPERIMENT_SMOKE).read_text()
    anchor = "    params: params/pretrain/smoke.yaml\n    data: random\n    set: {"
    if entry == "pretrain":
        text = text.replace(anchor, anchor.replace("set: {", f"set: {override}\n    old: {{"))
        text = text.replace("\n    old: {", "\n    # {")
    else:
        text = text.replace("    set: &tiny {", f"    set: {override}\n    x: &tiny {{", 1)
        text = text.replace("\n    x: &tiny {", "\n    # &tiny {").replace("set: *tiny", "set: {}")
    exp = tmp_path / "exp.yaml"
    exp.write_text(text)
    before = snapshot(tmp_path)
    rc, err = run_cli(capsys, ["experiment", exp, "--out", tmp_path / "out", "--dry-run"])
    assert rc == 2 and f"{exp}: {culprit}" in err, err
    assert "smoke.yaml" not in err  # not blamed on the params file it overrides
    assert snapshot(tmp_path) == before


# -- Ray: the executor's own cluster: no dashboard, token authentication -----------------------


@pytest.mark.slow
def test_the_ray_executors_own_cluster_refuses_peers_without_its_token(tmp_path, monkeypatch):
    """Ray 2.60 binds its gRPC servers to every interface (no setting keeps them on loopback),
    so the executor's private cluster must refuse whoever lacks its token and open no
    dashboard. (HOME is a temporary folder: Ray keeps the token in ~/.ray.)"""
    ray = pytest.importorskip("ray")
    import os
    import subprocess
    import sys

    import psutil

    from sgi_lab import experiments as ex

    monkeypatch.setenv("HOME", str(tmp_path))
    for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_ADDRESS"):
        monkeypatch.delenv(key, raising=False)
    if ray.is_initialized():
        ray.shutdown()
    try:
        executor = ex.RayExecutor(None)
        assert executor.cluster.get("CPU", 0) >= 1
        me = psutil.Process(os.getpid())
        dashboard = [
            c.laddr
            for p in me.children(recursive=True)
            if "dashboard/dashboard.py" in " ".join(p.cmdline())
            for c in p.net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN
        ]
        assert not dashboard, f"the dashboard listens on {dashboard}"
        from ray._raylet import AuthenticationMode, get_authentication_mode

        assert get_authentication_mode() == AuthenticationMode.TOKEN
        gcs = ray.get_runtime_context().gcs_address
        join = f"import ray; ray.init(address={gcs!r}); print('joined')"
        for mode in ("disabled", "token"):  # no token; a wrong one
            env = {**os.environ, "RAY_AUTH_MODE": mode, "RAY_AUTH_TOKEN": "0" * 64}
            done = subprocess.run(
                [sys.executable, "-c", join], env=env, capture_output=True, text=True, timeout=120
            )
            assert done.returncode != 0 and "joined" not in done.stdout, (mode, done.stdout)
    finally:
        ray.shutdown()


def test_a_run_opened_as_new_is_not_started_over_one_begun_meanwhile(tmp_path):
    from sgi_lab.base.files import RunFolderError

    config = {"lr": 1e-4, "steps": 10}
    first = RunDir.open(tmp_path / "run", "pretrain", config)
    second = RunDir.open(tmp_path / "run", "pretrain", config)  # both saw no folder
    first.start(0)
    (first.path / "model.pt").write_bytes(b"model")
    first.finish(10)
    before = snapshot(tmp_path)
    with pytest.raises(RunFolderError, match="another sgi-lab process started a run here"):
        second.start(0)
    assert snapshot(tmp_path) == before and first.finished


def test_experiment_set_accepts_keys_that_are_valid_only_together(tmp_path, capsys):
    """Each ``set:`` key is checked on its own for its type and range only: a combination that
    is valid together (ATC alone: the S/G/I weights 0) is not refused key by key."""
    text = Path(EXPERIMENT_SMOKE).read_text()
    anchor = "    params: params/pretrain/smoke.yaml\n    data: random\n    set: {"
    override = "{atc_weight: 1.0, spr_coefficient: 0.0, goal_weight: 0.0, inverse_weight: 0.0}"
    text = text.replace(anchor, anchor.replace("set: {", f"set: {override}\n    old: {{"))
    text = text.replace("\n    old: {", "\n    # {")
    exp = tmp_path / "exp.yaml"
    exp.write_text(text)
    rc, err = run_cli(capsys, ["experiment", exp, "--out", tmp_path / "out", "--dry-run"])
    assert rc == 0, err
