"""``make demo``: the whole pipeline on the embedded default, every notebook executed, one report.

Pong, a small Random dataset, Nature-CNN SGI pretraining, a short Rainbow+SPR finetune from it, its
evaluation, and every notebook executed into ``outputs/demo/<notebook>/`` (executed notebook,
HTML copy, figures, results), then ``outputs/demo/index.html`` linking them all. Each stage's
parameters are ``params/notebooks/demo_<notebook>.yaml`` (its timings: README.md, "What the demo
does"). Re-running skips the stages already finished (``--fresh`` starts over).
"""

from __future__ import annotations

import argparse
import contextlib
import html
import json
import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from sgi_lab.launch.notebooks import (
    NotebookRunError,
    RunExistsError,
    find_project_root,
    read_param_file,
    run_notebook,
)
from sgi_lab.runs import RunDir, atomic_write_text, provenance, read_jsonl

__all__ = [
    "STAGES",
    "Stage",
    "StepProgress",
    "main",
    "notebook_html",
    "estimate",
    "run_pipeline",
    "write_report",
]

DEMO_DIR = Path("outputs/demo")
TRAINING = ("pretrain", "finetune")  # stages whose progress bar counts training steps
DATA = DEMO_DIR / "data" / "pong_random"
BUDGET_MINUTES = 15


@dataclass
class Stage:
    """One notebook of the pipeline.

    Attributes:
        notebook: the notebook's name.
        title: what the stage does, as the report says it.
        minutes: rough minutes on a 2-core CPU (printed up front).
        state: finished, failed, skipped (finished earlier) or pending.
        seconds: how long it ran this time.
        error: why it failed.
    """

    notebook: str
    title: str
    minutes: float
    state: str = "pending"
    seconds: float = 0.0
    error: str | None = None
    results: dict[str, Any] = field(default_factory=dict)


STAGES: tuple[tuple[str, str, float], ...] = (
    ("datasets", "the Random Pong dataset, beside a second one collected on the fly", 0.5),
    ("pretrain", "SGI pretraining (Nature CNN, S + G + I) with live loss curves", 1.0),
    ("representations", "latents of the pretrained encoder beside a random one (UMAP)", 0.5),
    ("goal_rewards", "goal rewards and goal-conditioned Q values along a trajectory", 0.25),
    ("finetune", "Rainbow + SPR finetuning from the pretrained encoder, then evaluation", 2.0),
    ("ablations", "the run's aggregate HNS beside the paper's rows", 0.25),
)


def _params_file(root: Path, notebook: str, smoke: bool) -> Path:
    name = f"{notebook}_smoke.yaml" if smoke else f"demo_{notebook}.yaml"
    return root / "params" / "notebooks" / name


def notebook_html(executed: Path) -> Path | None:
    """Convert an executed notebook to a self-contained HTML page beside it (None on failure)."""
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
    atomic_write_text(target, body)
    return target


class StepProgress:
    """A tqdm bar of a training stage's steps, read from its run folder's metrics.jsonl every
    ``interval`` seconds on a background thread (papermill's own bar counts cells only)."""

    def __init__(self, folder: Path, total: int, desc: str, interval: float = 2.0) -> None:
        self.metrics = folder / "metrics.jsonl"
        self.total, self.desc, self.interval = int(total), desc, interval
        self._stop = threading.Event()

    def __enter__(self) -> StepProgress:
        self.bar = tqdm(total=self.total, desc=self.desc, unit="step", dynamic_ncols=True)
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            self._update()

    def _update(self) -> None:
        rows = read_jsonl(self.metrics)
        step = max((int(r.get("step", 0)) for r in rows), default=0)
        self.bar.update(max(0, min(step, self.total) - self.bar.n))
        last = rows[-1] if rows else {}
        if step >= self.total:
            note = "training done, evaluating and plotting"
        elif not rows:
            note = "starting: kernel, data, first steps"
        elif last.get("charts/updates"):
            # once learning starts a step costs an update too: say so, the step rate drops
            note = f"{int(last['charts/updates'])} updates"
            if last.get("charts/ups"):
                note += f" at {last['charts/ups']:.1f}/s"
        else:
            note = ""
        self.bar.set_postfix_str(note, refresh=False)
        self.bar.refresh()  # the elapsed time moves even while no step was logged

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self._update()
        self.bar.close()


