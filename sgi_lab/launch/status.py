"""``sgi-lab status [FOLDER]``: how far every run under a folder has got.

One line per run folder (any folder with a ``status.json``: pretraining, finetuning, notebook
runs, an experiment's tasks): its stage, state, step of its total, rate, time left, when it last
reported, and its last metrics. A ``running`` run that has not reported for a long time is marked
as possibly dead (a killed process cannot update its status). Misspelled folders get a "did you
mean".
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path
from typing import Any

from sgi_lab.base.files import read_mapping
from sgi_lab.base.paths import did_you_mean
from sgi_lab.runs.status import read_status, run_folders

__all__ = [
    "add_status_parser",
    "find_run_folders",
    "main_status",
    "run_progress",
    "status_table",
]

STALE_AFTER_S = 15 * 60
"""A running run silent for longer than this is shown as possibly dead."""
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
    return run_folders(root)


def _timestamp(text: Any) -> float | None:
    try:
        return time.mktime(time.strptime(str(text), "%Y-%m-%dT%H:%M:%S"))
    except (TypeError, ValueError):
        return None


def _last_rows(path: Path, count: int = 20) -> list[dict[str, Any]]:
    """The last ``count`` rows of a metrics.jsonl (read from its end: runs log a lot)."""
    import json

    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            lines = fh.read().decode(errors="replace").splitlines()
    except OSError:
        return []
    rows = []
    for line in lines[-count:]:
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a torn first or last line
        if isinstance(row, dict):
            rows.append(row)
    return rows


def _rate(rows: list[dict[str, Any]], config: dict[str, Any]) -> float | None:
    """Steps per second from the run's own throughput metric (the newest row that has it)."""
    for row in reversed(rows):
        if isinstance(row.get("charts/sps"), (int, float)):
            return float(row["charts/sps"])
        samples = row.get("charts/samples_per_s")
        batch = config.get("batch_size")
        if isinstance(samples, (int, float)) and isinstance(batch, int) and batch > 0:
            return float(samples) / batch
    return None


def run_progress(folder: str | os.PathLike, now: float | None = None) -> dict[str, Any]:
    """What `sgi-lab status` says of one run folder.

    Returns:
        ``run`` (the folder), ``stage`` (pretrain, finetune, a notebook's name, ...), ``state``,
        ``step``, ``steps`` (the config's total, None when it has none), ``rate`` (steps/s, from
        the run's logged throughput), ``eta_s`` (seconds left at that rate, running runs only),
        ``age_s`` (seconds since the status was last written), ``stale`` (running but silent
        for over `STALE_AFTER_S`: killed?), ``metrics`` (``{key: value}`` of the last logged
        values of `SHOWN_METRICS`) and ``error`` (a failed run's message).
    """
    folder = Path(folder)
    now = time.time() if now is None else now
    status = read_status(folder) or {}
    config = read_mapping(folder / "config.yaml")
    rows = _last_rows(folder / "metrics.jsonl")
    state = str(status.get("state", "unknown"))
    step = status.get("step")
    if step is None and rows:
        step = rows[-1].get("step")
    steps = config.get("steps") if isinstance(config.get("steps"), int) else None
    rate = _rate(rows, config)
    updated = _timestamp(status.get("updated")) or (folder / "status.json").stat().st_mtime
    age = max(0.0, now - updated)
    eta = None
    if state == "running" and rate and steps and isinstance(step, int) and rate > 0:
        eta = max(0.0, (steps - step) / rate)
    metrics: dict[str, Any] = {}
    for row in reversed(rows):
        for key in SHOWN_METRICS:
            if key not in metrics and isinstance(row.get(key), (int, float)):
                metrics[key] = row[key]
    stage = status.get("kind") or status.get("notebook") or folder.name.split("__")[0]
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
        "metrics": {k: metrics[k] for k in SHOWN_METRICS if k in metrics},
        "error": status.get("error"),
    }


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
        state = p["state"] + (" (silent: killed?)" if p["stale"] else "")
        short = {k.split("/", 1)[-1]: v for k, v in p["metrics"].items()}
        metrics = ", ".join(f"{k} {v:.4g}" for k, v in short.items())
        if p["error"]:
            metrics = f"error: {str(p['error']).splitlines()[0][:80]}"
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
        return 0
    progress = [run_progress(f) for f in folders]
    if args.state:
        progress = [p for p in progress if p["state"] == args.state]
    print(status_table(progress, root))
    running = [p for p in progress if p["state"] == "running" and not p["stale"]]
    stale = [p for p in progress if p["stale"]]
    print(f"\n{len(progress)} run(s); {len(running)} running", end="")
    print(
        f"; {len(stale)} silent for over {STALE_AFTER_S // 60} min (killed? re-run its command to resume)"
        if stale
        else ""
    )
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
        choices=["running", "finished", "failed", "interrupted"],
        default=None,
        help="only runs in this state",
    )
    p.set_defaults(handler=main_status)
    return p
