"""The demo's own page and estimates: from this machine's measured times, one announced time
everywhere, and a re-run that skips every stage keeping the first run's times (its progress
bar: tests/runs/test_progress.py)."""

from __future__ import annotations

from sgi_lab.base.files import provenance, record_provenance
from sgi_lab.launch import demo
from sgi_lab.launch.notebook_runner import RunExistsError
from sgi_lab.runs.folder import RunDir


def _finished_stages(root, seconds=60.0):
    for name, _, _ in demo.STAGES:
        RunDir(root / name).set_status("finished", duration_s=seconds, results={"x": 1})


def test_rerun_that_skips_every_stage_keeps_the_first_runs_times(tmp_path, monkeypatch, capsys):
    root = tmp_path / "demo"
    _finished_stages(root, seconds=90.0)
    first = RunDir(root / demo.STAGES[0][0])  # made by this code; the others by older code
    first.set_status("finished", provenance=record_provenance({}))

    def finished_earlier(*args, **kwargs):
        raise RunExistsError("finished")

    monkeypatch.setattr(demo, "run_notebook", finished_earlier)
    stages, report = demo.run_pipeline(root, progress=False)
    assert [s.state for s in stages] == ["skipped"] * len(demo.STAGES)
    assert [s.seconds for s in stages] == [90.0] * len(demo.STAGES)
    page = report.read_text()
    assert f"Total time of the stages:\n{90 * len(demo.STAGES) / 60:.1f} min" in page
    assert "90 s (earlier run)" in page and "0.0 min, " not in page
    said = [line for line in capsys.readouterr().out.splitlines() if "earlier run" in line]
    assert said[0].strip() == "finished in an earlier run (use --fresh to redo it)"
    commit = provenance()["commit"]
    if commit:  # a clone: the stages older code made say so
        older = f"by code older than this one (this code is {commit[:10]})"
        assert all(older in line for line in said[1:]) and len(said) == len(demo.STAGES)


def test_estimate_comes_from_this_machines_measured_times(tmp_path, monkeypatch):
    monkeypatch.setenv("SGI_LAB_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "demo"
    assert "idle 2-core CPU" in demo.estimate(root)
    _finished_stages(root, seconds=120.0)
    text = demo.estimate(root)
    assert text.startswith(f"about {2.0 * len(demo.STAGES):.1f} minutes, as this machine measured")
    # a finished demo's times are kept for the next run elsewhere (e.g. after --fresh)
    stages = [demo.Stage(n, t, m, state="finished", seconds=30.0) for n, t, m in demo.STAGES]
    demo._record_seconds(stages)
    assert f"about {0.5 * len(demo.STAGES):.1f} minutes" in demo.estimate(tmp_path / "elsewhere")


def test_demo_finetune_logs_often_enough_for_the_bar_to_move_while_learning():
    from sgi_lab.launch.notebook_runner import read_param_file
    from sgi_lab.notebook import find_project_root

    params = read_param_file(find_project_root() / "params/notebooks/demo_finetune.yaml")
    assert params["config"]["log_every"] <= 10


def test_thumbnails_link_each_figure_with_a_png_and_the_environment_is_restored(
    tmp_path, monkeypatch, capsys
):
    """index.html shows a thumbnail for every figure that has a PNG beside its HTML; the demo
    asks the notebooks for PNGs only where static export works (here: said in one line when it
    does not), and leaves the process's environment as it found it."""
    from sgi_lab.notebook import FIGURE_FORMATS_ENV

    root = tmp_path / "demo"
    _finished_stages(root)
    figures = root / "pretrain" / "figures"
    figures.mkdir(parents=True)
    for name in ("losses", "probes"):
        (figures / f"{name}.html").write_text("<html></html>")
    (figures / "losses.png").write_bytes(b"\x89PNG")

    def finished_earlier(*args, **kwargs):
        raise RunExistsError("finished")

    monkeypatch.setattr(demo, "run_notebook", finished_earlier)
    monkeypatch.delenv(FIGURE_FORMATS_ENV, raising=False)
    monkeypatch.setattr(demo, "static_export_problem", lambda: "no Chromium here")
    _, report = demo.run_pipeline(root, progress=False)
    assert "PNG thumbnails left out: no Chromium here" in capsys.readouterr().out
    page = report.read_text()
    assert '<img src="pretrain/figures/losses.png"' in page
    assert "probes.png" not in page  # no PNG, no thumbnail (the link stays)
    assert 'href="pretrain/figures/probes.html"' in page

    seen = {}

    def record(*args, **kwargs):
        seen["formats"] = __import__("os").environ.get(FIGURE_FORMATS_ENV)
        raise RunExistsError("finished")

    monkeypatch.setattr(demo, "run_notebook", record)
    monkeypatch.setattr(demo, "static_export_problem", lambda: None)
    demo.run_pipeline(root, progress=False, skip=("minatar",))
    assert seen["formats"] == "png"
    assert FIGURE_FORMATS_ENV not in __import__("os").environ


def test_the_demo_announces_one_time_everywhere():
    """README.md, docs/setup.md and the demo's own estimate give the same idle minutes: the sum
    of the stages' measured minutes."""
    import re

    from sgi_lab.notebook import find_project_root

    minutes = sum(m for _, _, m in demo.STAGES)
    root = find_project_root()
    said = []
    for doc in ("README.md", "docs/setup.md"):
        text = (root / doc).read_text()
        said += re.findall(r"make demo .*\(~(\d+) min on 2 idle", text)
        said += re.findall(r"idle: the demo about (\d+) minutes", " ".join(text.split()))
    assert len(said) >= 3 and {int(n) for n in said} == {round(minutes)}
    assert f"about {minutes:.1f} minutes on an idle 2-core CPU" in demo.estimate(
        "/nonexistent", smoke=True
    )
