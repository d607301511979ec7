"""What an archived study cost (`sgi_lab.experiments.study_cost`): each task's training hours
from its logged speeds, a population once, by part of the study, with its commits and CPUs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from sgi_lab import experiments as ex
from sgi_lab.experiments.archive import task_folders
from sgi_lab.experiments.study_cost import cost_markdown, folder_hours, study_cost, study_part
from sgi_lab.launch.cli import main

EPYC = "AMD EPYC (cpu family 25, model 17)"


def _run(folder: Path, rows: list[dict], provenance: list[dict], batch: int | None = None):
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    status = {"state": "finished", "provenance": [{"cpu": EPYC, **p} for p in provenance]}
    (folder / "status.json").write_text(json.dumps(status))
    if batch is not None:
        (folder / "config.yaml").write_text(f"batch_size: {batch}\nsteps: 200\n")


@pytest.mark.parametrize(
    ("task", "part"),
    [
        ("finetune/reduced_lr__sgi_m__d0/part1of2", "finetune/reduced_lr__sgi_m"),
        ("finetune/sgi_none/part2of2", "finetune/sgi_none"),
        ("finetune/naive_2x__sgi/part3of4", "finetune/naive_2x__sgi"),
        ("pretrain/sgi_m__d2__minatar-breakout", "pretrain/sgi_m"),
        ("pretrain/agent__d0__minatar-space_invaders", "pretrain/agent"),
        ("pretrain/s__minatar-asterix", "pretrain/s"),
        ("pretrain/maker__minatar-seaquest", "pretrain/maker"),
        ("probe/probes__sgi__minatar-freeway", "probe/probes"),
    ],
)
def test_a_task_belongs_to_its_arm_or_config_without_draw_part_or_game(task, part):
    assert study_part(task) == part


def test_hours_are_each_logged_interval_over_its_speed(tmp_path):
    # a finetuning run: 1,000 steps at 50/s (20 s), an episode row (no speed), 3,000 at 10/s
    _run(tmp_path / "f", [{"step": 1000, "charts/sps": 50.0}, {"step": 1500, "episode/return": 1},
                          {"step": 4000, "charts/sps": 10.0}], [{"step": 0}])  # fmt: skip
    assert folder_hours(tmp_path / "f") == pytest.approx((20 + 300) / 3600)
    # pretraining: samples/s over the config's batch; 100 steps of 256 at 512/s = 50 s, twice
    rows = [
        {"step": 100, "charts/samples_per_s": 512.0},
        {"step": 200, "charts/samples_per_s": 256.0},
    ]
    _run(tmp_path / "p", rows, [{"step": 0}], batch=256)
    assert folder_hours(tmp_path / "p") == pytest.approx((50 + 100) / 3600)
    _run(tmp_path / "none", [{"step": 10, "losses/total": 1.0}], [{"step": 0}])
    assert folder_hours(tmp_path / "none") is None  # nothing logged a speed
    assert folder_hours(tmp_path / "absent") is None
    _run(tmp_path / "nobatch", rows, [{"step": 0}])
    with pytest.raises(ValueError, match="nobatch: logs samples/s but its config.yaml has no"):
        folder_hours(tmp_path / "nobatch")


def test_a_population_counts_once_and_each_part_sums_its_tasks(tmp_path):
    archive = tmp_path / "results"

    def agent(folder: str, steps: int, sps: float, *commits: tuple[int, str]) -> None:
        provenance = [{"step": at, "commit": c * 40} for at, c in commits]
        _run(archive / folder, [{"step": steps, "charts/sps": sps}], provenance)

    # scratch: one population of two agents (the same loop: 0.5 h and, its slower one, 1 h)
    agent("finetune/sgi_none/b__s0", 1800, 1.0, (0, "b"))
    agent("finetune/sgi_none/b__s1", 3600, 1.0, (0, "b"))
    # SGI, two draws: one resumed on another commit (listed in the order it ran)
    agent("finetune/naive__sgi__d0/b__s0", 7200, 2.0, (0, "c"), (500, "a"))
    agent("finetune/naive__sgi__d1/b__s1", 720, 1.0, (0, "c"))
    # a probe writes into its encoder's folder: the encoder's hours, not the probe's
    encoder = [{"step": 100, "charts/samples_per_s": 256.0}]
    _run(archive / "pretrain/sgi__d0__b", encoder, [{"step": 0, "commit": "c" * 40}], batch=9)
    tasks = {
        "finetune/sgi_none/part1of1": ["finetune/sgi_none/b__s0", "finetune/sgi_none/b__s1"],
        "finetune/naive__sgi__d0/part1of1": ["finetune/naive__sgi__d0/b__s0"],
        "finetune/naive__sgi__d1/part1of1": ["finetune/naive__sgi__d1/b__s1"],
        "pretrain/sgi__d0__b": ["pretrain/sgi__d0__b"],
        "probe/probes__sgi__d0__b": ["pretrain/sgi__d0__b"],
    }
    kinds = {"finetune": "finetune", "pretrain": "pretrain", "probe": "probe"}
    record = {k: {"kind": kinds[k.split("/")[0]], "folders": v} for k, v in tasks.items()}
    (archive / "archive.json").write_text(json.dumps({"tasks": record}))

    frame = study_cost(archive).set_index("task")
    assert frame.loc["finetune/sgi_none/part1of1", "hours"] == pytest.approx(1.0)
    assert frame.loc["finetune/sgi_none/part1of1", "runs"] == 2
    assert frame.loc["finetune/naive__sgi__d0/part1of1", "commits"] == ["ccccccc", "aaaaaaa"]
    assert frame.loc["pretrain/sgi__d0__b", "hours"] == pytest.approx(100 * 9 / 256 / 3600)
    assert math.isnan(frame.loc["probe/probes__sgi__d0__b", "hours"])
    assert frame.loc["probe/probes__sgi__d0__b", "commits"] == []

    text = cost_markdown(study_cost(archive))
    assert "| `finetune/naive__sgi` | 2 | 2 | 1.2 | ccccccc, aaaaaaa |" in text  # 1 h + 0.2 h
    assert "| `finetune/sgi_none` | 1 | 2 | 1.0 | bbbbbbb |" in text
    assert "| `probe/probes` | 1 | 1 | not logged | - |" in text
    assert "| total | 5 | 6 | 2.2 | |" in text
    assert text.endswith(f"CPUs: {EPYC}.")


def test_a_part_resumed_on_many_commits_names_the_first_three_and_counts_the_rest():
    frame = pd.DataFrame(
        [{"task": "finetune/a/part1of1", "part": "finetune/a", "runs": 1, "hours": 1.0,
          "commits": ["c1", "c2", "c3", "c4", "c5"], "cpus": []}]
    )  # fmt: skip
    assert "| `finetune/a` | 1 | 1 | 1.0 | c1, c2, c3 and 2 more |" in cost_markdown(frame)


def test_a_folder_that_is_not_an_archive_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no archive.json"):
        study_cost(tmp_path)


def test_every_archived_study_costs_what_its_tasks_logged():
    """The committed archives: every finetuning population and pretraining run logged a speed,
    and a study's total is the sum of its parts."""
    root = Path(__file__).resolve().parents[2] / "results"
    for name in ("minatar_calibration", "minatar_objectives", "minatar_objectives_2x"):
        frame = study_cost(root / name)
        timed = frame[frame["part"].str.startswith(("finetune/", "pretrain/"))]
        assert timed["hours"].notna().all(), (name, timed[timed["hours"].isna()])
        assert (timed["hours"] > 0).all(), name
        assert f"| total | {len(frame)} |" in cost_markdown(frame)


