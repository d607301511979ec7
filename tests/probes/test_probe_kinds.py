"""Labels probed by their kind: a linear readout of a counter gives R^2 about 1 and noise about 0
or below, a category keeps its F1, the two never averaged; the small-test flag; the collapse
diagnostic (identical latents 1, Gaussian ones about 0) and a run's rebuilt step 0."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from sgi_lab.probes.atariari import Variable
from sgi_lab.probes.collapse import collapse_rows, mean_pairwise_cosine
from sgi_lab.probes.game_labels import MINATAR_LABEL_KINDS, label_variables
from sgi_lab.probes.kinds import KINDS, headline, metric_of, small_test_warnings
from sgi_lab.probes.linear import ProbeSettings
from sgi_lab.probes.state_probes import state_probes


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def synthetic_split(n: int = 3000) -> dict[str, np.ndarray]:
    """Positions 0..n-1 dealt 70/10/20 in order (train, val, test)."""
    a, b = int(0.7 * n), int(0.8 * n)
    return {"train": np.arange(a), "val": np.arange(a, b), "test": np.arange(b, n)}


def counter_and_category(n: int = 3000, seed: int = 0):
    """A counter over 2,501 values (Freeway's ``time_left``) and a 3-class category, with
    features that read both linearly (the counter is a linear map of two feature columns, the
    category a one-hot block) and features of pure noise."""
    rng = np.random.default_rng(seed)
    counter = rng.integers(0, 2501, n)
    category = rng.integers(0, 3, n)
    noise = rng.normal(size=(n, 12))
    readable = noise.copy()
    readable[:, 0] = counter / 2500.0
    readable[:, 1] = -0.5 * counter / 2500.0 + 0.3
    readable[:, 2:5] = 3.0 * np.eye(3)[category]
    labels = np.stack([counter, category], 1)
    variables = (
        Variable("time_left", 0, "score_clock_lives_display", "counter"),
        Variable("ball_dir", 1, "miscellaneous", "category"),
    )
    return readable.astype(np.float32), noise.astype(np.float32), labels, variables


def test_a_linear_readout_of_a_counter_gives_r2_one_and_noise_none():
    readable, noise, labels, variables = counter_and_category()
    split = synthetic_split()
    read = state_probes(readable, labels, split, variables, ProbeSettings())
    time_left = read["variables"]["time_left"]
    assert (time_left["kind"], time_left["metric"]) == ("counter", "r2")
    assert time_left["r2"] == pytest.approx(1.0, abs=1e-3)
    assert time_left["score"] == time_left["r2"] and "f1" not in time_left  # never classified
    assert time_left["baseline_r2"] <= 0 and time_left["values"] > 1000
    # the category keeps its classifier and F1
    ball_dir = read["variables"]["ball_dir"]
    assert (ball_dir["kind"], ball_dir["metric"]) == ("category", "f1")
    assert ball_dir["f1"] == pytest.approx(1.0) and "r2" not in ball_dir
    # summaries: F1 over the category only, R^2 over the counter only, never one mean
    assert read["overall"] == read["across_categories"] == pytest.approx(ball_dir["f1"])
    assert read["categories"] == {"miscellaneous": pytest.approx(ball_dir["f1"])}
    assert read["r2"]["mean"] == pytest.approx(time_left["r2"])
    assert read["r2"]["kinds"] == {"counter": pytest.approx(time_left["r2"])}
    assert read["headline"]["metric"] == "r2"
    assert read["headline"]["value"] == pytest.approx(time_left["r2"])

    blind = state_probes(noise, labels, split, variables, ProbeSettings())
    assert blind["variables"]["time_left"]["r2"] < 0.01  # about 0, or below: no signal
    assert blind["variables"]["ball_dir"]["f1"] < 0.5  # chance for 3 balanced classes: 1/3


def test_atariari_variables_stay_classified_with_the_coordinates_regression_beside():
    readable, _, labels, _ = counter_and_category()
    variables = (  # AtariARI's protocol: every variable a category; a coordinate gets a ridge
        Variable("ball_x", 0, "small_object_localization"),
        Variable("mode", 1, "miscellaneous"),
    )
    read = state_probes(readable, labels, synthetic_split(), variables, ProbeSettings())
    ball_x = read["variables"]["ball_x"]
    assert ball_x["metric"] == "f1" and "f1" in ball_x and "r2" in ball_x
    assert read["r2"] == {"variables": 0}
    assert read["regression"]["variables"] == 1 and read["regression"]["f1"] == ball_x["f1"]
    assert read["headline"] == {
        "metric": "f1",
        "value": read["across_categories"],
        "of": "mean of the category means of F1 (AtariARI)",
    }


def test_every_minatar_label_has_a_kind_and_the_wide_ones_are_read_by_r2():
    from sgi_lab.envs.minatar import LABEL_NAMES

    names = {name for game in LABEL_NAMES.values() for name in game}
    assert names == set(MINATAR_LABEL_KINDS)
    assert set(MINATAR_LABEL_KINDS.values()) <= set(KINDS)
    for name in ("time_left", "oxygen", "paddle_x", "chicken_y", "ball_y", "enemies"):
        assert metric_of(MINATAR_LABEL_KINDS[name]) == "r2", name
    for name in ("ball_dir", "alien_dir", "sub_facing_right"):
        assert metric_of(MINATAR_LABEL_KINDS[name]) == "f1", name
    freeway = label_variables(LABEL_NAMES["freeway"])
    assert [(v.name, v.kind) for v in freeway] == [
        ("chicken_y", "coordinate"),
        ("cars", "counter"),
        ("time_left", "counter"),
    ]
    with pytest.raises(ValueError, match="label kind 'colour'"):
        metric_of("colour")


def test_headline_is_r2_with_regressed_labels_and_f1_without():
    assert headline({"r2": {"variables": 2, "mean": 0.4}, "across_categories": 0.9})["value"] == 0.4
    assert headline({"r2": {"variables": 0}, "across_categories": 0.9}) == {
        "metric": "f1",
        "value": 0.9,
        "of": "mean of the category means of F1 (AtariARI)",
    }


def test_a_test_split_under_1000_rows_is_flagged_and_named():
    result = {
        "store": {"game": "minatar/breakout"},
        "split": {"rows": {"train": 13998, "val": 1994, "test": 69}},
        "variables": {"paddle_x": {}, "ball_dir": {}},
        "reward": {"rows": {"train": 40, "val": 8, "test": 12}},
    }
    lines = small_test_warnings(result)
    assert result["split"]["small_test"] is True
    assert result["variables"]["paddle_x"] == {"test_rows": 69, "small_test": True}
    assert result["reward"]["small_test"] is True
    assert len(lines) == 2
    assert (
        "paddle_x, ball_dir scored on 69 test rows" in lines[0] and "minatar/breakout" in lines[0]
    )
    assert "reward scored on 12 balanced test rows" in lines[1]
    big = {"split": {"rows": {"test": 1000}}, "variables": {"x": {}}, "reward": {"skipped": "."}}
    assert small_test_warnings(big) == [] and big["split"]["small_test"] is False


def test_mean_pairwise_cosine_of_identical_latents_is_one_and_of_gaussian_ones_about_zero():
    rng = np.random.default_rng(0)
    assert mean_pairwise_cosine(np.tile(rng.normal(size=(1, 64)), (500, 1))) == pytest.approx(1.0)
    gaussian = mean_pairwise_cosine(rng.normal(size=(2000, 256)))
    # the mean of ~2M cosines of independent directions: sd about 1/sqrt(256 * 1000)
    assert abs(gaussian) < 0.005
    # the closed form equals the mean over every pair, by brute force
    x = rng.normal(size=(7, 5)) + 0.5
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    pairs = [u[i] @ u[j] for i in range(7) for j in range(7) if i != j]
    assert mean_pairwise_cosine(x) == pytest.approx(np.mean(pairs), abs=1e-12)
    assert np.isnan(mean_pairwise_cosine(x[:1]))
    np.testing.assert_array_equal(collapse_rows(np.arange(10, 20), 4), [10, 13, 16, 19])
    np.testing.assert_array_equal(collapse_rows(np.arange(3), 4), [0, 1, 2])


def test_a_pretraining_runs_step_0_is_rebuilt_exactly():
    """`initial_model` rebuilds the weights `build_state` starts a run from."""
    from sgi_lab.analysis.probe_encoders import initial_model
    from sgi_lab.config import PretrainConfig, load_config
    from sgi_lab.envs.spec import minatar_spec
    from sgi_lab.train.pretrain_step import build_state, model_args
    from sgi_lab.train.transfer import Pretrained

    config = load_config(PretrainConfig, "params/pretrain/minatar_sgi.yaml", {"seed": 3})
    spec = minatar_spec("breakout")
    args = model_args(config, 3, spec)
    started = build_state(config, 3, torch.device("cpu"), spec).model.state_dict()
    pretrained = Pretrained(Path("m.pt"), {}, args, 100, config={"seed": 3})
    model, source = initial_model(pretrained)
    assert "torch.manual_seed(3)" in source
    rebuilt = model.state_dict()
    assert set(rebuilt) == set(started)
    for name, tensor in started.items():
        torch.testing.assert_close(rebuilt[name], tensor, rtol=0, atol=0, msg=name)
    assert initial_model(Pretrained(Path("m.pt"), {}, args, 100, config={})) is None
