"""What a run leaves on disk: plotly.js at most once per executed notebook and per HTML page."""

from __future__ import annotations

import nbformat
import pytest

from sgi_lab.launch.demo import notebook_html
from sgi_lab.launch.notebooks import run_notebook

pytestmark = pytest.mark.smoke

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
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('out_dir = ""')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(LIVE_FIGURES)]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    path = tmp_path / "live.ipynb"
    nbformat.write(nb, path)
    return path


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
