"""The demo's MinAtar stage: its verdict sentence against hand-made scores,
its curves against hand-computed rolling means, the report's inline figure, and the stage end
to end on the smoke budget: finished, then skipped with the same results; a failure recorded in
one line with the report still written."""

from __future__ import annotations

import html
import json
import re

import pytest
import torch

from sgi_lab.launch import demo, demo_minatar
from sgi_lab.runs.folder import RunDir
from sgi_lab.viz.episode_curves import episode_curves_svg

SCRATCH, SGI, NAIVE = "from scratch", "SGI, reduced lr", "SGI, naive"


def _results(sgi, scratch, naive=None, episodes: int = 30):
    """Results as `run_minatar` returns them, with (mean, std) per agent (naive: as sgi)."""
    naive = naive or sgi
    return {
        SGI: {"mean": sgi[0], "std": sgi[1], "episodes": episodes, "normalized_score": 0.1},
        NAIVE: {"mean": naive[0], "std": naive[1], "episodes": episodes, "normalized_score": 0.3},
        SCRATCH: {"mean": scratch[0], "std": scratch[1], "episodes": episodes,
                  "normalized_score": 0.2, "normalization": "MinAtar score"},
        "random": 0.416,
        "reference": 10.0,
    }  # fmt: skip


def test_verdict_says_whether_learning_is_visible_and_how_each_start_compares():
    # s.e. = std / sqrt(30): 1.0 / 5.477 = 0.183; every mean - 2 s.e. above 0.416.
    both = demo_minatar.verdict(_results((2.5, 1.0), (2.4, 1.0)))
    assert both.startswith("Learning is visible: every agent scores above the random policy")
    # 0.1 apart, 2 s.e. of the difference = 2 * 0.258: no difference claimed.
    assert (
        'the "SGI, reduced lr" agent does not differ from the one from scratch beyond their '
        "evaluation noise (+0.10)" in both
    )
    assert "one seed each" in both and "not evidence" in both
    apart = demo_minatar.verdict(_results((1.0, 1.0), (2.5, 1.0), naive=(3.2, 1.0)))
    assert 'the "SGI, reduced lr" agent ends below the one from scratch (-1.50)' in apart
    assert 'the "SGI, naive" agent ends above the one from scratch (+0.70)' in apart
    # 0.9 - 2 * 0.183 = 0.53 > 0.416, but 0.6 - 0.365 = 0.235 is not.
    one = demo_minatar.verdict(_results((0.9, 1.0), (0.6, 1.0), naive=(0.6, 1.0)))
    assert one.startswith(
        'Learning is visible only for the "SGI, reduced lr" agent: above the random policy (0.42)'
    )
    two = demo_minatar.verdict(_results((0.9, 1.0), (0.6, 1.0)))
    assert two.startswith(
        'Learning is visible only for the "SGI, reduced lr" and "SGI, naive" agents'
    )
    none = demo_minatar.verdict(_results((0.4, 0.5), (0.5, 0.5)))
    assert none.startswith("Learning is not visible at this size")
    unfinished = _results((0.4, 0.5), (0.5, 0.5))
    unfinished[NAIVE]["mean"] = None
    assert "no final scores yet" in demo_minatar.verdict(unfinished)


def test_summary_lines_give_scores_in_words():
    results = _results((2.5, 1.0), (0.5, 0.0))
    results["verdict"] = "VERDICT"
    lines = demo_minatar.summary_lines(results)
    assert lines[0] == (
        "SGI, reduced lr: mean return 2.50 ± 0.18 (s.e.) over 30 episodes, MinAtar score 0.100"
    )
    assert lines[1].startswith("SGI, naive: mean return 2.50 ± 0.18")
    assert lines[2].startswith("from scratch: mean return 0.50 ± 0.00")
    assert (
        lines[3] == "MinAtar score: 0 = uniform random (0.42), 1 = the MinAtar paper's DQN (10.0)"
    )
    assert lines[-1] == "VERDICT" and demo.stage_summary("minatar", results) == lines


