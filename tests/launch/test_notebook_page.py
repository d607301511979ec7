"""An executed notebook's HTML page fetches no script from a CDN (it must open offline)."""

from __future__ import annotations

import nbformat

from sgi_lab.launch.demo import notebook_html as demo_notebook_html
from sgi_lab.launch.notebook_page import notebook_html, offline_page

# What plotly's notebook renderer writes before every figure (include_mathjax="cdn").
PLOTLY_MATHJAX = (
    '<script src="https://cdnjs.cloudflare.com/ajax/libs/mathjax/2.7.5/MathJax.js'
    '?config=TeX-AMS-MML_SVG"></script>'
)
FIGURE = '<div id="fig">plot</div><script type="text/javascript">Plotly.newPlot("fig")</script>'


def test_the_page_keeps_its_figures_and_loads_nothing_from_a_cdn(tmp_path):
    notebook = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("fig")
    cell.outputs = [
        nbformat.v4.new_output(
            "display_data", data={"text/html": PLOTLY_MATHJAX + FIGURE, "text/plain": "fig"}
        )
    ]
    notebook.cells = [nbformat.v4.new_markdown_cell("# a page"), cell]
    executed = tmp_path / "run.ipynb"
    nbformat.write(notebook, executed)
    page = notebook_html(executed).read_text()
    assert 'src="http' not in page  # no script (or anything) fetched by the page itself
    assert "require.min.js" not in page and "MathJax.js" not in page
    assert 'Plotly.newPlot("fig")' in page and "a page" in page
    assert demo_notebook_html is notebook_html  # the demo's report pages are made the same way


def test_only_cdn_scripts_for_require_and_mathjax_go():
    page = (
        '<script src="https://cdnjs.cloudflare.com/ajax/libs/require.js/2.1.10/require.min.js">'
        "</script>" + PLOTLY_MATHJAX + '<script src="local.js"></script>' + FIGURE
    )
    assert offline_page(page) == '<script src="local.js"></script>' + FIGURE
