"""The notebooks: committed clean, a literal-only ``parameters`` cell first, no functions, every
params/notebooks set matching a notebook's parameters, and each notebook executed by papermill
on CPU with its smoke parameters (the quick ones in the default suite, all of them with -m slow).
"""

from __future__ import annotations

import ast
import json
import os
import re
import time
from pathlib import Path

import nbformat
import pytest
import yaml
from conftest import write_finetune_run

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ("datasets", "pretrain", "finetune", "goal_rewards", "representations", "ablations")


def _notebook(name: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)


def _code_cells(nb: nbformat.NotebookNode) -> list:
    return [c for c in nb.cells if c.cell_type == "code"]


def _parameters(name: str) -> dict:
    from sgi_lab.launch.notebook_runner import notebook_defaults

    return notebook_defaults(ROOT / "notebooks" / f"{name}.ipynb")


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_is_committed_clean_with_a_parameters_cell_first(name):
    nb = _notebook(name)
    nbformat.validate(nb)
    cells = _code_cells(nb)
    for cell in cells:
        assert cell.outputs == [] and cell.execution_count is None, f"{name}: outputs committed"
    first = cells[0]
    assert "parameters" in first.metadata.get("tags", []), f"{name}: first code cell untagged"
    # literals only: every statement is `name = <literal>`
    for node in ast.parse(first.source).body:
        assert isinstance(node, ast.Assign), f"{name}: {ast.unparse(node)} is not an assignment"
        ast.literal_eval(node.value)
    assert nb.cells[0].cell_type == "markdown", f"{name}: starts without its purpose"
    assert "record_results" in cells[-1].source, f"{name}: the last cell records no metrics"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_defines_no_functions_or_classes(name):
    for cell in _code_cells(_notebook(name)):
        for node in ast.walk(ast.parse(cell.source)):
            assert not isinstance(
                node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
            ), f"{name}: defines {type(node).__name__} (move it to sgi_lab)"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_papermill_sees_every_parameter(name):
    from papermill.inspection import inspect_notebook

    found = inspect_notebook(str(ROOT / "notebooks" / f"{name}.ipynb"))
    assert set(found) == set(_parameters(name)), "a line papermill cannot parse (a second '=')"
    assert "out_dir" in found


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_notebook_has_a_smoke_set_of_its_own_parameters(name):
    folder = ROOT / "params" / "notebooks"
    sets = sorted([*folder.glob(f"{name}_*.yaml"), *folder.glob(f"demo_{name}.yaml")])
    assert folder / f"{name}_smoke.yaml" in sets
    assert folder / f"demo_{name}.yaml" in sets  # make demo's stage
    declared = set(_parameters(name))
    for path in sets:
        keys = set(yaml.safe_load(path.read_text()))
        assert keys <= declared, f"{path.name}: {sorted(keys - declared)} are not parameters"


@pytest.mark.parametrize("stage", ["pretrain", "finetune"])
def test_stage_params_files_are_valid_notebook_parameter_files(stage):
    """``papermill notebooks/pretrain.ipynb OUT -f params/pretrain/sgi_m.yaml`` must work: each
    top-level key of a stage params file is a parameter of the stage's notebook."""
    declared = set(_parameters(stage))
    assert {"name", "description", "config", "params_file", "overrides"} <= declared
    for path in sorted((ROOT / "params" / stage).glob("*.yaml")):
        assert set(yaml.safe_load(path.read_text())) <= declared, path.name


# -- execution ----------------------------------------------------------------------------------


def execute(name: str, tmp_path: Path, **parameters) -> dict:
    """Run a notebook with its smoke set plus ``parameters``; return its results.json."""
    import papermill

    params = yaml.safe_load((ROOT / "params" / "notebooks" / f"{name}_smoke.yaml").read_text())
    params.update(parameters, out_dir=str(tmp_path / "run"))
    tmp_path.mkdir(parents=True, exist_ok=True)
    papermill.execute_notebook(
        str(ROOT / "notebooks" / f"{name}.ipynb"),
        str(tmp_path / f"{name}.ipynb"),
        parameters=params,
        kernel_name="python3",
        progress_bar=False,
        cwd=str(ROOT),
        # nbclient waits 4 s for a cell's last output by default: too little on a loaded
        # 2-core machine (a MinAtar goal_rewards cell timed out so on 2026-11-26)
        iopub_timeout=60,
    )
    return json.loads((tmp_path / "run" / "results.json").read_text())


@pytest.mark.smoke
@pytest.mark.notebooks
def test_datasets_notebook(tmp_path, pong_store):
    results = execute("datasets", tmp_path, data=str(pong_store), compare_collect_steps=300)
    assert len(results["stores"]) == 2
    assert (tmp_path / "run" / "figures" / "start_distance.html").exists()


