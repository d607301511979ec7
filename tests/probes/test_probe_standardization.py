"""Features constant in training: standardized to 0 on every row, so a held-out row where one is
not constant moves no probe's prediction (with the old 1e-6 floor on the standard deviation such
a row sat at 1e6 standard deviations, and a MinAtar Breakout probe's R^2 fell to -7.5 and -67)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sgi_lab.probes.game_labels import label_variables
from sgi_lab.probes.linear import (
    CONSTANT_STD,
    ProbeSettings,
    fit_linear_probes,
    fit_logistic_probes,
    fit_ridge_regressions,
    r_squared,
    standardization,
    train_design,
)
from sgi_lab.probes.state_probes import state_probes


def _dead_feature_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """400 rows of 40 features, about 30 % of them 0 on every row (ReLU units that never
    fire in training), two nearly collinear; a target that is a sum of five live features.
    Returns the features, the target (N, 1) and the dead features' columns."""
    rng = np.random.default_rng(seed)
    x = rng.random((400, 40)).astype(np.float32)
    x[:, rng.random(40) < 0.3] = 0.0
    x[:, 1] = x[:, 0] + 1e-3 * x[:, 2]
    dead = np.flatnonzero(x.std(0) == 0)
    y = (x[:, :5].sum(1, keepdims=True) * 3).astype(np.float64)
    return x, y, dead


def test_a_feature_constant_in_training_reads_zero_everywhere():
    x = np.array([[0.3, 0.0, 1.0], [0.3, 0.0, 3.0], [0.3, 0.0, 5.0]], np.float32)
    mean, std = standardization(x)
    assert torch.isinf(std[:2]).all()  # 0.3 and 0: constant, whatever float32 makes the mean
    assert std[2].item() == pytest.approx(2.0)  # the sample std (ddof 1), as before
    design = train_design(x)
    np.testing.assert_array_equal(design.x[:, :2].numpy(), 0.0)
    np.testing.assert_allclose(design.x[:, 2].numpy(), [-1.0, 0.0, 1.0])
    # A held-out row far from the constant still reads 0 there, not (value - mean) / 1e-6.
    held_out = (torch.tensor([[7.0, 2.0, 3.0]]) - mean) / std
    np.testing.assert_array_equal(held_out[0, :2].numpy(), 0.0)
    # One training row: nothing to standardize by.
    _, std = standardization(x[:1])
    np.testing.assert_array_equal(std.numpy(), 1.0)
    # A feature that varies only a little is standardized as before.
    tiny = np.stack([np.zeros(4), [0.0, 0.0, 0.0, 10 * CONSTANT_STD]], 1).astype(np.float32)
    assert np.isfinite(standardization(tiny)[1][1].item())


def test_ridge_predictions_ignore_features_constant_in_training():
    x, y, dead = _dead_feature_data()
    ridge = fit_ridge_regressions(x[:300], y[:300], x[300:350], y[300:350], ProbeSettings())
    assert ridge.alphas == [1e-3]  # a near-exact fit: the smallest penalty
    test = x[350:].copy()
    shifted = test.copy()
    shifted[:, dead] = 1.0  # units that never fired in training fire on held-out rows
    # The old floor moved these predictions by about 55 (the target spans about 0-15).
    np.testing.assert_array_equal(ridge.predict(shifted), ridge.predict(test))
    assert r_squared(y[350:, 0], ridge.predict(shifted)[:, 0]) > 0.99


def test_classifiers_ignore_features_constant_in_training():
    x, y, dead = _dead_feature_data(1)
    classes = np.digitize(y[:, 0], np.quantile(y[:, 0], [1 / 3, 2 / 3]))[:, None]
    test = x[350:].copy()
    shifted = test.copy()
    shifted[:, dead] = 5.0
    for fit in (fit_linear_probes, fit_logistic_probes):
        probes = fit(x[:300], classes[:300], x[300:350], classes[300:350], ProbeSettings())
        np.testing.assert_array_equal(probes.predict(shifted), probes.predict(test))


def test_state_r2_of_held_out_rows_with_new_active_features_stays_near_one():
    """The Breakout case by hand: a position read linearly from live features, validation rows
    like training's, test rows where units dead in training fire. The old code's state R^2
    here was -103; now the test rows score as they do without the new units."""
    x, y, dead = _dead_feature_data(1)
    labels = np.round(y).astype(np.int64)
    split = {"train": np.arange(300), "val": np.arange(300, 340), "test": np.arange(340, 400)}
    variables = label_variables(("paddle_x",))
    quiet = state_probes(x, labels, split, variables, ProbeSettings())
    x = x.copy()
    x[380:, dead] = 0.5
    result = state_probes(x, labels, split, variables, ProbeSettings())
    assert result["headline"]["metric"] == "r2"
    assert result["variables"]["paddle_x"]["r2"] > 0.95
    assert result["r2"]["mean"] == quiet["r2"]["mean"]
