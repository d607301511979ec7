"""``sgi-lab experiment``: its options (`add_experiment_parser`), its handler (`main_experiment`),
and `run_experiment` / `load_graph` for notebooks and tests."""

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
from sgi_lab.experiments.scheduler import run_graph, write_inputs
from sgi_lab.experiments.spec import (
    EXECUTORS,
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


def _add_power_options(p: argparse.ArgumentParser) -> None:
    """``--power`` and the options that go with it (`_print_power`)."""
    p.add_argument(
        "--power",
        action="store_true",
        help="print what the question's design can detect (power, minimum detectable effect, "
        "seeds needed, interval coverage), resampling a pilot's runs; runs nothing",
    )
    p.add_argument(
        "--pilot",
        type=Path,
        default=None,
        metavar="DIR",
        help="--power: an experiment folder or archive to resample (default: --archive, else "
        "the experiment folder), e.g. results/minatar_objectives",
    )
    p.add_argument(
        "--pilot-arm",
        default=None,
        metavar="LABEL",
        help="--power: the pilot's finetuning label to resample (default: the question's baseline)",
    )
    p.add_argument(
        "--power-seeds",
        type=int,
        default=None,
        metavar="N",
        help="--power: runs per arm and game to evaluate (default: the experiment's seeds)",
    )
    p.add_argument(
        "--power-alpha",
        type=float,
        default=None,
        metavar="A",
        help="--power: test each contrast at level A (default: Holm's first, the question's "
        "alpha over its primary contrasts)",
    )


def add_experiment_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``experiment`` on an argparse sub-parser set; the handler is ``args.handler``."""
    p = subparsers.add_parser(
        "experiment",
        help="run a table of the paper (params/experiments/*.yaml) as a task graph",
        description="Expand an experiment file into its task graph (datasets -> pretraining -> "
        "finetuning populations -> report) and run it locally or on Ray. Re-run to resume.",
    )
    p.add_argument("file", type=Path, help="params/experiments/NAME.yaml")
    p.add_argument("--out", type=Path, default=None, help="default outputs/experiments/<name>")
    p.add_argument("--executor", choices=EXECUTORS, default="local")
    p.add_argument("--address", default=None, help="Ray: the cluster to join (host:port, auto)")
    p.add_argument(
        "--storage",
        default=None,
        metavar="URI",
        help="keep the run folders at an fsspec URI (s3://bucket/exp, gs://..., file:///...) "
        "for a cluster without a shared filesystem; the report is written to --out",
    )
    p.add_argument("--dry-run", action="store_true", help="print the graph and its cost only")
    p.add_argument("--max-parallel", type=int, default=1, help="local: task processes at a time")
    p.add_argument("--retries", type=int, default=1, help="runs again of a failed task")
    p.add_argument("--param", action="append", metavar="KEY=VALUE", help="an experiment parameter")
    p.add_argument(
        "--first",
        action="extend",
        nargs="+",
        metavar="PATTERN",
        help="start the tasks whose ids match (fnmatch: 'finetune/sgi_none/*'), and what they "
        "read, before the others, in the patterns' order; several after one --first or "
        "--first repeated (the ids: --dry-run)",
    )
    p.add_argument(
        "--branch-first",
        action="store_true",
        help="after --first, run each finetuning task with what it reads (its data and "
        "pretraining) before the next, so whole objectives land one after another instead of "
        "every pretraining run first; probes right after their encoders",
    )
    p.add_argument(
        "--archive",
        type=Path,
        default=None,
        metavar="DIR",
        help="keep the results (no models or data) in DIR, e.g. results/NAME in "
        "git: restored first where the experiment folder lacks them (a fresh clone goes on "
        "from there), then each task's as it finishes",
    )
    p.add_argument(
        "--rebuild",
        action="extend",
        nargs="+",
        metavar="PATTERN",
        help="run only the pretraining tasks whose ids match (fnmatch: 'pretrain/s__*'), and "
        "their data, again where --archive restored them without their model (another "
        "experiment reuses them with run:); each rebuilt run's curve is checked against the "
        "archived one (its rebuilt.json; one that differs fails) and never archived",
    )
    p.add_argument("--report-only", action="store_true", help="write the report of what finished")
    p.add_argument(
        "--overwrite-archive",
        action="store_true",
        help="--report-only --archive: replace archived files whose content differs from the "
        "experiment folder's (default: refuse, naming the first)",
    )
    _add_power_options(p)
    p.add_argument("--no-progress", action="store_true", help="no progress display")
    p.set_defaults(handler=main_experiment)
    return p