@pytest.mark.smoke
@pytest.mark.notebooks
def test_goal_rewards_notebook(tmp_path, pong_store):
    results = execute(
        "goal_rewards", tmp_path, data=str(pong_store), bank_size=200, search_roots=[]
    )
    assert results["model"].startswith("random init")
    assert 0.0 <= results["positive_reward_share"] <= 1.0
    assert (tmp_path / "run" / "figures" / "goal_trajectory.html").exists()


@pytest.mark.smoke
@pytest.mark.notebooks
def test_representations_notebook_with_pca(tmp_path, pong_store):
    from sgi_lab.probes.results import write_probes

    probed = tmp_path / "probed"  # a random encoder's probe result, as sgi-lab probe writes it
    entry = {"encoder": {"kind": "random_init", "seed": 0}, "store": {"game": "Pong"}}
    entry.update(settings={}, overall=0.61, categories={"agent_localization": 0.5})
    write_probes(probed / "probes.json", {**entry, "store": {**entry["store"], "fingerprint": "f"}})
    results = execute(
        "representations",
        tmp_path,
        data=str(pong_store),
        num_points=150,
        embedding="pca",
        search_roots=[],
        probe_runs=[str(probed)],
    )
    assert results["points"] == 150
    assert (tmp_path / "run" / "figures" / "embeddings.html").exists()
    assert results["probe_overall_f1"] == {"random_init": 0.61}
    assert (tmp_path / "run" / "figures" / "probe_f1.html").exists()


@pytest.mark.smoke
@pytest.mark.notebooks
def test_ablations_notebook_with_a_run(tmp_path):
    from sgi_lab.probes.results import write_probes

    write_finetune_run(tmp_path / "runs", "frozen", "Pong", 0, -10.0)
    probed = tmp_path / "probed"  # a random encoder's probe result, as sgi-lab probe writes it
    entry = {"encoder": {"kind": "random_init", "seed": 0}, "settings": {}, "overall": 0.61}
    write_probes(probed / "probes.json", {**entry, "store": {"game": "Pong", "fingerprint": "f"}})
    results = execute(
        "ablations", tmp_path, runs_root=str(tmp_path / "runs"), paper=[], probe_runs=[str(probed)]
    )
    assert results["methods"] == ["frozen", "random_init"]
    assert results["games"] == ["Pong"]
    methods = {row["method"] for row in results["aggregates"]}
    assert {"frozen", "Frozen (paper)", "SGI-M (paper)"} <= methods
    probes = {(row["method"], row["metric"]): row["value"] for row in results["probes"]}
    assert probes == {("random_init", "overall"): 0.61}
    assert (tmp_path / "run" / "figures" / "probe_f1.html").exists()


@pytest.mark.smoke
@pytest.mark.notebooks
def test_pretrain_then_finetune_notebooks(tmp_path, pong_store):
    """The training notebooks end to end: pretrain (10 steps), then finetune from that run."""
    pretrain = execute(
        "pretrain", tmp_path / "pretrain", data=str(pong_store), overrides={"steps": 10}
    )
    assert Path(pretrain["model"]).exists() and pretrain["steps"] == 10
    run = tmp_path / "pretrain" / "run"
    assert (run / "figures" / "training_curves.html").exists()
    executed = (tmp_path / "pretrain" / "pretrain.ipynb").read_text()
    # no stale tqdm bar: the saved progress line says where training ended
    assert "pretraining smoke: finished at step 10 of 10 in " in executed
    assert not re.search(r"[^0-9]0/10\b", executed)  # no bar saved at 0%
    # run again into the finished run: nothing is trained, and the notebook says so and shows
    # the recorded curves rather than empty live panels; beside another run
    other = tmp_path / "other_run"
    other.mkdir()
    (other / "metrics.jsonl").write_text(json.dumps({"step": 5, "losses/total": 2.0}) + "\n")
    again = execute(
        "pretrain",
        tmp_path / "pretrain",
        data=str(pong_store),
        overrides={"steps": 10},
        compare_with=[str(other)],
    )
    assert again["steps"] == 10
    executed = (tmp_path / "pretrain" / "pretrain.ipynb").read_text()
    assert "finished earlier: showing its recorded curves" in executed
    assert "finished earlier at step 10 of 10; nothing trained now" in executed
    page = (run / "figures" / "runs_side_by_side.html").read_text()
    page = page.replace("\\u002f", "/")  # plotly's JSON escapes "/" inside <script>
    assert "losses/total (run)" in page and "losses/total (other_run)" in page
    short = {"steps": 100, "learning_starts": 50, "eval_max_frames": 400, "eval_episodes": 1}
    finetune = execute(
        "finetune",
        tmp_path / "finetune",
        pretrained=str(run),
        pretrain_name="sgi_m",
        overrides=short,
    )
    assert finetune["paper_config"] == "SGI-M" and finetune["pretrained"] == str(run)
    assert finetune["eval_episodes"] >= 1
    assert (tmp_path / "finetune" / "run" / "eval.json").exists()


