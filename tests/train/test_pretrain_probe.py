"""Probing during pretraining (``probe_every``): the probe curve's points are the probes of the
encoder at those steps, probing leaves the training as it is, and bad probe inputs are refused
before anything trains."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sgi_lab.config import ConfigError, PretrainConfig, build_config
from sgi_lab.data import TransitionStore, TransitionStoreWriter
from sgi_lab.probes.atariari import annotations
from sgi_lab.probes.encoder_probe import ProbeEncoder, probe_encoder
from sgi_lab.probes.probe_data import ProbeInputError
from sgi_lab.runs.checkpoints import load_checkpoint
from sgi_lab.runs.folder import RunDir
from sgi_lab.train.pretrain import pretrain, probe_metrics
from sgi_lab.train.pretrain_step import build_state

TINY = dict(encoder="nature", batch_size=8, log_every=4, checkpoint_every=6, prefetch=0)


def ram_store(path, seed: int, ram: bool = True, episodes: int = 12, length: int = 30):
    """Pong frames that draw ball_x as a bright block at column 10 * value; RAM holds it."""
    rng = np.random.default_rng(seed)
    n = episodes * length
    values = rng.integers(0, 8, n)
    frames = np.zeros((n, 84, 84), np.uint8)
    for t, v in enumerate(values):
        frames[t, 30:40, 10 * v : 10 * v + 8] = 200
    frames[:, 80:84, 0:20] = rng.integers(0, 255, (n, 4, 20))
    ball_x = next(v.address for v in annotations("Pong") if v.name == "ball_x")
    rams = np.zeros((n, 128), np.uint8)
    rams[:, ball_x] = values
    first = np.zeros(n, np.uint8)
    first[::length] = 1
    writer = TransitionStoreWriter.create(
        path, game="Pong", source="random", num_actions=6, chunk_size=300, ram=ram
    )
    writer.append_many(
        frame=frames,
        action=rng.integers(0, 6, n).astype(np.int32),
        reward=(values == 7).astype(np.float32),
        terminal=np.roll(first, -1),
        first=first,
        **({"ram": rams} if ram else {}),
    )
    return TransitionStore(writer.close())


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("probe_stores")
    return ram_store(root / "data", seed=0), ram_store(root / "probe", seed=1)


def config(probe_store=None, **overrides) -> PretrainConfig:
    values = {**TINY, "steps": 12, "goal_weight": 0.0, **overrides}
    if probe_store is not None:
        values.update(probe_every=6, probe_data=str(probe_store.path), probe_frames=200)
    return build_config(PretrainConfig, values)


def test_probe_curve_points_are_the_encoders_probes_and_training_is_unchanged(stores, tmp_path):
    data, probe_store = stores
    probed = pretrain(config(probe_store), data, tmp_path / "probed", progress=False)
    plain = pretrain(config(), data, tmp_path / "plain", progress=False)

    # the probe store's identity is one of the run's inputs (a resume on another is refused)
    inputs = RunDir(tmp_path / "probed").status()["inputs"]
    assert inputs == {"data": data.fingerprint, "probe_data": probe_store.fingerprint}
    rows = RunDir(tmp_path / "probed").read_metrics()
    # the initialisation (step 0), log_every 4, and the probes at 6 and 12
    assert [r["step"] for r in rows] == [0, 4, 6, 8, 12]
    with_probe = [r["step"] for r in rows if "probe/f1" in r]
    assert with_probe == [0, 6, 12]
    for row in rows:
        if "probe/f1" in row:
            assert 0 <= row["probe/f1"] <= 1 and 0 <= row["probe/reward_f1"] <= 1
            assert any(k.startswith("probe/f1_") for k in row)  # per category

    # Probing reads the model and its own random streams: the training is bit for bit the same.
    a = load_checkpoint(probed, kind="pretrained_model")
    b = load_checkpoint(plain, kind="pretrained_model")
    for name in a["model"]:
        torch.testing.assert_close(a["model"][name], b["model"][name], rtol=0, atol=0, msg=name)

    # The point at step 12 is the probe of the final encoder, as `sgi-lab probe` computes it.
    def probed(state_dict, name):  # `sgi-lab probe`'s metrics of a model with these weights
        model = build_state(config(), data.num_actions, torch.device("cpu")).model
        if state_dict is not None:
            model.load_state_dict(state_dict)
        encoder = ProbeEncoder(model, name, "pretrain", tmp_path / f"unused_{name}.json")
        return probe_metrics(
            probe_encoder(
                encoder,
                probe_store,
                max_frames=200,
                random_baseline_seed=None,
                device="cpu",
                progress=False,
            )
        )

    def logged(row):
        return {k: v for k, v in row.items() if k.startswith("probe/")}

    assert logged(rows[-1]) == pytest.approx(probed(a["model"], "final"), abs=1e-6)
    # The point at step 0 is the probe of the run's own initialisation.
    assert logged(rows[0]) == pytest.approx(probed(None, "init"), abs=1e-6)


def test_probe_metrics_reads_overall_categories_and_reward():
    result = {
        "overall": 0.5,
        "categories": {"agent_localization": {"f1": 0.25}, "score_clock_lives_display": 0.75},
        "reward": {"f1": 0.6},
    }
    assert probe_metrics(result) == {
        "probe/f1": 0.5,
        "probe/f1_agent_localization": 0.25,
        "probe/f1_score_clock_lives_display": 0.75,
        "probe/reward_f1": 0.6,
    }
    assert probe_metrics({"overall": None, "reward": {}}) == {}


def test_bad_probe_inputs_are_refused_before_training(stores, tmp_path):
    data, _ = stores
    with pytest.raises(ConfigError, match="probe_data: probe_every > 0 needs a store"):
        config(probe_every=5)
    no_ram = ram_store(tmp_path / "no_ram", seed=2, ram=False)
    with pytest.raises(ProbeInputError, match="no_ram"):
        pretrain(config(no_ram), data, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()  # refused before the run folder is touched


def test_pretraining_curves_draw_the_probe_curve_beside_the_similarity():
    """The default pretraining panels include the probe F1 (only its probed steps, joined) right
    after the latent similarity, with a readable title."""
    from sgi_lab.viz.training import PRETRAIN_CURVES, training_curves

    keys = list(PRETRAIN_CURVES)
    assert keys.index("probe/f1") == keys.index("charts/cosine_similarity") + 1
    rows = [
        {"step": s, "losses/total": 1.0 / s, "charts/cosine_similarity": 0.5}
        | ({"probe/f1": s / 100} if s % 20 == 0 else {})
        for s in range(10, 61, 10)
    ]
    fig = training_curves(rows, PRETRAIN_CURVES)
    titles = [a.text for a in fig.layout.annotations]
    assert "probe F1 (AtariARI state, overall)" in titles
    probe = [t for t in fig.data if list(t.y) == [0.2, 0.4, 0.6]]
    assert len(probe) == 1 and list(probe[0].x) == [20, 40, 60]


def test_training_probe_curves_and_their_summary(tmp_path):
    """Two seeds of one objective: the curve per step is the mean over seeds with a t interval
    (n = 2: mean +- 12.706 * sd / sqrt 2), read from the runs' metrics.jsonl."""
    import json

    from sgi_lab.analysis.probe_study import curve_summary, training_probe_curves

    runs = []
    for seed, values in ((0, (0.5, 0.7)), (1, (0.6, 0.9))):
        run = tmp_path / f"sgi_seed{seed}__Pong"
        run.mkdir()
        (run / "config.yaml").write_text(f"seed: {seed}\n")
        (run / "status.json").write_text(json.dumps({"params": f"sgi_seed{seed}", "game": "Pong"}))
        rows = [{"step": 5, "losses/total": 1.0}]  # a row without a probe is not a point
        rows += [{"step": 10, "probe/f1": values[0], "probe/reward_f1": 0.5}]
        rows += [{"step": 20, "probe/f1": values[1], "probe/f1_agent_localization": 0.25}]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        runs.append(run)
    curves = training_probe_curves(runs)
    assert list(curves["step"]) == [10, 20, 10, 20] and set(curves["objective"]) == {"sgi"}
    assert list(curves["seed"]) == [0, 0, 1, 1]
    summary = curve_summary(curves)
    assert list(summary["step"]) == [10, 20] and list(summary["seeds"]) == [2, 2]
    for step, a, b in ((10, 0.5, 0.6), (20, 0.7, 0.9)):
        row = summary[summary["step"] == step].iloc[0]
        mean, half = (a + b) / 2, 12.706 * abs(a - b) / 2**0.5 / 2**0.5
        assert row["value"] == pytest.approx(mean)
        assert row["upper"] - mean == pytest.approx(half, rel=1e-3)


def test_training_probe_curves_read_a_minatar_run_that_logs_r2_only(tmp_path):
    """Freeway and Asterix have no classified label: their rows carry probe/r2 and no
    probe/f1, and are points of the R^2 curve all the same."""
    import json

    from sgi_lab.analysis.probe_study import curve_summary, training_probe_curves

    run = tmp_path / "sgi_seed0__minatar-freeway"
    run.mkdir()
    (run / "config.yaml").write_text("seed: 0\n")
    (run / "status.json").write_text(json.dumps({"params": "sgi", "game": "minatar/freeway"}))
    rows = [{"step": 0, "probe/r2": 0.25, "probe/headline": 0.25}, {"step": 50, "probe/r2": 0.5}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    curves = training_probe_curves([run])
    assert list(curves["step"]) == [0, 50] and list(curves["state_r2"]) == [0.25, 0.5]
    assert curves["overall"].isna().all()
    assert list(curve_summary(curves, "state_r2")["value"]) == [0.25, 0.5]