def _timings_file() -> Path:
    """This machine's measured stage times (beside the CPU settings cache, per user)."""
    from sgi_lab.nets.cpu_settings import cache_file

    return cache_file().parent / "demo_timings.json"


def _measured_seconds(out_root: Path) -> dict[str, float]:
    """Each stage's seconds as this machine last measured them: the stage's finished run
    under ``out_root``, else the demo's last run anywhere on this machine (none: not yet)."""
    try:
        measured = json.loads(_timings_file().read_text())
    except (OSError, ValueError):
        measured = {}
    for name, _, _ in STAGES:
        status = (
            RunDir(out_root / name, create=False).status() if (out_root / name).exists() else {}
        )
        if status.get("state") == "finished" and status.get("duration_s"):
            measured[name] = float(status["duration_s"])
    return {k: float(v) for k, v in measured.items() if k in {n for n, _, _ in STAGES}}


def _record_seconds(stages: list[Stage]) -> None:
    measured = {s.notebook: round(s.seconds, 1) for s in stages if s.state == "finished"}
    if not measured:
        return
    path = _timings_file()
    with contextlib.suppress(OSError, ValueError):
        measured = {**json.loads(path.read_text()), **measured}
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(measured, indent=1))


def estimate(out_root: str | os.PathLike, smoke: bool = False) -> str:
    """The demo's expected duration, from this machine's own measured stage times where it has
    them (the reference 2-core times fill the rest), with a warning when the CPU is busy."""
    measured = {} if smoke else _measured_seconds(Path(out_root))
    seconds = sum(measured.get(name, minutes * 60) for name, _, minutes in STAGES)
    if len(measured) == len(STAGES):
        text = f"about {seconds / 60:.1f} minutes, as this machine measured its last demo run"
    elif measured:
        text = (
            f"about {seconds / 60:.1f} minutes ({len(measured)} of {len(STAGES)} stages as "
            "measured here, the rest as on an idle 2-core CPU)"
        )
    else:
        text = (
            f"about {seconds / 60:.1f} minutes on an idle 2-core CPU (this machine's speed is "
            "measured by this run and used next time)"
        )
    cores = os.cpu_count() or 1
    with contextlib.suppress(OSError, AttributeError):
        load = os.getloadavg()[0]
        if load > 0.5 * cores:
            text += f"; the CPU is busy (load {load:.1f} on {cores} cores), expect longer"
    return text


def _training_steps(params_file: Path) -> int | None:
    """``config.steps`` of a stage's params file (inline config or its params_file's)."""
    params = read_param_file(params_file)
    config = params.get("config") or {}
    if not config and params.get("params_file"):
        config = read_param_file(params["params_file"]).get("config", {})
    steps = (params.get("overrides") or {}).get("steps", config.get("steps"))
    return None if steps is None else int(steps)


def _result_lines(results: dict[str, Any]) -> list[str]:
    keep = []
    for key, value in results.items():
        if isinstance(value, (int, float, str)) and key not in ("run folder", "model"):
            text = f"{value:.4g}" if isinstance(value, float) else str(value)
            keep.append(f"{key}: {text}")
    return keep[:8]


