"""Linear probes: they read a label the frames encode and not a shuffled one; the split keeps
episodes apart; AtariARI's averaging; the closed-form early stopping equals gradient descent; the
CLI round trip and its refusals; the annotation table."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from sgi_lab.analysis import probe_study
from sgi_lab.analysis.probe_encoders import random_probe_encoder
from sgi_lab.data import TransitionStore, TransitionStoreWriter
from sgi_lab.launch.cli import main
from sgi_lab.probes import (
    CATEGORIES,
    ProbeInputError,
    UnannotatedGameError,
    annotated_games,
    annotations,
    category_averages,
    check_probe_store,
    fit_linear_probes,
    probe_encoder,
    split_episodes,
)
from sgi_lab.probes.linear import ProbeSettings, gradient_descent_filter, gram_eigenbasis

PONG_BALL_X = 49  # AtariARI: Pong's ball_x
PONG_PLAYER_Y = 51


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def synthetic_store(
    path,
    episodes: int = 24,
    length: int = 40,
    shuffle: bool = False,
    source: str = "random",
    game: str = "Pong",
    ram: bool = True,
    seed: int = 0,
    num_actions: int | None = None,
    random_actions: bool = False,
):
    """A store whose frames draw Pong's ball_x: a bright block at column 10 * value (value in
    0..7), plus noise in a corner so no two states are alike. ``shuffle`` permutes the RAM over
    rows (the label no longer follows the pixels). A reward arrives exactly when value == 7 and
    the action is value // 2 (a policy that reads the frame)."""
    rng = np.random.default_rng(seed)
    n = episodes * length
    values = rng.integers(0, 8, n)
    frames = np.zeros((n, 84, 84), np.uint8)
    for t, v in enumerate(values):
        frames[t, 30:40, 10 * v : 10 * v + 8] = 200
    frames[:, 80:84, 0:20] = rng.integers(0, 255, (n, 4, 20))
    rams = np.zeros((n, 128), np.uint8)
    rams[:, PONG_BALL_X] = values
    rams[:, PONG_PLAYER_Y] = rng.integers(0, 8, n)  # a variable the pixels do not show
    if shuffle:
        rams = rams[rng.permutation(n)]
    writer = TransitionStoreWriter.create(
        path,
        game=game,
        source=source,
        num_actions=num_actions or (18 if game == "Alien" else 6),
        chunk_size=300,
        ram=ram,
    )
    first = np.zeros(n, np.uint8)
    first[::length] = 1
    terminal = np.roll(first, -1)
    writer.append_many(
        frame=frames,
        # the policy that reads the frame, or uniform over the game's actions (as played)
        action=(
            rng.integers(0, writer.manifest.num_actions, n) if random_actions else values // 2
        ).astype(np.int32),
        reward=(values == 7).astype(np.float32),
        terminal=terminal,
        first=first,
        **({"ram": rams} if ram else {}),
    )
    return TransitionStore(writer.close())


def test_probes_read_what_the_pixels_show_and_not_shuffled_labels(tmp_path):
    store = synthetic_store(tmp_path / "s", source="exploratory")
    encoder = random_probe_encoder(tmp_path / "r", store.num_actions, "nature", seed=0)
    result = probe_encoder(encoder, store, random_baseline_seed=None, progress=False)
    ball = result["variables"]["ball_x"]
    assert ball["f1"] > 0.95 and ball["category"] == "small_object_localization"
    assert ball["majority_f1"] < 0.1  # eight even values: the majority is a poor guess
    hidden = result["variables"]["player_y"]  # in RAM, not on screen
    assert hidden["f1"] < 0.35
    # Variables constant in this RAM carry no entropy and are left out, as in AtariARI.
    assert "enemy_x" in result["dropped_low_entropy"] and "enemy_x" not in result["variables"]
    assert result["categories"]["small_object_localization"] == ball["f1"]
    assert result["reward"]["f1"] > 0.9  # a reward comes exactly when the block is rightmost
    assert result["action"]["accuracy"] > 0.9 > result["action"]["majority_accuracy"] + 0.4

    shuffled = synthetic_store(tmp_path / "shuffled", shuffle=True)
    result = probe_encoder(encoder, shuffled, random_baseline_seed=None, progress=False)
    ball = result["variables"]["ball_x"]
    assert ball["f1"] < 0.3  # chance is 1/8: nothing to read
    assert "skipped" in result["action"]  # Random data: no policy worth imitating