@pytest.mark.smoke
@pytest.mark.notebooks
def test_finetune_notebook_trains_a_population(tmp_path):
    """games x seeds: one run folder per agent, compared with the paper; with max_agents 1 as
    two populations of one, one after another, into the folders one population would use."""
    overrides = {"steps": 60, "learning_starts": 30, "eval_max_frames": 200, "eval_episodes": 1}
    results = execute(
        "finetune",
        tmp_path,
        games=["Pong", "Breakout"],
        seeds=[0],
        max_agents=1,
        overrides=overrides,
    )
    assert results["agents"] == 2 and results["game"] == "Pong"
    for game in ("Pong", "Breakout"):
        evaluation = json.loads((tmp_path / "run" / f"{game}__s0" / "eval.json").read_text())
        assert evaluation["game"] == game and evaluation["step"] == 60
    assert (tmp_path / "run" / "figures" / "vs_paper.html").exists()
    # every agent is shown, not agent 1 only
    executed = (tmp_path / "finetune.ipynb").read_text()
    assert "losses and charts of 2 agents" in executed
    for figure in ("training_curves", "runs_side_by_side"):
        page = (tmp_path / "run" / "figures" / f"{figure}.html").read_text()
        assert "Pong__s0" in page and "Breakout__s0" in page, figure
    # 60 steps end no episode: the agents' learning curves say so rather than show agent 1
    page = (tmp_path / "run" / "figures" / "learning_curve.html").read_text()
    assert "no episode finished in the " in page and "2 agents" in page


@pytest.mark.slow
@pytest.mark.smoke
@pytest.mark.parametrize("name", NOTEBOOKS)
@pytest.mark.notebooks
def test_every_notebook_with_its_smoke_set(name, tmp_path, pong_store):
    """Exactly the smoke sets (UMAP included), data aside."""
    extra = {} if name in ("ablations", "finetune") else {"data": str(pong_store)}
    assert execute(name, tmp_path, **extra)


@pytest.mark.slow
@pytest.mark.smoke
@pytest.mark.notebooks
def test_representations_of_a_pretrained_run(tmp_path, pong_store):
    from sgi_lab.probes.results import write_probes

    execute("pretrain", tmp_path / "pretrain", data=str(pong_store))
    run = tmp_path / "pretrain" / "run"
    # what `sgi-lab probe RUN` writes: shown although probe_runs is empty
    entry = {"encoder": {"kind": "pretrain", "params": "smoke"}, "settings": {}, "overall": 0.7}
    write_probes(run / "probes.json", {**entry, "store": {"game": "Pong", "fingerprint": "f"}})
    results = execute(
        "representations", tmp_path / "repr", data=str(pong_store), pretrained=str(run)
    )
    assert len(results["encoders"]) == 2
    assert results["final_logged_cosine_similarity"]
    assert results["probe_overall_f1"] == {"smoke": 0.7}
    executed = (tmp_path / "repr" / "representations.ipynb").read_text()
    assert "no probe results" not in executed


@pytest.mark.slow
@pytest.mark.smoke
@pytest.mark.notebooks
def test_demo_pipeline_with_smoke_sets(tmp_path):
    from sgi_lab.launch.demo import STAGES, run_pipeline

    stages, report = run_pipeline(tmp_path / "demo", smoke=True, progress=False)
    assert [s.state for s in stages] == ["finished"] * len(STAGES)
    page = report.read_text()
    for stage in stages:
        assert f'href="{stage.notebook}/{stage.notebook}.html"' in page
    again, _ = run_pipeline(tmp_path / "demo", smoke=True, progress=False)
    assert [s.state for s in again] == ["skipped"] * len(STAGES)  # finished stages are not redone


def test_demo_report_links_what_exists(tmp_path):
    from sgi_lab.launch.demo import Stage, write_report

    (tmp_path / "pretrain" / "figures").mkdir(parents=True)
    (tmp_path / "pretrain" / "pretrain.html").write_text("<html></html>")
    (tmp_path / "pretrain" / "figures" / "training_curves.html").write_text("<html></html>")
    stages = [
        Stage(
            "pretrain",
            "pretraining",
            1.0,
            "finished",
            12.0,
            None,
            {
                "steps": 10,
                "losses/total": 0.5123456,
                "cosine_similarity": {"pretrained": 0.99961234, "random init": 0.98},
            },
        ),
        Stage("finetune", "finetuning", 1.0, "failed", 3.0, "ValueError: <boom>"),
    ]
    page = write_report(tmp_path, stages, 15.0, note="over budget").read_text()
    assert 'href="pretrain/pretrain.html"' in page
    assert 'href="pretrain/figures/training_curves.html"' in page
    assert "total loss: 0.5123" in page and "ValueError: &lt;boom&gt;" in page
    assert "latents: pretrained 0.9996, random init 0.98" in page  # words, 3 digits, no raw keys
    assert "losses/" not in page and "charts/" not in page
    assert "60M samples" in page  # what the stage measured and what it means at this size
    assert "over budget" in page


