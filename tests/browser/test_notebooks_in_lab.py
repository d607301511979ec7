"""The notebooks as a researcher sees them: JupyterLab in headless Chromium (the ``browser`` tier).

Papermill proves that the notebooks execute; these tests prove that their figures and widgets
render and respond. JupyterLab (the .venv's) is started on 127.0.0.1 with a random port and a
token, its root a temporary copy of the project's layout (``notebooks/`` and ``params/``), so
nothing is written into the checkout. Each notebook is copied there with papermill's
``parameters`` injection of its smoke set (``params/notebooks/<name>_smoke.yaml``, with the
tests' small store and a run folder in the temporary root), opened, run with "Run All Cells" from
the command palette, and checked: no error output, every plotly figure drawn, widgets drawn, and,
for the interactive notebooks, one control that changes the plotted data; the ablation explorer's
table (headers are the chosen metrics, every method named, values follow the metrics) and the
header line naming the run a notebook shows. A screenshot of each notebook after Run All lands in
``outputs/browser/<name>.png`` (``SGI_LAB_SCREENSHOTS`` to move it; its path is printed).

The demo test opens ``outputs/demo/index.html`` and every page it links with the network off:
every figure must render from the page itself (plotly inlined or beside it, no CDN). When no demo
has been run (``make demo``), it runs the demo pipeline with the smoke sets into its tmp folder
instead (about 2 minutes), so the tier always checks a report.

``make test-browser`` installs Debian's ``chromium`` and Python ``playwright`` (never
``playwright install``); without them these tests are skipped.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
import yaml
from conftest import write_finetune_run

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("SGI_LAB_CHROMIUM", "/usr/bin/chromium"))
SCREENSHOTS = Path(os.environ.get("SGI_LAB_SCREENSHOTS", ROOT / "outputs" / "browser"))
"""Where each notebook's screenshot after Run All lands (git-ignored), for a developer to look at."""

pytestmark = pytest.mark.browser

# plotly figures each notebook shows (live FigureWidgets included) with its smoke set
EXPECTED_FIGURES = {
    "datasets": 6,  # stores table, frame strip, summary, distance from start, coverage, side by side
    "pretrain": 7,  # config table, store table, live curves, curves, diversity, summary, runs
    # side by side
    "finetune": 7,  # config table, live curves, learning curve, losses, evaluation, vs paper,
    # runs side by side
    "goal_rewards": 5,  # strip, trajectory, nearest frames, the explorer's two figures
    "representations": 3,  # embeddings, diversity table, diversity curves
    "ablations": 6,  # the explorer's two figures (its table is HTML), interval, table, per game,
    # objectives
}
INTERACTIVE = ("ablations", "goal_rewards")
PLOTLY = "application/vnd.plotly.v1+json"
RUN_TIMEOUT_S = 420  # the slowest, finetune's 300 steps and 2 evaluation episodes, on a busy CPU


def _require_browser() -> None:
    pytest.importorskip("playwright.sync_api", reason="make test-browser installs playwright")
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} missing: make test-browser installs Debian's chromium")


# -- JupyterLab and the browser -----------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """A JupyterLab server on 127.0.0.1 serving ``root``; ``url(path)`` carries the token."""

    def __init__(self, root: Path, state: Path) -> None:
        self.root, self.port, self.token = root, _free_port(), secrets.token_hex(16)
        settings = state / "settings" / "@jupyterlab" / "apputils-extension"
        settings.mkdir(parents=True)
        # no requests to the internet for news or updates
        (settings / "notification.jupyterlab-settings").write_text(
            json.dumps({"fetchNews": "false", "checkForUpdates": False})
        )
        env = {
            k: v
            for k, v in os.environ.items()
            # the live FigureWidgets a researcher gets, not the static figures of papermill runs
            if k not in ("SGI_LAB_STATIC_FIGURES", "PLOTLY_RENDERER")
        }
        env["JUPYTER_RUNTIME_DIR"] = str(state / "runtime")
        self.log = state / "jupyterlab.log"
        self.process = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("jupyter")),
                "lab",
                "--no-browser",
                "--allow-root",  # containers run as root
                "--ServerApp.ip=127.0.0.1",
                f"--ServerApp.port={self.port}",
                "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={self.token}",
                f"--ServerApp.root_dir={root}",
                f"--LabApp.user_settings_dir={state / 'settings'}",
                f"--LabApp.workspaces_dir={state / 'workspaces'}",
            ],
            env=env,
            stdout=self.log.open("w"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 120
        while True:
            try:
                self.api("status")
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"JupyterLab did not start:\n{self.log.read_text()[-3000:]}"
                    ) from None
                time.sleep(0.5)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}?token={self.token}"

    def api(self, path: str, method: str = "GET"):
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/api/{path}",
            method=method,
            headers={"Authorization": f"token {self.token}"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def shut_down_kernels(self) -> None:
        for session in self.api("sessions"):
            self.api(f"sessions/{session['id']}", method="DELETE")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="session")