def test_random_init_baseline_is_probed_on_the_same_split(tmp_path):
    store = synthetic_store(tmp_path / "s", episodes=12)
    encoder = random_probe_encoder(tmp_path / "r", store.num_actions, "nature", seed=3)
    result = probe_encoder(encoder, store, random_baseline_seed=3, progress=False)
    # The same architecture and seed: the baseline must equal the encoder's own scores.
    assert result["random_init"]["seed"] == 3
    assert result["random_init"]["overall"] == pytest.approx(result["overall"])
    assert result["majority"]["overall"] < result["overall"]


def test_episode_split_never_shares_an_episode(tmp_path):
    store = synthetic_store(tmp_path / "s", episodes=15, length=20)
    for seed in range(5):
        split = split_episodes(store, seed)
        episodes = {k: set(store.episode_index[rows]) for k, rows in split.items()}
        assert all(episodes.values())
        assert not episodes["train"] & episodes["val"]
        assert not episodes["train"] & episodes["test"]
        assert not episodes["val"] & episodes["test"]
        assert set.union(*episodes.values()) == set(range(store.num_episodes))
        # Whole episodes: every row of an episode lies in its split.
        for name, rows in split.items():
            for e in episodes[name]:
                assert set(range(store.episode_starts[e], store.episode_ends[e] + 1)) <= set(rows)
        fractions = [len(split[k]) / len(store) for k in ("train", "val", "test")]
        assert fractions[0] == pytest.approx(0.7, abs=0.1)
    few = synthetic_store(tmp_path / "few", episodes=2)
    with pytest.raises(ProbeInputError, match="at least 3"):
        split_episodes(few)


def test_category_averages_match_a_hand_computed_example():
    scores = {"player_x": 1.0, "player_y": 0.5, "score": 0.0, "angle": 0.3, "ball_x": 0.9}
    categories = {
        "player_x": "agent_localization",
        "player_y": "agent_localization",
        "score": "score_clock_lives_display",
        "angle": None,  # in no category: the overall mean only
        "ball_x": "small_object_localization",
    }
    summary = category_averages(scores, categories)
    assert summary["categories"] == {
        "agent_localization": pytest.approx(0.75),
        "score_clock_lives_display": pytest.approx(0.0),
        "small_object_localization": pytest.approx(0.9),
    }
    assert summary["overall"] == pytest.approx((1.0 + 0.5 + 0.0 + 0.3 + 0.9) / 5)
    assert summary["across_categories"] == pytest.approx((0.75 + 0.0 + 0.9) / 3)


def test_closed_form_early_stopping_equals_gradient_descent():
    rng = np.random.default_rng(0)
    x = torch.as_tensor(rng.normal(size=(50, 6)), dtype=torch.float64)
    y = torch.as_tensor(rng.normal(size=(50, 3)), dtype=torch.float64)
    gram = x.T @ x / len(x)
    eigenvalues, basis = torch.linalg.eigh(gram)
    step = 1 / eigenvalues[-1]
    w = torch.zeros(6, 3, dtype=torch.float64)
    for steps in range(1, 41):
        w = w - step * (gram @ w - x.T @ y / len(x))  # gradient of the mean squared error / 2
        if steps in (1, 7, 40):
            gain = gradient_descent_filter(eigenvalues, steps)
            closed = basis @ (gain[:, None] * (basis.T @ (x.T @ y / len(x))))
            torch.testing.assert_close(closed, w)
    least_squares = torch.linalg.lstsq(x, y).solution
    gain = gradient_descent_filter(eigenvalues, float("inf"))
    closed = basis @ (gain[:, None] * (basis.T @ (x.T @ y / len(x))))
    torch.testing.assert_close(closed, least_squares)


