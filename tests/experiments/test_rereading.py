"""The declared contrasts re-read (`sgi_lab.experiments.rereading`): each reading cuts the same
agents the way it names, against hand-counted P(improvement)s."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from study_helpers import agent

from sgi_lab import experiments as ex
from sgi_lab.experiments.design import arm_labels
from sgi_lab.experiments.question import question_table
from sgi_lab.experiments.rereading import rereading_markdown, rereading_table

ROOT = Path(__file__).resolve().parents[2]
CALIBRATION = ROOT / "params" / "experiments" / "minatar_calibration.yaml"
GAMES = ["minatar/breakout", "minatar/space_invaders"]


def p_by_hand(x: list[float], y: list[float]) -> float:
    return float(np.mean([(a > b) + 0.5 * (a == b) for a in x for b in y]))


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """The calibration study's arms, 10 seeds a game: the positive control above scratch on
    Breakout only and below it in training episodes; naive SGI's first encoder above, its
    other two below; every other arm scratch's equal in distribution."""
    root = tmp_path_factory.mktemp("study")
    experiment = ex.load_experiment(CALIBRATION)
    rng = np.random.default_rng(0)
    scores: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for arm, labels in arm_labels(experiment).items():
        for k, label in enumerate(labels):
            for game in GAMES:
                for seed in range(k, 10, len(labels)):
                    score = 1.0 + rng.random()
                    if arm == "reduced_lr__agent" and game == "minatar/breakout":
                        score += 5.0
                    if arm == "naive__sgi":
                        score += 5.0 if k == 0 else -5.0
                    training = -score if arm == "reduced_lr__agent" else score
                    agent(root, label, game, seed, score, training)
                    scores.setdefault((label, game), []).append((seed, score))
    return root, experiment, scores


def cell(table, reading: str, arm: str, against: str = "sgi_none"):
    found = table[
        (table["reading"] == reading) & (table["arm"] == arm) & (table["against"] == against)
    ]
    assert len(found) == 1, (reading, arm, against)
    return found.iloc[0]


def test_each_reading_cuts_the_agents_it_names(study):
    root, experiment, scores = study
    table = rereading_table(root, experiment, reps=400)
    declared = "declared (final evaluation)"
    contrasts, _ = question_table(root, experiment)
    for row in contrasts[contrasts["family"] == "primary"].itertuples():
        assert cell(table, declared, row.arm)["p_improvement"] == row.p_improvement
    # one game alone: hand-counted over that game's 10 against 10 agents
    s = {key: [v for _, v in values] for key, values in scores.items()}
    agent_si = s[("reduced_lr__agent__d0", GAMES[1])] + s[("reduced_lr__agent__d1", GAMES[1])]
    only_si = cell(table, "space_invaders only", "reduced_lr__agent")
    assert only_si["p_improvement"] == pytest.approx(p_by_hand(agent_si, s[("sgi_none", GAMES[1])]))
    assert cell(table, "breakout only", "reduced_lr__agent")["p_improvement"] == 1.0
    assert only_si["runs"] == "10 vs 10"
    # the other readout reads the training episodes, where the control is always below
    assert cell(table, "training episodes", "reduced_lr__agent")["p_improvement"] == 0.0
    assert cell(table, "training episodes", "naive__agent")["p_improvement"] == pytest.approx(
        cell(table, declared, "naive__agent")["p_improvement"]
    )  # the same ordering where training equals the evaluation
    # a draw alone: naive SGI's first encoder (seeds 0, 3, 6, 9) above, the others below
    d0 = cell(table, "draw d0 only", "naive__sgi")
    assert d0["p_improvement"] == 1.0 and d0["runs"] == "8 vs 20"
    assert cell(table, "draw d1 only", "naive__sgi")["p_improvement"] == 0.0
    # the secondary pair cuts both its pooled sides to the same encoder
    pair = cell(table, "draw d2 only", "reduced_lr__sgi", against="negative_control__sgi")
    assert pair["runs"] == "6 vs 6"
    assert table[(table["arm"] == "reduced_lr__agent") & (table["reading"] == "draw d2 only")].empty
    # each half of the seeds
    half = cell(table, "seeds 0-4", "reduced_lr__agent")
    first = [v for key, values in scores.items() for seed, v in values
             if key[0].startswith("reduced_lr__agent") and key[1] == GAMES[1] and seed < 5]  # fmt: skip
    base = [v for seed, v in scores[("sgi_none", GAMES[1])] if seed < 5]
    assert half["runs"] == "10 vs 10"
    assert half["p_improvement"] == pytest.approx((1.0 + p_by_hand(first, base)) / 2)


def test_the_table_marks_intervals_that_leave_out_a_half(study):
    root, experiment, _ = study
    text = rereading_markdown(rereading_table(root, experiment, reps=400))
    assert text.startswith("Exploratory:")
    lines = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines()}
    assert "1.00 [1.00, 1.00]*" in lines["breakout only"]
    row = lines["draw d2 only"].split(" | ")
    header = lines["reading"].split(" | ")
    assert row[header.index("`reduced_lr__agent` vs `sgi_none`")] == "-"  # two draws only
