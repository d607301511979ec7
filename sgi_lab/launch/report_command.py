"""``sgi-lab report``: the command's handler (its parser is `sgi_lab.launch.cli`'s)."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["run_report"]


def _check_curves(out: Path) -> None:
    """``--curves OUT``: an .html file that does not exist yet, in a folder that does."""
    if out.suffix.lower() not in (".html", ".htm"):
        raise ValueError(f"--curves: {out} must be an .html file")
    if out.exists():
        raise FileExistsError(f"--curves: {out} exists; name a new file (nothing is overwritten)")
    if not out.parent.is_dir():
        raise FileNotFoundError(f"--curves: {out.parent} is not a folder; create it first")


def _write_curves(runs: list[Path], out: Path) -> None:
    """The runs' training curves overlaid (one colour per run) as one HTML page at ``out``."""
    # lazy: the CLI starts without torch; a command loads what it runs
    from sgi_lab.base.files import atomic_write_text
    from sgi_lab.viz.training import compare_runs

    labels = {str(run): run for run in runs}
    atomic_write_text(out, compare_runs(labels).to_html(include_plotlyjs=True))
    print(f"curves of {len(runs)} run(s) side by side: {out}")


def run_report(args: argparse.Namespace) -> int:
    """``sgi-lab report RUNS``: per-game scores, aggregates, P(improvement) over --baseline,
    the probe table of runs with probe results only; --csv and --curves files."""
    import pandas as pd

    # lazy: the CLI starts without torch; a command loads what it runs
    from sgi_lab.analysis.improvement import improvement_over
    from sgi_lab.analysis.report import (
        aggregates_csv_path,
        columns_explained,
        format_aggregates,
        report,
    )
    from sgi_lab.base.paths import did_you_mean
    from sgi_lab.launch.probe import print_probes, split_probed
    from sgi_lab.viz.report_tables import format_improvement

    missing = [did_you_mean(run, "run folder") for run in args.runs if not Path(run).exists()]
    if missing:
        raise FileNotFoundError("; ".join(missing))
    if args.reps < 1:
        raise ValueError(f"--reps: at least 1 bootstrap resample, got {args.reps}")
    if args.csv is not None:  # both files it writes, before anything is computed or written
        taken = [p for p in (args.csv, aggregates_csv_path(args.csv)) if Path(p).exists()]
        if taken:
            raise FileExistsError(
                f"--csv: {', '.join(map(str, taken))} exists; name a new file (--csv X writes "
                "X and X's .aggregates.csv; nothing is overwritten)"
            )
    if args.curves is not None:  # checked now, written once a mistyped baseline cannot stop it
        _check_curves(args.curves)
    # Runs with probe results only (pretraining runs, random encoders) go to the probe table.
    curve_runs = list(args.runs)
    args.runs, probed = split_probed(args.runs)
    if not args.runs:
        if args.curves is not None:
            _write_curves(curve_runs, args.curves)
        return print_probes(probed)

    improvement = None
    if args.baseline is not None:  # first: a mistyped baseline prints nothing else
        improvement = improvement_over(
            args.runs, args.baseline, reps=args.reps, allow_unfinished=args.allow_unfinished
        )
    if args.curves is not None:
        _write_curves(curve_runs, args.curves)
    per_game, aggregates = report(
        args.runs, csv=args.csv, reps=args.reps, allow_unfinished=args.allow_unfinished
    )
    with pd.option_context("display.width", 160, "display.max_columns", 20):
        normalizations = ", ".join(sorted(set(per_game.get("normalization", ["HNS"]))))
        print(
            f"Per game (mean raw score over runs, normalised: {normalizations} in the hns column; "
            "paper's column for the same config)"
        )
        shown = per_game.drop(columns=["code"])
        print(shown.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
        print()
        print(f"Aggregates ({normalizations}; 95% stratified bootstrap CIs over runs)")
        print(format_aggregates(aggregates).to_string(index=False))
        if improvement is not None:
            print(
                f"\nProbability of improvement over {args.baseline}: P(a run of the method "
                "beats a run of the baseline on a random game both have), 95% stratified "
                "bootstrap CIs"
            )
            print(format_improvement(improvement).to_string(index=False))
    for method, reason in columns_explained(args.runs).items():
        print(f"\npaper column of {method}: {reason}")
    unfinished = int(per_game["unfinished"].sum()) if "unfinished" in per_game else 0
    if unfinished:
        print(f"\nNOTE: {unfinished} run(s) never finished (the 'unfinished' column)")
    codes = sorted({c for cell in aggregates["code"] for c in cell.split(", ")})
    if len(codes) > 1 or any("dirty" in c or ">" in c for c in codes):
        print(f"\nNOTE: these runs were made by other code than one clean commit: {codes}")
    if args.csv:
        print(f"\nwrote {args.csv} and {aggregates_csv_path(args.csv)}")
    return print_probes(probed)