def test_demo_results_in_words_and_why_it_ran_over_budget():
    from sgi_lab.launch.demo import budget_note, stage_summary

    datasets = stage_summary(
        "datasets",
        {
            "stores": {"pong_random (random)": {"transitions": 5000, "episodes": 6,
                                                "mean_episode_return": -20.666666}},
            "cells_per_1k": {"pong_random (random)": 12.3456},
        },
    )  # fmt: skip
    assert datasets == [
        "pong_random (random): 5000 steps, 6 episodes, mean return -20.67",
        "coverage of pong_random (random): 12.35 distinct cells per 1,000 steps",
    ]
    finetune = stage_summary(
        "finetune",
        {"eval_mean": -21.0, "eval_episodes": 2, "hns": 0.0078, "paper_config": "SGI-M/S",
         "paper_mean": -20.5, "paper_hns": 0.02, "comparable_with_paper": False},
    )  # fmt: skip
    assert finetune[0] == (
        "evaluation: mean return -21 over 2 episode(s), human-normalized score 0.0078"
    )
    assert finetune[1].startswith("paper (SGI-M/S): mean -20.5, HNS 0.02 (not comparable)")
    capped = stage_summary("finetune", {"eval_mean": -13.0, "eval_max_frames": 2000, "hns": 0.2})
    assert capped[0].startswith("evaluation (capped at 500 steps: not a result): mean return -13")

    assert budget_note(14 * 60, [9.0], cores=2) is None
    busy = budget_note(27 * 60, [5.0, 7.0], cores=2)
    assert "27 min, over its 15-min budget: the CPU was busy (mean load 6.0 on 2 cores" in busy
    assert "67%" in busy
    slow = budget_note(20 * 60, [1.5], cores=2)
    assert "not crowded" in slow and "slower than the 2-core reference" in slow


# -- runs the user already has -----------------------------------------------------------------


def _finished(folder: Path, kind: str, game: str, result: str, age: float) -> Path:
    import os
    import time

    folder.mkdir(parents=True)
    status = {"state": "finished", "kind": kind, "game": game}
    (folder / "status.json").write_text(json.dumps(status))
    (folder / result).write_text("{}")
    stamp = time.time() - age
    os.utime(folder / "status.json", (stamp, stamp))
    return folder


def test_find_latest_run_picks_the_newest_finished_run_of_a_kind(tmp_path, capsys):
    from sgi_lab import notebook

    demo, runs = tmp_path / "demo", tmp_path / "runs"
    old = _finished(demo / "pretrain", "pretrain", "Pong", "model.pt", age=100)
    new = _finished(runs / "pretrain__sgi_m__Pong__s0", "pretrain", "Pong", "model.pt", age=10)
    breakout = _finished(runs / "pretrain__x__Breakout__s0", "pretrain", "Breakout", "model.pt", 1)
    unfinished = runs / "pretrain__y__Pong__s0"
    unfinished.mkdir()
    (unfinished / "status.json").write_text(json.dumps({"state": "running", "kind": "pretrain"}))
    (unfinished / "model.pt").write_text("")
    ft = _finished(demo / "finetune", "finetune", "Pong", "eval.json", age=5)
    roots = [demo, runs, tmp_path / "missing"]

    assert notebook.find_runs_of_kind("pretrain", roots) == [breakout, new, old]
    assert notebook.find_latest_run("pretrain", roots, game="Pong") == new
    assert notebook.find_latest_run("finetune", roots) == ft
    assert notebook.find_latest_run("pretrain", [tmp_path / "missing"]) is None
    # a MinAtar game however it is written (minatar/Breakout names minatar/breakout)
    grid = _finished(runs / "pretrain__m__minatar_breakout", "pretrain", "minatar/breakout",
                     "model.pt", age=1)  # fmt: skip
    assert notebook.find_runs_of_kind("pretrain", roots, game="minatar/Breakout") == [grid]
    assert grid not in notebook.find_runs_of_kind("pretrain", roots, game="Breakout")

    assert notebook.discover_run("", "pretrain", "pretrained", roots, "Pong") == str(new)
    header = capsys.readouterr().out
    assert "pretraining run: pretrain__sgi_m__Pong__s0" in header
    assert "picked automatically" in header and str(old) in header  # another to pick
    assert notebook.discover_run("mine", "pretrain", "pretrained", roots) == "mine"
    assert "pinned by pretrained in the parameters cell" in capsys.readouterr().out
    assert notebook.discover_run("", "pretrain", "pretrained", [], fallback="random") == ""
    out = capsys.readouterr().out
    assert "pretraining run: none — no finished pretraining run" in out and "random" in out

    assert notebook.discover_runs_root("", "runs_root", roots) == str(demo)
    experiment = tmp_path / "experiments"
    _finished(experiment / "tab1" / "ft__sgi_m" / "Pong__s0", "finetune", "Pong", "eval.json", 0)
    assert notebook.discover_runs_root("", "runs_root", [demo, experiment]) == str(
        experiment / "tab1"
    )
    assert notebook.discover_runs_root("", "runs_root", []) == "outputs/runs"
    with pytest.raises(ValueError):
        notebook.find_runs_of_kind("collect", roots)


