"""``sgi-lab experiment``'s options, without torch: `add_experiment_parser` reads the executors
from the experiment file's spec alone, so ``sgi-lab experiment --help`` loads neither torch nor
the finetuning code; the command itself (`sgi_lab.experiments.command`) is imported when it
runs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sgi_lab.experiments.spec import EXECUTORS

__all__ = ["add_experiment_parser", "main_experiment"]


def main_experiment(args: argparse.Namespace) -> int:
    """The handler: `sgi_lab.experiments.command.main_experiment`, imported now."""
    # lazy: the command's task graph imports the finetuning code (torch, scipy, pandas)
    from sgi_lab.experiments.command import main_experiment as run

    return run(args)


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