def chromium():
    _require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def lab_root(tmp_path_factory, pong_store):
    """A project layout JupyterLab serves: ``notebooks/`` (parameterized copies, written by
    `_lab_notebook`), ``params/`` (a copy), and the ablations notebook's finetuning runs."""
    root = tmp_path_factory.mktemp("lab")
    (root / "notebooks").mkdir()
    shutil.copytree(ROOT / "params", root / "params")
    for method, game, seed, score in [
        ("frozen", "Pong", 0, -19.0),
        ("frozen", "Pong", 1, -17.0),
        ("frozen", "Breakout", 0, 3.0),
        ("frozen", "Breakout", 1, 5.0),
        ("sgi_m", "Pong", 0, -12.0),
        ("sgi_m", "Breakout", 0, 9.0),
    ]:
        write_finetune_run(root / "finetune_runs", method, game, seed, score)
    return root


@pytest.fixture(scope="session")
def lab(lab_root, tmp_path_factory, chromium):
    server = Lab(lab_root, tmp_path_factory.mktemp("jupyterlab"))
    yield server
    server.stop()


def _smoke_parameters(name: str, root: Path, store: Path) -> dict:
    """The notebook's smoke set, with the tests' store and a run folder inside ``root``; the
    heavy parts are cut as tests/test_notebooks.py cuts them (PCA for UMAP, fewer points)."""
    params = yaml.safe_load((ROOT / "params" / "notebooks" / f"{name}_smoke.yaml").read_text())
    if "data" in params:
        params["data"] = str(store)
    params["out_dir"] = str(root / "runs" / name)
    params.update(
        {
            "datasets": {"compare_collect_steps": 300},
            # the pretrain notebook's run (tested before them), found as a researcher's would be
            "goal_rewards": {"bank_size": 200, "search_roots": [str(root / "runs")]},
            "representations": {
                "num_points": 150,
                "embedding": "pca",
                "search_roots": [str(root / "runs")],
            },
            "ablations": {"runs_root": str(root / "finetune_runs"), "reps": 100},
        }.get(name, {})
    )
    return params


def _lab_notebook(name: str, root: Path, store: Path) -> str:
    """Write the notebook with its smoke parameters injected (as papermill does) into
    ``root/notebooks``; return its path relative to ``root``."""
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    nb = load_notebook_node(str(ROOT / "notebooks" / f"{name}.ipynb"))
    nb = parameterize_notebook(nb, _smoke_parameters(name, root, store))
    nbformat.write(nb, root / "notebooks" / f"{name}.ipynb")
    return f"notebooks/{name}.ipynb"


# -- what the page shows ------------------------------------------------------------------------

# one summary per drawn plotly figure: its traces' names and data (typed arrays as lists) and
# its annotations' texts (what an empty figure says instead)
FIGURE_DATA_JS = """plots => plots.map(gd => JSON.stringify({
    traces: (gd.data || []).map(t => ({
        name: t.name, type: t.type,
        x: t.x ? Array.from(t.x) : null, y: t.y ? Array.from(t.y) : null,
        cells: t.cells ? t.cells.values : null,
    })),
    notes: ((gd.layout || {}).annotations || []).map(a => a.text),
}))"""


def _prompts(page) -> list[str]:
    return page.locator(".jp-Notebook .jp-CodeCell .jp-InputArea-prompt").all_text_contents()


