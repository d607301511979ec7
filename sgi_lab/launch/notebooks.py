"""Notebooks as runs: the ``sgi-lab run`` wrapper, and the helpers a notebook's setup cell calls.

`run_notebook` executes one notebook with papermill into its own run folder,
``outputs/runs/<notebook>__<config>__<game>__s<seed>/`` (its files: outputs/README.md). The run
folder reaches the notebook as its ``out_dir`` parameter. A finished run is never
overwritten unless asked; a run left ``running`` (killed) or ``failed`` is executed again into the
same folder, where the trainers resume from their last checkpoint.

A notebook's first code cell holds only literals (the ``parameters`` cell); its next cell calls
`enter_project_root`, `stage_config` and `run_dir_for` to turn them into a config and a folder.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from sgi_lab.config import (
    ConfigError,
    load_config,
    load_yaml_mapping,
    parse_value,
    read_params,
)
from sgi_lab.runs import (
    CHECKPOINT_RE,
    RunDir,
    atomic_write_text,
    jsonable,
    read_mapping,
    read_status,
    record_provenance,
    run_kind,
    run_name,
)

__all__ = [
    "NotebookRunError",
    "RecordedResults",
    "RunExistsError",
    "DISCOVERY_ROOTS",
    "add_run_parser",
    "describe_run",
    "discover_run",
    "discover_runs_root",
    "enter_project_root",
    "find_latest_run",
    "find_runs_of_kind",
    "find_project_root",
    "is_smoke_run",
    "main_run",
    "notebook_defaults",
    "open_store",
    "parse_parameter",
    "prune_checkpoints",
    "read_param_file",
    "record_results",
    "resolve_notebook",
    "resolve_parameters",
    "run_dir_for",
    "run_folder_name",
    "run_header",
    "run_notebook",
    "figure_formats",
    "save_figure",
    "static_export_problem",
    "show_run_header",
    "stage_config",
]

DEFAULT_OUT_ROOT = "outputs/runs"
KEEP_CHECKPOINTS = 1
"""Checkpoints a finished run keeps per ``checkpoints/`` folder: the newest one is the whole
training state (optimizer, replay) to go on from; ``model.pt`` is always kept. While a run is
running its trainer keeps two, so that a kill mid-write still leaves one to resume from."""
PARAMS_FILE = "params.yaml"
RESULTS_FILE = "results.json"


class RunExistsError(FileExistsError):
    """The run folder already holds a finished run (pass ``overwrite=True`` to redo it)."""


class NotebookRunError(RuntimeError):
    """A notebook failed; ``run_dir`` holds the executed notebook showing the failing cell."""

    def __init__(self, message: str, run_dir: Path) -> None:
        super().__init__(message)
        self.run_dir = run_dir


# -- the project and its notebooks --------------------------------------------------------------


def find_project_root(start: str | os.PathLike | None = None) -> Path | None:
    """The nearest folder at or above ``start`` (default: cwd) holding ``notebooks/`` and ``params/``."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "notebooks").is_dir() and (folder / "params").is_dir():
            return folder
    return None


def enter_project_root() -> Path:
    """Make the project root the working directory (JupyterLab starts kernels in ``notebooks/``).

    Every relative path in a notebook's parameters (``params/...``, ``outputs/...``) then means
    the same thing whether the notebook runs in JupyterLab, under papermill or ``sgi-lab run``.
    Outside a checkout the working directory is left as it is.

    Returns:
        The working directory afterwards.
    """
    root = find_project_root()
    if root is not None and Path.cwd().resolve() != root:
        os.chdir(root)
    return Path.cwd()


def resolve_notebook(notebook: str | os.PathLike) -> Path:
    """``"pretrain"``, ``"pretrain.ipynb"`` or a path -> the notebook file (which must exist)."""
    path = Path(notebook)
    candidates = [path]
    if path.suffix != ".ipynb":
        candidates.append(path.with_name(path.name + ".ipynb"))
    root = find_project_root()
    if root is not None and not path.is_absolute():
        candidates += [root / "notebooks" / c.name for c in candidates]
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    raise FileNotFoundError(
        f"no notebook {notebook!r} (tried {', '.join(str(c) for c in candidates)})"
    )


# -- parameters ---------------------------------------------------------------------------------


