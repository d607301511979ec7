"""``make demo``: the whole pipeline on the embedded default, every notebook executed, one report.

Pong, a small Random dataset, Nature-CNN SGI pretraining, a short Rainbow+SPR finetune from it, its
evaluation, and every notebook executed into ``outputs/demo/<notebook>/`` (executed notebook,
HTML copy, figures, results), then the MinAtar stage (`sgi_lab.launch.demo_minatar`: two
SGI-pretrained agents and a from-scratch one finetuning on MinAtar Breakout, into
``outputs/demo/minatar/``), then ``outputs/demo/index.html`` linking them all. Each notebook
stage's parameters are ``params/notebooks/demo_<notebook>.yaml`` (its timings: README.md, "What
the demo does"). Re-running skips the stages already finished and resumes an interrupted MinAtar
stage (``--fresh`` starts over; ``--skip minatar`` leaves a stage out).
"""

from __future__ import annotations

import argparse
import contextlib
import html
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from sgi_lab.base.files import atomic_write_text, provenance, record_provenance
from sgi_lab.base.threads import (
    busy_machine_threads,
    current_load,
    thread_environment,
    user_threads,
)
from sgi_lab.launch import demo_minatar
from sgi_lab.launch.demo_notes import MINATAR, STAGE_NOTES, stage_summary
from sgi_lab.launch.notebook_page import notebook_html
from sgi_lab.launch.notebook_runner import (
    NotebookRunError,
    RunExistsError,
    read_param_file,
    run_notebook,
)
from sgi_lab.notebook import (
    FIGURE_FORMATS_ENV,
    find_project_root,
    save_figure,
    static_export_problem,
)
from sgi_lab.runs.folder import RunDir
from sgi_lab.runs.progress import ProgressBar
from sgi_lab.runtime.cpu_settings import cache_file
from sgi_lab.viz import learning
from sgi_lab.viz.episode_curves import episode_curves_svg

