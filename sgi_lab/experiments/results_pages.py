"""The generated parts of the ``docs/results/`` pages, regenerated from the archived studies in
``results/`` by one command (``make results``, or ``python -m sgi_lab.experiments.results_pages``).

A page is written by hand around what its numbers come from: each generated table sits between
two marker lines, ``<!-- make results: NAME -->`` and ``<!-- make results: NAME, end -->``, and
`regenerate` rewrites only what lies between them (`PAGE_BLOCKS` declares each block: its page,
its archive and the function that makes it). The pages' figures are redrawn by their own writers,
which replace only a figure of their kind (`PAGE_FIGURES`). Each study's own report (its
``results.md`` with every exploratory table, ``question.svg``, ``curves.svg``, ``report.html``,
``results.csv``, ``scores.npz``) is written into ``outputs/results/NAME``, an experiment folder
its archive is restored into (`study_reports`): the archive in ``results/`` is only read.

``--check`` compares instead of writing: it lists each block and figure that would change and
exits 1 if any would (the figures are drawn into a temporary folder for that).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sgi_lab.analysis.probe_study import probe_folders, probe_frame
from sgi_lab.base.files import atomic_write_text
from sgi_lab.config_values import ConfigError
from sgi_lab.experiments.archive import restore
from sgi_lab.experiments.experiment_report import write_report
from sgi_lab.experiments.graph import expand
from sgi_lab.experiments.question import (
    power_markdown,
    power_report,
    progress_markdown,
    question_markdown,
    question_progress,
    sealed_question_figure,
)
from sgi_lab.experiments.rereading import rereading_markdown, rereading_table
from sgi_lab.experiments.scheduler import write_inputs
from sgi_lab.experiments.spec import load_experiment
from sgi_lab.experiments.study_cost import cost_markdown, study_cost
from sgi_lab.studies.finetune_budgets import write_finetune_budget_figure
from sgi_lab.studies.finetune_report import study_markdown
from sgi_lab.studies.probe_seed_tests import encoder_game_table
from sgi_lab.viz.forest import write_forest_svg
from sgi_lab.viz.markdown import frame_markdown

__all__ = [
    "COPY_MARK",
    "PAGE_BLOCKS",
    "PAGE_FIGURES",
    "STUDIES",
    "Block",
    "Figure",
    "block_markers",
    "main",
    "regenerate",
    "replace_blocks",
    "study_reports",
]

STUDIES = {
    "minatar_objectives": "params/experiments/minatar_objectives.yaml",
    "minatar_objectives_2x": "params/experiments/minatar_objectives_2x.yaml",
    "minatar_calibration": "params/experiments/minatar_calibration.yaml",
    "minatar_mixed": "params/experiments/minatar_mixed.yaml",
}
"""Each archived finetuning study in ``results/`` and the experiment file that declares it (the
archive's own ``experiment.yaml`` is the file as it ran; a question declared since lives in
the params file)."""

COPY_MARK = ".copy_of_results_archive"
"""The file `study_reports` leaves in each study folder it writes: a folder without it is not
ours, and is never replaced."""


@dataclass(frozen=True)
class Block:
    """A generated table of a page: ``make(root)`` gives the Markdown between its markers."""

    page: str
    name: str
    make: Callable[[Path], str]


@dataclass(frozen=True)
class Figure:
    """A generated figure of a page: ``draw(root, path)`` writes it to ``path``."""

    path: str
    draw: Callable[[Path, Path], object]


def block_markers(name: str) -> tuple[str, str]:
    """The two lines a page holds around the block ``name``."""
    return f"<!-- make results: {name} -->", f"<!-- make results: {name}, end -->"


def _from_line(text: str, start: str) -> str:
    """``text`` from its first line starting with ``start`` on, without trailing blank lines."""
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith(start)), None)
    if first is None:
        raise ValueError(f"no line starting with {start!r} in the generated text")
    return "\n".join(lines[first:]).rstrip()


def question_tables(study: str, figure: str) -> Callable[[Path], str]:
    """The declared question's tables of ``study`` (`question_markdown` on its archive: the
    contrasts, the link to its forest plot, named ``figure``, and each arm's runs and IQM; the
    plot itself is a `Figure` of its own)."""

    def make(root: Path) -> str:
        experiment = load_experiment(root / STUDIES[study])
        with tempfile.TemporaryDirectory() as scratch:  # the link only: drawn in PAGE_FIGURES
            path = Path(scratch) / figure
            text = question_markdown(root / "results" / study, experiment, figure=path)
        return _from_line(text, "| arm | against |")

    return make


def sealed_question_tables(study: str, figure: str) -> Callable[[Path], str]:
    """`question_tables` once every arm of ``study``'s declared question has all its runs in
    the archive; until then only each arm's finished runs against those planned
    (`question_progress`), so that a page shows no interim value of a pre-registered study."""

    def make(root: Path) -> str:
        experiment = load_experiment(root / STUDIES[study])
        progress = question_progress(root / "results" / study, experiment)
        if progress is not None:
            return progress_markdown(progress)
        return question_tables(study, figure)(root)

    return make


def sealed_rereadings(study: str) -> Callable[[Path], str]:
    """``study``'s declared contrasts re-read other ways (`rereading_table`: exploratory), once
    every arm of its question is complete; until then one line saying they wait for it."""

    def make(root: Path) -> str:
        experiment = load_experiment(root / STUDIES[study])
        if question_progress(root / "results" / study, experiment) is not None:
            return "Shown with the declared answer, once every arm is complete."
        return rereading_markdown(rereading_table(root / "results" / study, experiment))

    return make


def power_tables(
    study: str, pilot: str, seeds: int | None = None, alpha: float | None = None
) -> Callable[[Path], str]:
    """What ``study``'s design can detect, from the scratch runs of the archived ``pilot``
    (`power_report`, as ``sgi-lab experiment FILE --power --pilot results/PILOT``)."""

    def make(root: Path) -> str:
        experiment = load_experiment(root / STUDIES[study])
        found = power_report(root / "results" / pilot, experiment, seeds=seeds, alpha=alpha)
        return _from_line(power_markdown(found), "| at | value |")

    return make


def encoder_probe_table(study: str, metric: str) -> Callable[[Path], str]:
    """Each archived encoder's probe ``metric`` per game (`encoder_game_table`), read from the
    pretraining runs' and probe tasks' ``probes.json`` that ``study``'s archive keeps."""

    def make(root: Path) -> str:
        archive = root / "results" / study
        folders = probe_folders(
            [f"{archive}/pretrain/*", f"{archive}/probes/*"], current_only=False
        )
        return frame_markdown(encoder_game_table(probe_frame(folders, current_only=False), metric))

    return make