def read_param_file(path: str | os.PathLike) -> dict[str, Any]:
    """A papermill parameters file: a YAML mapping of notebook parameter names to values."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(
            f"{path}: a folder, expected a YAML parameters file (e.g. "
            "params/notebooks/pretrain_smoke.yaml)"
        )
    if not path.is_file():
        raise FileNotFoundError(f"{path}: parameters file not found")
    return load_yaml_mapping(path, "a mapping of parameter names to values")


def parse_parameter(raw: str) -> Any:
    """A ``-p KEY VALUE`` value as YAML: ``3`` -> 3, ``true`` -> True, ``1e-4`` -> 0.0001."""
    return parse_value(raw)


def notebook_defaults(notebook: str | os.PathLike) -> dict[str, Any]:
    """The literal values of a notebook's ``parameters`` cell (``{}`` when it has none)."""
    import ast

    import nbformat

    nb = nbformat.read(resolve_notebook(notebook), as_version=4)
    cell = next(
        (
            c
            for c in nb.cells
            if c.cell_type == "code" and "parameters" in c.metadata.get("tags", [])
        ),
        None,
    )
    defaults: dict[str, Any] = {}
    if cell is None:
        return defaults
    for node in ast.parse(cell.source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                defaults[target.id] = ast.literal_eval(node.value)
    return defaults


def resolve_parameters(
    params_file: str | os.PathLike | None = None,
    parameters: dict[str, Any] | None = None,
    notebook: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """The notebook's defaults (when ``notebook`` is given), updated by the parameters file's
    mapping, updated by ``parameters``: what the notebook will run with.

    Raises:
        ConfigError: a parameter the notebook's ``parameters`` cell does not define (papermill
            would only warn, and the run would silently ignore it).
    """
    resolved = notebook_defaults(notebook) if notebook is not None else {}
    from_file = read_param_file(params_file) if params_file else {}
    if resolved:
        unknown = sorted((set(from_file) | set(parameters or {})) - set(resolved))
        if unknown:
            raise ConfigError(
                f"unknown notebook parameter(s) {unknown} for {Path(notebook).name}; "
                f"its parameters cell defines: {sorted(resolved)}"
            )
        for key, value in {**from_file, **(parameters or {})}.items():
            _check_parameter_type(key, value, resolved[key], Path(notebook).name)
    resolved.update(from_file)
    resolved.update(parameters or {})
    return resolved


def _check_parameter_type(key: str, value: Any, default: Any, notebook: str) -> None:
    """Refuse a value of another type than a numeric or boolean default's (``-p seed abc``),
    before a run folder is named after it; other defaults (text, None, lists) take anything."""
    if isinstance(default, bool):
        ok, what = isinstance(value, bool), "true or false"
    elif isinstance(default, int):
        ok, what = isinstance(value, int) and not isinstance(value, bool), "an integer"
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        what = "a number"
    else:
        return
    if not ok:
        raise ConfigError(
            f"{key}: expected {what} (the default in {notebook} is {default!r}), got {value!r}"
        )


def run_folder_name(
    notebook: str, parameters: dict[str, Any], params_file: str | os.PathLike | None = None
) -> str:
    """``<notebook>__<config>__<game>__s<seed>`` from the resolved parameters.

    The config part is the ``name`` parameter, else the name of the notebook's own
    ``params_file`` parameter (pretrain/finetune), else the parameters file's stem without a
    ``<notebook>_`` prefix, else ``default``; game and seed are left out when absent.
    """
    stem = Path(notebook).stem
    config = parameters.get("name") or ""
    stage_file = parameters.get("params_file")
    if not config and stage_file and not parameters.get("config") and Path(stage_file).is_file():
        # the pretrain/finetune notebooks take their set's name from their own params_file
        config = str(read_param_file(stage_file).get("name") or Path(stage_file).stem)
    config = config or (Path(params_file).stem if params_file else "") or "default"
    config = config.removeprefix(f"{stem}_") or config  # params/notebooks/pretrain_smoke -> smoke
    seed = parameters.get("seed")
    return run_name(
        stem,
        config,
        parameters.get("game"),
        None if seed is None else f"s{seed}",
    )


DISCOVERY_ROOTS: tuple[str, ...] = ("outputs/demo", "outputs/runs", "outputs/experiments")
"""Where notebooks look for runs the user already has: the demo's, ``sgi-lab run``'s and
``sgi-lab experiment``'s folders (relative to the project root)."""

_RESULT_FILE = {"pretrain": "model.pt", "finetune": "eval.json"}


def _recorded_game(folder: Path) -> str | None:
    status = read_status(folder) or {}
    for source in (
        status,
        read_mapping(folder / "config.yaml"),
        read_mapping(folder / "eval.json"),
    ):
        if source.get("game"):
            return str(source["game"])
    return None


def _same_game(a: str, b: str) -> bool:
    from sgi_lab.envs.games import UnknownGameError, canonical_game

    try:
        return canonical_game(a) == canonical_game(b)
    except UnknownGameError:
        return a == b


def find_runs_of_kind(
    kind: str,
    roots: tuple[str | os.PathLike, ...] | list[str | os.PathLike] = DISCOVERY_ROOTS,
    game: str | None = None,
) -> list[Path]:
    """Finished runs of a stage under ``roots``, newest first (by their status.json's time).

    Args:
        kind: ``"pretrain"`` (a finished run with its ``model.pt``) or ``"finetune"`` (one with
            an ``eval.json``).
        roots: folders searched recursively; missing ones are skipped.
        game: keep only runs of this game (runs that record no game are kept).
    """
    if kind not in _RESULT_FILE:
        raise ValueError(f"kind must be one of {sorted(_RESULT_FILE)}, got {kind!r}")
    found: dict[Path, float] = {}
    for root in map(Path, roots):
        if not root.is_dir():
            continue
        for status_file in root.rglob("status.json"):
            folder = status_file.parent
            if folder in found or not (folder / _RESULT_FILE[kind]).is_file():
                continue
            if run_kind(folder) not in (kind, "") or read_status(folder).get("state") != "finished":
                continue
            recorded = _recorded_game(folder) if game else None
            if game and recorded and not _same_game(recorded, game):
                continue
            found[folder] = status_file.stat().st_mtime
    # A smoke run (a test's few steps) is newest after every Lab session that ran a notebook
    # with its defaults: the full runs come first, newest first, and smoke runs after them.
    return sorted(found, key=lambda p: (is_smoke_run(p), -found[p], str(p)))


def is_smoke_run(folder: str | os.PathLike) -> bool:
    """Whether a run is a smoke run (its parameter set or folder is named ``*smoke*``)."""
    folder = Path(folder)
    status = read_status(folder) or {}
    names = [folder.name, str(status.get("params") or "")]
    return any("smoke" in n.lower() for n in names)


def describe_run(folder: str | os.PathLike) -> dict[str, Any]:
    """What a notebook says about the run it uses: ``name`` (the folder), ``params`` (its
    parameter set), ``game``, ``step`` (of ``steps``), ``state`` and ``smoke``."""
    folder = Path(folder)
    status = read_status(folder) or {}
    config = read_mapping(folder / "config.yaml")
    return {
        "name": folder.name,
        "params": status.get("params") or "",
        "game": _recorded_game(folder) or "",
        "step": status.get("step"),
        "steps": config.get("steps"),
        "encoder": config.get("encoder", ""),
        "state": status.get("state", "unknown"),
        "smoke": is_smoke_run(folder),
    }


def run_header(
    folder: str | os.PathLike | None,
    what: str,
    parameter: str,
    automatic: bool,
    others: list[Path] | None = None,
    fallback: str = "",
) -> str:
    """The one line (HTML) at the top of a notebook naming the run it shows: its name,
    parameter set, encoder, steps and state, whether it was picked automatically, and how
    to pick another (``parameter`` in the parameters cell, with other runs found)."""
    import html

    if folder is None:
        body = f"<b>{html.escape(what)}: none</b>" + (
            f" — {html.escape(fallback)}" if fallback else ""
        )
        hint = f"set <code>{html.escape(parameter)}</code> in the parameters cell to use one"
    else:
        info = describe_run(folder)
        step = info["step"] if info["step"] is not None else "?"
        steps = f"{step} of {info['steps']} steps" if info["steps"] else f"step {step}"
        facts = [
            f"params <code>{html.escape(str(info['params'] or '?'))}</code>",
            *([html.escape(str(info["encoder"]))] if info["encoder"] else []),
            *([html.escape(str(info["game"]))] if info["game"] else []),
            steps,
            html.escape(str(info["state"])) + (" (smoke run)" if info["smoke"] else ""),
        ]
        body = (
            f"<b>{html.escape(what)}: {html.escape(info['name'])}</b> — {', '.join(facts)}"
            f"<br><small>{html.escape(str(folder))}</small>"
        )
        if automatic:
            hint = (
                "picked automatically (the newest finished run, full runs before smoke runs); "
                f"set <code>{html.escape(parameter)}</code> in the parameters cell to pin "
                "another"
            )
            if others:
                listed = ", ".join(f"<code>{html.escape(str(p))}</code>" for p in others[:3])
                hint += f", e.g. {listed}" + (
                    f" ({len(others) - 3} more)" if len(others) > 3 else ""
                )
        else:
            hint = f"pinned by <code>{html.escape(parameter)}</code> in the parameters cell"
    return (
        '<div class="sgi-lab-run-header" style="border-left: 4px solid #636efa; '
        f'padding: 4px 10px; margin: 4px 0">{body}<br><small>{hint}</small></div>'
    )


def show_run_header(header: str) -> None:
    """Display a `run_header` (HTML in a notebook; its text elsewhere)."""
    try:
        from IPython import get_ipython
        from IPython.display import HTML, display
    except ImportError:  # pragma: no cover - IPython is a dependency
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        display(HTML(header))
        return
    import re

    text = re.sub(r"<br>", "\n", header)
    print(re.sub(r"<[^>]+>", "", text))


def find_latest_run(
    kind: str,
    roots: tuple[str | os.PathLike, ...] | list[str | os.PathLike] = DISCOVERY_ROOTS,
    game: str | None = None,
) -> Path | None:
    """The newest finished run of ``kind`` under ``roots`` (`find_runs_of_kind`), or None."""
    runs = find_runs_of_kind(kind, roots, game)
    return runs[0] if runs else None


_WHAT = {"pretrain": "pretraining run", "finetune": "finetuning run"}


def discover_run(
    value: str,
    kind: str,
    parameter: str,
    roots: tuple[str | os.PathLike, ...] | list[str | os.PathLike] = DISCOVERY_ROOTS,
    game: str | None = None,
    fallback: str = "",
) -> str:
    """A notebook parameter naming a run: ``value`` when set, else the newest finished run of
    ``kind`` under ``roots`` (``""`` when there is none); prints which one and how to change it.

    Args:
        value: the parameter's value (``""``: discover).
        kind: ``"pretrain"`` or ``"finetune"``.
        parameter: the parameter's name, for the message (``"pretrained"``).
        roots: where to look (default `DISCOVERY_ROOTS`).
        game: prefer runs of this game.
        fallback: what the notebook does without a run, for the message.
    """
    what = _WHAT[kind]
    if value:
        show_run_header(run_header(value, what, parameter, automatic=False))
        return value
    runs = find_runs_of_kind(kind, roots, game)
    where = ", ".join(str(r) for r in roots)
    if not runs:
        none = f"no finished {what} under {where}" + (f" for {game}" if game else "")
        show_run_header(
            run_header(None, what, parameter, True, fallback=f"{none}; {fallback}".strip("; "))
        )
        return ""
    show_run_header(run_header(runs[0], what, parameter, automatic=True, others=runs[1:]))
    return str(runs[0])


def discover_runs_root(
    value: str,
    parameter: str = "runs_root",
    roots: tuple[str | os.PathLike, ...] | list[str | os.PathLike] = DISCOVERY_ROOTS,
) -> str:
    """A folder of finetuning runs: ``value`` when set, else the root under ``roots`` that holds
    the newest finished finetuning run (an experiment's own folder for
    ``outputs/experiments/NAME/...``); prints which one. ``outputs/runs`` when there is none
    (the caller then says that nothing was found)."""
    if value:
        show_run_header(
            f'<div class="sgi-lab-run-header"><b>finetuning runs under {value}</b><br>'
            f"<small>pinned by <code>{parameter}</code> in the parameters cell</small></div>"
        )
        return value
    found = find_latest_run("finetune", roots)
    where = ", ".join(str(r) for r in roots)
    if found is None:
        print(f"no finetuning runs under {where}; set {parameter} in the parameters cell")
        return DEFAULT_OUT_ROOT
    for root in map(Path, roots):
        try:
            rel = found.relative_to(root)
        except ValueError:
            continue
        chosen = root / rel.parts[0] if root.name == "experiments" and len(rel.parts) > 1 else root
        others = [str(r) for r in roots if Path(r) != chosen and Path(r).is_dir()]
        show_run_header(
            run_header(found, f"finetuning runs under {chosen}; the newest", parameter, True)
            .replace("the newest finished run", "the folder of the newest finished run")
            .replace(
                "to pin another",
                "to choose another folder"
                + (f" (searched: {', '.join(others)})" if others else ""),
            )
        )
        return str(chosen)
    return str(found.parent)


def run_dir_for(
    notebook: str,
    out_dir: str = "",
    name: str = "",
    game: str | None = None,
    seed: int | None = None,
    root: str | os.PathLike = DEFAULT_OUT_ROOT,
) -> Path:
    """The folder a notebook writes to: ``out_dir`` when given, else the folder `run_notebook`
    would pick (``root/<notebook>__<name>__<game>__s<seed>``), created if missing."""
    if out_dir:
        path = Path(out_dir)
    else:
        parts = {"name": name or "default", "game": game, "seed": seed}
        path = Path(root) / run_folder_name(notebook, {k: v for k, v in parts.items() if v != ""})
    path.mkdir(parents=True, exist_ok=True)
    return path


def stage_config(
    cls: type,
    params_file: str = "",
    config: dict[str, Any] | None = None,
    overrides: dict[str, Any] | None = None,
    name: str = "",
    **fields: Any,
) -> tuple[Any, str]:
    """Build a stage config from a notebook's parameters, with a clear precedence.

    Lowest to highest: the params file's ``config`` mapping (``params_file``), replaced whole
    by ``config`` when that is non-empty (papermill ``-f params/pretrain/sgi_m.yaml`` injects
    ``name``, ``description`` and ``config``), then ``fields`` that are not None (the notebook's
    own ``game``/``seed``/``pretrained`` parameters), then ``overrides``.

    Args:
        cls: `PretrainConfig` or `FinetuneConfig`.
        params_file: a ``params/<stage>/*.yaml`` path, or ``""``.
        config: a config mapping; non-empty wins over ``params_file``.
        overrides: keys to change last.
        name: the parameter set's name; defaults to the params file's name (or its stem).
        **fields: config fields set from notebook parameters; None leaves a field alone.

    Returns:
        ``(config, name)``; name is ``"custom"`` when nothing names the set.
    """
    if config:
        values = dict(config)
    elif params_file:
        payload = read_params(params_file)
        values = dict(payload.get("config", {}))
        name = name or str(payload.get("name") or Path(params_file).stem)
    else:
        values = {}
    values.update({k: v for k, v in fields.items() if v is not None})
    built = load_config(cls, values, overrides or {})
    return built, name or "custom"


def open_store(data: str | os.PathLike, game: str = "Pong", collect_steps: int = 0, seed: int = 0):
    """Open the TransitionStore at ``data``; if it is missing and ``collect_steps`` > 0, first
    collect a Random dataset of that many steps there (so a notebook can start from nothing)."""
    from sgi_lab.data import TransitionStore
    from sgi_lab.data.collect import collect_random

    path = Path(data)
    if path.exists() or collect_steps <= 0:
        return TransitionStore(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return collect_random(game, int(collect_steps), path, seed=seed)


# -- what a notebook writes ---------------------------------------------------------------------


FIGURE_FORMATS_ENV = "SGI_LAB_FIGURE_FORMATS"
"""Static formats every `save_figure` also writes, comma-separated (``png,svg,pdf``); set by
``sgi-lab run --figure-formats`` for the notebook's kernel, or in the environment."""
STATIC_FORMATS = ("png", "svg", "pdf")


def figure_formats(formats: str | list[str] | tuple[str, ...] | None = None) -> list[str]:
    """The static formats asked for (``formats``, else `FIGURE_FORMATS_ENV`), checked.

    Raises:
        ValueError: a format that is not one of png, svg, pdf (named).
    """
    if formats is None:
        formats = os.environ.get(FIGURE_FORMATS_ENV, "")
    if isinstance(formats, str):
        formats = [f.strip().lower().lstrip(".") for f in formats.split(",") if f.strip()]
    bad = [f for f in formats if f not in STATIC_FORMATS]
    if bad:
        raise ValueError(
            f"figure formats {bad} unknown; static formats are {', '.join(STATIC_FORMATS)} "
            "(HTML is always written)"
        )
    return list(dict.fromkeys(formats))


def static_export_problem() -> str | None:
    """Why static figures cannot be written here (None when they can): plotly writes PNG, SVG
    and PDF through kaleido (``pip install 'sgi-lab[export]'``), which drives a local Chrome
    or Chromium (``apt-get install chromium``); nothing is fetched from the network."""
    try:
        import kaleido  # noqa: F401
    except ImportError:
        return "kaleido is not installed: pip install 'sgi-lab[export]'"
    import shutil as _shutil

    browsers = ("chromium", "chromium-browser", "google-chrome", "chrome")
    if os.environ.get("BROWSER_PATH") or any(_shutil.which(b) for b in browsers):
        return None
    return "kaleido needs Chrome or Chromium: apt-get install chromium (or set BROWSER_PATH)"


def save_figure(
    fig: Any,
    out_dir: str | os.PathLike,
    name: str,
    formats: str | list[str] | tuple[str, ...] | None = None,
) -> Path:
    """Write a plotly figure to ``out_dir/figures/<name>.html`` (plotly.js once per folder), and
    beside it ``<name>.png`` / ``.svg`` / ``.pdf`` for each static format asked for
    (`figure_formats`: ``formats``, else ``$SGI_LAB_FIGURE_FORMATS``).

    Raises:
        ValueError: an unknown format.
        RuntimeError: static formats were asked for and cannot be written here (why, and what
            to install); the HTML is written first.
    """
    formats = figure_formats(formats)
    folder = Path(out_dir) / "figures"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.html"
    fig.write_html(path, include_plotlyjs="directory", full_html=True)
    if formats:
        problem = static_export_problem()
        if problem:
            raise RuntimeError(f"{name}: cannot write {', '.join(formats)} figures: {problem}")
        for fmt in formats:
            fig.write_image(folder / f"{name}.{fmt}", format=fmt)
    return path


class RecordedResults(dict):
    """A notebook's recorded results: a plain dict that a notebook shows as a short table
    (`sgi_lab.viz.tables.results_frame`: rounded numbers, long lists summarised) rather than
    the raw dict with every digit."""

    def _frame(self):
        from sgi_lab.viz.tables import results_frame

        return results_frame(self)

    def _repr_html_(self) -> str:
        return self._frame().to_html(index=False, border=0)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text("{...}" if cycle else self._frame().to_string(index=False))


def record_results(out_dir: str | os.PathLike, results: dict[str, Any]) -> dict[str, Any]:
    """The last cell of every notebook: write ``results.json`` in the run folder and return it
    (a `RecordedResults`: the dict, shown as a short table).

    `run_notebook` copies it into ``status.json`` and `sgi_lab.launch.sweep` into ``sweep.json``.
    """
    payload = jsonable(results)
    path = Path(out_dir) / RESULTS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(payload, indent=2, default=str))
    return RecordedResults(payload)


# -- running ------------------------------------------------------------------------------------


def run_notebook(
    notebook: str | os.PathLike,
    params_file: str | os.PathLike | None = None,
    parameters: dict[str, Any] | None = None,
    out_root: str | os.PathLike = DEFAULT_OUT_ROOT,
    overwrite: bool = False,
    name: str | None = None,
    progress: bool = True,
    kernel_name: str | None = None,
    keep_checkpoints: int | None = KEEP_CHECKPOINTS,
) -> Path:
    """Execute a notebook with papermill into its own run folder.

    Args:
        notebook: ``"pretrain"``, ``"notebooks/pretrain.ipynb"``, or any notebook path.
        params_file: a YAML mapping of parameter names to values (papermill's ``-f``); a
            ``params/<stage>/*.yaml`` file works too (its ``name``/``description``/``config``
            keys are parameters of the pretrain and finetune notebooks).
        parameters: values that win over the file's (papermill's ``-p``).
        out_root: where run folders go.
        overwrite: run again from scratch over a finished run (its folder is emptied).
        name: the run folder's name; default ``<notebook>__<config>__<game>__s<seed>``.
        progress: papermill's per-cell progress bar.
        kernel_name: Jupyter kernel; default the notebook's own (``python3``).
        keep_checkpoints: once the run finishes, the newest checkpoints kept in each of its
            ``checkpoints/`` folders (a population's agents included); None keeps all. A failed
            run keeps every checkpoint, to resume from.

    Returns:
        The run folder, its status ``finished``.

    Raises:
        RunExistsError: the folder holds a finished run and ``overwrite`` is false.
        NotebookRunError: a cell raised; status.json says ``failed`` with the error, and the
            executed notebook in the folder shows the failing cell with its traceback.
    """
    import papermill
    from papermill.exceptions import PapermillExecutionError

    nb_path = resolve_notebook(notebook)
    resolved = resolve_parameters(params_file, parameters, nb_path)
    folder = Path(out_root) / (name or run_folder_name(nb_path.stem, resolved, params_file))
    run = RunDir(folder)
    state = run.status().get("state", "new")
    if state == "finished":
        if not overwrite:
            raise RunExistsError(
                f"{folder} already holds a finished run; pass overwrite=True "
                "(sgi-lab run --overwrite) to run it again from scratch, or choose another name"
            )
        shutil.rmtree(folder)
        run = RunDir(folder)
        state = "new"
    resolved["out_dir"] = str(folder)
    atomic_write_text(folder / PARAMS_FILE, yaml.safe_dump(jsonable(resolved), sort_keys=False))
    out_nb = folder / nb_path.name
    attempt = int(run.status().get("attempt", 0)) + 1 if state != "new" else 1
    started = time.time()
    run.set_status(
        "running",
        notebook=str(out_nb),
        source=str(nb_path),
        params_file=None if params_file is None else str(params_file),
        attempt=attempt,
        resumed=state != "new",
        error=None,
        started=time.strftime("%Y-%m-%dT%H:%M:%S"),
        provenance=record_provenance(run.status()),
    )
    try:
        # Static figures in the kernel: the executed notebook and its HTML page keep them.
        from sgi_lab.viz.training import STATIC_FIGURES_ENV

        with _environment({STATIC_FIGURES_ENV: "1"}):
            papermill.execute_notebook(
                str(nb_path),
                str(out_nb),
                parameters=resolved,
                kernel_name=kernel_name,
                progress_bar=progress,
                cwd=str(find_project_root(nb_path.parent) or Path.cwd()),
                **_kernel_manager(),
            )
    except PapermillExecutionError as exc:
        message = f"{exc.ename}: {exc.evalue}"
        run.set_status(
            "failed",
            error=message,
            failed_cell=exc.exec_count,
            duration_s=round(time.time() - started, 1),
        )
        raise NotebookRunError(
            f"{nb_path.name} failed in cell [{exc.exec_count}]: {message} "
            f"(the executed notebook is {out_nb})",
            folder,
        ) from exc
    except BaseException as exc:  # kernel died, interrupted: the folder can be resumed
        run.set_status(
            "failed",
            error=f"{type(exc).__name__}: {exc}",
            duration_s=round(time.time() - started, 1),
        )
        raise
    results_path = folder / RESULTS_FILE
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    if keep_checkpoints is not None:
        prune_checkpoints(folder, keep_checkpoints)
    run.set_status("finished", results=results, duration_s=round(time.time() - started, 1))
    return folder


def prune_checkpoints(folder: str | os.PathLike, keep: int = KEEP_CHECKPOINTS) -> list[Path]:
    """Delete all but the newest ``keep`` checkpoints in every ``checkpoints/`` under ``folder``.

    A Nature-encoder pretraining checkpoint weighs about 300 MB (weights, target network,
    optimizer) and a finetuning one carries its replay; a finished run needs at most the last.

    Returns:
        The checkpoints deleted.
    """
    removed = []
    for ckpt_dir in sorted(Path(folder).rglob("checkpoints")):
        found = sorted(p for p in ckpt_dir.iterdir() if CHECKPOINT_RE.search(p.name))
        for old in found[: len(found) - max(keep, 0)]:
            old.unlink()
            removed.append(old)
    return removed


def _kernel_manager() -> dict[str, Any]:
    """papermill's kernel manager, where the machine has Unix sockets: the kernel talks over
    sockets in a private temporary folder (mode 0700, removed at shutdown) instead of loopback
    TCP ports, so other users of a shared machine cannot connect to or read its traffic, and
    ipykernel's warning about unencrypted TCP is not printed at every run."""
    if os.name != "posix":
        return {}
    import tempfile

    from jupyter_client.manager import AsyncKernelManager
    from traitlets import default

    class PrivateSocketsKernelManager(AsyncKernelManager):
        @default("transport")
        def _default_transport(self) -> str:
            return "ipc"

        @default("ip")
        def _default_ip(self) -> str:
            # Short on purpose: a Unix socket path holds at most 107 bytes.
            self._socket_folder = tempfile.mkdtemp(prefix="sgi-lab-kernel-")
            return os.path.join(self._socket_folder, "k")

        async def _async_cleanup_resources(self, restart: bool = False) -> None:
            await super()._async_cleanup_resources(restart=restart)
            folder = getattr(self, "_socket_folder", None)
            if folder and not restart:
                with contextlib.suppress(OSError):
                    os.rmdir(folder)  # only once empty: never more than the sockets it made

        cleanup_resources = _async_cleanup_resources

        async def _async_shutdown_kernel(self, now: bool = False, restart: bool = False) -> None:
            # jupyter_client interrupts the kernel (SIGINT) before it asks it to shut down; a
            # kernel handling a message just then logs "ERROR | KeyboardInterrupt caught in
            # kernel" at the end of a run that went well. The shutdown request (and a kill after
            # its grace period) stops a kernel without it.
            self._normal_shutdown = True
            try:
                await super()._async_shutdown_kernel(now=now, restart=restart)
            finally:
                self._normal_shutdown = False

        shutdown_kernel = _async_shutdown_kernel

        async def _async_interrupt_kernel(self) -> None:
            if getattr(self, "_normal_shutdown", False):
                return
            await super()._async_interrupt_kernel()

        interrupt_kernel = _async_interrupt_kernel

    return {"kernel_manager_class": PrivateSocketsKernelManager}


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables (inherited by the kernels started meanwhile), then restore."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# -- command line -------------------------------------------------------------------------------


def _parameters(pairs: list[list[str]] | None) -> dict[str, Any]:
    return {key: parse_parameter(value) for key, value in (pairs or [])}


def main_run(args: argparse.Namespace) -> int:
    """``sgi-lab run NOTEBOOK [-f PARAMS] [-p KEY VALUE]... [--overwrite] [--out-root DIR]``."""
    formats = figure_formats(args.figure_formats or "")
    problem = static_export_problem() if formats else None
    if problem:  # before anything runs: a long notebook must not fail at its first figure
        raise RuntimeError(f"--figure-formats {','.join(formats)}: {problem}")
    env = {FIGURE_FORMATS_ENV: ",".join(formats)} if formats else {}
    try:
        with _environment(env):
            folder = run_notebook(
                args.notebook,
                params_file=args.params_file,
                parameters=_parameters(args.parameter),
                out_root=args.out_root,
                overwrite=args.overwrite,
                name=args.name,
                progress=not args.no_progress,
                keep_checkpoints=args.keep_checkpoints,
            )
    except NotebookRunError as exc:
        print(f"sgi-lab run: {exc}", file=sys.stderr)
        return 1
    except RunExistsError as exc:
        print(f"sgi-lab run: {exc}", file=sys.stderr)
        return 2
    print(folder)
    return 0


def add_run_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``run`` on an argparse sub-parser set; the handler is ``args.handler``."""
    p = subparsers.add_parser(
        "run",
        help="execute a notebook with papermill into its own run folder",
        description="Execute a notebook into outputs/runs/<notebook>__<config>__<game>__s<seed>/ "
        "(executed notebook, params.yaml, status.json, results, figures). A finished run is kept "
        "unless --overwrite; a failed or interrupted one is resumed.",
    )
    _add_common(p)
    p.add_argument("--name", default=None, help="run folder name (default: derived)")
    p.add_argument(
        "--keep-checkpoints",
        type=lambda raw: None if raw == "all" else int(raw),
        default=KEEP_CHECKPOINTS,
        metavar="N|all",
        help=f"checkpoints a finished run keeps per checkpoints/ folder (default "
        f"{KEEP_CHECKPOINTS}; model.pt is always kept)",
    )
    p.add_argument(
        "--figure-formats",
        default=None,
        metavar="png,svg,pdf",
        help="also write every saved figure in these static formats (needs kaleido: "
        "pip install 'sgi-lab[export]', and a local Chromium; works offline)",
    )
    p.set_defaults(handler=main_run)
    return p


def _add_common(p: argparse.ArgumentParser, run_options: bool = True) -> None:
    p.add_argument("notebook", help="notebook name (pretrain) or path (notebooks/pretrain.ipynb)")
    p.add_argument(
        "-f", "--params-file", dest="params_file", default=None, help="YAML parameters file"
    )
    p.add_argument(
        "-p",
        "--parameter",
        nargs=2,
        action="append",
        metavar=("KEY", "VALUE"),
        help="a parameter (YAML value), repeatable: -p game Breakout -p seed 1",
    )
    p.add_argument("--overwrite", action="store_true", help="redo finished runs from scratch")
    if run_options:
        p.add_argument("--out-root", default=DEFAULT_OUT_ROOT, help="where run folders go")
        p.add_argument("--no-progress", action="store_true", help="hide papermill's progress bar")