@pytest.mark.parametrize("rows", [50, 12])  # more rows than features, and fewer
def test_closed_form_early_stopping_equals_gradient_descent_either_gram(rows):
    rng = np.random.default_rng(2)
    x = torch.as_tensor(rng.normal(size=(rows, 20)), dtype=torch.float64)
    y = torch.as_tensor(rng.normal(size=(rows, 2)), dtype=torch.float64)
    gram = x.T @ x / rows
    eigenvalues, basis = gram_eigenbasis(x)
    assert basis.shape[1] == min(rows, 20)
    step = 1 / eigenvalues[-1]
    w = torch.zeros(20, 2, dtype=torch.float64)
    for _ in range(25):
        w = w - step * (gram @ w - x.T @ y / rows)
    gain = gradient_descent_filter(eigenvalues, 25)
    torch.testing.assert_close(basis @ (gain[:, None] * (basis.T @ (x.T @ y / rows))), w)


def test_linear_probes_stop_where_validation_is_best():
    rng = np.random.default_rng(1)
    classes = rng.integers(0, 4, 400)
    centers = rng.normal(size=(4, 20)) * 3
    x = centers[classes] + rng.normal(size=(400, 20))
    y = np.stack([classes * 10, rng.integers(0, 4, 400)], 1)  # readable, and pure noise
    probes = fit_linear_probes(x[:300], y[:300], x[300:], y[300:], ProbeSettings())
    pred = probes.predict(x[300:])
    assert (pred[:, 0] == y[300:, 0]).mean() > 0.95
    assert set(np.unique(pred[:, 0])) <= {0, 10, 20, 30}  # predictions are observed values
    assert (pred[:, 1] == y[300:, 1]).mean() < 0.45


def test_annotation_table_covers_atariaris_games():
    assert set(annotated_games()) == {
        "BattleZone", "Boxing", "Breakout", "DemonAttack", "Freeway", "Frostbite", "Hero",
        "MsPacman", "Pong", "PrivateEye", "Qbert", "Seaquest",
    }  # fmt: skip
    pong = {v.name: v for v in annotations("pong")}
    assert (pong["ball_x"].address, pong["ball_x"].category) == (49, "small_object_localization")
    assert (pong["player_y"].address, pong["player_y"].category) == (51, "agent_localization")
    assert pong["enemy_score"].category == "score_clock_lives_display"
    breakout = annotations("Breakout")
    assert len([v for v in breakout if v.name.startswith("block_bit_map_")]) == 30
    assert {v.category for g in annotated_games() for v in annotations(g)} <= {*CATEGORIES, None}
    with pytest.raises(UnannotatedGameError, match="Alien.*annotated games: BattleZone"):
        annotations("Alien")


def _pretrain_run(store, out):
    rc = main(
        [
            "pretrain", "--params", "params/pretrain/smoke.yaml", "--set", "steps=2",
            "--set", "batch_size=4", "--data", str(store.path), "--out", str(out), "--no-progress",
        ]
    )  # fmt: skip
    assert rc == 0


