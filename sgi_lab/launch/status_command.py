"""``sgi-lab status [FOLDER]``: how far every run under a folder has got.

One line per run folder (any folder with a ``status.json``: pretraining, finetuning, notebook
runs, an experiment's tasks): its stage, state, step of its total, rate, time left, when it last
reported, and its last metrics. What it says is checked, not copied: a run whose status says
``running`` while no process holds its folder's lock (killed, even by kill -9), says ``finished``
without its final model, or whose status.json is torn or empty beside checkpoints is listed as
``interrupted``, and one that stopped cleanly at a checkpoint (a time limit, SIGTERM) as
``stopped`` rather than failed; a live run silent for a long time is marked as possibly stuck.
Symlinked folders are followed (each real folder once). One unreadable run is named and
skipped. Misspelled folders get a "did you mean". Each experiment folder found (the folder
itself, or one or two levels below it: ``outputs/experiments/NAME``) gets a line of its own
(`experiment_lines`): its tasks by state, from its driver's record, and whether that driver is
alive; a record with tasks running and no driver is one that was killed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from sgi_lab.base.files import lock_holder, read_mapping
from sgi_lab.base.paths import did_you_mean
from sgi_lab.runs.checkpoints import CHECKPOINT_RE, checkpoint_files
from sgi_lab.runs.progress import eta_seconds, last_rows, logged_rate
from sgi_lab.runs.status import has_final_model, read_status, restored_files, run_folders

__all__ = [
    "add_status_parser",
    "experiment_lines",
    "find_run_folders",
    "main_status",
    "run_progress",
    "status_table",
]

STALE_AFTER_S = 15 * 60
"""A running run silent for longer than this is shown as possibly dead."""
STOPPED_MESSAGES = (
    "stopped at step ",
    "stopped during its evaluation",
    "stopped: ",
    "interrupted (",
)
"""How `sgi_lab.runs.stopping.failure_reason` begins the message of a run stopped cleanly at a
checkpoint (RunStopped, a full disk, Ctrl-C): resumable, not an error."""
SHOWN_METRICS = (
    "losses/total",
    "episode/return",
    "charts/inverse_accuracy",
    "charts/cosine_similarity",
    "charts/q_mean",
)
"""The last metrics a status line shows, when the run logs them."""


def find_run_folders(root: str | os.PathLike) -> list[Path]:
    """Run folders under ``root`` (``root`` itself when it is one), in path order: folders with a
    ``status.json`` of ours, not inside a run's ``checkpoints/``."""
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(did_you_mean(root))
    return run_folders(root, interrupted=True)


EXPERIMENT_RECORD = "experiment.json"
"""An experiment driver's record of its tasks (`sgi_lab.experiments.state.STATE_FILE`; not
imported: ``status`` starts without the experiments package)."""
TASK_STATES = ("done", "running", "pending", "failed", "blocked", "unneeded")
"""The order `experiment_lines` counts an experiment's tasks in (`sgi_lab.experiments.
scheduler.STATES`; others after them)."""


def experiment_lines(root: str | os.PathLike) -> list[str]:
    """One line per experiment folder at ``root`` or one or two levels below it: its name, its
    tasks by state (its driver's ``experiment.json``) and whether its driver is alive (the
    folder's lock). A record with tasks running while no process holds the lock is a driver
    that was killed (a stopped one puts its tasks back to pending): re-running its command
    resumes it."""
    root, lines = Path(root), []
    for pattern in (EXPERIMENT_RECORD, f"*/{EXPERIMENT_RECORD}", f"*/*/{EXPERIMENT_RECORD}"):
        for record in sorted(root.glob(pattern)):
            state = read_mapping(record)
            tasks = state.get("tasks")
            if not isinstance(tasks, dict) or not tasks:  # a report's copy keeps no tasks
                continue
            counts = Counter(
                str(t.get("state", "pending")) for t in tasks.values() if isinstance(t, dict)
            )
            order = sorted(counts, key=lambda k: (TASK_STATES + (k,)).index(k))
            by_state = ", ".join(f"{counts[k]} {k}" for k in order)
            holder = lock_holder(record.parent)
            if holder:
                driver = f"its driver running (PID {holder})"
            elif counts.get("running"):
                driver = "no driver holds it (killed?): re-run its command to resume"
            else:
                driver = "no driver running"
            name = state.get("name") or record.parent.name
            lines.append(f"experiment {name}: {len(tasks)} tasks: {by_state}; {driver}")
    return lines


def _timestamp(text: Any) -> float | None:
    try:
        return time.mktime(time.strptime(str(text), "%Y-%m-%dT%H:%M:%S"))
    except (TypeError, ValueError):
        return None


