"""Seed-level tests of probe comparisons: a seed's encoders are averaged before any test, the
sign test's floor with 3 seeds, the t test on seed means, contrasts within a seed."""

from __future__ import annotations

import pandas as pd
import pytest

from sgi_lab.analysis.probe_seed_tests import (
    seed_level_table,
    seed_level_test,
    seed_means,
    sign_test_p,
)


def encoders() -> pd.DataFrame:
    """Two objectives with I and one without, 3 seeds: changes from each seed's random encoder.
    Seed 0's two I-encoders fall by 0.10 and 0.20, seed 1's by 0.05 and 0.15, seed 2's by 0.30
    and 0.10; G moves +0.01, -0.01, +0.03."""
    rows = [
        ("i", 0, -0.10), ("sgi", 0, -0.20), ("g", 0, 0.01),
        ("i", 1, -0.05), ("sgi", 1, -0.15), ("g", 1, -0.01),
        ("i", 2, -0.30), ("sgi", 2, -0.10), ("g", 2, 0.03),
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=["objective", "seed", "value"])


def test_a_seeds_encoders_are_averaged_before_the_test():
    per_seed = seed_means(encoders(), objectives=["i", "sgi"])
    assert per_seed.to_dict() == pytest.approx({0: -0.15, 1: -0.10, 2: -0.20})


def test_three_seeds_in_one_direction_give_a_sign_test_p_of_a_quarter_not_of_6_encoders():
    # 6 of 6 encoders lower would read p = 2 / 64 = 0.031 counted as independent; the seed is
    # the unit: 3 of 3, p = 2 / 8
    assert sign_test_p(6, 6) == pytest.approx(0.03125)
    assert sign_test_p(3, 3) == pytest.approx(0.25)
    assert sign_test_p(12, 12) == pytest.approx(2 / 4096)
    test = seed_level_test(seed_means(encoders(), objectives=["i", "sgi"]))
    assert (test["seeds"], test["below"]) == (3, 3)
    assert test["sign_p"] == pytest.approx(0.25) and test["min_sign_p"] == pytest.approx(0.25)
    # t on (-0.15, -0.10, -0.20): mean -0.15, sd 0.05, t = -0.15 / (0.05 / sqrt 3) = -5.196,
    # two-sided p with 2 degrees of freedom = 0.0351
    assert test["mean"] == pytest.approx(-0.15)
    assert test["t_p"] == pytest.approx(0.03510, abs=1e-4)
    # its 95% interval: -0.15 -+ 4.3027 x 0.05 / sqrt 3
    assert test["upper"] == pytest.approx(-0.15 + 4.30265 * 0.05 / 3**0.5, rel=1e-4)


def test_equal_seed_values_have_no_t_test_and_one_seed_no_interval():
    assert seed_level_test([-0.1, -0.1, -0.1])["t_p"] is None
    one = seed_level_test([-0.1])
    assert one["t_p"] is None and one["min_sign_p"] == 1.0 and one["sign_p"] == 1.0


def test_the_table_tests_groups_and_contrasts_over_seeds():
    table = seed_level_table(
        encoders(),
        {"with I": ["i", "sgi"], "G": ["g"], "with I minus G": (["i", "sgi"], ["g"])},
    )
    row = table.loc["with I"]
    assert row["encoders"] == 6 and row["seeds lower"] == "3 of 3"
    assert row["seed means"] == "0: -0.150, 1: -0.100, 2: -0.200"
    assert row["sign test p"] == "0.25 (at best 0.25)" and row["t test p"] == "0.035"
    assert table.loc["G", "seeds lower"] == "1 of 3"
    # the contrast is taken seed by seed: (-0.16, -0.09, -0.23)
    contrast = table.loc["with I minus G"]
    assert contrast["seed means"] == "0: -0.160, 1: -0.090, 2: -0.230"
    assert contrast["encoders"] == 9