def test_a_finished_full_run_beats_a_newer_smoke_run(tmp_path, capsys):
    """After a Lab session runs pretrain.ipynb with its smoke defaults, the notebooks that
    look for a pretraining run keep the demo's (a full, finished run) and say which."""
    from sgi_lab import notebook

    demo = _finished(tmp_path / "demo" / "pretrain", "pretrain", "Pong", "model.pt", age=100)
    (demo / "config.yaml").write_text("encoder: nature\nsteps: 200\n")
    status = json.loads((demo / "status.json").read_text())
    (demo / "status.json").write_text(json.dumps({**status, "params": "demo", "step": 200}))
    smoke = tmp_path / "runs" / "pretrain__smoke__Pong__s0"
    _finished(smoke, "pretrain", "Pong", "model.pt", age=1)
    running = tmp_path / "runs" / "pretrain__sgi_m__Pong__s0"
    running.mkdir()
    (running / "status.json").write_text(json.dumps({"state": "running", "kind": "pretrain"}))
    (running / "model.pt").write_text("")
    roots = [tmp_path / "demo", tmp_path / "runs"]

    assert notebook.is_smoke_run(smoke) and not notebook.is_smoke_run(demo)
    assert notebook.find_runs_of_kind("pretrain", roots) == [demo, smoke]
    assert notebook.discover_run("", "pretrain", "pretrained", roots, "Pong") == str(demo)
    out = capsys.readouterr().out
    assert (
        "pretraining run: pretrain — params demo, nature, Pong, 200 of 200 steps, finished" in out
    )
    assert f"set pretrained in the parameters cell to pin another, e.g. {smoke}" in out
    header = notebook.run_header(smoke, "pretraining run", "pretrained", automatic=False)
    assert "finished (smoke run)" in header and "pinned by" in header


def test_the_run_with_the_most_steps_run_is_picked_whatever_its_name(tmp_path, capsys):
    """A README example with tiny overrides makes ``pretrain__sgi_m__Pong__s0`` (3 steps, newest,
    a full parameter set's name): the 200-step demo run is still picked."""
    from sgi_lab import notebook

    def finished(folder, step, age):
        _finished(folder, "pretrain", "Pong", "model.pt", age=age)
        status = json.loads((folder / "status.json").read_text())
        (folder / "status.json").write_text(json.dumps({**status, "step": step}))
        stamp = time.time() - age
        os.utime(folder / "status.json", (stamp, stamp))
        return folder

    demo = finished(tmp_path / "demo" / "pretrain", 200, age=100)
    tiny = finished(tmp_path / "runs" / "pretrain__sgi_m__Pong__s0", 3, age=1)
    smoke = finished(tmp_path / "runs" / "pretrain__smoke__Pong__s0", 200, age=2)
    legacy = _finished(
        tmp_path / "runs" / "pretrain__old__Pong__s0", "pretrain", "Pong", "model.pt", 0
    )
    roots = [tmp_path / "demo", tmp_path / "runs"]

    assert notebook.steps_run(demo) == 200 and notebook.steps_run(legacy) == 0
    # equal budgets: the full run before the smoke run although the smoke run is newer
    assert notebook.find_runs_of_kind("pretrain", roots) == [demo, smoke, tiny, legacy]
    assert notebook.discover_run("", "pretrain", "pretrained", roots, "Pong") == str(demo)
    assert "the finished run with the most steps run" in capsys.readouterr().out


@pytest.mark.smoke
@pytest.mark.notebooks
def test_ablations_notebook_discovers_runs(tmp_path):
    runs = tmp_path / "found"
    folder = write_finetune_run(runs, "frozen", "Pong", 0, -10.0)
    (folder / "status.json").write_text(json.dumps({"state": "finished", "kind": "finetune"}))
    results = execute("ablations", tmp_path, runs_root="", search_roots=[str(runs)], paper=[])
    assert results["methods"] == ["frozen"]
    executed = (tmp_path / "ablations.ipynb").read_text()
    assert "sgi-lab-run-header" in executed and f"finetuning runs under {runs}" in executed


