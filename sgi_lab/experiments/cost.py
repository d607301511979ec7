"""Measured speeds (`SPEEDS`, `MACHINES`), a graph's estimated cost (`estimate_cost`) and
the ``--dry-run`` plan (`format_plan`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sgi_lab.config import FinetuneConfig, build_config
from sgi_lab.experiments.archive import task_folders
from sgi_lab.experiments.graph import (
    Graph,
    Task,
)
from sgi_lab.experiments.study_cost import folder_hours
from sgi_lab.train.capacity import agent_bytes

# -- speeds and cost ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Speed:
    """One measured speed from ``benchmarks/README.md``."""

    stage: str  # collect_random, collect_exploratory, pretrain, finetune
    encoder: str | None  # the encoder for pretrain/finetune
    machine: str  # key of MACHINES
    rate: float  # per second: agent steps (collection, finetuning, one agent) or samples
    source: str  # where the figure is in benchmarks/README.md
    readout: str | None = None  # probe: the readout it was measured with (None: any other)


MACHINES = {
    "h100": "one NVIDIA H100 (bf16, channels-last)",
    "cpu": "the 2-core development CPU (2 torch threads)",
}

SPEEDS: tuple[Speed, ...] = (
    Speed("collect_random", None, "cpu", 2250.0, "Foundation: Random collection, one core"),
    Speed("collect_random", None, "h100", 2250.0, "Foundation: Random collection, one core"),
    Speed("collect_exploratory", None, "cpu", 84.0, "Exploratory collection: 8 envs, one thread"),
    Speed("pretrain", "nature", "h100", 8673.0, "Pretraining speed: H100, samples/s"),
    Speed("pretrain", "resnet", "h100", 3929.0, "Pretraining speed: H100, samples/s"),
    Speed("pretrain", "resnet_l", "h100", 2872.0, "Pretraining speed: H100, samples/s"),
    Speed("pretrain", "nature", "cpu", 375.0, "Pretraining speed: two threads, samples/s"),
    Speed("pretrain", "resnet", "cpu", 134.7, "Pretraining speed: two threads, samples/s"),
    Speed("pretrain", "resnet_l", "cpu", 19.0, "Pretraining speed: one thread, busy machine"),
    Speed("finetune", "nature", "h100", 18.3, "Finetuning: whole loop on an H100, env steps/s"),
    Speed("finetune", "resnet", "h100", 10.1, "Finetuning: whole loop on an H100, env steps/s"),
    Speed("finetune", "nature", "cpu", 5.24, "Finetuning: whole loop, 2 threads, 2026-11-22"),
    Speed("finetune", "resnet", "cpu", 1.91, "Finetuning: whole loop, 2 threads, 2026-11-22"),
    # Probes: frames/s of the probe store, one loaded thread (the 2026-11-26/27 re-read: 20k frames
    # by least squares in 16-19 s, by the logistic probe in 86-169 s).
    Speed("probe", "nature", "cpu", 1100.0, "Probe readouts: the re-read's costs, least squares"),
    Speed(
        "probe", "nature", "cpu", 160.0, "Probe readouts: the re-read's costs", readout="logistic"
    ),
    # MinAtar (2026-11-26, 2-core Intel Xeon, one thread per task: two tasks at a time). The
    # finetuning rate is the whole loop at one update a step (the MinAtar study's budget);
    # at the paper's two it is about half.
    Speed("pretrain", "minatar", "cpu", 1500.0, "MinAtar: SGI pretraining, one thread, samples/s"),
    Speed("finetune", "minatar", "cpu", 39.0, "MinAtar: whole loop, one thread, 1 update/step"),
    Speed("probe", "minatar", "cpu", 270.0, "MinAtar: a probe of 20k frames in 73 s, loaded CPU"),
    # An agent's replay as a store and its Weak selection, rows/s (2026-11-29, 200k MinAtar rows,
    # a loaded 2-core AMD EPYC; the export's figure includes loading its 83 MB checkpoint).
    Speed("export_replay", None, "cpu", 127_000.0, "docs/datasets.md: MinAtar-Replay, export"),
    Speed("select_replay", None, "cpu", 154_000.0, "docs/datasets.md: MinAtar-Replay, select"),
)
"""Measured speeds (benchmarks/README.md). Finetuning rates are one agent's; a population on a
GPU batches its agents, so its figure is an upper bound on the time. No figure: DQN Replay
imports, exploratory collection on a GPU box, ResNet-L finetuning (reported as unknown)."""

MINATAR_UPDATE_SHARE = 0.85
"""The share of a MinAtar finetuning step's time that its one update takes, at the rate
`SPEEDS` gives (an update a step): measured 2026-11-29 on a 2-core AMD EPYC (Zen 4), one
thread, process CPU time of a 6,000-step Breakout run learning from step 1,000, 110 s at an
update a step against 44.5 s at one every 4 steps: about 17.5 ms an update, 3 ms a step
besides (docs/datasets.md, MinAtar-Replay). A MinAtar task's steps are scaled to its own
updates a step (``updates_per_step / update_every``) with it."""


def _step_scale(task: Task) -> float:
    """How much a finetuning step of ``task`` costs against the rate measured for its encoder:
    for MinAtar, whose rate is at an update a step, its own updates a step by
    `MINATAR_UPDATE_SHARE`; 1 elsewhere (Atari's rates are the paper's settings')."""
    if task.stage != "finetune" or task.encoder != "minatar":
        return 1.0
    updates = task.config.get("updates_per_step", 1) / task.config.get("update_every", 1)
    return 1.0 - MINATAR_UPDATE_SHARE + MINATAR_UPDATE_SHARE * updates


def _speed(
    stage: str, encoder: str | None, machine: str, readout: str | None = None
) -> float | None:
    """The measured rate of a stage, encoder and machine: a probe's for its readout where one
    was measured, else the stage's figure measured without naming one."""
    found = [s for s in SPEEDS if (s.stage, s.encoder, s.machine) == (stage, encoder, machine)]
    for wanted in (readout, None):
        for s in found:
            if s.readout == wanted:
                return s.rate
    return None


def estimate_cost(graph: Graph, left: Mapping[str, float] | None = None) -> dict[str, Any]:
    """Runs, agent steps, pretraining samples and hours per stage on each machine of `MACHINES`;
    with ``left`` (task id -> the fraction still to do, `sgi_lab.experiments.state.task_left`),
    only what is left: each task's work scaled by its fraction, done tasks (0) left out.

    Returns:
        ``{"stages": {stage: {tasks, runs, steps, samples, hours: {machine: h}, unmeasured}},
        "total": {...}, "unknown": ["stage/encoder (machine)" without a measured speed]}``.
        Hours are one process's (or one GPU's) time per task, summed over tasks (divide by the
        tasks that run at once); tasks without a measured speed count 0 and put their machine
        in ``unmeasured``.
    """
    stages: dict[str, dict[str, Any]] = {}
    unknown: set[str] = set()
    counted = 0
    for task in graph.tasks:
        share = 1.0 if left is None else left.get(task.id, 1.0)
        if task.kind == "report" or share <= 0:
            continue
        counted += 1
        row = stages.setdefault(
            task.stage,
            {
                "tasks": 0,
                "runs": 0,
                "steps": 0,
                "samples": 0,
                "hours": dict.fromkeys(MACHINES, 0.0),
            },
        )
        row["tasks"] += 1
        row["runs"] += len(task.agents) or 1
        row["steps"] += task.steps * share
        row["samples"] += task.samples * share
        work = task.samples if task.stage == "pretrain" else task.steps * _step_scale(task)
        work *= share
        for machine in MACHINES:
            rate = _speed(task.stage, task.encoder, machine, task.probe.get("readout"))
            if rate is None:
                unknown.add(
                    f"{task.stage}" + (f"/{task.encoder}" if task.encoder else "") + f" ({machine})"
                )
                row.setdefault("unmeasured", set()).add(machine)
            else:
                row["hours"][machine] += work / rate / 3600
    total = {
        "tasks": len(graph.tasks) if left is None else counted,
        "runs": sum(r["runs"] for r in stages.values()),
        "steps": sum(r["steps"] for r in stages.values()),
        "samples": sum(r["samples"] for r in stages.values()),
        "hours": {m: sum(r["hours"][m] for r in stages.values()) for m in MACHINES},
        "unmeasured": set().union(*(r.get("unmeasured", set()) for r in stages.values())),
    }
    return {"stages": stages, "total": total, "unknown": sorted(unknown)}


def _work(task: Task) -> float:
    """A task's work in the units its speed is measured in: pretraining samples, else agent
    steps scaled to its updates (`_step_scale`)."""
    return task.samples if task.stage == "pretrain" else task.steps * _step_scale(task)


def _stage_key(task: Task) -> str:
    return task.stage + (f"/{task.encoder}" if task.encoder else "")


def _logged_hours(task: Task) -> float | None:
    """A finished task's training hours from its runs' logged speeds (a population once); None
    when none logged one, or a run's config lacks the batch size its samples/s needs (the dry
    run then prices the task's stage as if it had not finished)."""
    try:
        hours = [h for h in map(folder_hours, task_folders(task)) if h is not None]
    except ValueError:
        return None
    return max(hours) if hours else None


def pace_left(graph: Graph, left: Mapping[str, float]) -> dict[str, Any]:
    """What is left (``left``: task id -> the fraction still to do) at the pace the experiment's
    own finished tasks logged, per stage and encoder (their summed hours over their summed
    work); a stage none of its tasks has finished yet counts at `SPEEDS`' CPU figure.

    Returns:
        ``{"hours": process-hours left, "paces": {stage/encoder: units per second},
        "finished": tasks read, "unmeasured": stages priced at SPEEDS' CPU figure instead
        (0 where it has none)}``
    """
    key = _stage_key
    seconds: dict[str, float] = {}
    work: dict[str, float] = {}
    finished = 0
    for task in graph.tasks:
        if task.kind in ("report", "probe") or left.get(task.id, 1.0) > 0 or not _work(task):
            continue
        hours = _logged_hours(task)
        if hours:
            finished += 1
            seconds[key(task)] = seconds.get(key(task), 0.0) + hours * 3600
            work[key(task)] = work.get(key(task), 0.0) + _work(task)
    paces = {k: work[k] / seconds[k] for k in seconds}
    total, unmeasured = 0.0, set()
    for task in graph.tasks:
        share = left.get(task.id, 1.0)
        if task.kind == "report" or share <= 0:
            continue
        rate = paces.get(key(task))
        if rate is None:
            unmeasured.add(key(task))
            rate = _speed(task.stage, task.encoder, "cpu", task.probe.get("readout"))
        total += _work(task) * share / rate / 3600 if rate else 0.0
    return {"hours": total, "paces": paces, "finished": finished, "unmeasured": unmeasured}


def _pace_line(graph: Graph, left: Mapping[str, float]) -> str | None:
    """The dry run's line for `pace_left`, once the experiment has finished a task that logged
    its speed."""
    pace = pace_left(graph, left)
    if not pace["finished"]:
        return None
    rates = ", ".join(f"{k} {r:,.1f}/s" for k, r in sorted(pace["paces"].items()))
    line = (
        f"  at its own pace: about {pace['hours']:.1f} process-hours left, at the speeds its "
        f"{pace['finished']} finished tasks logged ({rates}: agent steps, or samples for "
        "pretraining)"
    )
    if pace["unmeasured"]:
        line += f"; {', '.join(sorted(pace['unmeasured']))} at the cpu column's speeds"
    return line


def _fmt_count(n: float) -> str:
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:.0f}"


