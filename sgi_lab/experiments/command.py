"""``sgi-lab experiment``: what it does (`main_experiment`, its options in
`sgi_lab.experiments.options`), and `run_experiment` / `load_graph` for notebooks and tests."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from sgi_lab.base.files import FolderLock
from sgi_lab.config import ConfigError, parse_value
from sgi_lab.experiments.archive import (
    ARCHIVE_FILE,
    archived_tasks,
    restore,
    verified_archive,
)
from sgi_lab.experiments.archive import archive as archive_results
from sgi_lab.experiments.cost import (
    format_plan,
)
from sgi_lab.experiments.experiment_report import write_report
from sgi_lab.experiments.graph import (
    Graph,
    expand,
)
from sgi_lab.experiments.order import REBUILD_NEEDS_ARCHIVE, run_order
from sgi_lab.experiments.question import power_markdown, power_report, question_plan
from sgi_lab.experiments.scheduler import keep_report_files, run_graph, write_inputs
from sgi_lab.experiments.spec import (
    EXPERIMENT_FILE,
    STATE_FILE,
    load_experiment,
)
from sgi_lab.experiments.state import (
    check_experiment_folder,
    pull_results,
    task_left,
    unneeded,
)
from sgi_lab.experiments.storage import RunStorage

# -- the whole thing ----------------------------------------------------------------------------


def run_experiment(
    file: str | os.PathLike,
    out: str | os.PathLike,
    parameters: dict[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """`load_experiment` + `expand` + `run_graph` (keyword arguments go to `run_graph`)."""
    return run_graph(expand(load_experiment(file, parameters), out), **kwargs)


def load_graph(out: str | os.PathLike) -> Graph:
    """The graph of an experiment folder, from the ``experiment.yaml`` it holds."""
    return expand(load_experiment(Path(out) / EXPERIMENT_FILE), out)


def main_experiment(args: argparse.Namespace) -> int:
    """``sgi-lab experiment FILE --out DIR [--executor local|ray] [--dry-run] ...``."""

    parameters = {}
    for item in args.param or []:
        if "=" not in item:
            raise ConfigError(f"--param {item!r} must look like KEY=VALUE")
        key, raw = item.split("=", 1)
        parameters[key.strip()] = parse_value(raw)
    experiment = load_experiment(args.file, parameters)
    out = args.out or Path("outputs/experiments") / experiment.name
    graph = expand(experiment, out)
    if args.rebuild and args.report_only:
        raise ConfigError("--rebuild pretrains again; it does not go with --report-only")
    if args.rebuild and args.dry_run and not args.archive:  # run_graph refuses the real run
        raise ConfigError(REBUILD_NEEDS_ARCHIVE)
    if args.overwrite_archive and not (args.report_only and args.archive):
        raise ConfigError("--overwrite-archive goes with --report-only --archive DIR only")
    if args.report_only and args.storage and args.archive:  # as run_graph refuses them
        raise ConfigError("--archive is for local folders; with --storage it is refused")
    if args.dry_run:
        # what run_graph would run, listed in the order the real run starts them
        graph = run_order(graph, args.first or (), args.branch_first, args.rebuild or ())
        # what is left, when the folder holds a run of this experiment (local folders only)
        started = not args.storage and (Path(graph.out) / STATE_FILE).is_file()
        left = {t.id: task_left(t) for t in graph.tasks} if started else None
        if args.archive and (args.archive / ARCHIVE_FILE).is_file():  # read, nothing restored
            verified_archive(args.archive, graph)  # a damaged archive restores nothing
            left = left or {t.id: 1.0 for t in graph.tasks}
            left.update(dict.fromkeys(archived_tasks(graph, args.archive), 0.0))
        if left is not None:  # what restored tasks alone read is not run
            for task_id in unneeded(graph, {t for t, x in left.items() if x == 0.0}):
                left[task_id] = 0.0
        print(format_plan(graph, left))
        for line in graph.missing_data:  # the real run refuses until they are made
            print(f"not made yet: {line}")
        if experiment.question is not None:
            print("\n" + question_plan(experiment))
        return 0
    if args.power:
        return _print_power(args, experiment, graph)
    if args.report_only:
        check_experiment_folder(graph.out, experiment.name)
        graph.out.mkdir(parents=True, exist_ok=True)
        lock = FolderLock(graph.out, f"the experiment {experiment.name!r}'s report", wait=0)
        try:
            return _report_only(args, graph)
        finally:
            lock.release()
    summary = run_graph(
        graph,
        executor=args.executor,
        max_parallel=args.max_parallel,
        retries=args.retries,
        address=args.address,
        progress=not args.no_progress,
        storage=args.storage,
        first=args.first or (),
        branch_first=args.branch_first,
        archive=args.archive,
        rebuild=args.rebuild or (),
    )
    bad = {k: v for k, v in summary["tasks"].items() if v["state"] in ("failed", "blocked")}
    for task_id, entry in bad.items():
        print(f"\n{entry['state']}: {task_id} (log {entry['log']})", file=sys.stderr)
        print(_indent(entry.get("error") or ""), file=sys.stderr)
    print(json.dumps(summary["counts"]))
    if (graph.out / "report.html").exists():
        print(f"report: {graph.out / 'report.html'}")
    return 1 if bad else 0


def _report_only(args: argparse.Namespace, graph: Graph) -> int:
    """``--report-only``: the report of what finished (results pulled from ``--storage``, or
    restored from and archived into ``--archive``), the folder locked by the caller."""
    if args.storage:
        pull_results(graph, RunStorage(args.storage))
    if args.archive:
        # the folder marked as this experiment's first (experiment.json), as a run marks it: a
        # folder the restore fills is one the real run then goes on in
        write_inputs(graph, graph.out)
        if (args.archive / ARCHIVE_FILE).is_file():
            print(f"restored {len(restore(graph, args.archive)['restored'])} tasks")
        # the inputs just written are the working tree's: an archived file they differ from
        # (params the archived runs ran with) is replaced only when asked
        done = archive_results(graph, args.archive, replace_changed=args.overwrite_archive)
        print(f"archived {len(done)} tasks in {args.archive}")
    print(f"wrote {write_report(graph)}")
    if args.archive:
        keep_report_files(graph, args.archive)
    return 0


def _print_power(args: argparse.Namespace, experiment: Any, graph: Graph) -> int:
    """``--power``: what the question's design can detect, from a pilot (``--pilot``, else
    ``--archive``, else the experiment folder); writes nothing."""
    if experiment.question is None:
        raise ConfigError(f"--power: {args.file} declares no question: (docs/experiments.md)")
    pilot = args.pilot or args.archive or graph.out
    if not (Path(pilot) / "finetune").is_dir():
        raise ConfigError(f"--power: {pilot}: no finetune/ runs to use as a pilot (--pilot DIR)")
    try:
        report = power_report(
            pilot, experiment, args.pilot_arm, args.power_seeds, alpha=args.power_alpha
        )
    except ValueError as exc:
        raise ConfigError(f"--power: {exc}") from None
    print(power_markdown(report))
    return 0


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())