def test_open_store_collects_what_is_missing_and_says_so_in_lines(tmp_path, capsys):
    """A notebook starting from nothing collects its data with lines, not a tqdm widget (which
    a notebook saved by papermill keeps at 0%), and opens an existing store as it is."""
    from sgi_lab import notebook

    path = tmp_path / "data" / "pong_random"
    store = notebook.open_store(path, "Pong", collect_steps=40, seed=0)
    assert len(store) == 40
    out = capsys.readouterr()
    assert f"collecting 40 Random steps of Pong into {path} ..." in out.out
    assert "collected 40 steps in " in out.out and "%" not in out.err
    assert len(notebook.open_store(path, "Pong", collect_steps=99)) == 40  # kept as it is
    assert "collecting" not in capsys.readouterr().out


# -- the laptop track: MinAtar games through the notebooks' parameters ------------------------


def _minatar_run(root: Path, method: str, game: str, seed: int, mean: float) -> Path:
    """A finished MinAtar finetuning run as the ablations notebook finds it (its label from
    results.json: the folder name holds no params part)."""
    run = root / f"finetune__{method}__{game.replace('/', '_')}__s{seed}"
    run.mkdir(parents=True)
    (run / "status.json").write_text(json.dumps({"state": "finished", "kind": "finetune"}))
    (run / "eval.json").write_text(json.dumps({"game": game, "mean": mean, "scores": [mean]}))
    (run / "config.yaml").write_text(f"game: {game}\nseed: {seed}\n")
    (run / "results.json").write_text(json.dumps({"method": method}))
    return run


def test_every_notebook_has_a_minatar_parameter_set():
    for name in NOTEBOOKS:
        params = yaml.safe_load((ROOT / "params/notebooks" / f"{name}_minatar.yaml").read_text())
        games = [params.get("game", "")]
        assert name == "ablations" or games[0].startswith("minatar/"), name
    for stage in ("pretrain", "finetune"):  # the stage's MinAtar params, sized for MinAtar
        params = yaml.safe_load((ROOT / f"params/notebooks/{stage}_minatar.yaml").read_text())
        assert params["params_file"].startswith(f"params/{stage}/minatar_"), stage