def _errors(page) -> list[str]:
    """Tracebacks and error outputs in the notebook, widget views that failed to render."""
    texts = page.locator(
        '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
    ).all_text_contents()
    errors = [t for t in texts if "Traceback" in t]  # error outputs render as stderr too
    errors += [
        t
        for t in page.locator(".jp-OutputArea-output").all_text_contents()
        if "Error displaying widget" in t or "Error rendering" in t
    ]
    return errors


def _accept_kernel_dialog(page) -> None:
    """Accept JupyterLab's "Select Kernel" dialog (its default, the notebook's Python 3) when it
    opens: on a busy machine the kernel's first start can outlast Lab's wait and Lab asks."""
    dialog = page.locator(".jp-Dialog")
    if dialog.count() and dialog.first.is_visible():
        dialog.locator(".jp-mod-accept").first.click()
        page.wait_for_timeout(1_000)


def _run_all(page, timeout_s: float) -> None:
    """Run > Run All Cells from the menu bar, then wait until every cell ran (or one failed,
    which stops the run) and the kernel is idle."""
    for attempt in range(3):  # a click while the freshly opened notebook settles can be lost
        _accept_kernel_dialog(page)
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-item:not(.lm-mod-disabled)").filter(
            has=page.locator(".lm-Menu-itemLabel", has_text="Run All Cells")
        ).filter(has_not_text="Restart").first.click()
        try:
            # Every cell queued: the last code cell shows [*] (or has run) at once.
            page.wait_for_function(
                "() => { const p = Array.from(document.querySelectorAll("
                "'.jp-CodeCell .jp-InputArea-prompt')); "
                "return p.length > 0 && /\\[(\\*|\\d+)\\]/.test(p[p.length - 1].textContent); }",
                timeout=15_000,
            )
            break
        except Exception:
            if attempt == 2:
                raise
            page.keyboard.press("Escape")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        prompts = _prompts(page)
        idle = page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').count()
        if idle and not any("*" in p for p in prompts):
            return
        time.sleep(1.0)
    raise AssertionError(f"the notebook still runs after {timeout_s:.0f} s: prompts {prompts}")


def _figures(page, cell=None):
    scope = cell if cell is not None else page.locator(".jp-Notebook")
    return scope.locator(".js-plotly-plot")


def _figure_data(locator) -> list[str]:
    return locator.evaluate_all(FIGURE_DATA_JS)


def _cell_with(page, text: str):
    """The code cell whose source contains ``text``."""
    cell = page.locator(".jp-Notebook .jp-CodeCell").filter(
        has=page.locator(".jp-InputArea-editor", has_text=text)
    )
    assert cell.count() == 1, f"{cell.count()} cells contain {text!r}"
    return cell


def _wait_changed(locator, before: list[str], timeout_s: float = 90) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        after = _figure_data(locator)
        if len(after) == len(before) and after != before:
            return after
        time.sleep(0.5)
    raise AssertionError("the plotted data did not change after the interaction")


TABLE_JS = """t => ({
    headers: Array.from(t.querySelectorAll('thead th')).map(th => th.textContent.trim()),
    rows: Array.from(t.querySelectorAll('tbody tr')).map(
        tr => Array.from(tr.querySelectorAll('td')).map(td => td.textContent.trim())),
})"""


def _explorer_table(cell) -> dict:
    table = cell.locator(".sgi-lab-table table")
    assert table.count() == 1, f"the explorer shows {table.count()} tables, not 1"
    return table.evaluate(TABLE_JS)


def _wait_table(cell, headers: list[str], timeout_s: float = 90) -> dict:
    deadline = time.monotonic() + timeout_s
    while (table := _explorer_table(cell))["headers"] != headers:
        if time.monotonic() > deadline:
            raise AssertionError(f"table headers {table['headers']}, not {headers}")
        time.sleep(0.5)
    return table


