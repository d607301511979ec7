"""An executed notebook as an HTML page that works offline: nbconvert's page without the
scripts it would fetch from a CDN.

nbconvert's ``lab`` template loads require.js and MathJax from cdnjs in every page's head, and
plotly's notebook renderer adds a MathJax script from cdnjs to every figure it draws. Our
notebooks hold no LaTeX and plotly.js itself is embedded in the page (once), so both scripts
only cost a page opened offline a failed fetch each (and a wait): they are left out.
"""

from __future__ import annotations

import re
from pathlib import Path

from sgi_lab.base.files import atomic_write_text

__all__ = ["CDN_SCRIPT", "notebook_html", "offline_page"]

CDN_SCRIPT = re.compile(
    r"<script[^>]*\ssrc=\"https?://[^\"]*(?:require|mathjax)[^\"]*\"[^>]*>\s*</script>",
    re.IGNORECASE,
)
"""A ``<script src=...>`` loading require.js or MathJax from the network."""


def offline_page(page: str) -> str:
    """``page`` without its `CDN_SCRIPT` tags (require.js, MathJax); everything else as is."""
    return CDN_SCRIPT.sub("", page)


def notebook_html(executed: Path) -> Path | None:
    """Convert an executed notebook to a self-contained HTML page beside it, with no script
    fetched from a CDN (`offline_page`); None on failure."""
    try:
        import nbformat
        from nbconvert import HTMLExporter
    except ImportError:
        return None
    try:
        body, _ = HTMLExporter().from_notebook_node(nbformat.read(executed, as_version=4))
    except Exception:  # a report without one page beats no report
        return None
    target = executed.with_suffix(".html")
    atomic_write_text(target, offline_page(body))
    return target
