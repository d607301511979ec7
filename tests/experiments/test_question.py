"""A study's design in its experiment file: drawn pretraining configs, agent sources (the positive
control), a config's own seeds, the declared question, its answer and its power, and archives
that survive a config field added at its default."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from study_helpers import agent

from sgi_lab import experiments as ex
from sgi_lab.config import ConfigError
from sgi_lab.experiments.archive import task_fingerprint
from sgi_lab.experiments.design import arm_labels
from sgi_lab.experiments.question import power_report, question_plan, question_table
from sgi_lab.launch.cli import main

ROOT = Path(__file__).resolve().parents[2]
CALIBRATION = ROOT / "params" / "experiments" / "minatar_calibration.yaml"
GAMES = ["minatar/breakout", "minatar/space_invaders"]


def test_draws_deal_the_seeds_and_agents_become_pretraining_tasks(tmp_path):
    experiment = ex.load_experiment(CALIBRATION)
    names = [p.name for p in experiment.pretrain]
    assert names == ["sgi__d0", "sgi__d1", "sgi__d2", "agent__d0", "agent__d1"]
    assert [p.set["seed"] for p in experiment.pretrain] == [0, 1, 2, 1000, 1001]
    assert {p.draw_of for p in experiment.pretrain} == {"sgi", "agent"}
    dealt = {
        f"{f.name}__{b}": f.seeds for f in experiment.finetune for b in f.pretrain if b != "none"
    }
    assert dealt["reduced_lr__sgi__d0"] == [0, 3, 6, 9]
    assert dealt["reduced_lr__sgi__d2"] == [2, 5, 8]
    assert dealt["naive__agent__d1"] == [1, 3, 5, 7, 9]
    # every arm holds each seed once, over its draws
    for arm, labels in arm_labels(experiment).items():
        seeds = sorted(s for label in labels for s in (dealt.get(label) or experiment.seeds))
        assert seeds == list(range(10)), arm
    graph = ex.expand(experiment, tmp_path / "out")
    source = graph.task("pretrain/agent__d1__minatar-breakout")
    assert source.argv[:2] == ("finetune", "--params") and source.stage == "finetune"
    assert source.argv[source.argv.index("--seed") + 1] == "1001" and source.steps == 100_000
    negative = graph.task("finetune/negative_control__sgi__d1/part1of2")
    assert negative.deps == ("pretrain/sgi__d1__minatar-breakout",)
    params = graph.params_files[negative.argv[negative.argv.index("--params") + 1]]
    assert params["config"]["pretrained_values"] == "initial"
    # the resolved experiment (what the folder's experiment.yaml holds) expands to the same
    written = tmp_path / "experiment.yaml"
    written.write_text(yaml.safe_dump(json.loads(json.dumps(_asdict(experiment)))))
    again = ex.expand(ex.load_experiment(written), tmp_path / "out")
    assert [t.argv for t in again.tasks] == [t.argv for t in graph.tasks]
    assert arm_labels(ex.load_experiment(written)) == arm_labels(experiment)


def _asdict(experiment):
    import dataclasses

    return dataclasses.asdict(experiment)


def test_the_dry_run_shows_the_arms_and_the_primary_test(capsys):
    assert main(["experiment", str(CALIBRATION), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "baseline sgi_none: 10 runs a game (sgi_none)" in out
    assert (
        "arm reduced_lr__agent: 10 runs a game (reduced_lr__agent__d0, reduced_lr__agent__d1)"
        in out
    )
    assert "Holm over 4 at 0.05" in out and "negative_control__sgi vs sgi_none" in out
    assert question_plan(ex.load_experiment(CALIBRATION)).startswith("question: Does finetuning")


BASE = """
name: q
games: [minatar/breakout]
seeds: [0, 1, 2]
data: {random: {source: random, steps: 600}}
pretrain:
  - {name: sgi, params: params/pretrain/minatar_sgi.yaml, data: random, draws: 2}
finetune:
  - {name: sgi_none, params: params/finetune/minatar_none.yaml, pretrain: [none]}
  - {name: reduced_lr, params: params/finetune/minatar_reduced_lr.yaml, pretrain: [sgi]}