def _interact_ablations(page) -> None:
    """The explorer's table: one named column per chosen metric and every method's name on
    first display; other metrics (as many, then fewer) change its headers and values. Then the
    interval plot follows the metrics and the per-game plot the games."""
    cell = _cell_with(page, "AblationExplorer(")
    table = _wait_table(cell, ["Method", "IQM", "Median", "Mean"])
    methods = [row[0] for row in table["rows"]]
    assert methods[:2] == ["frozen", "sgi_m"] and "SGI-M (paper)" in methods, methods
    assert all(all(cells) for cells in table["rows"]), f"empty cells: {table['rows']}"
    metrics = cell.get_by_label("metrics", exact=True)
    figures = _figures(page, cell)
    before = _figure_data(figures)
    # the interval plot, the per-game plot, and the probe bars (these runs have no probes)
    assert len(before) == 3, f"the explorer shows {len(before)} figures, not 3"
    assert "no probe results" in before[2], f"the probe bars show {before[2][:200]}"
    assert cell.locator(".sgi-lab-note").filter(has_text="no probe results").count() == 1
    # as many columns as before (a select lists its choices in its own order)
    metrics.select_option(["iqm", "optimality_gap", "games_above_human"])
    changed = _wait_table(cell, ["Method", "IQM", "Optimality Gap", "#Games > Human"])
    assert [r[0] for r in changed["rows"]] == methods
    assert [r[2] for r in changed["rows"]] != [r[2] for r in table["rows"]], "values unchanged"
    assert [r[1] for r in changed["rows"]] == [r[1] for r in table["rows"]]
    metrics.select_option(["iqm"])
    _wait_table(cell, ["Method", "IQM"])
    after = _wait_changed(figures, before)
    assert after[0] != before[0], "the interval plot did not change with the metrics"
    games = cell.get_by_label("games", exact=True)
    games.select_option(["Pong"])
    again = _wait_changed(figures, after)
    assert again[1] != after[1], "the per-game plot did not change with the games"


def _interact_goal_rewards(page) -> None:
    """Drag the noise alpha slider: the goal reward curve along the trajectory changes."""
    cell = _cell_with(page, "GoalExplorer(")
    slider = cell.locator(".widget-slider").filter(has_text="noise alpha")
    trajectory = _figures(page, cell).first
    before = _reward_curve(trajectory)
    handle = slider.locator(".noUi-handle")
    handle.scroll_into_view_if_needed()
    track = slider.locator(".noUi-target").bounding_box()
    box = handle.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.move(track["x"] + 0.8 * track["width"], box["y"] + box["height"] / 2, steps=8)
    page.mouse.up()
    deadline = time.monotonic() + 90
    while (after := _reward_curve(trajectory)) == before and time.monotonic() < deadline:
        time.sleep(0.5)
    readout = slider.locator(".widget-readout").inner_text()
    assert after != before, f"the goal reward curve did not change (alpha now {readout})"
    assert float(readout) > 0.5, readout


def _reward_curve(figure) -> list:
    return figure.evaluate(
        "gd => gd.data.filter(t => t.name === 'goal reward').map(t => Array.from(t.y))"
    )


def _screenshot(page, path: Path) -> None:
    """The whole notebook: the viewport grown to the notebook's height (JupyterLab scrolls the
    notebook inside a fixed page, so a full-page screenshot would show one screen of it)."""
    scroller = page.locator(".jp-WindowedPanel-outer").first
    for _ in range(2):  # content-visibility estimates the height of cells not yet drawn
        height = scroller.evaluate("e => { e.scrollTop = 0; return e.scrollHeight; }")
        page.set_viewport_size({"width": 1400, "height": min(int(height) + 200, 16_000)})
        page.wait_for_timeout(1_000)  # plotly redraws at the new size
    page.screenshot(path=path)


INTERACTIONS = {"ablations": _interact_ablations, "goal_rewards": _interact_goal_rewards}

# What the header line of a notebook that shows an earlier run must say
RUN_HEADERS = {
    "goal_rewards": ["pretraining run: pretrain", "steps", "finished", "picked automatically"],
    "representations": ["pretraining run: pretrain", "steps", "finished", "picked automatically"],
    "ablations": ["finetuning runs under", "pinned by runs_root"],
}