def _count(value: Any) -> int | None:
    """A step or total as recorded, when it is a whole number (a bool, a dict, a string: None)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _true_state(folder: Path, status: dict[str, Any] | None) -> tuple[str, str | None]:
    """The state a run is really in, and why it differs from its status.json (None: as said).

    - status missing or torn (the folder was listed for its checkpoints): ``interrupted``;
    - ``finished`` without the final ``model.pt`` of a training run: ``interrupted``, or
      ``restored`` when its results came back from an experiment archive without it;
    - ``running`` while no process holds the folder's lock (killed, even by kill -9, since the
      kernel frees the lock with its process): ``interrupted``;
    - ``failed`` because it was stopped cleanly at a checkpoint (a time limit, SIGTERM, Ctrl-C,
      a full disk: `sgi_lab.runs.stopping.failure_reason`), not by an error: ``stopped``.
    """
    if status is None:
        return "interrupted", "status.json missing or torn; re-run its command to resume"
    state = str(status.get("state", "unknown"))
    if state == "finished" and not has_final_model(folder, status):
        if restored_files(folder):
            return "restored", None  # its results, from an experiment archive; no model.pt
        return "interrupted", "status says finished but model.pt is missing"
    # Only the run lifecycle (a status with a kind) holds the lock while it runs.
    if state == "running" and status.get("kind") and lock_holder(folder) is None:
        return "interrupted", "its process is gone (the folder is not locked); re-run to resume"
    if state == "failed" and str(status.get("message", "")).startswith(STOPPED_MESSAGES):
        return "stopped", None  # its message says why and how to resume
    return state, None


def run_progress(folder: str | os.PathLike, now: float | None = None) -> dict[str, Any]:
    """What `sgi-lab status` says of one run folder.

    Returns:
        ``run`` (the folder), ``stage`` (pretrain, finetune, a notebook's name, ...), ``state``
        (`_true_state`: ``interrupted`` for a run that says running but whose process is gone,
        says finished without its model, or has a torn status), ``step``, ``steps`` (the
        config's total, None when it has none), ``rate`` (steps/s, from the run's logged
        throughput), ``eta_s`` (seconds left at that rate, running runs only), ``age_s``
        (seconds since the status or the metrics were last written), ``stale`` (running but
        silent for over `STALE_AFTER_S`), ``alive`` (running, and its process holds the
        folder's lock), ``metrics`` (``{key: value}`` of the last logged values of
        `SHOWN_METRICS`) and ``error`` (a failed run's message, or why the state differs from
        its status.json).
    """
    folder = Path(folder)
    now = time.time() if now is None else now
    recorded = read_status(folder)
    status = recorded or {}
    config = read_mapping(folder / "config.yaml")
    rows = last_rows(folder / "metrics.jsonl")
    state, why = _true_state(folder, recorded)
    step = _count(status.get("step"))
    logged = _count(rows[-1].get("step")) if rows else None
    if logged is not None and (step is None or (state == "running" and logged > step)):
        # status.json moves at checkpoints; a running run logs its steps in between
        step = logged
    if step is None and recorded is None:
        newest = checkpoint_files(folder)
        step = int(CHECKPOINT_RE.search(newest[-1].name).group(1)) if newest else None
    steps = _count(config.get("steps"))
    rate = logged_rate(rows, config)
    age = max(0.0, now - max(_updated(folder, status), _mtime(folder / "metrics.jsonl")))
    eta = eta_seconds(step, steps, rate) if state == "running" else None
    metrics: dict[str, Any] = {}
    for row in reversed(rows):
        for key in SHOWN_METRICS:
            if key not in metrics and isinstance(row.get(key), (int, float)):
                metrics[key] = row[key]
    stage = status.get("kind") or status.get("notebook") or folder.name.split("__")[0]
    message = status.get("message") if state in ("failed", "stopped") else None
    return {
        "run": str(folder),
        "stage": str(stage),
        "state": state,
        "step": step,
        "steps": steps,
        "rate": rate,
        "eta_s": eta,
        "age_s": age,
        "stale": state == "running" and age > STALE_AFTER_S,
        # A lifecycle run that says running and got here holds its lock: alive, however silent.
        "alive": state == "running" and bool(status.get("kind")),
        "metrics": {k: metrics[k] for k in SHOWN_METRICS if k in metrics},
        "evaluation": _evaluation(folder) if state in ("finished", "restored") else None,
        "error": status.get("error") or why or message,
    }


def _evaluation(folder: Path) -> dict[str, Any] | None:
    """A finished finetuning run's score from its eval.json: ``mean``, ``episodes``, the
    normalised score and its name (HNS, or the MinAtar score); None without a readable one."""
    try:
        evaluation = json.loads((folder / "eval.json").read_text())
        mean = float(evaluation["mean"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    normalized = evaluation.get("normalized_score", evaluation.get("hns"))
    # lazy: the metrics package loads scipy (seconds), which `sgi-lab status --help` must not
    from sgi_lab.metrics.protocol import comparability_note, protocol_of

    protocol = protocol_of(evaluation)
    return {
        "mean": mean,
        "episodes": evaluation.get("episodes"),
        "normalized": normalized if isinstance(normalized, (int, float)) else None,
        "normalization": str(evaluation.get("normalization") or "HNS"),
        # an HNS from fewer episodes or shorter games than the paper's is no paper figure
        "caveat": None
        if protocol is not None and protocol.comparable
        else comparability_note(protocol),
    }


def _evaluation_text(evaluation: dict[str, Any]) -> str:
    """``"eval 12.5 over 100 episodes, HNS 0.412"``."""
    episodes = evaluation["episodes"]
    text = f"eval {evaluation['mean']:.4g}" + (f" over {episodes} episodes" if episodes else "")
    if evaluation["normalized"] is not None:
        text += f", {evaluation['normalization']} {evaluation['normalized']:.3f}"
        if evaluation["normalization"] == "HNS" and evaluation.get("caveat"):
            text += f" ({evaluation['caveat']})"
    return text


def _updated(folder: Path, status: dict[str, Any]) -> float:
    """When the status was last written: its ``updated`` field, else its file's (or the
    folder's) modification time."""
    stamp = _timestamp(status.get("updated"))
    if stamp is not None:
        return stamp
    for path in (folder / "status.json", folder):
        try:
            return path.stat().st_mtime
        except OSError:
            continue
    return time.time()


def _mtime(path: Path) -> float:
    """When ``path`` was last written (0 without it): a run that logs is not silent."""
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def status_table(progress: list[dict[str, Any]], root: str | os.PathLike | None = None) -> str:
    """`run_progress` rows as an aligned text table (run folders relative to ``root``)."""
    lines = [("run", "stage", "state", "step", "rate", "left", "updated", "last metrics")]
    for p in progress:
        run = p["run"]
        if root is not None:
            try:
                run = str(Path(run).relative_to(root)) or "."
            except ValueError:
                pass
        step = "-" if p["step"] is None else f"{p['step']:,}"
        if p["steps"]:
            done = 100 * (p["step"] or 0) / p["steps"]
            step += f"/{p['steps']:,} ({done:.0f}%)"
        silent = " (silent: stuck?)" if p.get("alive") else " (silent: killed?)"
        state = p["state"] + (silent if p["stale"] else "")
        short = {k.split("/", 1)[-1]: v for k, v in p["metrics"].items()}
        metrics = ", ".join(f"{k} {v:.4g}" for k, v in short.items())
        if p.get("evaluation"):
            metrics = "; ".join(
                [_evaluation_text(p["evaluation"]), *([metrics] if metrics else [])]
            )
        if p["error"]:
            lines_of = str(p["error"]).splitlines() or [""]
            metrics = f"{'error' if p['state'] == 'failed' else 'note'}: {lines_of[0][:80]}"
        rate = f"{p['rate']:.3g}/s" if p["rate"] else "-"
        lines.append(
            (
                run,
                p["stage"],
                state,
                step,
                rate,
                _duration(p["eta_s"]),
                _duration(p["age_s"]) + " ago",
                metrics,
            )
        )
    widths = [max(len(row[i]) for row in lines) for i in range(len(lines[0]) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths)) + "  " + row[-1]
        for row in lines
    ).rstrip()