@pytest.mark.smoke
@pytest.mark.notebooks
def test_ablations_notebook_on_minatar_runs(tmp_path):
    """MinAtar runs: the MinAtar score named in the figures, no paper row, and each method's
    probability of improvement over the baseline (SGI's runs all above: 1)."""
    for seed in (0, 1):
        for game, low in (("minatar/breakout", 1.0), ("minatar/asterix", 2.0)):
            _minatar_run(tmp_path / "runs", "sgi_none", game, seed, low + seed)
            _minatar_run(tmp_path / "runs", "reduced_lr@sgi", game, seed, low + 5 + seed)
    # Section 6: an experiment at 10k finetuning steps and its 2x one (SGI below scratch at 10k
    # in every seed pair, above it at 20k; by training episodes, raw 2.0 against 3.0, below at
    # both).
    budgets = {"10k steps": tmp_path / "study", "20k steps": tmp_path / "twice"}
    for folder, labels, sgi in (
        (budgets["10k steps"], ("sgi_none", "reduced_lr__sgi"), -0.05),
        (budgets["20k steps"], ("sgi_none_2x", "reduced_lr_2x__sgi"), 0.05),
    ):
        for label, shift, training in zip(labels, (0.0, sgi), (3.0, 2.0), strict=True):
            for seed in (0, 1):
                _experiment_agent(folder, label, "minatar/breakout", seed, 0.3 + shift, training)
    # Section 7: the 10k study's second run (scratch 0.3, 0.25 there) as a per-seed CSV of raw
    # returns: scratch 0.35 and 0.2 (one seed above its first run, one below), sgi 0.3 and 0.3.
    second = tmp_path / "second.csv"
    lines = ["objective,scheme,game,seed,score"]
    for objective, scheme, scores in (
        ("none", "none", (0.35, 0.2)),
        ("sgi", "reduced_lr", (0.3, 0.3)),
    ):
        for seed, score in enumerate(scores):
            raw = score * (10.0 - 0.416) + 0.416  # Breakout: 0.416 random, 10.0 the reference
            lines.append(f"{objective},{scheme},minatar/breakout,{seed},{raw:.6f}")
    second.write_text("\n".join(lines) + "\n")
    params = _minatar_set(
        "ablations",
        runs_root=str(tmp_path / "runs"),
        reps=100,
        budgets={k: str(v) for k, v in budgets.items()},
        rerun={"first": str(budgets["10k steps"]), "second": str(second)},
    )
    results = execute("ablations", tmp_path, **params)
    rerun = {row["method"]: row for row in results["rerun"]}
    assert set(rerun) == {"none", "sgi"}
    assert (rerun["none"]["above"], rerun["none"]["below"], rerun["none"]["level"]) == (1, 1, 0)
    assert rerun["sgi"]["iqm_second"] == pytest.approx(0.3)
    against = {(r["method"], r["baseline"]) for r in results["rerun_baselines"]}
    assert against == {("sgi", "first"), ("sgi", "second"), ("sgi", "both")}
    own = {r["baseline"]: r for r in results["rerun_second_baselines"]}
    assert set(own) == {"first", "second", "both"}
    assert own["second"]["iqm"] == pytest.approx(0.3)  # the second run's sgi, 0.3 and 0.3
    assert results["rerun_training"] == []  # a CSV second run keeps no training episodes
    # sgi's two runs pooled, a seed's mean against scratch's: 0.275 < 0.325, 0.275 > 0.25
    (pooled,) = results["rerun_pooled"]
    assert (pooled["method"], pooled["runs"], pooled["above"], pooled["below"]) == ("sgi", 2, 1, 1)
    assert (tmp_path / "run" / "figures" / "rerun.svg").read_text().startswith("<svg")
    budget_rows = {(r["budget"], r["method"]): r for r in results["finetune_budgets"]}
    assert set(budget_rows) == {(b, m) for b in budgets for m in ("none", "sgi")}
    assert budget_rows["10k steps", "sgi"]["below_none"] == 2
    assert budget_rows["20k steps", "sgi"]["below_none"] == 0
    assert budget_rows["20k steps", "sgi"]["iqm"] == pytest.approx(0.35)
    training = {(r["budget"], r["method"]): r for r in results["finetune_budgets_training"]}
    assert training["20k steps", "sgi"]["below_none"] == 2  # the other readout's verdict
    assert training["20k steps", "sgi"]["iqm"] == pytest.approx((2.0 - 0.416) / (10.0 - 0.416))
    figure = (tmp_path / "run" / "figures" / "finetune_budgets.svg").read_text()
    assert figure.startswith("<svg") and "10k steps" in figure and "20k steps" in figure
    returns = {(r["budget"], r["method"]): r for r in results["finetune_budget_returns"]}
    assert set(returns) == {(b, m) for b in budgets for m in ("none", "sgi")}
    assert returns["20k steps", "sgi"]["value"] == pytest.approx(3.5)  # raw: 10 x 0.35
    assert (returns["10k steps", "none"]["value"], returns["10k steps", "none"]["seeds"]) == (
        3.0,
        2,
    )
    assert results["normalization"] == "MinAtar score"
    assert results["games"] == ["minatar/asterix", "minatar/breakout"]
    assert {row["method"] for row in results["aggregates"]} == {"sgi_none", "reduced_lr@sgi"}
    (poi,) = results["improvement"]
    assert (poi["method"], poi["baseline"], poi["value"]) == ("reduced_lr@sgi", "sgi_none", 1.0)
    page = (tmp_path / "run" / "figures" / "per_game.html").read_text()
    assert "MinAtar score (0 random, 1 DQN)" in page and "human-normalized" not in page
    executed = (tmp_path / "ablations.ipynb").read_text()
    assert "no paper row: the paper reports Atari games only" in executed
    assert "1.000 (1.000, 1.000)" in executed  # the probability of improvement's table


@pytest.fixture(scope="module")
def minatar_store(tmp_path_factory):
    pytest.importorskip("minatar")
    from sgi_lab.data.collect import collect_random

    path = tmp_path_factory.mktemp("minatar") / "breakout_random"
    return collect_random("minatar/breakout", 1_000, path, seed=0, progress=False).path


@pytest.fixture(scope="module")
def minatar_pretrained(minatar_store, tmp_path_factory):
    """A 4-step MinAtar pretraining run (the minatar encoder) on the store."""
    from sgi_lab.config import PretrainConfig
    from sgi_lab.data import TransitionStore
    from sgi_lab.train.pretrain import pretrain

    out = tmp_path_factory.mktemp("minatar_pretrain") / "run"
    config = PretrainConfig(
        encoder="minatar", hidden_size=32, steps=4, batch_size=8, spr_steps=3, n_step=3,
        goal_window=10, log_every=2, checkpoint_every=2, prefetch=0,
    )  # fmt: skip
    pretrain(config, TransitionStore(minatar_store), out, progress=False)
    return out