def test_the_dry_run_projects_what_is_left_at_the_experiments_own_pace(tmp_path, capsys):
    """Finished tasks' logged speeds, per stage and encoder, price what is left; a stage none
    of them measured counts at the benchmark's CPU figure (the minatar_mixed file, hand-made
    runs: one SGI encoder and the scratch population of Breakout finished)."""
    from sgi_lab.experiments.cost import SPEEDS, pace_left
    from sgi_lab.experiments.state import task_left

    root = Path(__file__).resolve().parents[2]
    file = root / "params/experiments/minatar_mixed.yaml"
    graph = ex.expand(ex.load_experiment(file), tmp_path / "mixed")
    encoder = graph.task("pretrain/sgi_m__d0__minatar-breakout")  # 2,000 steps at batch 256
    scratch = graph.task("finetune/sgi_none/part1of2")  # 15 agents x 10k steps
    steps = encoder.samples // 256
    rows = [{"step": steps, "charts/samples_per_s": 512.0}]  # 1,000 s
    _run(encoder.folder, rows, [{"step": 0}], batch=256)
    for folder in scratch.agent_folders:  # one loop: 10k steps at 2.5 population steps/s
        _run(folder, [{"step": 10000, "charts/sps": 2.5}], [{"step": 0}])
    for task in (encoder, scratch):
        for folder in task_folders(task):
            status = json.loads((folder / "status.json").read_text())
            status |= {"step": steps if task is encoder else 10000}
            (folder / "status.json").write_text(json.dumps(status))
            (folder / "model.pt").write_bytes(b"")
    left = {t.id: task_left(t) for t in graph.tasks}
    assert left[encoder.id] == 0 and left[scratch.id] == 0

    pace = pace_left(graph, left)
    assert pace["finished"] == 2
    assert pace["paces"]["pretrain/minatar"] == pytest.approx(512.0)
    assert scratch.steps == 15 * 10000  # agent steps; one update a step, so no scaling
    assert pace["paces"]["finetune/minatar"] == pytest.approx(15 * 2.5)
    pending = [t for t in graph.tasks if t.kind in ("pretrain", "finetune") and left[t.id] > 0]
    by_hand = sum(
        (t.samples / 512.0 if t.kind == "pretrain" else t.steps / (15 * 2.5)) / 3600
        for t in pending
    )
    assert pace["hours"] == pytest.approx(by_hand) and not pace["unmeasured"]
    assert {s.stage for s in SPEEDS if s.encoder == "minatar"} >= {"pretrain", "finetune"}

    # before scratch had finished, its stage was priced at the benchmark's CPU figure
    earlier = pace_left(graph, left | {scratch.id: 1.0})
    assert earlier["finished"] == 1 and earlier["unmeasured"] == {"finetune/minatar"}
    cpu = next(
        s.rate for s in SPEEDS if (s.stage, s.encoder, s.machine) == ("finetune", "minatar", "cpu")
    )
    finetuning = sum(t.steps for t in graph.tasks if t.kind == "finetune") / cpu / 3600
    pretraining = sum(t.samples for t in pending if t.kind == "pretrain") / 512.0 / 3600
    assert earlier["hours"] == pytest.approx(finetuning + pretraining)

    # the dry run says it, once the folder is the experiment's own
    (graph.out / ex.STATE_FILE).write_text(json.dumps({"name": "minatar_mixed", "tasks": {}}))
    assert main(["experiment", str(file), "--out", str(graph.out), "--dry-run"]) == 0
    plan = capsys.readouterr().out
    assert f"at its own pace: about {pace['hours']:.1f} process-hours left" in plan
    assert "finetune/minatar 37.5/s, pretrain/minatar 512.0/s" in plan