def _population_gb(graph: Graph, task: Task) -> float | None:
    """Estimated memory of a finetuning task's agents trained as one population
    (`sgi_lab.train.capacity.agent_bytes` of its resolved config), or None."""

    argv = list(task.argv)
    if "--agents" in argv:  # a shared population: its agents share the architecture
        agents = graph.params_files.get(argv[argv.index("--agents") + 1], {}).get("agents")
        params = agents[0]["params"] if agents else None
    else:
        params = argv[argv.index("--params") + 1] if "--params" in argv else None
    resolved = graph.params_files.get(params) if params else None
    if resolved is None:
        return None
    config = build_config(FinetuneConfig, resolved["config"])
    return agent_bytes(config)["total"] * len(task.agents) / 1e9


def format_plan(graph: Graph, left: Mapping[str, float] | None = None) -> str:
    """The graph (one line per task, with its inputs and command) and its estimated cost; with
    ``left`` (`estimate_cost`), each task says whether it is done or how much of it is left,
    and the cost table gains a row for what is left."""
    e = graph.experiment
    lines = [
        f"experiment {e.name}" + (f" ({e.table})" if e.table else "") + f": {e.description}",
        f"folder {graph.out}",
        f"{len(e.games)} games x {len(e.seeds)} seeds; tasks: "
        + ", ".join(f"{n} {k}" for k, n in graph.counts().items() if n or k != "probe"),
        "",
    ]
    for task in graph.tasks:
        extra = ""
        if task.agents:
            memory = _population_gb(graph, task)
            extra = f"  [{len(task.agents)} agents" + (
                f", ~{memory:.0f} GB as one population]"
                if memory is not None and memory >= 10
                else f", ~{memory:.2g} GB as one population]"
                if memory is not None
                else "]"
            )
        if left is not None and task.kind != "report":
            share = left.get(task.id, 1.0)
            extra += "  (done)" if share <= 0 else f"  ({share:.0%} left)" if share < 1 else ""
        lines.append(f"{task.id}{extra}")
        if task.deps:
            shown = ", ".join(task.deps[:4]) + (
                f" +{len(task.deps) - 4}" if len(task.deps) > 4 else ""
            )
            lines.append(f"    after {shown}")
        if task.argv:
            lines.append("    sgi-lab " + " ".join(_quote(a) for a in task.argv))
    for note in graph.dropped:
        lines.append(f"dropped: {note}")
    cost = estimate_cost(graph)
    lines += ["", "estimated cost (speeds: benchmarks/README.md; sgi_lab.experiments.SPEEDS)"]
    header = f"{'stage':<20}{'tasks':>6}{'runs':>7}{'agent-steps':>13}{'samples':>10}"
    header += "".join(f"{m + ' h':>12}" for m in MACHINES)
    lines.append(header)

    def hours(row: dict[str, Any], machine: str) -> str:
        h = row["hours"][machine]
        if machine not in row.get("unmeasured", ()):
            return f"{h:>12.1f}"
        return f"{'?':>12}" if h == 0 else f"{f'{h:.1f}+?':>12}"

    rows = [*cost["stages"].items(), ("total", cost["total"])]
    if left is not None:
        rows.append(("left", estimate_cost(graph, left)["total"]))
    for stage, row in rows:
        line = f"{stage:<20}{row.get('tasks', 0):>6}{row['runs']:>7}"
        line += f"{_fmt_count(row['steps']):>13}{_fmt_count(row['samples']):>10}"
        line += "".join(hours(row, m) for m in MACHINES)
        lines.append(line)
    for machine, what in MACHINES.items():
        lines.append(f"  {machine}: {what}")
    lines.append(
        "  hours are summed over tasks (one process or GPU each); finetuning uses one agent's "
        "rate per agent (a batched population is faster)"
    )
    if left is not None:
        lines.append(
            "  left: the tasks not done, each from its last checkpoint (the run folders' "
            "status), at the same speeds"
        )
        lines += [line for line in [_pace_line(graph, left)] if line]
    if cost["unknown"]:
        lines.append(f"  ?: no measured speed for {', '.join(cost['unknown'])} (counted as 0)")
    return "\n".join(lines)


def _quote(arg: str) -> str:
    return f"'{arg}'" if any(c in arg for c in " {}*?$") else arg