def _experiment_agent(
    root: Path, label: str, game: str, seed: int, score: float, training: float | None = None
) -> None:
    """A finished finetuning agent of an experiment folder (``finetune/<label>/<game>__s<seed>``)
    with its MinAtar score, as `sgi_lab.studies.finetune_study.study_runs` reads it, and one
    training episode of raw return ``training`` when given."""
    folder = root / "finetune" / label / f"{game.replace('/', '-')}__s{seed}"
    folder.mkdir(parents=True)
    if training is not None:
        row = {"step": 900, "episode/return": training}
        (folder / "metrics.jsonl").write_text(json.dumps(row) + "\n")
    (folder / "status.json").write_text(json.dumps({"state": "finished", "params": label}))
    (folder / "config.yaml").write_text(f"game: {game}\nseed: {seed}\n")
    evaluation = {"game": game, "mean": 10 * score, "normalized_score": score}
    (folder / "eval.json").write_text(json.dumps({**evaluation, "normalization": "MinAtar score"}))


def _minatar_set(notebook: str, **parameters) -> dict:
    """A notebook's MinAtar parameter set with ``parameters`` over it (its ``name`` left out:
    the tests give the run folder)."""
    path = ROOT / "params" / "notebooks" / f"{notebook}_minatar.yaml"
    params = {k: v for k, v in yaml.safe_load(path.read_text()).items() if k != "name"}
    return {**params, **parameters}


@pytest.mark.slow
@pytest.mark.smoke
@pytest.mark.notebooks
def test_goal_rewards_notebook_on_minatar(tmp_path, minatar_store, minatar_pretrained):
    results = execute(
        "goal_rewards",
        tmp_path,
        **_minatar_set("goal_rewards", data=str(minatar_store), pretrained=str(minatar_pretrained),
                       bank_size=200, search_roots=[], episode=1),
    )  # fmt: skip
    assert results["model"] == "pretrained: run"
    page = (tmp_path / "run" / "figures" / "nearest_frames.html").read_text()
    assert '"type":"image"' in page and '"name":"paddle"' in page  # coloured channel grids


@pytest.mark.slow
@pytest.mark.smoke
@pytest.mark.notebooks
def test_finetune_notebook_on_minatar(tmp_path):
    """The MinAtar parameter set with a tiny budget: a live learning curve with the game's
    random and DQN-reference lines, the MinAtar score recorded, no paper column."""
    pytest.importorskip("minatar")
    tiny = {"hidden_size": 32, "steps": 120, "batch_size": 8, "learning_starts": 60,
            "eps_steps": 61, "eval_episodes": 2, "log_every": 40, "checkpoint_every": 60}  # fmt: skip
    results = execute("finetune", tmp_path, **_minatar_set("finetune", overrides=tiny))
    assert results["game"] == "minatar/breakout" and results["normalization"] == "MinAtar score"
    assert results["paper_config"] is None and "Atari games only" in results["paper_column_reason"]
    page = (tmp_path / "run" / "figures" / "learning_curve.html").read_text()
    assert "DQN reference" in page
    page = (tmp_path / "run" / "figures" / "vs_paper.html").read_text()
    assert "MinAtar score" in page and "human-normalized" not in page


@pytest.mark.slow
@pytest.mark.smoke
@pytest.mark.notebooks
def test_datasets_notebook_on_minatar(tmp_path, minatar_store):
    results = execute(
        "datasets",
        tmp_path,
        **_minatar_set("datasets", data=str(minatar_store), compare_collect_steps=300),
    )
    assert len(results["stores"]) == 2
    page = (tmp_path / "run" / "figures" / "frame_strip.html").read_text()
    assert '"type":"image"' in page and '"name":"brick"' in page


@pytest.mark.slow
@pytest.mark.smoke
@pytest.mark.notebooks
def test_representations_notebook_on_minatar(tmp_path, minatar_store, minatar_pretrained):
    results = execute(
        "representations",
        tmp_path,
        **_minatar_set("representations", data=str(minatar_store),
                       pretrained=str(minatar_pretrained), num_points=150, embedding="pca",
                       search_roots=[]),
    )  # fmt: skip
    assert len(results["encoders"]) == 2


@pytest.mark.slow
@pytest.mark.smoke
@pytest.mark.notebooks
def test_pretrain_notebook_on_minatar(tmp_path, minatar_store):
    tiny = {"hidden_size": 32, "steps": 4, "batch_size": 8, "spr_steps": 3, "n_step": 3,
            "goal_window": 10, "log_every": 2, "checkpoint_every": 2}  # fmt: skip
    results = execute(
        "pretrain",
        tmp_path,
        **_minatar_set("pretrain", data=str(minatar_store), overrides=tiny, diversity_points=100),
    )
    assert results["steps"] == 4 and results["game"] == "minatar/breakout"