def test_learning_curves_are_rolling_means_of_episode_returns(tmp_path):
    rows = [{"step": 10, "losses/total": 1.0}]  # rows without a return are not episodes
    rows += [{"step": 10 * k, "episode/return": r} for k, r in enumerate([1, 2, 3, 4], 2)]
    folder = tmp_path / "finetune" / "sgi"
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    curves = demo_minatar.learning_curves(tmp_path, window=2)
    assert curves == {SGI: ([20.0, 30.0, 40.0, 50.0], [1.0, 1.5, 2.5, 3.5])}
    svg = episode_curves_svg(curves, random=0.416)
    assert svg.count("<polyline") == 3  # axes, random line, one agent
    assert ">SGI, reduced lr</text>" in svg and ">random</text>" in svg
    assert "50 agent steps" in svg
    assert "No finished training episode" in episode_curves_svg({})
    flat = episode_curves_svg({SCRATCH: ([1.0, 2.0], [0.0, 0.0])})  # no return yet
    assert ">1.0</text>" in flat and "nan" not in flat


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.smoke
def test_minatar_stage_runs_then_is_skipped_and_reported(tmp_path, one_thread, capsys):
    pytest.importorskip("minatar")
    root = demo.find_project_root()
    stage = demo.Stage("minatar", "t", 1.0)
    demo.run_minatar_stage(stage, tmp_path, root, smoke=True, progress=False)
    assert stage.state == "finished", stage.error
    results = stage.results
    for label in (SGI, NAIVE, SCRATCH):
        assert results[label]["episodes"] == 2 and results[label]["step"] == 120
        assert results[label]["normalization"] == "MinAtar score"
    folder = tmp_path / "minatar"
    transfer = json.loads((folder / "finetune" / "sgi" / "transfer.json").read_text())
    assert any(name.startswith("encoder.") for name in transfer["loaded"])
    scratch = json.loads((folder / "finetune" / "scratch" / "transfer.json").read_text())
    assert scratch["source"] is None and scratch["loaded"] == []
    naive = json.loads((folder / "finetune" / "sgi_naive" / "transfer.json").read_text())
    assert naive["loaded"] == transfer["loaded"]  # the same pretrained encoder
    # One population of three, each agent at its own rates: the reduced-lr encoder at 0.01x.
    assert transfer["lr_groups"]["encoder_transition"] == pytest.approx(1e-6)
    assert naive["lr_groups"]["encoder_transition"] == pytest.approx(1e-4)
    assert scratch["lr_groups"] == pytest.approx({"fresh": 1e-4})
    named = (
        ("sgi", "minatar_reduced_lr"),
        ("sgi_naive", "minatar_naive"),
        ("scratch", "minatar_none"),
    )
    for name, params in named:
        agent = RunDir(folder / "finetune" / name).status()
        assert agent["population"] == 3 and agent["params"] == params, agent
    assert (folder / "figures" / "learning_curves.html").exists()
    # finished parts are never resumed: no checkpoint is left (the docs say the demo keeps none)
    assert not list(folder.rglob("ckpt_*.pt"))
    assert (folder / "pretrain" / "model.pt").is_file()
    status = RunDir(folder).status()
    assert status["state"] == "finished" and status["results"]["verdict"] == results["verdict"]
    assert status["provenance"]
    # A second run skips it, with the first run's time and results.
    again = demo.Stage("minatar", "t", 1.0)
    demo.run_minatar_stage(again, tmp_path, root, smoke=True, progress=False)
    assert again.state == "skipped" and again.results == json.loads(json.dumps(results))
    assert again.seconds == status["duration_s"]
    page = demo.write_report(tmp_path, [again], 1.0).read_text()
    assert "<svg" in page and page.count("<polyline") >= 3
    assert 'href="minatar/figures/learning_curves.html"' in page
    assert html.escape(results["verdict"]) in page and "MinAtar score:" in page


def test_a_failed_minatar_stage_is_recorded_in_one_line(tmp_path, capsys):
    stage = demo.Stage("minatar", "t", 1.0)
    demo.run_minatar_stage(stage, tmp_path, tmp_path / "no-project", smoke=True, progress=False)
    assert stage.state == "failed" and "\n" not in stage.error
    assert RunDir(tmp_path / "minatar").status()["state"] == "failed"
    assert "FAILED" in capsys.readouterr().err
    page = demo.write_report(tmp_path, [stage], 1.0).read_text()
    assert re.search(r'class="failed">failed<br><code>\w+', page)


def test_unknown_stage_to_skip_is_named_before_anything_runs(tmp_path, capsys):
    with pytest.raises(ValueError, match="^skip: no stage minatr; stages: datasets, "):
        demo.run_pipeline(tmp_path / "demo", skip=["minatr"], progress=False)
    assert not (tmp_path / "demo").exists()
    with pytest.raises(SystemExit):  # the command line offers only the stages there are
        demo.main(["--skip", "minatr", "--out", str(tmp_path / "demo")])
    assert "invalid choice: 'minatr'" in capsys.readouterr().err


def test_the_minatar_stage_runs_on_the_thread_count_chosen_for_a_busy_machine(
    tmp_path, monkeypatch
):
    # main() sets OMP_NUM_THREADS=1 on a busy machine; the notebook stages' kernels read it when
    # they start, but the MinAtar stage runs in the demo's own process, whose torch pool exists.
    seen = []
    monkeypatch.setattr(
        demo.demo_minatar,
        "run_minatar",
        lambda *a: seen.append(torch.get_num_threads()) or {"verdict": "-"},
    )
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        demo.run_minatar_stage(demo.Stage("minatar", "t", 1.0), tmp_path, tmp_path, True, False)
        assert seen == [1] and torch.get_num_threads() == 2  # restored afterwards
        monkeypatch.delenv("OMP_NUM_THREADS")
        monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
        demo.run_minatar_stage(
            demo.Stage("minatar", "t", 1.0), tmp_path / "b", tmp_path, True, False
        )
        assert seen == [1, 2]  # nothing chosen: the process's own count
    finally:
        torch.set_num_threads(before)