def test_cli_probe_round_trip_and_skip(tmp_path, capsys):
    store = synthetic_store(tmp_path / "s", episodes=10, length=30)
    run = tmp_path / "run"
    _pretrain_run(store, run)
    capsys.readouterr()
    argv = ["probe", str(run), "--data", str(store.path), "--no-progress"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["computed"] and summary["game"] == "Pong"
    payload = json.loads((run / "probes.json").read_text())
    (entry,) = payload["entries"]
    assert entry["encoder"]["kind"] == "pretrain" and entry["encoder"]["params"] == "smoke"
    assert entry["store"]["fingerprint"] == store.fingerprint
    assert entry["variables"]["ball_x"]["f1"] > 0.8 and entry["random_init"]["overall"] > 0.3
    assert summary["overall_f1"] == entry["overall"]
    written = (run / "probes.json").stat().st_mtime_ns
    assert main(argv) == 0  # done: skipped, the file untouched
    assert json.loads(capsys.readouterr().out)["computed"] is False
    assert (run / "probes.json").stat().st_mtime_ns == written
    # A run trained again (a new model.pt) is probed again, its old entry replaced.
    stat = (run / "model.pt").stat()
    os.utime(run / "model.pt", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["computed"] is True
    assert len(json.loads((run / "probes.json").read_text())["entries"]) == 1
    # A random encoder into its own folder.
    out = tmp_path / "random"
    argv = ["probe", "--random-init", "nature", "--seed", "1", "--out", str(out)]
    assert main([*argv, "--data", str(store.path), "--no-progress", "--no-random-baseline"]) == 0
    (entry,) = json.loads((out / "probes.json").read_text())["entries"]
    assert entry["encoder"]["kind"] == "random_init" and entry["encoder"]["seed"] == 1
    assert "random_init" not in entry
    # sgi-lab report shows probe F1 of runs that have no finetuning score.
    assert main(["report", str(run), str(out)]) == 0
    shown = capsys.readouterr().out
    assert "Probes (linear probes" in shown and "random_init" in shown and "smoke" in shown
    assert f"{summary['overall_f1']:.3f}" in shown


def test_cli_probe_refuses_bad_inputs_naming_them(tmp_path, capsys):
    good = synthetic_store(tmp_path / "good", episodes=6)
    no_ram = synthetic_store(tmp_path / "no_ram", episodes=6, ram=False)
    alien = synthetic_store(tmp_path / "alien", episodes=6, game="Alien")
    run = tmp_path / "run"
    _pretrain_run(good, run)
    capsys.readouterr()
    cases = [
        (["probe", str(run), "--data", str(no_ram.path)], "no_ram: this store holds no RAM"),
        (["probe", str(run), "--data", str(alien.path)], "Alien: AtariARI annotates no RAM"),
        (["probe", str(good.path), "--data", str(good.path)], "good: not an encoder"),
        (["probe", str(tmp_path / "missing"), "--data", str(good.path)], "missing: no such run"),
        (["probe", str(run / "metrics.jsonl"), "--data", str(good.path)], "metrics.jsonl"),
        (["probe", str(run), "--data", str(tmp_path / "nostore")], "nostore: no such store"),
        (["probe", "--data", str(good.path)], "give RUN folders"),
    ]
    for argv, message in cases:
        assert main([*argv, "--no-progress"]) == 2, argv
        assert message in capsys.readouterr().err, argv
    assert not (run / "probes.json").exists()
    with pytest.raises(ProbeInputError, match="no RAM"):
        check_probe_store(no_ram.path)


def _fake_entry(game: str, kind: str, params: str | None, seed: int | None, overall: float):
    return {
        "encoder": {"kind": kind, "params": params, "seed": seed, "encoder": "nature"},
        "store": {"game": game, "fingerprint": f"fp-{game}", "path": f"/data/{game}"},
        "settings": {"split_seed": 0, "max_frames": None},
        "overall": overall,
        "across_categories": overall,
        "categories": {"agent_localization": overall - 0.1},
        "majority": {"overall": 0.2},
        "reward": {"f1": 0.5},
        "action": {"skipped": "random data"},
        "split": {"rows": {"train": 7, "val": 1, "test": 2}},
        "seconds": {"total": 1.0},
    }


def test_objective_summary_ci_correlation_and_figure(tmp_path):
    from sgi_lab.analysis.probe_study import (
        load_probe_results,
        paper_rank_correlation,
        summary_table,
    )
    from sgi_lab.metrics.aggregate import mean_ci
    from sgi_lab.probes.results import write_probes
    from sgi_lab.viz.probes import probe_bars

    scores = {  # objective -> seed -> (Pong, Breakout)
        "s": {0: (0.5, 0.7), 1: (0.6, 0.8), 2: (0.4, 0.6)},
        "i": {0: (0.8, 0.8), 1: (0.9, 0.9), 2: (0.7, 0.7)},
        "g_i": {0: (0.9, 0.9), 1: (0.9, 0.9), 2: (0.9, 0.9)},
    }
    for objective, seeds in scores.items():
        for seed, per_game in seeds.items():
            for game, value in zip(("Pong", "Breakout"), per_game, strict=True):
                folder = tmp_path / "exp" / "pretrain" / f"{objective}_seed{seed}__{game}"
                folder.mkdir(parents=True)
                (folder / "config.yaml").write_text(f"seed: {seed}\n")
                (folder / "status.json").write_text(json.dumps({"state": "finished"}))
                write_probes(
                    folder / "probes.json",
                    _fake_entry(game, "pretrain", f"{objective}_seed{seed}", None, value),
                )
    for seed, value in enumerate((0.3, 0.35, 0.4)):
        folder = tmp_path / "exp" / "probes" / f"probes__random_init__s{seed}__Pong"
        folder.mkdir(parents=True)
        write_probes(folder / "probes.json", _fake_entry("Pong", "random_init", None, seed, value))
    (tmp_path / "exp" / "experiment.json").write_text("{}")
    frame, summary = load_probe_results([tmp_path / "exp"])
    assert len(frame) == 3 * 3 * 2 + 3
    overall = summary[summary.metric == "overall"].set_index("objective")
    # s: per-seed means over games 0.6, 0.7, 0.5 -> mean 0.6, t(2) 95% CI 0.6 +- 4.303 * 0.1/sqrt3
    assert overall.loc["s", "value"] == pytest.approx(0.6)
    assert overall.loc["s", "upper"] - 0.6 == pytest.approx(4.302653 * 0.1 / np.sqrt(3), rel=1e-4)
    assert overall.loc["random_init", "value"] == pytest.approx(0.35)
    assert overall.loc["g_i", "lower"] == pytest.approx(0.9)  # no spread, no width
    assert mean_ci([0.5])[1] != mean_ci([0.5])[1]  # NaN bounds from one seed
    assert summary_table(summary).loc["s", "overall"].startswith("0.600 [")
    correlation = paper_rank_correlation(summary)
    # Ours: random_init 0.35 < s 0.6 < i 0.8 < g_i 0.9; the paper's median HNS: S 0.009 <
    # SGI-None 0.343 < I 0.411 < G+I 0.512.
    assert correlation["n"] == 4 and correlation["rho"] == pytest.approx(0.8)
    figure = probe_bars(summary)
    assert {t.name for t in figure.data} == {"s", "i", "g_i", "random_init"}
    bar = next(t for t in figure.data if t.name == "s")
    assert bar.y[0] == pytest.approx(0.6) and bar.error_y.array[0] > 0


def test_probe_folders_walk_runs_and_take_random_encoders_and_globs(tmp_path):
    """probe_folders finds runs as `run_folders` does (a status.json of ours), plus the random
    encoders' folders (probe results, not runs) of an experiment or given themselves."""
    from sgi_lab.analysis.probe_study import probe_folders
    from sgi_lab.probes.results import write_probes

    def probed(folder, run=True):
        folder.mkdir(parents=True)
        if run:
            (folder / "status.json").write_text(json.dumps({"state": "finished"}))
        write_probes(folder / "probes.json", _fake_entry("Pong", "pretrain", "s", None, 0.5))
        return folder

    runs = tmp_path / "runs"
    a, b = probed(runs / "pretrain__s__Pong"), probed(runs / "deep" / "pretrain__g__Pong")
    (runs / "unprobed").mkdir()
    (runs / "unprobed" / "status.json").write_text(json.dumps({"state": "finished"}))
    copy = probed(runs / "copied", run=False)  # probes.json in a folder that is not a run
    ckpt = probed(a / "checkpoints" / "x")  # inside a run's checkpoints/
    assert probe_folders([runs]) == [b, a]  # path order, the copy and checkpoints/ left out
    assert probe_folders([str(runs / "pretrain__*"), a]) == [a]  # a glob; each folder once
    assert probe_folders([copy, a / "probes.json"]) == [copy, a / "probes.json"]
    exp = tmp_path / "exp"
    (exp / "experiment.json").parent.mkdir()
    (exp / "experiment.json").write_text("{}")
    run, rand = probed(exp / "pretrain" / "s__Pong"), probed(exp / "probes" / "r__Pong", run=False)
    assert probe_folders([exp]) == [run, rand]
    assert probe_folders([tmp_path / "missing", str(tmp_path / "none*")]) == []
    assert ckpt.exists()


def test_checkpoints_give_a_probe_curve_and_finetuned_models_probe(tmp_path, capsys):
    from sgi_lab.analysis.probe_encoders import load_probe_encoder
    from sgi_lab.analysis.probe_study import probe_curves
    from sgi_lab.nets import SGIModel

    store = synthetic_store(tmp_path / "s", episodes=8, length=30)
    run = tmp_path / "run"
    rc = main(
        [
            "pretrain", "--params", "params/pretrain/smoke.yaml", "--set", "steps=4",
            "--set", "checkpoint_every=2", "--set", "batch_size=4", "--data", str(store.path),
            "--out", str(run), "--no-progress",
        ]
    )  # fmt: skip
    assert rc == 0
    checkpoints = sorted(str(p) for p in (run / "checkpoints").glob("ckpt_*.pt"))
    argv = ["probe", *checkpoints, run, "--data", str(store.path), "--no-random-baseline"]
    assert main([str(a) for a in argv] + ["--no-progress"]) == 0
    capsys.readouterr()
    curve = probe_curves([run])
    assert list(curve["step"]) == [2, 4] and curve["overall"].notna().all()
    assert (run / "probes_ckpt_00000002.json").exists() and (run / "probes.json").exists()
    # A finetuned model file: its encoder is probed, the result beside it.
    model = SGIModel("nature", 6, noisy=False)
    payload = {"format": "sgi-lab", "kind": "finetuned_model", "step": 7}
    payload.update(model=model.state_dict(), model_args=model.init_args)
    torch.save(payload, tmp_path / "finetuned.pt")
    encoder = load_probe_encoder(tmp_path / "finetuned.pt")
    assert encoder.kind == "finetune" and encoder.step == 7
    assert encoder.out == tmp_path / "probes_finetuned.json"
    for name, tensor in encoder.model.encoder.state_dict().items():
        torch.testing.assert_close(tensor, model.encoder.state_dict()[name])


def test_probe_experiment_graph_runs_its_tasks_and_reports(tmp_path, capsys):
    import yaml

    from sgi_lab import experiments as ex

    spec = {
        "name": "tiny_probes",
        "games": ["Breakout"],
        "data": {"random": {"source": "random", "steps": 1200}},
        "pretrain": [
            {
                "name": "s_seed0",
                "params": "params/pretrain/smoke.yaml",
                "data": "random",
                "set": {"steps": 2, "batch_size": 4},
            }
        ],
        "probe": [
            {"name": "p", "data": "random", "pretrain": ["none", "s_seed0"], "seeds": [0, 1]},
            # a second reading of the same encoder: the report summarises each apart
            {"name": "q", "data": "random", "pretrain": ["s_seed0"], "features": "projection"},
            # the same readout and features on fewer frames: a third measurement, not averaged in
            {"name": "r", "data": "random", "pretrain": ["s_seed0"], "max_frames": 600},
        ],
    }
    file = tmp_path / "tiny.yaml"
    file.write_text(yaml.safe_dump(spec))
    graph = ex.expand(ex.load_experiment(file), tmp_path / "exp")
    ids = [t.id for t in graph.tasks]
    assert graph.counts()["probe"] == 5 and graph.counts()["finetune"] == 0
    # Each probe right after its inputs; the report waits for every probe.
    assert ids.index("probe/p__none__s0__Breakout") == ids.index("data/random__Breakout") + 1
    assert ids.index("probe/p__s_seed0__Breakout") == ids.index("pretrain/s_seed0__Breakout") + 1
    assert set(graph.task("report").deps) == {i for i in ids if i.startswith("probe/")}
    for path, payload in graph.params_files.items():  # what run_graph writes first
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(yaml.safe_dump(payload))
    for task in graph.tasks:
        if task.kind == "report":
            continue
        assert not ex.task_done(task)
        assert main(list(task.argv)) == 0, task.argv
        assert ex.task_done(task), task.id
    capsys.readouterr()
    report = ex.write_report(graph)
    assert "Probes: tiny_probes" in report.read_text()
    import pandas as pd

    rows = pd.read_csv(tmp_path / "exp" / "results.csv")
    assert sorted(rows["objective"]) == ["random_init", "random_init", "s", "s", "s"]
    assert set(rows["seed"]) == {0, 1}
    assert sorted(rows["max_frames"].fillna(0)) == [0, 0, 0, 0, 600]
    summary = pd.read_csv(tmp_path / "exp" / "results.aggregates.csv")
    # One summary per reading (readout, features, frames), never a mean across them.
    combos = summary.groupby("reading")["objective"].agg(lambda o: sorted(set(o)))
    assert combos.to_dict() == {
        "lstsq, projection": ["s"],
        "lstsq, renormalized": ["random_init", "s"],
        "lstsq, renormalized, 600 frames": ["s"],
    }
    labels = probe_study.reading_labels(rows)
    for reading, group in summary.groupby("reading"):
        part = rows[labels == reading]
        assert len(part) == (3 if reading == "lstsq, renormalized" else 1)
        for objective, expected in part.groupby("objective")["overall"].mean().items():
            got = group[(group["objective"] == objective) & (group["metric"] == "overall")]
            assert got["value"].item() == pytest.approx(expected)
    markdown = (tmp_path / "exp" / "results.md").read_text()
    assert "| objective | overall |" in markdown and "Spearman rho" in markdown
    sections = markdown.split("## Readout: ")[1:]
    assert [s.split("\n", 1)[0] for s in sections] == [
        "lstsq, renormalized",  # the default first
        "lstsq, renormalized, 600 frames",
        "lstsq, projection",
    ]
    # and the readings side by side: one column each, in results.md and report.html
    side = markdown.split("## Readings side by side")[1]
    assert (
        "| objective (across_categories) | lstsq, renormalized | lstsq, renormalized, 600 frames "
        "| lstsq, projection |" in side
    )
    assert "Readings side by side" in report.read_text()


@pytest.mark.parametrize(
    ("probe", "message"),
    [
        ({"name": "p", "data": "nowhere", "pretrain": ["none"]}, "probe[0].data: 'nowhere'"),
        ({"name": "p", "data": "r", "pretrain": ["sgi"]}, "probe[0].pretrain: 'sgi'"),
        ({"name": "p", "data": "r", "pretrain": ["none"], "encoder": "vgg"}, "probe[0].encoder"),
        ({"name": "p", "data": "r", "colour": 1}, "probe[0].colour"),
    ],
)
def test_experiment_probe_specs_refuse_bad_keys(tmp_path, probe, message):
    import yaml

    from sgi_lab import experiments as ex
    from sgi_lab.config import ConfigError

    spec = {"name": "x", "games": ["Pong"], "data": {"r": {"source": "random", "steps": 10}}}
    file = tmp_path / "x.yaml"
    file.write_text(yaml.safe_dump({**spec, "probe": [probe]}))
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        ex.load_experiment(file)


def test_a_store_without_ram_gets_reward_and_action_probes_on_request(tmp_path, capsys):
    store = synthetic_store(tmp_path / "dqn", ram=False, source="dqn_replay", game="Alien")
    out = tmp_path / "random"
    argv = ["probe", "--random-init", "nature", "--out", str(out), "--data", str(store.path)]
    argv += ["--no-progress", "--no-random-baseline"]
    assert main(argv) == 2  # the state probes need RAM (and an annotated game)
    assert "--no-state-probes" in capsys.readouterr().err
    assert main([*argv, "--no-state-probes"]) == 0
    (entry,) = json.loads((out / "probes.json").read_text())["entries"]
    assert entry["state_probes"].startswith("skipped") and "variables" not in entry
    assert entry["settings"]["state_probes"] is False
    assert entry["action"]["accuracy"] > 0.9 and entry["reward"]["f1"] > 0.9


def test_eigendecomposition_falls_back_when_float32_lapack_gives_up(monkeypatch):
    from sgi_lab.probes import linear

    rng = np.random.default_rng(3)
    x = torch.as_tensor(rng.normal(size=(40, 6)), dtype=torch.float32)
    gram = x.T @ x / 40
    expected = torch.linalg.eigvalsh(gram.double())
    real_eigh = torch.linalg.eigh
    calls = []

    def flaky(matrix):
        calls.append(matrix.dtype)
        if matrix.dtype == torch.float32 or len(calls) == 2:
            raise torch.linalg.LinAlgError("linalg.eigh: The algorithm failed to converge")
        return real_eigh(matrix)

    monkeypatch.setattr(torch.linalg, "eigh", flaky)
    values, vectors = linear.symmetric_eigh(gram)
    assert calls == [torch.float32, torch.float64, torch.float64]  # float64, then with jitter
    assert values.dtype == vectors.dtype == torch.float32
    torch.testing.assert_close(values.double(), expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(vectors @ torch.diag(values) @ vectors.T, gram, rtol=1e-4, atol=1e-5)


def test_eigendecomposition_falls_back_when_float32_returns_nan_without_raising(monkeypatch):
    """MKL's float32 solver returned NaN for some real Gram matrices without raising (4 of 296
    probe reads on a 2-core Xeon): every probe then predicted one class. The float64 solution
    is used instead, and the probes read what they read with a healthy float32 solution."""
    from sgi_lab.probes import linear

    rng = np.random.default_rng(4)
    labels = rng.integers(0, 3, size=(300, 2))
    x = rng.normal(size=(300, 8)) + 2.0 * np.eye(3)[labels[:, 0]] @ rng.normal(size=(3, 8))
    healthy = linear.fit_linear_probes(x[:200], labels[:200], x[200:], labels[200:])
    real_eigh = torch.linalg.eigh
    calls = []

    def silent_nan(matrix):
        calls.append(matrix.dtype)
        values, vectors = real_eigh(matrix)
        if matrix.dtype == torch.float32:
            return torch.full_like(values, float("nan")), torch.full_like(vectors, float("nan"))
        return values, vectors

    monkeypatch.setattr(torch.linalg, "eigh", silent_nan)
    probes = linear.fit_linear_probes(x[:200], labels[:200], x[200:], labels[200:])
    assert calls == [torch.float32, torch.float64]
    assert torch.isfinite(probes.weight).all()
    assert probes.steps == healthy.steps
    np.testing.assert_array_equal(probes.predict(x[200:]), healthy.predict(x[200:]))

    # NaN in the features themselves: no solver can help, and the error says so
    monkeypatch.setattr(torch.linalg, "eigh", real_eigh)
    gram = torch.full((4, 4), float("nan"))
    with pytest.raises(torch.linalg.LinAlgError, match="features hold NaN or inf"):
        linear.symmetric_eigh(gram)
