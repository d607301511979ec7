"""The report of an experiment that only makes data: agents trained from scratch (pretraining
configs of kind ``agent``) and the stores made of their runs (``replay``, ``weak``, ``mixed``
sources), with no finetuning or probes (``params/experiments/minatar_replay.yaml``).

Per making agent: its steps, final evaluation, normalised score beside the game's references and
its training hours; per store: rows, episodes, returns, size and fingerprint; the agents'
learning curves beside the reference (``makers.svg``). Written as ``results.md``,
``results.csv`` (one row per maker and per store) and ``report.html``."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from sgi_lab.base.files import atomic_write_text, read_jsonl
from sgi_lab.data.replay_export import commit_history, learning_curve
from sgi_lab.data.store import TransitionStore
from sgi_lab.data.store_format import MANIFEST, StoreError
from sgi_lab.experiments.graph import Graph, Task, is_agent_task
from sgi_lab.experiments.study_cost import logged_hours
from sgi_lab.metrics.minatar import normalization_name, normalized_score, score_references
from sgi_lab.runs.status import read_status
from sgi_lab.viz.method_curves import method_curves_svg
from sgi_lab.viz.svg import write_svg

MAKERS_MARK = "sgi-lab data_report.makers_svg"
"""Inside every figure `write_data_report` draws: what it may overwrite."""


def _top(game: str) -> tuple[str, float]:
    """The game's score at normalised 1 and its name (``DQN reference``, ``human``)."""
    return list(score_references(game).items())[-1]


def _game_of(task: Task) -> str:
    argv = list(task.argv)
    return argv[argv.index("--game") + 1] if "--game" in argv else ""


def read_makers(graph: Graph) -> list[dict[str, Any]]:
    """What each making agent's folder holds, read once: its task, status, game, metrics rows,
    config and final evaluation (empty where not written yet)."""
    makers = []
    for task in filter(is_agent_task, graph.tasks):
        status = read_status(task.folder) or {}
        metrics, evaluation = task.folder / "metrics.jsonl", task.folder / "eval.json"
        config = task.folder / "config.yaml"
        makers.append(
            {
                "task": task,
                "status": status,
                "game": status.get("game") or _game_of(task),
                "rows": read_jsonl(metrics) if metrics.is_file() else [],
                "config": (yaml.safe_load(config.read_text()) or {}) if config.is_file() else {},
                "result": json.loads(evaluation.read_text()) if evaluation.is_file() else {},
            }
        )
    return makers


