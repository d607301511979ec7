"""The order a graph's tasks run in: what ``--first`` starts first (`first_order`), whole
branches one after another (``--branch-first``, `branch_order`), and the graph cut down to the
pretraining runs ``--rebuild`` runs again (`rebuild_graph`); `run_order` applies them as
`sgi_lab.experiments.scheduler.run_graph` does, for the real run and ``--dry-run`` alike."""

from __future__ import annotations

import dataclasses
import fnmatch
import glob
from collections.abc import Sequence

from sgi_lab.experiments.graph import Graph, Task

REBUILD_NEEDS_ARCHIVE = (
    "--rebuild: needs --archive DIR, the archive that restored those runs (their curves are "
    "checked against it)"
)
"""Why a rebuild without an archive is refused (by `run_graph`, and by the CLI's dry run)."""


def first_order(graph: Graph, patterns: Sequence[str]) -> tuple[Task, ...]:
    """The graph's tasks with those matching ``patterns`` (``fnmatch`` on task ids), and the
    tasks they depend on, first: the first pattern's group, then the next pattern's (less what
    is already placed), then everything else; each group keeps the graph's (dependency) order,
    so the whole stays a dependency order.

    Raises:
        ValueError: a pattern that matches no task, naming it and some task ids.
    """
    by_id = {t.id: t for t in graph.tasks}
    placed: set[str] = set()
    order: list[Task] = []
    for pattern in patterns:
        hits = [t.id for t in graph.tasks if fnmatch.fnmatchcase(t.id, pattern)]
        if not hits:
            some = ", ".join(t.id for t in graph.tasks if t.kind in ("finetune", "pretrain"))
            raise ValueError(
                f"--first {pattern!r} matches no task of {graph.experiment.name!r} "
                f"(task ids look like: {some[:300]}...)"
            )
        group = set(hits) - placed
        todo = list(group)
        while todo:  # everything the chosen tasks read
            for dep in by_id[todo.pop()].deps:
                if dep not in group and dep not in placed:
                    group.add(dep)
                    todo.append(dep)
        order += [t for t in graph.tasks if t.id in group]
        placed |= group
    return tuple(order) + tuple(t for t in graph.tasks if t.id not in placed)


def rebuild_graph(graph: Graph, patterns: Sequence[str]) -> Graph:
    """The graph cut down to the pretraining tasks whose ids match ``patterns`` (``fnmatch``)
    and what they read (their datasets): ``--rebuild``'s, which pretrains again the runs an
    archive restored without their model. Nothing reads them in the cut graph, so a restore
    brings their archived results back, and they run on top of them from step 0.

    Raises:
        ValueError: a pattern that matches no pretraining task, naming it and the task ids.
    """
    by_id = {t.id: t for t in graph.tasks}
    chosen: set[str] = set()
    for pattern in patterns:
        hits = {
            t.id for t in graph.tasks if t.kind == "pretrain" and fnmatch.fnmatchcase(t.id, pattern)
        }
        if not hits:
            ids = ", ".join(t.id for t in graph.tasks if t.kind == "pretrain") or "none"
            raise ValueError(
                f"--rebuild {pattern!r} matches no pretraining task of "
                f"{graph.experiment.name!r} (its pretraining tasks: {ids[:400]})"
            )
        chosen |= hits
    for task_id in list(chosen):
        chosen |= set(by_id[task_id].deps)
    tasks = tuple(t for t in graph.tasks if t.id in chosen)
    return dataclasses.replace(graph, tasks=tasks)


def branch_order(graph: Graph, first: Sequence[str] = ()) -> tuple[Task, ...]:
    """`first_order`, then each finetuning task with what it reads, one after another in the
    graph's order (``--branch-first``): a long study's branches (an objective's pretraining and
    populations) land whole, one after another, instead of every pretraining run first; each
    probe right after the encoders it reads. A dependency order still."""
    patterns = [*first, *(glob.escape(t.id) for t in graph.tasks if t.kind == "finetune")]
    ordered = [t for t in first_order(graph, patterns) if t.kind != "probe"]
    for probe in (t for t in graph.tasks if t.kind == "probe"):
        ids = [t.id for t in ordered]
        after = [ids.index(d) for d in probe.deps if d in ids]
        ordered.insert(max(after) + 1 if after else 0, probe)
    return tuple(ordered)


def run_order(
    graph: Graph, first: Sequence[str] = (), branch_first: bool = False, rebuild: Sequence[str] = ()
) -> Graph:
    """``graph`` as a run takes it: cut down to ``rebuild``'s pretraining runs when it names
    any (`rebuild_graph`), then ``first`` (and with ``branch_first``, each branch whole) first.

    Raises:
        ValueError: a pattern that matches no task (`first_order`, `rebuild_graph`).
    """
    if rebuild:
        graph = rebuild_graph(graph, rebuild)
    order = branch_order(graph, first) if branch_first else first_order(graph, first)
    return dataclasses.replace(graph, tasks=order)
