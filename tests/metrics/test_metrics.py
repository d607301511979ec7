"""Human-normalized scores, aggregate metrics and the paper's tables.

The strongest check is the paper against itself: from its per-game columns our metric functions
must reproduce the aggregate rows printed under them, for every column.
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pytest

from sgi_lab.envs.games import ATARI_100K_GAMES
from sgi_lab.metrics import aggregate, hns, paper
from sgi_lab.metrics.aggregate import (
    aggregate_scores,
    aggregate_with_ci,
    games_above_human,
    games_above_zero,
    iqm,
    mean_hns,
    median_hns,
    optimality_gap,
    probability_of_improvement,
    probability_of_improvement_with_ci,
)
from sgi_lab.metrics.hns import canonical_game, hns_matrix, human_normalized_score, per_game_hns

GAMES = tuple(ATARI_100K_GAMES)

# ---------------------------------------------------------------------------- HNS


def test_pong_hns_hand_computed():
    assert human_normalized_score("Pong", 14.6) == pytest.approx(1.0)
    assert human_normalized_score("Pong", -20.7) == pytest.approx(0.0)
    assert human_normalized_score("Pong", (14.6 - 20.7) / 2) == pytest.approx(0.5)
    np.testing.assert_allclose(
        human_normalized_score("Pong", np.array([-20.7, -3.05, 14.6])), [0.0, 0.5, 1.0]
    )


def test_hns_broadcasts_games_over_columns():
    # Breakout: random 1.7, human 30.5 -> (17.1 - 1.7) / 28.8.
    out = human_normalized_score(["Pong", "Breakout"], [[14.6, 17.1], [-20.7, 1.7]])
    np.testing.assert_allclose(out, [[1.0, 15.4 / 28.8], [0.0, 0.0]])


@pytest.mark.parametrize(
    "name, expected",
    [
        ("Pong", "Pong"),
        ("pong", "Pong"),
        ("ALE/Pong-v5", "Pong"),
        ("PongNoFrameskip-v4", "Pong"),
        ("ms_pacman", "MsPacman"),
        ("Ms Pacman", "MsPacman"),
        ("James Bond", "Jamesbond"),
        ("Up N Down", "UpNDown"),
        ("kung-fu-master", "KungFuMaster"),
    ],
)
def test_canonical_game_spellings(name, expected):
    assert canonical_game(name) == expected


def test_unknown_game_lists_valid_games():
    with pytest.raises(ValueError, match="MsPacman"):
        canonical_game("Montezuma")


def test_reference_scores_cover_26_games():
    assert len(GAMES) == 26
    assert (hns.random_score("Pong"), hns.human_score("pong")) == (-20.7, 14.6)
    assert all(hns.human_score(g) > hns.random_score(g) for g in GAMES)


def test_game_table_is_the_papers_game_order():
    assert list(GAMES) == paper.paper_data()["games"]
    for name, info in ATARI_100K_GAMES.items():
        assert canonical_game(info.ale_id) == name


def test_hns_matrix_layouts_agree():
    runs = {"Pong": [14.6, -20.7, -3.05], "ALE/Breakout-v5": [1.7, 30.5, 16.1]}
    expected = np.array([[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]])  # paper order: Breakout, Pong
    np.testing.assert_allclose(hns_matrix(runs), expected)
    wide = pd.DataFrame(runs)
    np.testing.assert_allclose(hns_matrix(wide), expected)
    long = pd.DataFrame(
        [{"game": g, "seed": s, "score": v} for g, vs in runs.items() for s, v in enumerate(vs)]
    ).sample(frac=1.0, random_state=0)  # row order must not matter: runs are sorted by seed
    np.testing.assert_allclose(hns_matrix(long), expected)
    np.testing.assert_allclose(hns_matrix(runs, games=["Pong"]), expected[:, 1:])


def test_hns_matrix_rejects_ragged_runs():
    with pytest.raises(ValueError, match="same number of runs"):
        hns_matrix({"Pong": [1.0, 2.0], "Breakout": [3.0]})


def test_per_game_hns_averages_runs_first():
    series = per_game_hns({"Pong": [14.6, -20.7]})
    assert series["Pong"] == pytest.approx(0.5)


# ---------------------------------------------------------------------------- aggregates

# 2 runs x 4 games. Per-game means [0.1, 0.6, 3.0, 0.0]; sorted runs x games:
# -1, 0, 0.2, 0.5, 0.7, 1.0, 2.0, 4.0.
TINY = np.array([[0.0, 0.5, 2.0, -1.0], [0.2, 0.7, 4.0, 1.0]])


def test_aggregates_of_hand_computed_matrix():
    assert median_hns(TINY) == pytest.approx((0.1 + 0.6) / 2)
    assert mean_hns(TINY) == pytest.approx(3.7 / 4)
    assert iqm(TINY) == pytest.approx((0.2 + 0.5 + 0.7 + 1.0) / 4)  # drops 2 lowest, 2 highest
    # min(x, 1) sums to 3.4 over the 8 scores.
    assert optimality_gap(TINY) == pytest.approx(1 - 3.4 / 8)
    assert games_above_human(TINY) == 1
    assert games_above_zero(TINY) == 3  # a mean of exactly 0 is not above random


def test_metrics_match_rliable():
    rl_metrics = pytest.importorskip("rliable.metrics")
    scores = np.random.default_rng(0).normal(0.5, 1.0, size=(7, 26))
    assert iqm(scores) == pytest.approx(rl_metrics.aggregate_iqm(scores))
    assert median_hns(scores) == pytest.approx(rl_metrics.aggregate_median(scores))
    assert mean_hns(scores) == pytest.approx(rl_metrics.aggregate_mean(scores))
    assert optimality_gap(scores) == pytest.approx(rl_metrics.aggregate_optimality_gap(scores))
    other = scores[:5] + 0.2
    assert probability_of_improvement(other, scores) == pytest.approx(
        rl_metrics.probability_of_improvement(other, scores)
    )


def test_probability_of_improvement_hand_computed():
    x = np.array([[1.0, 0.0], [2.0, 0.0]])
    y = np.array([[1.5, 0.0]])
    # game 0: 1 of 2 pairs won -> 0.5; game 1: all ties -> 0.5.
    assert probability_of_improvement(x, y) == pytest.approx(0.5)
    assert probability_of_improvement(x + 10, y) == pytest.approx(1.0)


def test_aggregate_shapes_are_checked():
    with pytest.raises(ValueError, match="num_runs, num_games"):
        iqm(np.zeros(26))


# ---------------------------------------------------------------------------- CIs

SCORES = {
    "a": np.random.default_rng(1).normal(0.5, 0.6, size=(5, 26)),
    "b": np.random.default_rng(2).normal(0.8, 0.6, size=(5, 26)),
}


def test_ci_contains_point_and_is_reproducible():
    df = aggregate_with_ci(SCORES, reps=300, seed=3)
    assert list(df.columns) == ["method", "metric", "value", "lower", "upper"]
    assert len(df) == 2 * len(aggregate.DEFAULT_METRICS)
    assert (df["lower"] <= df["value"] + 1e-12).all() and (df["value"] <= df["upper"] + 1e-12).all()
    again = aggregate_with_ci(SCORES, reps=300, seed=3)
    pd.testing.assert_frame_equal(df, again)
    other_seed = aggregate_with_ci(SCORES, reps=300, seed=4)
    assert not np.allclose(df["lower"], other_seed["lower"])
    # A method's interval does not depend on the other methods in the dict.
    alone = aggregate_with_ci({"b": SCORES["b"]}, reps=300, seed=3)
    pd.testing.assert_frame_equal(
        alone, df[df["method"] == "b"].reset_index(drop=True), check_exact=False
    )
    point = aggregate_scores(SCORES)
    np.testing.assert_allclose(point["value"], df["value"])


def test_rliable_seeding_leaves_global_numpy_state_alone():
    np.random.seed(123)
    expected = np.random.random()
    np.random.seed(123)
    aggregate_with_ci(SCORES["a"], metrics=["iqm"], reps=50, seed=0)
    assert np.random.random() == expected


def test_missing_rliable_is_an_error_that_says_what_to_install(monkeypatch):
    aggregate._rliable_library.cache_clear()
    monkeypatch.setitem(sys.modules, "rliable", None)  # makes `import rliable` fail
    try:
        with pytest.raises(ImportError, match="pip install rliable"):
            aggregate_with_ci(SCORES["a"], metrics=["iqm"], reps=100, seed=0)
    finally:
        aggregate._rliable_library.cache_clear()


def test_probability_of_improvement_ci():
    df = probability_of_improvement_with_ci(SCORES, reps=200, seed=0)
    assert set(zip(df["x"], df["y"])) == {("a", "b"), ("b", "a")}
    assert ((df["lower"] <= df["value"]) & (df["value"] <= df["upper"])).all()
    ab, ba = df["value"]
    assert ab + ba == pytest.approx(1.0)


def test_probability_of_improvement_ci_of_disjoint_and_identical_methods():
    # 3 runs x 2 games; "ahead" beats every run of "behind" on every game, in every resample.
    behind = np.array([[0.0, 1.0], [0.2, 1.5], [0.1, 1.2]])
    scores = {"ahead": behind + 10.0, "behind": behind, "same": behind.copy()}
    df = probability_of_improvement_with_ci(
        scores, pairs=[("ahead", "behind"), ("behind", "ahead"), ("same", "behind")], reps=200
    ).set_index(["x", "y"])
    assert df.loc[("ahead", "behind")].tolist() == [1.0, 1.0, 1.0]
    assert df.loc[("behind", "ahead")].tolist() == [0.0, 0.0, 0.0]
    same = df.loc[("same", "behind")]
    # Identical scores: per game 3 wins, 3 losses and 3 ties of 9 pairs -> (3 + 1.5) / 9.
    assert same["value"] == pytest.approx(0.5)
    assert same["lower"] < 0.5 < same["upper"]


def test_probability_of_improvement_ci_refuses_unknown_methods_and_other_games():
    with pytest.raises(KeyError, match=r"no scores for \['c'\]; methods: a, b"):
        probability_of_improvement_with_ci(SCORES, pairs=[("a", "c")], reps=10)
    with pytest.raises(ValueError, match="a has 26 games, b 3"):
        probability_of_improvement_with_ci(
            {"a": SCORES["a"], "b": SCORES["b"][:, :3]}, pairs=[("a", "b")], reps=10
        )


# ---------------------------------------------------------------------------- the paper's tables


def _paper_matrix(config: str) -> np.ndarray:
    return hns_matrix(paper.paper_per_game(config).to_dict())


def _column_cases():
    for table in paper.PER_GAME_TABLES:
        for config in paper.paper_data()["per_game_tables"][table]["aggregate_rows"]:
            yield pytest.param(table, config, id=f"{table}-{config}")


@pytest.mark.parametrize("table, config", list(_column_cases()))
def test_per_game_columns_reproduce_their_printed_aggregate_rows(table, config):
    printed = paper.paper_data()["per_game_tables"][table]["aggregate_rows"][config]
    hns_ = _paper_matrix(config)
    # The paper rounds per-game scores to 0.1 and aggregates unrounded ones.
    assert median_hns(hns_) == pytest.approx(printed["median"], abs=0.002)
    assert mean_hns(hns_) == pytest.approx(printed["mean"], abs=0.002)
    assert games_above_human(hns_) == printed["games_above_human"]
    if "games_above_zero" in printed:
        assert games_above_zero(hns_) == printed["games_above_zero"]
    if "games_above_spr" in printed:
        ours = paper.paper_per_game(config)
        spr = paper.paper_per_game("SPR")
        if config == "Frozen":
            # Freeway ties with SPR at the printed 24.4; the paper counts it (see notes).
            assert int((ours > spr).sum()) == printed["games_above_spr"] - 1
            assert int((ours >= spr).sum()) == printed["games_above_spr"]
        else:
            assert int((ours > spr).sum()) == printed["games_above_spr"]


def test_ablation_header_swap_is_resolved_by_the_aggregate_table():
    controls = paper.paper_aggregates("tab:controls_hns").set_index("config")
    for config in ("S+G", "G+I"):
        hns_ = _paper_matrix(config)
        assert median_hns(hns_) == pytest.approx(controls.loc[config, "median"], abs=0.002)
        assert mean_hns(hns_) == pytest.approx(controls.loc[config, "mean"], abs=0.002)
    headers = paper.paper_per_game_table("tab:all_abl_scores").attrs["headers"]
    assert headers["S+G"] == "G+I" and headers["G+I"] == "S+G"
    assert any("swaps G+I and S+G" in n for n in paper.paper_notes(config="S+G"))


# Where the aggregate tables disagree with the per-game tables (all listed in paper_notes).
KNOWN_MISMATCHES = {
    ("tab:HNS", "SGI-R", "games_above_zero"),
    ("tab:HNS", "SGI-M/S", "games_above_human"),
    ("tab:HNS", "SGI-M/L", "mean"),
    ("tab:IQMs", "SGI-M/L", "mean"),
    ("tab:finetune_controls_hns", "Naive", "median"),
    ("tab:finetune_controls_hns", "Naive", "mean"),
    ("tab:IQMs", "Naive", "median"),
    ("tab:IQMs", "Naive", "mean"),
    ("tab:IQMs", "No SPR", "median"),
}


def test_aggregate_tables_agree_with_per_game_tables_except_known_mismatches():
    mismatches = set()
    per_game = set(paper.paper_configs(per_game=True))
    for table in paper.paper_tables():
        if table in paper.PER_GAME_TABLES:
            continue
        for _, row in paper.paper_aggregates(table).iterrows():
            if row["config"] not in per_game:
                continue
            hns_ = _paper_matrix(row["config"])
            for metric, fn, tol in (
                ("median", median_hns, 0.002),
                ("mean", mean_hns, 0.002),
                ("games_above_human", games_above_human, 0),
                ("games_above_zero", games_above_zero, 0),
            ):
                if metric in row and not pd.isna(row[metric]):
                    if abs(fn(hns_) - row[metric]) > tol:
                        mismatches.add((table, row["config"], metric))
    assert mismatches == KNOWN_MISMATCHES
    noted = " ".join(paper.paper_notes())
    for config in {c for _, c, _ in KNOWN_MISMATCHES}:
        assert config in noted


def test_loaders_return_all_26_games():
    for config in paper.paper_configs(per_game=True):
        series = paper.paper_per_game(config)
        assert list(series.index) == list(GAMES), config
        assert series.notna().all()
    for table in paper.PER_GAME_TABLES:
        assert list(paper.paper_per_game_table(table).index) == list(GAMES)
    expected = {"SPR", "ATC-M", "SGI-R", "SGI-E", "SGI-W", "SGI-M/S", "SGI-M", "SGI-M/L"}
    expected |= {"SGI-None", "Naive", "Frozen", "No SPR", "Full SSL"}
    expected |= {"S", "G", "I", "G+I", "S+G", "S+I", "Random", "Human"}
    assert set(paper.paper_configs(per_game=True)) == expected


def test_paper_values_spot_checks():
    assert paper.paper_per_game("SGI-M")["Breakout"] == 42.8
    assert paper.paper_per_game("SGI-M/L")["Breakout"] == 251.9
    assert paper.paper_per_game("S+G")["Pong"] == -21.0  # printed under the "G+I" header
    assert paper.paper_per_game("G+I")["Pong"] == 0.9
    iqms = paper.paper_aggregates("IQMs").set_index("config")
    assert iqms.loc["SGI-M", ["iqm", "iqm_lower", "iqm_upper"]].tolist() == [0.567, 0.524, 0.612]
    hns_table = paper.paper_aggregates("HNS").set_index("config")
    assert hns_table.loc["CPT@0", "median"] == 0.809 and hns_table.loc["BC-M", "data"] == "3M"
    cliques = paper.paper_clique_scores()
    assert cliques.loc["Kangaroo"].tolist() == [489.2, 994.0] and len(cliques) == 11


def test_paper_cis_bracket_their_point_estimates():
    df = paper.paper_aggregates("tab:IQMs", tidy=True)
    assert ((df["lower"] <= df["value"]) & (df["value"] <= df["upper"])).all()
    assert len(df) == 3 * 23


def test_paper_aggregates_tidy_concats_with_ours():
    ours = aggregate_with_ci({"SGI-M": SCORES["a"]}, metrics=["iqm"], reps=50)
    theirs = paper.paper_aggregates("IQMs", tidy=True)
    both = pd.concat([ours.assign(source="ours"), theirs.assign(source="paper")])
    assert set(both[both["metric"] == "iqm"]["method"]) >= {"SGI-M", "SGI-M/L"}
    assert theirs["lower"].notna().all()
    assert paper.paper_aggregates("controls_hns", tidy=True)["lower"].isna().all()


@pytest.mark.parametrize(
    "name, pretrain, expected",
    [
        ("sgi_none", None, "SGI-None"),
        ("reduced_lr", None, "SGI-M"),
        ("naive", None, "Naive"),
        ("frozen", None, "Frozen"),
        ("no_ssl", None, "No SPR"),
        ("all_ssl", None, "Full SSL"),
        ("sgi_m", None, "SGI-M"),
        ("sgi_m_s", None, "SGI-M/S"),
        ("sgi_m_l", None, "SGI-M/L"),
        ("s", None, "S"),
        ("g", None, "G"),
        ("i", None, "I"),
        ("s_g", None, "S+G"),
        ("g_i", None, "G+I"),
        ("s_i", None, "S+I"),
        ("atc", None, "ATC-M"),
        ("bc", None, "BC-M"),
        ("sgi_w", None, "SGI-W"),
        ("params/finetune/naive.yaml", None, "Naive"),
        ("SGI-M/S", None, "SGI-M/S"),
        ("reduced_lr", "g", "G"),
        ("reduced_lr", "sgi_m_l", "SGI-M/L"),
        ("naive", "sgi_m", "Naive"),
        ("no_ssl", "sgi_none", "SGI-None (No SPR)"),
    ],
)
def test_paper_column_for_params_names(name, pretrain, expected):
    assert paper.paper_column_for(name, pretrain=pretrain) == expected


def test_paper_column_for_rejects_unreported_combinations():
    with pytest.raises(KeyError, match="only with SGI-M"):
        paper.paper_column_for("frozen", pretrain="g")
    with pytest.raises(KeyError, match="no paper config"):
        paper.paper_column_for("sgi_q")
    with pytest.raises(KeyError, match="only aggregates"):
        paper.paper_per_game("BC-M")


def test_compare_to_paper():
    df = hns.compare_to_paper({"ALE/Pong-v5": [14.6, -20.7], "Breakout": 42.8}, "sgi_m")
    assert list(df.columns) == [
        "game",
        "ours",
        "paper",
        "ours_hns",
        "paper_hns",
        "protocol",
        "comparable",
    ]
    assert list(df["game"]) == ["Breakout", "Pong"]
    pong = df.set_index("game").loc["Pong"]
    assert pong["ours"] == pytest.approx(-3.05) and pong["ours_hns"] == pytest.approx(0.5)
    assert pong["paper"] == 7.6
    assert pong["paper_hns"] == pytest.approx(human_normalized_score("Pong", 7.6))
    breakout = df.set_index("game").loc["Breakout"]
    assert breakout["ours_hns"] == pytest.approx(breakout["paper_hns"])
    assert df.attrs["config"] == "SGI-M"
    full = hns.compare_to_paper({"Pong": 0.0}, "Frozen", all_games=True)
    assert len(full) == 26 and full["ours"].isna().sum() == 25


def test_metrics_define_no_second_game_table():
    assert hns.ATARI_100K_GAMES is ATARI_100K_GAMES  # the env table itself, not a copy
    assert not hasattr(paper, "atari_100k_games") and not hasattr(paper, "reference_scores")


def test_evaluation_protocol_labels_and_comparability():
    from sgi_lab.metrics import PAPER_PROTOCOL, EvalProtocol, comparability_note, protocol_of

    assert PAPER_PROTOCOL == EvalProtocol(100, 108_000) and PAPER_PROTOCOL.comparable
    assert PAPER_PROTOCOL.label == "100 episodes, cap 108,000 frames (27,000 steps)"
    assert EvalProtocol(1, None).label == "1 episode, no frame cap"
    # several runs: the weakest protocol decides
    mixed = protocol_of(
        [{"episodes": 100, "max_frames": 108_000}, {"episodes": 2, "max_frames": 2000}]
    )
    assert mixed == EvalProtocol(2, 2000) and not mixed.comparable
    assert protocol_of({"scores": [1.0, 2.0, 3.0]}) == EvalProtocol(3, None)
    assert protocol_of([]) is None and protocol_of(None) is None
    assert "not comparable" in comparability_note(mixed)
    assert comparability_note(PAPER_PROTOCOL).endswith("(the paper's protocol)")
    assert mixed.to_dict()["comparable_with_paper"] is False


def test_seed_pairs_count_each_shared_seed_and_sign_test():
    """x against y by (game, seed): above on 3 pairs, below on 1, level on 1; a seed only one
    side has is not a pair; x's two runs of one seed are averaged before pairing."""

    from sgi_lab.metrics import seed_pairs

    index = pd.MultiIndex.from_tuples
    x = pd.Series(
        [2.0, 3.0, 1.0, 5.0, 4.0, 0.0, 9.0],
        index=index([("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1), ("b", 1), ("b", 2)]),
    )
    y = pd.Series(
        [1.0, 1.0, 2.0, 5.0, 1.0, 7.0],
        index=index([("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1), ("c", 0)]),
    )
    pairs = seed_pairs(x, y)
    # a0 above, a1 above, a2 below, b0 level, b1 (4 + 0) / 2 = 2 > 1 above; b2 and c0 unpaired
    assert {k: pairs[k] for k in ("pairs", "above", "below", "level")} == {
        "pairs": 5, "above": 3, "below": 1, "level": 1,
    }  # fmt: skip
    # two-sided sign test of 3 of 4: P(X <= 1 or X >= 3) = (1 + 4 + 4 + 1) / 16
    assert pairs["sign_p"] == pytest.approx(10 / 16)
    level = seed_pairs(y, y)
    assert level["level"] == 6 and np.isnan(level["sign_p"])
    assert seed_pairs(x.iloc[:0], y)["pairs"] == 0
