"""What a run leaves on disk: plotly.js at most once per executed notebook and per HTML page."""

from __future__ import annotations

import pytest
from conftest import write_notebook

from sgi_lab.launch.demo import notebook_html
from sgi_lab.launch.notebook_runner import run_notebook

pytestmark = [pytest.mark.smoke, pytest.mark.notebooks]

# The first line of every copy of plotly.js (plotly.offline.get_plotlyjs()).
PLOTLYJS_MARK = "* plotly.js v"

LIVE_FIGURES = (
    "from sgi_lab import viz\n"
    "import plotly.graph_objects as go\n"
    "curves = viz.LiveCurves(['losses/total'], min_interval_s=0.0)\n"
    "curves.show()\n"
    "for step in range(8):\n"
    "    curves.update({'step': step, 'losses/total': 1.0 / (step + 1)})\n"
    "final = curves.finish()\n"
    "live = viz.LiveFigure()\n"
    "live.show()\n"
    "for n in range(4):\n"
    "    live.replace(go.Figure(go.Scatter(y=list(range(n + 2)))))\n"
    "final.show()\n"
    "final\n"
)


@pytest.fixture
def live_notebook(tmp_path):
    """A notebook that redraws live curves and a live figure many times, as pretrain does."""
    return write_notebook(tmp_path / "live.ipynb", LIVE_FIGURES, 'out_dir = ""')


def test_executed_notebook_and_its_html_carry_plotlyjs_once(live_notebook, tmp_path, monkeypatch):
    # The demo's renderers: the notebook renderer embeds plotly.js so the HTML works offline.
    monkeypatch.setenv("PLOTLY_RENDERER", "plotly_mimetype+notebook")
    folder = run_notebook(live_notebook, out_root=tmp_path / "runs", name="live", progress=False)
    executed = folder / "live.ipynb"
    page = notebook_html(executed)
    assert executed.read_text().count(PLOTLYJS_MARK) == 1
    html = page.read_text()
    assert html.count(PLOTLYJS_MARK) == 1
    # every figure is still drawn: the live curves, the live figure, two shows of the final one
    assert html.count("Plotly.newPlot(") >= 4
    assert page.stat().st_size < 10 * 2**20


CHECKPOINTS = (
    "from pathlib import Path\n"
    "for sub in ('', 'Pong__s0', 'Breakout__s0'):\n"
    "    ckpts = Path(out_dir, sub, 'checkpoints')\n"
    "    ckpts.mkdir(parents=True, exist_ok=True)\n"
    "    for step in (100, 200, 300):\n"
    "        (ckpts / f'ckpt_{step:08d}.pt').write_bytes(b'0' * 1000)\n"
    "    Path(out_dir, sub, 'model.pt').write_bytes(b'0' * 100)\n"
    "if fail:\n"
    "    raise ValueError('boom')\n"
)


@pytest.fixture
def checkpointing_notebook(tmp_path):
    """A notebook that leaves three checkpoints in its run folder and in two agents' folders."""
    return write_notebook(tmp_path / "ckpt.ipynb", CHECKPOINTS, 'out_dir = ""\nfail = False')


def _kept(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("ckpt_*.pt"))


def test_finished_run_keeps_the_newest_checkpoint_per_folder_and_the_model(
    checkpointing_notebook, tmp_path
):
    from sgi_lab.launch.cli import main

    assert main(["run", str(checkpointing_notebook), "--out-root", str(tmp_path / "runs"),
                 "--name", "r", "--no-progress"]) == 0  # fmt: skip
    folder = tmp_path / "runs" / "r"
    assert _kept(folder) == [
        "Breakout__s0/checkpoints/ckpt_00000300.pt",
        "Pong__s0/checkpoints/ckpt_00000300.pt",
        "checkpoints/ckpt_00000300.pt",
    ]
    assert len(list(folder.rglob("model.pt"))) == 3


def test_checkpoint_retention_is_configurable_and_a_failed_run_keeps_all(
    checkpointing_notebook, tmp_path
):
    from sgi_lab.launch.cli import main
    from sgi_lab.launch.notebook_runner import NotebookRunError

    runs = tmp_path / "runs"
    none = run_notebook(checkpointing_notebook, out_root=runs, name="none", keep_checkpoints=0)
    assert _kept(none) == [] and (none / "model.pt").exists()
    argv = ["run", str(checkpointing_notebook), "--out-root", str(runs), "--no-progress"]
    assert main([*argv, "--name", "all", "--keep-checkpoints", "all"]) == 0
    assert len(_kept(runs / "all")) == 9
    with pytest.raises(NotebookRunError):
        run_notebook(checkpointing_notebook, None, {"fail": True}, out_root=runs, name="failed")
    assert len(_kept(runs / "failed")) == 9  # to resume from