def _check_run_header(page, name: str) -> None:
    header = page.locator(".jp-Notebook .sgi-lab-run-header")
    assert header.count() >= 1, f"{name}: no header line names the run it shows"
    # textContent: cells scrolled out of view are not rendered, and have no innerText
    text = " ".join(" ".join(t.split()) for t in header.all_text_contents())
    missing = [part for part in RUN_HEADERS[name] if part not in text]
    assert not missing, f"{name}: the run header lacks {missing}: {text!r}"


# -- the tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(EXPECTED_FIGURES))
def test_notebook_runs_and_renders_in_jupyterlab(name, lab, chromium, pong_store, tmp_path):
    path = _lab_notebook(name, lab.root, pong_store)
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page_errors = []
    page.on("pageerror", lambda error: page_errors.append(str(error)))
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    screenshot = SCREENSHOTS / f"{name}.png"
    try:
        page.goto(lab.url(f"lab/workspaces/{name}/tree/{path}"))  # a workspace of its own
        page.wait_for_selector(
            '.jp-Notebook-ExecutionIndicator[data-status="idle"]', timeout=120_000
        )
        started = time.monotonic()
        _run_all(page, RUN_TIMEOUT_S)
        seconds = time.monotonic() - started
        errors = _errors(page)
        assert not errors, f"{name}: error output in the notebook:\n" + "\n".join(errors)
        prompts = _prompts(page)
        assert all(p.strip("[]: ").isdigit() for p in prompts), f"cells not run: {prompts}"

        expected = EXPECTED_FIGURES[name]
        with contextlib.suppress(Exception):  # counted and reported below
            page.wait_for_function(
                f"() => document.querySelectorAll('.jp-Notebook .js-plotly-plot').length >= "
                f"{expected} && Array.from(document.querySelectorAll('.jp-Notebook "
                ".js-plotly-plot')).every(gd => gd._fullLayout)",
                timeout=60_000,
            )
        figures = _figure_data(_figures(page))
        assert len(figures) >= expected, f"{name}: {len(figures)} figures drawn, not {expected}"
        undrawn = page.locator(f".jp-Notebook .jp-OutputArea-output[data-mime-type='{PLOTLY}']")
        undrawn = undrawn.filter(has_not=page.locator(".js-plotly-plot")).count()
        assert not undrawn, f"{name}: {undrawn} plotly outputs are not drawn"
        empty = [i for i, data in enumerate(figures) if data == '{"traces":[],"notes":[]}']
        assert not empty, f"{name}: figures {empty} show nothing and say nothing"
        if name in INTERACTIVE:  # explorers
            assert page.locator(".jp-Notebook .jupyter-widgets").count() > 0, "no widget drawn"
        if name in ("pretrain", "finetune"):
            # Live curves are a FigureWidget while training, replaced by the static figure when
            # the cell ends (so the notebook file keeps them); the line above them says where
            # training ended, never a progress bar stuck at 0%.
            # textContent: cells scrolled out of view are not rendered, and have no innerText
            outputs = page.locator(".jp-Notebook .jp-OutputArea-output").all_text_contents()
            text = "\n".join(outputs)
            assert re.search(r": finished (earlier )?at step [\d,]+", text), f"{name}: no end line"
            assert "0%|" not in text, f"{name}: a stale progress bar"
        if name in RUN_HEADERS:
            _check_run_header(page, name)
        if name in INTERACTIONS:
            INTERACTIONS[name](page)
            assert not _errors(page), "\n".join(_errors(page))
        assert not page_errors, f"{name}: errors in the page: {page_errors}"
        print(f"{name}: ran in {seconds:.0f} s, {len(figures)} figures")
    finally:
        with contextlib.suppress(Exception):
            _screenshot(page, screenshot)
            print(f"screenshot: {screenshot}")
        context.close()
        lab.shut_down_kernels()