def cost_table(study: str) -> Callable[[Path], str]:
    """What ``study``'s archived tasks cost, by part (`study_cost`: training hours from their
    logged speeds, commits, CPUs)."""

    def make(root: Path) -> str:
        return cost_markdown(study_cost(root / "results" / study))

    return make


def _budget_figure(root: Path, path: Path) -> object:
    folders = {
        "10k steps": root / "results/minatar_objectives",
        "20k steps": root / "results/minatar_objectives_2x",
    }
    return write_finetune_budget_figure(folders, path)


def _question_figure(study: str) -> Callable[[Path, Path], object]:
    """``study``'s forest plot, sealed (`sealed_question_figure`: no value) until every arm of
    its declared question is complete, as its page block is."""

    def draw(root: Path, path: Path) -> object:
        experiment = load_experiment(root / STUDIES[study])
        progress = question_progress(root / "results" / study, experiment)
        if progress is not None:
            return write_forest_svg(path, sealed_question_figure(experiment, progress))
        return question_markdown(root / "results" / study, experiment, figure=path)

    return draw


PAGE_BLOCKS = (
    Block("docs/results/minatar.md", "calibration question", sealed_question_tables(
        "minatar_calibration", "minatar_calibration_question.svg")),
    Block("docs/results/minatar.md", "calibration re-readings", sealed_rereadings(
        "minatar_calibration")),
    Block("docs/results/minatar.md", "calibration power", power_tables(
        "minatar_calibration", "minatar_objectives")),
    Block("docs/results/minatar.md", "calibration power, its own scratch runs", power_tables(
        "minatar_calibration", "minatar_calibration")),
    Block("docs/results/minatar.md", "mixed question", sealed_question_tables(
        "minatar_mixed", "minatar_mixed_question.svg")),
    Block("docs/results/minatar.md", "mixed re-readings", sealed_rereadings("minatar_mixed")),
    Block("docs/results/minatar.md", "mixed power", power_tables(
        "minatar_mixed", "minatar_calibration")),
    Block("docs/results/minatar.md", "objectives question", question_tables(
        "minatar_objectives", "minatar_objectives_question.svg")),
    Block("docs/results/minatar.md", "objectives power, Holm", power_tables(
        "minatar_objectives", "minatar_objectives", seeds=3)),
    Block("docs/results/minatar.md", "objectives power, one contrast", power_tables(
        "minatar_objectives", "minatar_objectives", seeds=3, alpha=0.05)),
    Block("docs/results/minatar.md", "objectives cost", cost_table("minatar_objectives")),
    Block("docs/results/minatar.md", "calibration cost", cost_table("minatar_calibration")),
    Block("docs/results/minatar.md", "mixed cost", cost_table("minatar_mixed")),
    Block("docs/results/probes.md", "objectives encoders' coordinate R2", encoder_probe_table(
        "minatar_objectives", "coordinate_r2")),
)  # fmt: skip
"""Every generated table of the pages, in page order."""