def maker_rows(makers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per making agent (`read_makers`): finished or not, its steps, evaluation and
    hours."""
    rows = []
    for maker in makers:
        status, game, result = maker["status"], maker["game"], maker["result"]
        rows.append(
            {
                "kind": "maker",
                "task": maker["task"].id,
                "game": game,
                "state": status.get("state", "not started"),
                "steps": status.get("step", 0),
                "final_mean": result.get("mean"),
                "final_episodes": result.get("episodes"),
                "normalized": normalized_score(game, result["mean"]) if result else None,
                "normalization": normalization_name(game),
                "random_score": score_references(game)["random"],
                "top_score": _top(game)[1],
                "top_name": _top(game)[0],
                "training_hours": logged_hours(maker["rows"]),
                "commits": [
                    c["commit"][:7] + (f" from {c['from_step']:,}" if c["from_step"] else "")
                    for c in commit_history(status)
                ],
            }
        )
    return rows


def _bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def store_rows(graph: Graph) -> list[dict[str, Any]]:
    """One row per store a data task makes: made or not, and what it holds."""
    rows = []
    for task in (t for t in graph.tasks if t.kind == "data"):
        row: dict[str, Any] = {"kind": "store", "task": task.id, "folder": str(task.folder)}
        if not (task.folder / MANIFEST).is_file():  # a store is complete once it has one
            rows.append({**row, "state": "not made"})
            continue
        try:
            store = TransitionStore(task.folder)
        except (OSError, ValueError, StoreError) as exc:  # named: someone must look at it
            rows.append({**row, "state": f"unreadable: {exc}"})
            continue
        summary = store.summary()
        rows.append(
            {
                **row,
                "state": "made",
                "game": store.game,
                "source": store.manifest.source,
                "rows": summary["transitions"],
                "episodes": summary["episodes"],
                "mean_episode_return": summary["mean_episode_return"],
                "mb": _bytes(task.folder) / 1e6,
                "fingerprint": store.fingerprint,
            }
        )
    return rows


def makers_curves(makers: list[dict[str, Any]]) -> pd.DataFrame:
    """``game, method, step, return`` of every maker's training episodes per checkpoint interval
    (`learning_curve`, as a replay's manifest records it), and the game's score at normalised 1
    as a flat line."""
    frames = []
    for maker in makers:
        ends = [r["step"] for r in maker["rows"] if "episode/return" in r]
        if not ends:
            continue
        every = int(maker["config"].get("checkpoint_every") or 50_000)
        curve = learning_curve(maker["rows"], list(range(every, max(ends) + every, every)))
        binned = pd.DataFrame(
            [(c["step"], c["mean_return"]) for c in curve if c["episodes"]],
            columns=["step", "return"],
        )
        game, name = maker["game"], maker["task"].id.split("/")[1].split("__")[0]
        frames.append(binned.assign(game=game, method=name))
        top_name, top = _top(game)
        frames.append(pd.DataFrame({"step": binned["step"], "return": top}).assign(
            game=game, method=f"{top_name} (normalised 1)"
        ))  # fmt: skip
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _cell(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def data_markdown(graph: Graph, makers: list[dict], stores: list[dict], figure: str) -> str:
    """``results.md``: the makers' table (`maker_rows`), the figure, the stores' table
    (`store_rows`)."""
    e = graph.experiment
    lines = [f"# {e.name}", "", e.description, "", "## The agents that made the data", ""]
    lines += [
        "| game | state | steps | final return (episodes) | normalised | normalised 1 at | "
        "training hours | commits |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in makers:
        lines.append(
            f"| {r['game']} | {r['state']} | {r['steps']} | {_cell(r['final_mean'])} "
            f"({_cell(r['final_episodes'])}) | {_cell(r['normalized'])} | "
            f"{_cell(r['top_score'], 1)} ({r['top_name']}) | {r['training_hours']:.2f} | "
            f"{'; '.join(r['commits'])} |"
        )
    lines += [
        "",
        "Normalised: (return - random) / (normalised 1 - random), the game's references "
        "(MinAtar: `sgi_lab/metrics/data/minatar_scores.json`; Atari: the human scores). Training hours: the agent's logged steps "
        "over its logged speed, evaluations and start-up left out, on whatever machine and load "
        "it ran (its status records the CPU). Commits: each sgi-lab commit the agent trained on, in "
        "order, a resumed run's later ones with the step they took over at.",
        "",
        f"![The making agents' training returns per checkpoint interval]({figure})",
        "",
        "## The stores",
        "",
        "| store | state | rows | episodes | mean episode return | MB | fingerprint |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for r in stores:
        lines.append(
            f"| {r['task'].split('/', 1)[1]} | {r['state']} | {_cell(r.get('rows'))} | "
            f"{_cell(r.get('episodes'))} | {_cell(r.get('mean_episode_return'))} | "
            f"{_cell(r.get('mb'), 1)} | {(r.get('fingerprint') or '-')[:16]} |"
        )
    return "\n".join([*lines, ""])


REPORT_FILES = ("results.md", "results.csv", "makers.svg")
"""What `keep_data_report` copies into an archive."""


def keep_data_report(out: Path, archive: Path) -> Path:
    """Copy the data report's files from ``out`` into ``archive/report`` (atomically, over the
    copy made before): an archive keeps no store, so the report is git's only record of what
    the stores held. Returns the folder."""
    dest = archive / "report"
    dest.mkdir(parents=True, exist_ok=True)
    for name in REPORT_FILES:
        if (out / name).is_file():
            atomic_write_text(dest / name, (out / name).read_text())
    return dest


def write_data_report(graph: Graph) -> Path:
    """``results.md``, ``results.csv``, ``makers.svg`` and ``report.html`` of a data
    experiment (`is_data_experiment`); returns the path of report.html."""
    out = graph.out
    read = read_makers(graph)
    makers, stores = maker_rows(read), store_rows(graph)
    curves = makers_curves(read)
    methods = sorted(set(curves["method"])) if not curves.empty else []
    methods = sorted(methods, key=lambda m: m.endswith("(normalised 1)"))  # agents first
    svg = method_curves_svg(curves, methods, mark=MAKERS_MARK, y_title="training return")
    write_svg(out / "makers.svg", svg, MAKERS_MARK, "a makers' learning-curve figure")
    frame = pd.DataFrame([*makers, *stores])
    if "commits" in frame:
        frame["commits"] = frame["commits"].map(
            lambda c: "; ".join(c) if isinstance(c, list) else c
        )
    atomic_write_text(out / "results.csv", frame.to_csv(index=False))
    markdown = data_markdown(graph, makers, stores, "makers.svg")
    atomic_write_text(out / "results.md", markdown)
    body = html.escape(markdown)
    page = (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(graph.experiment.name)}</title></head><body>"
        f"{svg}<pre>{body}</pre></body></html>"
    )
    path = out / "report.html"
    atomic_write_text(path, page)
    return path