__all__ = [
    "STAGES",
    "Stage",
    "STAGE_NOTES",
    "budget_note",
    "main",
    "notebook_html",
    "estimate",
    "run_pipeline",
    "run_stage",
    "stage_summary",
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


# Minutes each stage took on an idle 2-core CPU (2026-11-26, the Xeon of docs/setup.md: 8, 37,
# 19, 7, 84, 6 and 204 s): the demo's one announced time, about 6 minutes, is their sum (README.md
# and docs/setup.md say the same; a test holds them to it). Loaded machines: see `estimate`.
STAGES: tuple[tuple[str, str, float], ...] = (
    ("datasets", "the Random Pong dataset, beside a second one collected on the fly", 0.15),
    ("pretrain", "SGI pretraining (Nature CNN, S + G + I) with live loss curves", 0.6),
    ("representations", "latents of the pretrained encoder beside a random one (UMAP)", 0.3),
    ("goal_rewards", "goal rewards and goal-conditioned Q values along a trajectory", 0.1),
    ("finetune", "Rainbow + SPR finetuning from the pretrained encoder, then evaluation", 1.4),
    ("ablations", "the run's aggregate HNS beside the paper's rows", 0.1),
    (
        "minatar",
        "MinAtar Breakout: two SGI-pretrained agents and a from-scratch one finetuning side by side",
        3.4,  # three agents as one population under vmap
    ),
)


def _params_file(root: Path, notebook: str, smoke: bool) -> Path:
    name = f"{notebook}_smoke.yaml" if smoke else f"demo_{notebook}.yaml"
    return root / "params" / "notebooks" / name


def _timings_file() -> Path:
    """This machine's measured stage times (beside the CPU settings cache, per user)."""

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


def estimate(out_root: str | os.PathLike, smoke: bool = False, load: float | None = None) -> str:
    """The demo's expected duration, from this machine's own measured stage times where it has
    them (the reference 2-core times fill the rest), with a warning when the CPU is busy
    (``load``: cores kept busy by other work, as `current_load` measured it; else the 1-minute
    load average)."""
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
    if load is None:
        load = _load()
    if load is not None and load >= 0.5 * cores:
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


def budget_note(seconds: float, loads: list[float], cores: int | None = None) -> str | None:
    """Why the demo ran over its `BUDGET_MINUTES`, or None when it did not.

    Args:
        seconds: how long this invocation ran.
        loads: the 1-minute load averages sampled while it ran.
        cores: the machine's cores (default: this one's).
    """
    if seconds <= BUDGET_MINUTES * 60:
        return None
    cores = cores or os.cpu_count() or 1
    note = f"the demo took {seconds / 60:.0f} min, over its {BUDGET_MINUTES}-min budget"
    if loads:
        load = sum(loads) / len(loads)
        if load > 1.2 * cores:
            note += (
                f": the CPU was busy (mean load {load:.1f} on {cores} cores, so other "
                f"processes held about {max(0.0, 1 - cores / load):.0%} of it)"
            )
        else:
            note += (
                f" with the CPU not crowded (mean load {load:.1f} on {cores} cores): this "
                "CPU is slower than the 2-core reference; the next run's estimate uses "
                "this run's times"
            )
    return note


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def write_report(
    out_root: str | os.PathLike, stages: list[Stage], seconds: float, note: str | None = None
) -> Path:
    """``out_root/index.html``: one row per stage with its state, time, main results in words
    and a paragraph of what it measured at this size (`STAGE_NOTES`), and links to the
    executed notebook (HTML and .ipynb) and its figures; ``note`` (e.g. `budget_note`) above
    the table."""
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
        thumbs = [
            f'<a href="{stage.notebook}/figures/{f.name}" title="{html.escape(f.stem)}">'
            f'<img src="{stage.notebook}/figures/{f.stem}.png" alt="{html.escape(f.stem)}" '
            'loading="lazy"></a>'
            for f in figures
            if f.with_suffix(".png").exists()
        ]
        if thumbs:
            links.append(f'<div class="thumbs">{"".join(thumbs)}</div>')
        lines = stage_summary(stage.notebook, stage.results)
        results = "<br>".join(html.escape(line) for line in lines)
        if stage.notebook == MINATAR and folder.exists():
            curves = demo_minatar.learning_curves(folder)
            random_score = stage.results.get("random")
            results += "<br>" + episode_curves_svg(curves, random_score) if curves else ""
        if stage.notebook in STAGE_NOTES and stage.state in ("finished", "skipped"):
            results += f'<p class="note">{html.escape(STAGE_NOTES[stage.notebook])}</p>'
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
.note {{ color: #444; font-size: 0.9em; max-width: 40em; }}
.thumbs img {{ width: 160px; height: auto; border: 1px solid #ddd; margin: 2px; }}
</style></head><body>
<h1>sgi-lab demo: SGI on Pong, end to end, and on MinAtar Breakout</h1>
<p>Collect a Random dataset &rarr; pretrain (SPR + goal RL + inverse dynamics) &rarr; finetune
with Rainbow + SPR &rarr; evaluate &rarr; compare with the paper; then, on MinAtar Breakout,
pretrained and from-scratch agents finetuning side by side. Total time of the stages:
{sum(s.seconds for s in stages) / 60:.1f} min{skipped_note} (this invocation {seconds / 60:.1f} min). Each notebook can be opened in JupyterLab (<code>make lab</code>) and run
again with other parameters.</p>
{f'<p class="failed">{html.escape(note)}</p>' if note else ""}
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


def _png_thumbnails() -> bool:
    """Ask the notebooks for PNG copies of their figures (index.html's thumbnails) when static
    export works here (kaleido and a local Chromium, `static_export_problem`), unless the user
    chose the formats (`FIGURE_FORMATS_ENV`); else say why in one line."""
    if FIGURE_FORMATS_ENV in os.environ:
        return "png" in os.environ[FIGURE_FORMATS_ENV]
    problem = static_export_problem()
    if problem:
        print(f"PNG thumbnails left out: {problem}")
        return False
    os.environ[FIGURE_FORMATS_ENV] = "png"
    return True


def run_pipeline(
    out_root: str | os.PathLike = DEMO_DIR,
    fresh: bool = False,
    smoke: bool = False,
    progress: bool = True,
    skip: tuple[str, ...] | list[str] = (),
) -> tuple[list[Stage], Path]:
    """Run every stage (skipping finished ones) and write the report.

    Args:
        out_root: where the stages' run folders and index.html go.
        fresh: delete ``out_root``'s run folders first (the Pong data is kept; the MinAtar
            stage's small store, inside its folder, is collected again).
        smoke: use the notebooks' smoke sets instead of the demo sets (a quick check).
        progress: papermill's per-cell progress bar for each stage.
        skip: stages to leave out this time (state "left out"; e.g. ``("minatar",)``).

    Returns:
        The stages, with their states, and the report's path.
    """
    root = find_project_root() or Path.cwd()
    out_root = Path(out_root)
    unknown = sorted(set(skip) - {name for name, _, _ in STAGES})
    if unknown:
        raise ValueError(
            f"skip: no stage {', '.join(unknown)}; stages: {', '.join(n for n, _, _ in STAGES)}"
        )
    if fresh:
        for name, _, _ in STAGES:
            shutil.rmtree(out_root / name, ignore_errors=True)
    # Embed plotly.js in the executed notebooks so their HTML copies work offline.
    os.environ.setdefault("PLOTLY_RENDERER", "plotly_mimetype+notebook")
    asked = FIGURE_FORMATS_ENV in os.environ
    _png_thumbnails()
    stages = [Stage(*spec) for spec in STAGES]
    measured = {} if smoke else _measured_seconds(out_root)
    started = time.perf_counter()
    loads: list[float] = []
    try:
        _run_stages(stages, out_root, root, smoke, progress, skip, measured, loads)
    finally:
        if not asked:  # the process's environment as it was (a test runs the demo in-process)
            os.environ.pop(FIGURE_FORMATS_ENV, None)
    if not smoke:
        _record_seconds(stages)
    if (load := _load()) is not None:
        loads.append(load)
    seconds = time.perf_counter() - started
    note = None if smoke else budget_note(seconds, loads)
    if note:
        print(f"\nNOTE: {note}")
    report = write_report(out_root, stages, seconds, note)
    return stages, report


def _run_stages(
    stages: list[Stage],
    out_root: Path,
    root: Path,
    smoke: bool,
    progress: bool,
    skip: tuple[str, ...] | list[str],
    measured: dict[str, float],
    loads: list[float],
) -> None:
    """Each stage in turn (`run_pipeline`); a failed pretrain or finetune leaves the later
    notebook stages out, not the MinAtar one."""
    blocked = False  # a failed pretrain or finetune: the later notebooks need it, MinAtar not
    for i, stage in enumerate(stages, start=1):
        if stage.notebook in skip or (blocked and stage.notebook != MINATAR):
            stage.state = "left out"
            continue
        if (load := _load()) is not None:
            loads.append(load)
        expected = measured.get(stage.notebook, stage.minutes * 60) / 60
        print(f"\n[{i}/{len(stages)}] {stage.notebook}: {stage.title} (~{expected:.1f} min)")
        if stage.notebook == MINATAR:
            run_minatar_stage(stage, out_root, root, smoke, progress)
        else:
            run_stage(stage, _params_file(root, stage.notebook, smoke), out_root, progress)
        if stage.state == "failed" and stage.notebook in ("pretrain", "finetune"):
            print("    later notebook stages need this one: leaving them out", file=sys.stderr)
            blocked = True


def run_stage(stage: Stage, params_file: Path, out_root: Path, progress: bool) -> None:
    """Run one stage's notebook into ``out_root/<notebook>`` (a finished one is skipped) and
    set its ``state``, ``seconds``, ``results`` and ``error``; its executed notebook gets an
    HTML copy."""
    t0 = time.perf_counter()
    steps = _training_steps(params_file) if stage.notebook in TRAINING else None
    watch = (
        ProgressBar(out_root / stage.notebook, stage.notebook, steps)
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


@contextlib.contextmanager
def stage_threads() -> Iterator[None]:
    """The thread count `main` chose for a busy machine (or the user's), for a stage run in this
    process: the notebook stages' kernels read it from their environment when they start, but
    this process's torch has long started its pool, and on shared cores the MinAtar stage ran
    two threads beside a busy neighbour (112 % CPU, several times slower than one thread)."""
    threads = user_threads()
    if threads is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_minatar_stage(
    stage: Stage, out_root: Path, root: Path, smoke: bool, progress: bool
) -> None:
    """The MinAtar stage (`sgi_lab.launch.demo_minatar`) into ``out_root/minatar``, a folder
    whose ``status.json`` says finished (then skipped, as a finished notebook stage) or not
    (then run again: every finished part is reused, an interrupted one resumed)."""
    folder = out_root / MINATAR
    run = RunDir(folder)
    status = run.status()
    if status.get("state") == "finished":
        stage.state = "skipped"
        stage.seconds = float(status.get("duration_s", 0.0))
        stage.results = status.get("results", {})
        print(f"    finished in an earlier run{_older_code(folder)} (use --fresh to redo it)")
        return
    t0 = time.perf_counter()
    run.set_status("running", provenance=record_provenance(status))
    budget = demo_minatar.SMOKE_BUDGET if smoke else demo_minatar.DEMO_BUDGET
    try:
        with stage_threads():
            stage.results = demo_minatar.run_minatar(folder, budget, root, progress)
        runs = {
            label: folder / "finetune" / name for label, (name, _) in demo_minatar.AGENTS.items()
        }
        figure = learning.compare_learning_curves(
            runs, window=20, title="MinAtar Breakout: training returns"
        )
        save_figure(figure, folder, "learning_curves")
    except Exception as exc:  # the report still shows the Pong stages and why this one failed
        stage.state, stage.error = "failed", f"{type(exc).__name__}: {exc}"
        stage.seconds = time.perf_counter() - t0
        run.set_status("failed", error=stage.error, duration_s=stage.seconds)
        print(f"    FAILED: {stage.error}", file=sys.stderr)
        return
    stage.state = "finished"
    stage.seconds = time.perf_counter() - t0
    run.set_status("finished", duration_s=round(stage.seconds, 1), results=stage.results)
    print(f"    {stage.results['verdict']}")


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
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=[name for name, _, _ in STAGES],
        help="leave this stage out (repeatable), e.g. --skip minatar",
    )
    args = parser.parse_args(argv)
    load = current_load()  # the cores other work keeps busy as the demo starts
    busy = busy_machine_threads(load=load)
    if busy is not None:  # the stages' processes (and their kernels) inherit the count
        os.environ.update(thread_environment(busy[0]))
        print(f"sgi-lab demo: {busy[1]}")
    print(
        "sgi-lab demo: the whole SGI pipeline on Pong, then pretrained vs from-scratch on "
        "MinAtar Breakout, on this machine's CPU.\n"
        "  collect a Random dataset -> pretrain -> finetune -> evaluate -> report, "
        f"{estimate(args.out, args.smoke, load)} (budget {BUDGET_MINUTES}).\n"
        f"  Everything goes to {args.out}/; finished stages are skipped when run again."
    )
    stages, report = run_pipeline(args.out, fresh=args.fresh, smoke=args.smoke, skip=args.skip)
    print(f"\nreport: {report}")
    for stage in stages:
        print(f"  {stage.notebook:<16} {stage.state:<9} {stage.seconds:6.0f} s")
    print(json.dumps({s.notebook: s.state for s in stages}))
    return 0 if all(s.state in ("finished", "skipped", "left out") for s in stages) else 1


if __name__ == "__main__":
    sys.exit(main())