@pytest.fixture(scope="session")
def demo_report(tmp_path_factory):
    """``outputs/demo/index.html`` after ``make demo`` with this commit's code; without one (or
    with pages an older commit made), the demo pipeline with the smoke sets into a tmp folder
    (its Random store goes to outputs/smoke/data, as with ``sgi-lab demo --smoke``)."""
    from sgi_lab.base.files import provenance
    from sgi_lab.runs.status import read_status

    index = ROOT / "outputs" / "demo" / "index.html"
    commit = provenance()["commit"]
    stages = [read_status(p.parent) or {} for p in index.parent.glob("*/status.json")]
    made_by = {(s.get("provenance") or [{}])[-1].get("commit") for s in stages}
    if index.exists() and stages and made_by == {commit}:
        return index
    from sgi_lab.launch.demo import run_pipeline

    saved = os.environ.get("PLOTLY_RENDERER")
    try:
        stages, report = run_pipeline(tmp_path_factory.mktemp("demo"), smoke=True, progress=False)
    finally:  # run_pipeline sets it for its kernels
        if saved is None:
            os.environ.pop("PLOTLY_RENDERER", None)
        else:
            os.environ["PLOTLY_RENDERER"] = saved
    failed = [s.notebook for s in stages if s.state != "finished"]
    assert not failed, f"demo stages failed: {failed}"
    return report


def test_demo_report_and_its_pages_render_offline(demo_report, chromium):
    """Every page the report links draws its figures with the network off: plotly.js is in
    the page (executed notebooks) or beside it (figures/plotly.min.js), never on a CDN."""
    context = chromium.new_context(offline=True)
    remote = []
    page = context.new_page()
    page.on("request", lambda r: remote.append(r.url) if not r.url.startswith("file:") else None)
    page_errors = []
    page.on("pageerror", lambda error: page_errors.append(str(error)))
    try:
        page.goto(demo_report.as_uri())
        links = page.locator("a").evaluate_all("links => links.map(a => a.href)")
        pages = [link for link in links if link.endswith(".html")]
        assert pages, "the report links no pages"
        missing = [link for link in links if not Path(link.removeprefix("file://")).exists()]
        assert not missing, f"broken links: {missing}"
        drawn = {}
        for link in pages:
            page.goto(link)
            figures = page.locator(".plotly-graph-div")
            with contextlib.suppress(Exception):  # counted and reported below
                page.wait_for_function(
                    "() => Array.from(document.querySelectorAll('.plotly-graph-div'))"
                    ".every(gd => gd._fullLayout && gd.classList.contains('js-plotly-plot'))",
                    timeout=30_000,
                )
            total = figures.count()
            undrawn = figures.evaluate_all("gds => gds.filter(gd => !gd._fullLayout).length")
            name = link.removeprefix(demo_report.parent.as_uri() + "/")
            assert total, f"{name}: no plotly figure"
            assert not undrawn, f"{name}: {undrawn} of {total} figures not drawn"
            drawn[name] = total
        print(f"{len(pages)} pages of {demo_report}, figures drawn offline: {drawn}")
        print(f"requests that failed offline (not figures): {sorted(set(remote))}")
        # fonts or MathJax a page asks the internet for are not figures; plotly.js must not be
        assert not [url for url in remote if "plotly" in url], remote
        assert not page_errors, f"errors in the pages: {page_errors}"
    finally:
        context.close()


def test_demo_outputs_are_of_sane_size(demo_report):
    """plotly.js once per page, no page over 10 MB, the whole demo folder under 300 MB
    (checkpoints pruned when a stage finishes: model.pt is what later stages use)."""
    root = demo_report.parent
    sizes = {}
    for path in sorted(root.rglob("*")):
        if path.suffix in (".html", ".ipynb"):
            text = path.read_text(errors="replace")
            assert text.count("* plotly.js v") <= 1, f"{path}: plotly.js more than once"
            sizes[str(path.relative_to(root))] = path.stat().st_size
    big = {
        name: size for name, size in sizes.items() if name.endswith(".html") and size > 10 * 2**20
    }
    assert not big, f"pages over 10 MB: {big}"
    assert not list(root.rglob("checkpoints/ckpt_*.pt")), "a finished demo keeps no checkpoints"
    total = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    print(f"{root}: {total / 2**20:.0f} MB; pages and notebooks (MB): "
          f"{ {k: round(v / 2**20, 1) for k, v in sizes.items()} }")  # fmt: skip
    assert total < 300 * 2**20, f"{root} weighs {total / 2**20:.0f} MB"