PAGE_FIGURES = (
    Figure(
        "docs/results/minatar_calibration_question.svg", _question_figure("minatar_calibration")
    ),
    Figure("docs/results/minatar_mixed_question.svg", _question_figure("minatar_mixed")),
    Figure("docs/results/minatar_objectives_question.svg", _question_figure("minatar_objectives")),
    Figure("docs/results/minatar_finetune_budgets.svg", _budget_figure),
)
"""Every generated figure of the pages."""


def replace_blocks(text: str, blocks: dict[str, str], page: str = "the page") -> str:
    """``text`` with the lines between each block's markers replaced by ``blocks[name]``.

    Raises:
        ValueError: a block's markers are missing, doubled or out of order (``page`` named).
    """
    lines = text.split("\n")
    for name, body in blocks.items():
        begin, end = block_markers(name)
        starts = [i for i, line in enumerate(lines) if line.strip() == begin]
        ends = [i for i, line in enumerate(lines) if line.strip() == end]
        if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
            raise ValueError(
                f"{page}: block {name!r} needs one {begin!r} line and, below it, one {end!r} "
                f"line (found {len(starts)} and {len(ends)})"
            )
        lines[starts[0] + 1 : ends[0]] = body.split("\n")
    return "\n".join(lines)


def regenerate(
    root: str | os.PathLike = ".",
    blocks: Sequence[Block] = PAGE_BLOCKS,
    figures: Sequence[Figure] = PAGE_FIGURES,
    check: bool = False,
) -> list[str]:
    """Rewrite every generated block and figure of the pages under ``root`` from ``results/``
    (with ``check``, write nothing: figures are drawn into a temporary folder and compared).

    Returns:
        What changed (with ``check``: what would), one line each, ``page: block`` or a figure's
        path; empty when every page already says what its archives give.
    """
    root = Path(root)
    changed: list[str] = []
    pages: dict[str, dict[str, str]] = {}
    for block in blocks:
        pages.setdefault(block.page, {})[block.name] = block.make(root)
    for page, made in pages.items():
        path = root / page
        before = path.read_text()
        after = replace_blocks(before, made, page)
        for name, body in made.items():
            if replace_blocks(before, {name: body}, page) != before:
                changed.append(f"{page}: {name}")
        if after != before and not check:
            atomic_write_text(path, after)
    with tempfile.TemporaryDirectory() as scratch:
        for figure in figures:
            path = root / figure.path
            target = Path(scratch) / path.name if check else path
            if check and path.exists():
                shutil.copyfile(path, target)  # the writers replace only a figure of theirs
            before = path.read_bytes() if path.exists() else None
            figure.draw(root, target)
            if target.read_bytes() != before:
                changed.append(figure.path)
    return changed