def main_status(args: argparse.Namespace) -> int:
    root = Path(args.folder)
    folders = find_run_folders(root)
    if not folders:
        print(f"no run folders (with a status.json) under {root}")
        for line in experiment_lines(root):  # an experiment whose first task has not begun
            print(line)
        return 0
    progress = []
    for folder in folders:
        try:
            progress.append(run_progress(folder))
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            # One unreadable run must not hide the others: name it and go on.
            print(f"sgi-lab status: skipped {folder}: {type(exc).__name__}: {exc}", file=sys.stderr)
    if args.state:
        progress = [p for p in progress if p["state"] == args.state]
    print(status_table(progress, root))
    running = [p for p in progress if p["state"] == "running" and not p["stale"]]
    stale = [p for p in progress if p["stale"]]
    print(f"\n{len(progress)} run(s); {len(running)} running", end="")
    print(
        f"; {len(stale)} silent for over {STALE_AFTER_S // 60} min (see its log; a killed one "
        "resumes when its command is re-run)"
        if stale
        else ""
    )
    for line in experiment_lines(root):
        print(line)
    return 0


def add_status_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "status",
        help="how far the runs under a folder have got: stage, step, rate, time left, metrics",
    )
    p.add_argument(
        "folder",
        nargs="?",
        default="outputs",
        help="a run folder, or a folder of runs searched recursively (default: outputs)",
    )
    p.add_argument(
        "--state",
        choices=["running", "finished", "failed", "stopped", "interrupted", "restored"],
        default=None,
        help="only runs in this state",
    )
    p.set_defaults(handler=main_status)
    return p