"""


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            "question: {text: t, baseline: sgi_none, primary: [naive__sgi]}",
            "'naive__sgi' is not an arm",
        ),
        ("question: {text: t, baseline: sgi_none, primary: [sgi_none]}", "not the baseline"),
        (
            "question: {text: t, baseline: sgi_none, primary: [reduced_lr__sgi], resamples: 2000}",
            "at least 10,000",
        ),
        (
            "question: {text: t, baseline: sgi_none, primary: [reduced_lr__sgi], games: [minatar/seaquest]}",
            "not the experiment's games",
        ),
        (
            "question: {text: t, baseline: sgi_none, primary: [reduced_lr__sgi], secondary: [[sgi_none]]}",
            "arm, against",
        ),
        (
            "question: {text: t, baseline: sgi_none, primary: [reduced_lr__sgi], alpha: 1.5}",
            "alpha",
        ),
    ],
)
def test_a_question_that_names_what_the_experiment_lacks_is_refused(tmp_path, extra, message):
    path = tmp_path / "e.yaml"
    path.write_text(BASE + extra + "\n")
    with pytest.raises(ConfigError, match=message):
        ex.load_experiment(path)


def test_draws_need_seeds_and_an_agent_needs_no_data(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text(BASE.replace("seeds: [0, 1, 2]", "seeds: [0]"))
    with pytest.raises(ConfigError, match="1 seeds for the 2 draws"):
        ex.load_experiment(path)
    path.write_text(
        BASE.replace(
            "draws: 2}",
            "draws: 2}\n  - {name: a, kind: agent, params: params/finetune/minatar_none.yaml, data: random}",
        )
    )
    with pytest.raises(ConfigError, match="params \\(a params/finetune file\\) and no data"):
        ex.load_experiment(path)


def test_the_answer_pools_draws_and_holm_adjusts_the_primary_family(tmp_path):
    experiment = ex.load_experiment(CALIBRATION)
    rng = np.random.default_rng(0)
    shift = {"sgi_none": 0.0, "reduced_lr__agent": 5.0, "naive__agent": 5.0}
    for arm, labels in arm_labels(experiment).items():
        for k, label in enumerate(labels):
            for game in GAMES:
                for seed in range(k, 10, len(labels)):
                    agent(tmp_path, label, game, seed, 1.0 + shift.get(arm, 0.0) + rng.random())
    contrasts, arms = question_table(tmp_path, experiment)
    primary = contrasts[contrasts["family"] == "primary"].set_index("arm")
    assert primary.loc["reduced_lr__agent", "p_improvement"] == 1.0
    assert primary.loc["reduced_lr__agent", "reject"]
    assert not primary.loc["reduced_lr__sgi", "reject"]
    # Holm: the adjusted p values are the raw ones stepped down by 4, 3, 2, 1
    raw = primary["p"].sort_values()
    assert primary.loc[raw.index[0], "p_holm"] == pytest.approx(min(1, 4 * raw.iloc[0]))
    assert (primary["p_holm"] >= primary["p"]).all()
    assert set(arms.set_index("arm")["runs"]) == {20}
    # the report leads with it; an arm still running leaves its family unadjusted
    next(tmp_path.glob("finetune/naive__sgi__d0/*")).joinpath("eval.json").unlink()
    contrasts, _ = question_table(tmp_path, experiment)
    primary = contrasts[contrasts["family"] == "primary"].set_index("arm")
    assert primary["p_holm"].isna().all() and not primary.loc["naive__sgi", "complete"]
    assert primary.loc["naive__sgi", "runs"] == "19 vs 20"  # an interim value, said as such
    text = ex.question.question_markdown(tmp_path, experiment)
    assert text.startswith("## The declared question") and "(interim)" in text


def test_power_from_the_archived_study_and_the_cli(tmp_path, capsys):
    experiment = ex.load_experiment(CALIBRATION)
    pilot = ROOT / "results" / "minatar_objectives"
    found = power_report(pilot, experiment, seeds=3, sims=100, permutations=300)
    assert found["pilot_runs"] == [3, 3] and found["alpha"] == pytest.approx(0.05 / 4)
    more = power_report(pilot, experiment, seeds=10, sims=100, permutations=300)
    assert more["power"] > found["power"]
    assert more["mde_relative"] < (found["mde_relative"] or np.inf)
    with pytest.raises(ValueError, match="fewer than 2 finished runs"):
        power_report(pilot, experiment, pilot_arm="no_such_label", sims=10, permutations=10)
    assert main(["experiment", str(CALIBRATION), "--power", "--pilot", str(tmp_path)]) == 2
    assert "no finetune/ runs" in capsys.readouterr().err


def test_an_archive_survives_a_config_field_added_at_its_default(tmp_path):
    graph = ex.expand(ex.load_experiment(CALIBRATION), tmp_path / "out")
    task = graph.task("finetune/negative_control__sgi__d0/part1of2")
    params = task.argv[task.argv.index("--params") + 1]
    payload = graph.params_files[params]
    # as the archive's code wrote it: without the field added since
    old = {
        **payload,
        "config": {k: v for k, v in payload["config"].items() if k != "spr_coefficient"},
    }
    scratch = graph.task("finetune/sgi_none/part1of2")
    scratch_params = scratch.argv[scratch.argv.index("--params") + 1]
    scratch_payload = graph.params_files[scratch_params]
    older = {
        **scratch_payload,
        "config": {k: v for k, v in scratch_payload["config"].items() if k != "pretrained_values"},
    }
    graph.params_files[scratch_params] = older
    archived = task_fingerprint(graph, scratch)
    graph.params_files[scratch_params] = scratch_payload
    assert task_fingerprint(graph, scratch) != archived  # a new field changes the text...
    assert task_fingerprint(graph, scratch, {scratch_params: older}) == archived  # ...not what ran
    # a field the archive lacks at another value than its default: the task runs again
    graph.params_files[params] = payload  # pretrained_values: initial
    older_negative = {
        **payload,
        "config": {k: v for k, v in payload["config"].items() if k != "pretrained_values"},
    }
    graph.params_files[params] = older_negative
    archived = task_fingerprint(graph, task)
    graph.params_files[params] = payload
    assert task_fingerprint(graph, task, {params: older_negative}) != archived
    assert old  # (spr_coefficient is at its default: it would be left out)


@pytest.mark.slow  # the calibration study's graph at tiny budgets, for real: 4-6 min on 2 cores
def test_a_tiny_calibration_study_runs_its_controls_and_leads_with_its_question(tmp_path):
    text = CALIBRATION.read_text()
    tiny = {
        "steps: 100000, updates_per_step: 1, learning_starts: 1000, eval_episodes: 30, "
        "checkpoint_every: 10000": "steps: 80, updates_per_step: 1, learning_starts: 20, "
        "eval_episodes: 2, checkpoint_every: 40",
        "steps: 10000, updates_per_step: 1, learning_starts: 1000, eval_episodes: 30, "
        "checkpoint_every: 2500": "steps: 60, updates_per_step: 1, learning_starts: 20, "
        "eval_episodes: 2, checkpoint_every: 30",
        "set: {steps: 2000}": "set: {steps: 4, batch_size: 16, log_every: 2, checkpoint_every: 2}",
        "    steps: 100000\n": "    steps: 600\n",
        "seeds: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]": "seeds: [0, 1, 2]",
    }
    for old, new in tiny.items():
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / "tiny.yaml"
    path.write_text(text)
    out = tmp_path / "out"
    args = ["experiment", str(path), "--out", str(out), "--max-parallel", "2", "--no-progress"]
    assert main(args) == 0
    transfers = {
        label: json.loads(
            (out / "finetune" / label / "minatar-breakout__s0" / "transfer.json").read_text()
        )
        for label in ("reduced_lr__agent__d0", "negative_control__sgi__d0", "reduced_lr__sgi__d0")
    }
    loaded = {label: set(t["loaded"]) for label, t in transfers.items()}
    assert len({frozenset(v) for v in loaded.values()}) == 1  # the same tensors, all three
    assert [t["source_kind"] for t in transfers.values()] == ["agent", "pretrain", "pretrain"]
    assert [t["values"] for t in transfers.values()] == ["loaded", "initial", "loaded"]
    assert len({json.dumps(t["lr_groups"]) for t in transfers.values()}) == 1
    results = (out / "results.md").read_text()
    assert results.index("## The declared question") < results.index("## Exploratory")
    assert results.index("## Exploratory") < results.index("### The declared contrasts, re-read")
    assert "reduced_lr__agent" in results and (out / "question.svg").is_file()