def write_report(out_root: str | os.PathLike, stages: list[Stage], seconds: float) -> Path:
    """``out_root/index.html``: one row per stage with its state, time, main results and links
    to the executed notebook (HTML and .ipynb) and its figures."""
    out_root = Path(out_root)
    rows = []
    for stage in stages:
        folder = out_root / stage.notebook
        links = []
        page = folder / f"{stage.notebook}.html"
        if page.exists():
            links.append(f'<a href="{stage.notebook}/{page.name}">notebook</a>')
        if (folder / f"{stage.notebook}.ipynb").exists():
            links.append(f'<a href="{stage.notebook}/{stage.notebook}.ipynb">.ipynb</a>')
        figures = sorted((folder / "figures").glob("*.html")) if folder.exists() else []
        links += [f'<a href="{stage.notebook}/figures/{f.name}">{f.stem}</a>' for f in figures]
        results = "<br>".join(html.escape(line) for line in _result_lines(stage.results))
        error = f"<br><code>{html.escape(stage.error)}</code>" if stage.error else ""
        rows.append(
            f"<tr><td><b>{stage.notebook}</b><br>{html.escape(stage.title)}</td>"
            f'<td class="{stage.state}">{stage.state}{error}</td>'
            f"<td>{stage.seconds:.0f} s{' (earlier run)' if stage.state == 'skipped' else ''}"
            f"</td><td>{results}</td><td>{' · '.join(links)}</td></tr>"
        )
    skipped_note = (
        ", skipped stages counted as they took when they ran"
        if any(s.state == "skipped" for s in stages)
        else ""
    )
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>sgi-lab demo</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; max-width: 1200px; }}
table {{ border-collapse: collapse; width: 100%; }}
td, th {{ border: 1px solid #ddd; padding: 0.5em; vertical-align: top; text-align: left; }}
.finished, .skipped {{ color: #2a7a2a; }} .failed {{ color: #b00020; }}
</style></head><body>
<h1>sgi-lab demo: SGI on Pong, end to end</h1>
<p>Collect a Random dataset &rarr; pretrain (SPR + goal RL + inverse dynamics) &rarr; finetune
with Rainbow + SPR &rarr; evaluate &rarr; compare with the paper. Total time of the stages:
{sum(s.seconds for s in stages) / 60:.1f} min{skipped_note} (this invocation {seconds / 60:.1f} min). Each notebook can be opened in JupyterLab (<code>make lab</code>) and run
again with other parameters.</p>
<table><tr><th>stage</th><th>state</th><th>time</th><th>results</th><th>pages</th></tr>
{chr(10).join(rows)}
</table></body></html>
"""
    path = out_root / "index.html"
    atomic_write_text(path, page)
    return path


def _older_code(folder: Path) -> str:
    """``", by commit X (this code is Y)"`` when another commit made the run, else ``""``."""
    entries = RunDir(folder).status().get("provenance") or [{}]
    then, now = entries[-1].get("commit"), provenance()["commit"]
    if now is None or then == now:
        return ""
    made = f"commit {then[:10]}" if then else "code older than this one"
    return f", by {made} (this code is {now[:10]})"


def run_pipeline(
    out_root: str | os.PathLike = DEMO_DIR,
    fresh: bool = False,
    smoke: bool = False,
    progress: bool = True,
) -> tuple[list[Stage], Path]:
    """Run every stage (skipping finished ones) and write the report.

    Args:
        out_root: where the stages' run folders and index.html go.
        fresh: delete ``out_root``'s run folders first (the collected data is kept).
        smoke: use the notebooks' smoke sets instead of the demo sets (a quick check).
        progress: papermill's per-cell progress bar for each stage.

    Returns:
        The stages, with their states, and the report's path.
    """
    root = find_project_root() or Path.cwd()
    out_root = Path(out_root)
    if fresh:
        for name, _, _ in STAGES:
            shutil.rmtree(out_root / name, ignore_errors=True)
    # Embed plotly.js in the executed notebooks so their HTML copies work offline.
    os.environ.setdefault("PLOTLY_RENDERER", "plotly_mimetype+notebook")
    stages = [Stage(*spec) for spec in STAGES]
    measured = {} if smoke else _measured_seconds(out_root)
    started = time.perf_counter()
    for i, stage in enumerate(stages, start=1):
        params_file = _params_file(root, stage.notebook, smoke)
        expected = measured.get(stage.notebook, stage.minutes * 60) / 60
        print(f"\n[{i}/{len(stages)}] {stage.notebook}: {stage.title} (~{expected:.1f} min)")
        t0 = time.perf_counter()
        steps = _training_steps(params_file) if stage.notebook in TRAINING else None
        watch = (
            StepProgress(out_root / stage.notebook, steps, stage.notebook)
            if progress and steps and not (out_root / stage.notebook / "results.json").exists()
            else contextlib.nullcontext()
        )
        try:
            with watch:
                folder = run_notebook(
                    stage.notebook,
                    params_file,
                    _stage_parameters(stage.notebook, out_root, params_file),
                    out_root=out_root,
                    name=stage.notebook,
                    progress=progress and steps is None,
                    # a finished stage is skipped, never resumed: model.pt is all it needs
                    keep_checkpoints=0,
                )
            stage.state = "finished"
        except RunExistsError:
            folder = out_root / stage.notebook
            stage.state = "skipped"
            print(f"    finished in an earlier run{_older_code(folder)} (use --fresh to redo it)")
        except NotebookRunError as exc:
            folder = exc.run_dir
            stage.state, stage.error = "failed", str(exc)
            print(f"    FAILED: {exc}", file=sys.stderr)
        stage.seconds = time.perf_counter() - t0
        status = RunDir(folder).status()
        if stage.state == "skipped":  # the time it took when it ran, not 0
            stage.seconds = float(status.get("duration_s", 0.0))
        stage.results = status.get("results", {})
        executed = folder / f"{stage.notebook}.ipynb"
        if executed.exists() and stage.state != "skipped":
            notebook_html(executed)
        if stage.state == "failed" and stage.notebook in ("pretrain", "finetune"):
            print("    later stages need this one: stopping", file=sys.stderr)
            break
    if not smoke:
        _record_seconds(stages)
    report = write_report(out_root, stages, time.perf_counter() - started)
    return stages, report


def _stage_parameters(notebook: str, out_root: Path, params_file: Path) -> dict[str, Any]:
    """Point the stages at each other inside ``out_root`` (the params files name the default
    layout, ``outputs/demo``, which a test's tmp folder replaces)."""
    params = read_param_file(params_file)
    out: dict[str, Any] = {}
    if "pretrained" in params and notebook != "pretrain":
        out["pretrained"] = str(out_root / "pretrain")
    if notebook == "representations":
        out["diversity_runs"] = [str(out_root / "pretrain")]
    if notebook == "ablations":
        out["runs_root"] = str(out_root)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sgi-lab demo", description=__doc__)
    parser.add_argument("--out", default=str(DEMO_DIR), help="output folder (default outputs/demo)")
    parser.add_argument("--fresh", action="store_true", help="redo every stage")
    parser.add_argument("--smoke", action="store_true", help="the smoke sets: a 2-minute check")
    args = parser.parse_args(argv)
    print(
        "sgi-lab demo: the whole SGI pipeline on Pong, on this machine's CPU.\n"
        "  collect a Random dataset -> pretrain -> finetune -> evaluate -> report, "
        f"{estimate(args.out, args.smoke)} (budget {BUDGET_MINUTES}).\n"
        f"  Everything goes to {args.out}/; finished stages are skipped when run again."
    )
    stages, report = run_pipeline(args.out, fresh=args.fresh, smoke=args.smoke)
    print(f"\nreport: {report}")
    for stage in stages:
        print(f"  {stage.notebook:<16} {stage.state:<9} {stage.seconds:6.0f} s")
    print(json.dumps({s.notebook: s.state for s in stages}))
    return 0 if all(s.state in ("finished", "skipped") for s in stages) else 1


if __name__ == "__main__":
    sys.exit(main())
