"""Offline pretraining: learning happens, runs resume exactly, NaNs stop cleanly, CLI errors."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import moving_dot_store

from sgi_lab.config import ConfigError, PretrainConfig, build_config, load_config
from sgi_lab.launch.cli import main as cli_main
from sgi_lab.runs.checkpoints import load_checkpoint
from sgi_lab.runs.folder import RunDir
from sgi_lab.runs.stopping import Deadline, RunStopped
from sgi_lab.train import sgi_loss as sgi_loss_module
from sgi_lab.train.pretrain import load_pretrained_model, pretrain
from sgi_lab.train.pretrain_step import representation_similarity
from sgi_lab.train.transfer import load_pretrained

TINY = dict(encoder="nature", batch_size=8, log_every=5, checkpoint_every=10, prefetch=0)


@pytest.fixture(scope="module")
def dot_store(tmp_path_factory):
    return moving_dot_store(tmp_path_factory.mktemp("data") / "dot", rows=1200)


def test_representation_similarity_hand_computed():
    y = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    # pairwise cosines: 0, 1/sqrt2, 1/sqrt2 -> mean over ordered pairs
    assert representation_similarity(y).item() == pytest.approx((2 / 2**0.5) / 3, abs=1e-6)
    assert representation_similarity(torch.ones(4, 3)).item() == pytest.approx(1.0)


@pytest.mark.parametrize(
    "weights",
    [
        {},  # SGI
        {"goal_weight": 0.0, "inverse_weight": 0.0},  # S
        {"spr_coefficient": 0.0, "inverse_weight": 0.0},  # G
        {"spr_coefficient": 0.0, "goal_weight": 0.0, "inverse_weight": 0.0, "atc_weight": 1.0},
        {"spr_coefficient": 0.0, "goal_weight": 0.0, "inverse_weight": 0.0, "bc_weight": 1.0},
    ],
    ids=["sgi", "s", "g", "atc", "bc"],
)
def test_every_objective_runs_and_logs(dot_store, tmp_path, weights):
    config = build_config(PretrainConfig, {**TINY, "steps": 5, **weights, "atc_sequences": 4})
    model_path = pretrain(config, dot_store, tmp_path / "run", progress=False)
    rows = RunDir(tmp_path / "run").read_metrics()
    assert [r["step"] for r in rows] == [5]
    expected = {
        "spr_coefficient": "losses/spr",
        "goal_weight": "losses/goal",
        "inverse_weight": "losses/inverse",
        "atc_weight": "losses/atc",
        "bc_weight": "losses/bc",
    }
    for key, metric in expected.items():
        assert (metric in rows[0]) == (getattr(config, key) > 0)
    assert 0 <= rows[0]["charts/cosine_similarity"] <= 1 and rows[0]["charts/samples_per_s"] > 0
    payload = load_checkpoint(model_path, kind="pretrained_model")
    assert payload["model_args"]["goal_head"] == (config.goal_weight > 0)


def test_pretraining_learns_inverse_dynamics(dot_store, tmp_path):
    config = build_config(
        PretrainConfig,
        {
            **TINY,
            "batch_size": 32,
            # 40 steps: accuracy peaks around step 40 at this lr (0.46 over steps 21-40, 0.39
            # over 41-60, seed 0), so the last window is further above chance, not closer
            "steps": 40,
            "log_every": 20,
            "checkpoint_every": 40,  # one checkpoint, not several (a full-size model each)
            "lr": 1.0e-3,
            "goal_weight": 0.0,
            "spr_steps": 1,
        },
    )
    pretrain(config, dot_store, tmp_path / "run", progress=False)
    rows = RunDir(tmp_path / "run").read_metrics()
    first, last = rows[0], rows[-1]
    assert last["charts/inverse_accuracy"] > 0.35  # chance is 1/5
    assert last["losses/total"] < first["losses/total"]


def test_interrupted_run_resumes_at_the_right_step_and_matches(dot_store, tmp_path):
    # small heads: a 6x smaller model to checkpoint; the resume is what is tested
    config = build_config(
        PretrainConfig, {**TINY, "steps": 20, "goal_weight": 0.0, "hidden_size": 64}
    )
    reference = pretrain(config, dot_store, tmp_path / "straight", progress=False)

    def crash(row):
        if row["step"] == 15:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pretrain(config, dot_store, tmp_path / "crashed", progress=False, callback=crash)
    run = RunDir(tmp_path / "crashed")
    assert run.status()["state"] == "failed" and "interrupted" in run.status()["message"]
    assert [p.name for p in run.checkpoints()] == ["ckpt_00000010.pt"]
    assert [r["step"] for r in run.read_metrics()] == [5, 10, 15]
    resumed = pretrain(config, dot_store, tmp_path / "crashed", progress=False)
    assert [r["step"] for r in run.read_metrics()] == [5, 10, 15, 20]
    assert run.status()["state"] == "finished"
    a = load_checkpoint(reference, kind="pretrained_model")["model"]
    b = load_checkpoint(resumed, kind="pretrained_model")["model"]
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-5, msg=name)


def test_a_finished_run_keeps_model_pt_and_one_checkpoint_not_a_duplicate_of_it(
    dot_store, tmp_path
):
    """30 steps, checkpoints every 10, two kept while running: the last step's state goes to
    model.pt alone (no ckpt_30 beside it), and model.pt counts as one of the two kept, so the
    finished run holds model.pt and ckpt_20 (the smoke run held two 318 MB checkpoints)."""
    config = build_config(
        PretrainConfig, {**TINY, "steps": 30, "goal_weight": 0.0, "hidden_size": 64}
    )
    seen = []

    def watch(row):  # the checkpoints on disk at each logged step
        seen.append([p.name for p in RunDir(tmp_path / "run").checkpoints()])

    model = pretrain(config, dot_store, tmp_path / "run", progress=False, callback=watch)
    run = RunDir(tmp_path / "run")
    assert model.exists() and run.status()["state"] == "finished"
    assert [p.name for p in run.checkpoints()] == ["ckpt_00000020.pt"]
    assert seen[-1] == ["ckpt_00000010.pt", "ckpt_00000020.pt"]  # two while running
    assert load_checkpoint(model, kind="pretrained_model")["step"] == 30


def test_a_stopped_run_checkpoints_where_it_stopped_and_resumes_to_the_same_model(
    dot_store, tmp_path
):
    """A stop at step 5 (checkpoints every 10) writes a checkpoint at 5; the resumed run ends
    with the model of an uninterrupted one."""
    # small heads: a 6x smaller model to checkpoint; the resume is what is tested
    config = build_config(
        PretrainConfig, {**TINY, "steps": 20, "goal_weight": 0.0, "hidden_size": 64}
    )
    reference = pretrain(config, dot_store, tmp_path / "straight", progress=False)
    stop = Deadline()

    def ask(row):
        if row["step"] == 5:
            stop.request_stop("pre-empted")

    with pytest.raises(RunStopped, match="stopped at step 5: pre-empted"):
        pretrain(config, dot_store, tmp_path / "run", progress=False, callback=ask, stop=stop)
    run = RunDir(tmp_path / "run")
    assert [p.name for p in run.checkpoints()] == ["ckpt_00000005.pt"]
    assert run.status()["state"] == "failed" and "stopped at step 5" in run.status()["message"]
    resumed = pretrain(config, dot_store, tmp_path / "run", progress=False)
    a = load_checkpoint(reference, kind="pretrained_model")["model"]
    b = load_checkpoint(resumed, kind="pretrained_model")["model"]
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-5, msg=name)

    argv = ["pretrain", "--params", "params/pretrain/sgi_m.yaml", "--data", str(dot_store.path)]
    argv += ["--out", str(tmp_path / "cli"), "--no-progress", "--stop-after", "0.001"]
    for key, value in {**TINY, "steps": 20, "device": "cpu"}.items():
        argv += ["--set", f"{key}={value}"]
    assert cli_main(argv) == 75
    assert [p.name for p in RunDir(tmp_path / "cli").checkpoints()] == ["ckpt_00000001.pt"]


class StopAtStep(Deadline):
    """A stop asked for after ``step`` steps (between two logged rows)."""

    def __init__(self, step: int) -> None:
        super().__init__()
        self.calls, self.step = 0, step

    def reason(self) -> str | None:
        self.calls += 1
        return "pre-empted" if self.calls == self.step else None


def test_a_run_resumed_between_two_rows_logs_the_uninterrupted_runs_rows(dot_store, tmp_path):
    """Stopped at step 8 with rows every 3 steps: the row at 9 is the mean over steps 7-9 as
    in the run never stopped (the window's steps 7-8 come back from the checkpoint), so a
    rebuild of such a run compares equal (`compare_rebuilt`)."""
    config = build_config(
        PretrainConfig,
        {**TINY, "steps": 9, "log_every": 3, "checkpoint_every": 100, "goal_weight": 0.0},
    )
    pretrain(config, dot_store, tmp_path / "straight", progress=False)
    with pytest.raises(RunStopped, match="stopped at step 8"):
        pretrain(config, dot_store, tmp_path / "run", progress=False, stop=StopAtStep(8))
    pretrain(config, dot_store, tmp_path / "run", progress=False)
    straight = RunDir(tmp_path / "straight").read_metrics()
    resumed = RunDir(tmp_path / "run").read_metrics()
    assert [r["step"] for r in resumed] == [3, 6, 9]
    for a, b in zip(straight, resumed, strict=True):
        for key in a:
            if key.startswith(("losses/", "charts/")) and key != "charts/samples_per_s":
                assert a[key] == b[key], (a["step"], key)


def test_finished_run_is_not_rerun_and_config_change_is_refused(dot_store, tmp_path):
    config = build_config(PretrainConfig, {**TINY, "steps": 5, "goal_weight": 0.0})
    path = pretrain(config, dot_store, tmp_path / "run", progress=False)
    stamp = path.stat().st_mtime_ns
    assert pretrain(config, dot_store, tmp_path / "run", progress=False) == path
    assert path.stat().st_mtime_ns == stamp
    with pytest.raises(ConfigError, match=r"different config \(\['lr'\]"):
        pretrain(
            build_config(PretrainConfig, {**TINY, "steps": 5, "goal_weight": 0.0, "lr": 0.1}),
            dot_store,
            tmp_path / "run",
            progress=False,
        )


def test_nan_loss_stops_with_a_clear_message_and_keeps_the_last_checkpoint(
    dot_store, tmp_path, monkeypatch
):
    config = build_config(PretrainConfig, {**TINY, "steps": 30, "goal_weight": 0.0})
    real = sgi_loss_module.spr_loss
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        out = real(*args, **kwargs)
        return out * float("nan") if calls["n"] == 13 else out

    monkeypatch.setattr(sgi_loss_module, "spr_loss", flaky)
    with pytest.raises(
        FloatingPointError, match=r"non-finite pretraining loss.*step 13.*ckpt_00000010"
    ):
        pretrain(config, dot_store, tmp_path / "run", progress=False)
    run = RunDir(tmp_path / "run")
    assert run.status()["state"] == "failed"
    assert run.latest_checkpoint().name == "ckpt_00000010.pt"
    assert not (tmp_path / "run" / "model.pt").exists()


def test_load_pretrained_falls_back_to_checkpoint_and_rejects_foreign(dot_store, tmp_path):
    config = build_config(
        PretrainConfig, {**TINY, "steps": 10, "checkpoint_every": 5, "goal_weight": 0.0}
    )
    pretrain(config, dot_store, tmp_path / "run", progress=False)
    # its own model: the config inside agrees with config.yaml (runtime keys settled apart)
    assert load_pretrained(tmp_path / "run").config["goal_weight"] == 0.0
    (tmp_path / "run" / "model.pt").unlink()  # the last step's state was in model.pt alone
    pretrained = load_pretrained(tmp_path / "run", allow_unfinished=True)
    assert pretrained.path.name == "ckpt_00000005.pt" and pretrained.step == 5
    with pytest.raises(ConfigError, match="never finished"):
        load_pretrained(tmp_path / "run")  # finetuning from it must name the checkpoint
    model = load_pretrained_model(tmp_path / "run")
    assert not model.training and model.encoder_name == "nature"
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="not an sgi-lab run"):
        load_pretrained_model(tmp_path / "empty")


def test_a_run_with_a_progress_bar_says_why_the_spr_loss_is_negative(dot_store, tmp_path, capsys):
    """The bar shows "spr=-4.7": a line before it says SPR's loss is minus a sum of K cosines
    (0 to -K) and that the total follows it below 0."""
    from sgi_lab.train.pretrain import spr_loss_note

    note = spr_loss_note(5, 2.0)
    assert "negative by design: 0 for unrelated predictions, -5 when all match" in note
    assert "the total adds 2 x spr" in note and "\n" not in note
    config = build_config(PretrainConfig, {**TINY, "steps": 1, "goal_weight": 0.0})
    pretrain(config, dot_store, tmp_path / "bar", progress=True)
    assert spr_loss_note(config.spr_steps, config.spr_coefficient) in capsys.readouterr().out
    quiet = build_config(PretrainConfig, {**TINY, "steps": 1, "spr_coefficient": 0.0})
    pretrain(quiet, dot_store, tmp_path / "no_spr", progress=True)
    assert "losses: spr" not in capsys.readouterr().out


def test_objective_weight_validation():
    # The config refuses them as it is built (sgi_lab.config.validate), before any run folder.
    with pytest.raises(ConfigError, match="nothing to learn"):
        build_config(
            PretrainConfig, {"spr_coefficient": 0.0, "goal_weight": 0.0, "inverse_weight": 0.0}
        )
    with pytest.raises(ConfigError, match="baseline on its own"):
        build_config(PretrainConfig, {"atc_weight": 1.0})


def test_every_paper_params_file_loads():
    from pathlib import Path

    names = {p.stem for p in Path("params/pretrain").glob("*.yaml")}
    assert {
        "sgi_m",
        "sgi_m_s",
        "sgi_m_l",
        "s",
        "g",
        "i",
        "s_g",
        "g_i",
        "s_i",
        "atc",
        "bc",
        "smoke",
    } <= names
    for name in names:
        load_config(PretrainConfig, f"params/pretrain/{name}.yaml")  # validated as it is built
    assert load_config(PretrainConfig, "params/pretrain/g_i.yaml").spr_coefficient == 0.0


def test_cli_pretrain_smoke_and_bad_key(dot_store, tmp_path, capsys):
    out = tmp_path / "run"
    rc = cli_main(
        [
            "pretrain",
            "--params",
            "params/pretrain/smoke.yaml",
            "--set",
            "steps=4",
            "--set",
            "batch_size=4",
            "--data",
            str(dot_store.path),
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert rc == 0 and (out / "model.pt").exists()
    assert "%|" not in capsys.readouterr().err  # no progress bar
    assert RunDir(out).status()["params"] == "smoke"
    rc = cli_main(
        [
            "pretrain",
            "--params",
            "params/pretrain/smoke.yaml",
            "--set",
            "bogus=1",
            "--data",
            str(dot_store.path),
            "--out",
            str(tmp_path / "bad"),
        ]
    )
    assert rc == 2 and "bogus" in capsys.readouterr().err


def test_checkpoints_do_not_change_what_pretraining_learns(dot_store, tmp_path):
    """Checkpointing every 5 steps or only at the end gives the same model: the interval is a
    runtime key (sgi_lab.runs.folder.RUNTIME_KEYS) a stopped run may resume under."""
    models = []
    for every in (5, 20):
        config = build_config(
            PretrainConfig,
            {**TINY, "steps": 20, "goal_weight": 0.0, "hidden_size": 64, "checkpoint_every": every},
        )
        path = pretrain(config, dot_store, tmp_path / f"every_{every}", progress=False)
        models.append(load_checkpoint(path, kind="pretrained_model")["model"])
    a, b = models
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_goal_rl_runs_the_online_film_generator_once_with_the_same_loss_and_gradients(monkeypatch):
    """With double Q, the selection and the loss read one online FiLM pass of the goals (the
    target's is its own): the losses and every gradient equal those of two separate passes."""
    from sgi_lab.train import pretrain_step as step_module

    config = load_config(PretrainConfig, "params/pretrain/minatar_sgi.yaml", {"batch_size": 8})
    assert config.goal_double_q and config.uses_goal_rl
    spec, batch = _minatar_grid_batch(config)
    goal_targets = step_module.goal_targets

    def without_reuse(*args, **kwargs):  # the loss runs its own FiLM pass, as before the reuse
        targets, rewards = goal_targets(*args, **kwargs)
        return targets._replace(goal_film=None), rewards

    runs = []
    for reuse in (True, False):
        state = step_module.build_state(config, 3, torch.device("cpu"), spec)
        passes, forward = [], state.model.film.forward

        def counted(x, passes=passes, forward=forward):
            passes.append(1)
            return forward(x)

        monkeypatch.setattr(state.model.film, "forward", counted)
        monkeypatch.setattr(step_module, "goal_targets", goal_targets if reuse else without_reuse)
        total, logs = step_module.sgi_losses(config, state, batch)
        total.backward()
        grads = {n: p.grad for n, p in state.model.named_parameters()}
        runs.append((len(passes), logs, grads))
    (passes_a, logs_a, grads_a), (passes_b, logs_b, grads_b) = runs
    assert (passes_a, passes_b) == (1, 2)
    assert logs_a.keys() == logs_b.keys()
    assert all(torch.equal(logs_a[k], logs_b[k]) for k in logs_a)
    assert grads_a["film.layers.5.weight"].abs().sum() > 0
    assert grads_a.keys() == grads_b.keys()
    for name, grad in grads_a.items():
        assert (grad is None) == (grads_b[name] is None), name
        assert grad is None or torch.equal(grad, grads_b[name]), name


def _minatar_grid_batch(config, seed: int = 0):
    """A MinAtar Breakout batch of sparse 0/255 grids, with goals (what `sgi_losses` reads)."""
    from sgi_lab.envs.spec import minatar_spec
    from sgi_lab.train.pretrain_step import PretrainBatch

    spec, K = minatar_spec("breakout"), config.spr_steps
    g = torch.Generator().manual_seed(seed)

    def grids(*lead):
        return (torch.rand(*lead, *spec.stacked_shape, generator=g) < 0.1).to(torch.uint8) * 255

    n = config.batch_size
    batch = PretrainBatch(
        grids(n, K + 1),
        torch.randint(0, 3, (n, K + 1), generator=g),
        torch.ones(n, K + 1, dtype=torch.bool),
        grids(n),
    )
    return spec, batch


def _compiled_against_eager(config, steps: int):
    """Two states from one seed, one stepped with the eager losses and one with
    `loss_function`'s compiled ones: (eager logs, compiled logs, eager model, compiled model)."""
    from sgi_lab.train import pretrain_step as step_module

    spec, batch = _minatar_grid_batch(config)
    out = []
    for losses in (None, step_module.loss_function(config)):
        torch.manual_seed(0)
        state = step_module.build_state(config, 3, torch.device("cpu"), spec)
        logs = [step_module.train_step(config, state, batch, losses=losses) for _ in range(steps)]
        out.append((logs, state.model.state_dict()))
    (logs_a, model_a), (logs_b, model_b) = out
    return logs_a, logs_b, model_a, model_b


def _assert_same_steps(logs_a, logs_b, model_a, model_b, rtol, atol):
    for a, b in zip(logs_a, logs_b, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            torch.testing.assert_close(b[key], a[key], rtol=rtol, atol=atol, msg=key)
    for name in model_a:
        torch.testing.assert_close(model_b[name], model_a[name], rtol=rtol, atol=atol, msg=name)


def test_compile_runs_the_same_losses_through_torch_compile(monkeypatch, tmp_path):
    """``compile: true`` hands the config's losses to ``torch.compile`` and the run steps with
    them: traced (aot_eager: the same graph without inductor's codegen, which the slow test
    checks), two SGI steps give the eager steps' losses and weights, and a pretraining run
    with it steps with the compiled losses to the end."""
    from sgi_lab.train import pretrain_step as step_module

    monkeypatch.setattr(step_module, "COMPILE_BACKEND", "aot_eager")
    compiled = []
    real_compile = torch.compile

    def spy(fn, **kwargs):
        compiled.append((fn, kwargs))
        return real_compile(fn, **kwargs)

    monkeypatch.setattr(torch, "compile", spy)
    config = load_config(
        PretrainConfig, "params/pretrain/minatar_sgi.yaml",
        {"batch_size": 8, "compile": True, "cpu_amp": False, "channels_last": False},
    )  # fmt: skip
    eager = dataclasses.replace(config, compile=False)
    assert step_module.loss_function(eager) is step_module.sgi_losses
    _assert_same_steps(*_compiled_against_eager(config, steps=2), rtol=1e-4, atol=1e-5)
    assert compiled[-1] == (
        step_module.sgi_losses, {"dynamic": False, "backend": "aot_eager"}
    )  # fmt: skip

    pytest.importorskip("minatar")
    from sgi_lab.data.collect import collect_random

    store = collect_random("minatar/breakout", 300, tmp_path / "data", seed=0, progress=False)
    run = dataclasses.replace(config, steps=4, log_every=2, checkpoint_every=2, prefetch=0)
    calls = len(compiled)
    pretrain(run, store, tmp_path / "run", progress=False)
    assert len(compiled) == calls + 1 and compiled[-1][0] is step_module.sgi_losses
    assert [r["step"] for r in RunDir(tmp_path / "run").read_metrics()] == [2, 4]
    assert RunDir(tmp_path / "run").status()["state"] == "finished"
    # how fast a run steps, not what it learns: the run is the same run with compile off
    model = pretrain(dataclasses.replace(run, compile=False), store, tmp_path / "run", False)
    assert model == tmp_path / "run" / "model.pt" and len(compiled) == calls + 1


@pytest.mark.slow
def test_inductor_compiled_steps_match_the_eager_steps():
    """The inductor-compiled MinAtar SGI step (fp32) gives the eager step's losses and weights
    after five steps, within float reassociation (a cold compile: ~40 s on 2 cores)."""
    config = load_config(
        PretrainConfig, "params/pretrain/minatar_sgi.yaml",
        {"batch_size": 16, "compile": True, "cpu_amp": False, "channels_last": False},
    )  # fmt: skip
    _assert_same_steps(*_compiled_against_eager(config, steps=5), rtol=1e-3, atol=1e-4)


def test_compile_without_a_cpp_compiler_is_refused_before_anything_is_created(
    dot_store, tmp_path, monkeypatch
):
    """Inductor needs a C++ compiler on a CPU: without one, ``compile: true`` is refused naming
    the key and the fix, and no run folder appears."""
    import shutil

    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    config = build_config(PretrainConfig, {**TINY, "steps": 2, "compile": True, "device": "cpu"})
    with pytest.raises(ConfigError, match=r"compile: .*C\+\+ compiler.*compile: false"):
        pretrain(config, dot_store, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()
    # the eager step needs none
    eager = dataclasses.replace(config, compile=False)
    pretrain(eager, dot_store, tmp_path / "eager", progress=False)
    assert RunDir(tmp_path / "eager").status()["state"] == "finished"