def study_reports(
    root: str | os.PathLike = ".",
    out: str | os.PathLike = "outputs/results",
    studies: Sequence[str] | None = None,
    reps: int = 2000,
) -> list[Path]:
    """Each archived study's report (`write_report`) in ``out/NAME``: an experiment folder of
    the experiment file that declares it (`STUDIES`) into which ``results/NAME`` is restored
    (`restore`, as ``--report-only --archive`` does, without archiving anything back).

    Raises:
        FileExistsError: ``out/NAME`` exists and is not a folder this function made.
    """
    root, out = Path(root), Path(out)
    written = []
    for name in studies if studies is not None else list(STUDIES):
        archive, folder = root / "results" / name, out / name
        if not archive.is_dir():  # declared, not run yet: nothing to report
            print(f"{name}: no archive at {archive} yet", file=sys.stderr)
            continue
        if folder.exists() and not (folder / COPY_MARK).is_file():
            raise FileExistsError(f"{folder}: not a copy of {archive} made here; left as it is")
        if folder.exists():  # ours, from an earlier run: made again from the archive
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        (folder / COPY_MARK).write_text(f"restored from {archive} by make results\n")
        experiment = load_experiment(root / STUDIES[name])
        try:
            graph = expand(experiment, folder)
        except ConfigError as exc:  # it reuses runs of another experiment folder, not here
            print(f"{name}: its tables only ({exc})", file=sys.stderr)
            written.append(_tables_only(experiment, archive, folder, reps))
            continue
        write_inputs(graph, folder)  # the folder marked as this experiment's, as a run marks it
        restore(graph, archive)
        written.append(write_report(graph, reps))  # reps: the report's bootstrap resamples
    return written


def _tables_only(experiment: Any, archive: Path, folder: Path, reps: int) -> Path:
    """``results.md`` of a study whose graph cannot be built here (its ``run:`` names another
    experiment's folder, absent from a fresh clone): the study's tables (`study_markdown`) read
    from a copy of its archive's finetuning runs, without the encoders' probes beside them."""
    shutil.copytree(archive / "finetune", folder / "finetune")
    planned = sum(1 for p in (folder / "finetune").glob("*/*") if p.is_dir())
    tables = study_markdown(
        folder, planned=planned, reps=reps, curves=folder / "curves.svg", per_seed=True
    )
    path = folder / "results.md"
    head = [f"# {experiment.name}", "", experiment.description, ""]
    atomic_write_text(path, "\n".join([*head, tables]))
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sgi_lab.experiments.results_pages [--check] [--no-reports] [--out DIR]``."""
    parser = argparse.ArgumentParser(
        prog="python -m sgi_lab.experiments.results_pages",
        description="regenerate the docs/results pages' tables and figures from results/",
    )
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository's root")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; list what would change, exit 1 if any"
    )
    parser.add_argument(
        "--no-reports", action="store_true", help="the pages only, not each study's report"
    )
    parser.add_argument(
        "--out", type=Path, default=Path("outputs/results"), help="where the studies' reports go"
    )
    args = parser.parse_args(argv)
    changed = regenerate(args.root, check=args.check)
    verb = "would change" if args.check else "rewritten"
    for line in changed:
        print(f"{verb}: {line}")
    if not changed:
        print("every generated table and figure of docs/results/ is what results/ gives")
    if not args.check and not args.no_reports:
        for path in study_reports(args.root, args.out):
            print(f"report: {path}")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
