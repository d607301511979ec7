"""Seed-level tests of probe comparisons: a seed's encoders are averaged before any test, the
sign test's floor with 3 seeds, the t test on seed means, contrasts within a seed."""

from __future__ import annotations

import pandas as pd
import pytest

from sgi_lab.studies.probe_seed_tests import (
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


def test_each_encoder_is_paired_with_its_own_seeds_random_encoder_per_game_and_reading():
    from sgi_lab.studies.probe_seed_tests import (
        inverse_groups,
        paired_change_frame,
        reading_seed_table,
    )

    # (objective, seed, game, across_categories): random encoders 0.80/0.90 (seed 0/1) on Pong,
    # 0.60/0.70 on Boxing; I is 0.10 below its seed's on Pong and 0.20 on Boxing in seed 0,
    # 0.04 and 0.06 in seed 1; S is level in seed 0 and 0.02 above in seed 1
    values = [
        ("random_init", 0, "Pong", 0.80), ("random_init", 0, "Boxing", 0.60),
        ("random_init", 1, "Pong", 0.90), ("random_init", 1, "Boxing", 0.70),
        ("i", 0, "Pong", 0.70), ("i", 0, "Boxing", 0.40),
        ("i", 1, "Pong", 0.86), ("i", 1, "Boxing", 0.64),
        ("s", 0, "Pong", 0.80), ("s", 0, "Boxing", 0.60),
        ("s", 1, "Pong", 0.92), ("s", 1, "Boxing", 0.72),
    ]  # fmt: skip
    frame = pd.DataFrame(
        [
            {"objective": o, "seed": s, "game": g, "across_categories": v}
            | {"readout": "lstsq", "features": "renormalized", "max_frames": None}
            for o, s, g, v in values
        ]
    )
    changes = paired_change_frame(frame, "across_categories").set_index(["objective", "seed"])
    assert changes.loc[("i", 0), "value"] == pytest.approx(-0.15)  # mean of -0.10 and -0.20
    assert changes.loc[("i", 1), "value"] == pytest.approx(-0.05)
    assert changes.loc[("s", 1), "value"] == pytest.approx(0.02)
    assert set(changes["reading"]) == {"lstsq, renormalized"}
    assert inverse_groups(["random_init", "i", "s", "sgi_noaug", "bc"]) == {
        "with inverse dynamics (i, sgi_noaug)": ["i", "sgi_noaug"],
        "S, G, S+G (s)": ["s"],
        "with minus without, within a seed": (["i", "sgi_noaug"], ["s"]),
    }
    table = reading_seed_table(frame)
    row = table.loc["lstsq, renormalized: with inverse dynamics (i)"]
    assert row["seed means"] == "0: -0.150, 1: -0.050" and row["seeds lower"] == "2 of 2"
    assert row["sign test p"] == "0.50 (at best 0.50)"
    contrast = table.loc["lstsq, renormalized: with minus without, within a seed"]
    assert contrast["seed means"] == "0: -0.150, 1: -0.070"


def test_an_archived_studys_probes_are_read_without_their_models(tmp_path):
    """An archive keeps a run's probes.json, not its model.pt: read on request, one row per
    encoder and game, random encoders by seed."""
    import json

    from sgi_lab.analysis.probe_study import probe_folders, probe_frame
    from sgi_lab.studies.probe_seed_tests import encoder_game_table

    def entry(kind, game, r2, seed=None, stamp=None):
        return {
            "encoder": {"kind": kind, "params": "sgi", "seed": seed, "stamp": stamp},
            "store": {"game": game, "fingerprint": game},
            "settings": {"split_seed": 0},
            "regression": {"r2": r2},
            "split": {"rows": {"train": 10, "val": 2, "test": 69}},
        }

    stamp = {"name": "model.pt", "size": 1, "mtime_ns": 1}  # the model is gone
    for folder, entries in {
        "pretrain/sgi": [entry("pretrain", "minatar/breakout", 0.9, stamp=stamp)],
        "probes/r0": [entry("random_init", "minatar/breakout", 0.2, seed=0)],
        "probes/r1": [entry("random_init", "minatar/breakout", 0.95, seed=1)],
    }.items():
        (tmp_path / folder).mkdir(parents=True)
        payload = {"format": 2, "entries": entries}
        (tmp_path / folder / "probes.json").write_text(json.dumps(payload))
    (tmp_path / "pretrain/sgi/config.yaml").write_text("seed: 0\n")
    paths = [tmp_path / "pretrain/*", tmp_path / "probes/*"]
    assert len(probe_frame(probe_folders(paths))) == 2  # current only: the run's entry is stale
    frame = probe_frame(probe_folders(paths, current_only=False), current_only=False)
    assert len(frame) == 3 and list(frame["test_rows"]) == [69, 69, 69]
    table = encoder_game_table(frame, "coordinate_r2")
    assert table.to_dict() == {
        "breakout": {"random_init, seed 0": "0.200", "random_init, seed 1": "0.950", "sgi": "0.900"}
    }
