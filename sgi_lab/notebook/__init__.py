"""What a notebook's cells call: the project root, the stage config and run folder built from the
``parameters`` cell, a transition store, the runs a notebook reads, figures and the results.

A notebook's first code cell holds only literals (the ``parameters`` cell); its next cell calls
`enter_project_root`, `stage_config` and `run_dir_for` to turn them into a config and a folder, and
its last cell calls `record_results`. The folder is the one `sgi_lab.launch.notebook_runner`
(``sgi-lab run``) hands the notebook as ``out_dir``, named by `run_folder_name` here, so a notebook
opened in JupyterLab writes where its papermill run would.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
import warnings
from pathlib import Path
from typing import Any

from sgi_lab.base.files import atomic_write_text, jsonable, read_mapping
from sgi_lab.config import load_config, load_yaml_mapping, read_params
from sgi_lab.data import TransitionStore
from sgi_lab.data.collect import collect_random
from sgi_lab.envs import canonical_env_game
from sgi_lab.envs.games import UnknownGameError
from sgi_lab.runs.folder import run_name
from sgi_lab.runs.status import read_status, run_folders, run_kind

__all__ = [
    "DEFAULT_OUT_ROOT",
    "DISCOVERY_ROOTS",
    "FIGURE_FORMATS_ENV",
    "RESULTS_FILE",
    "RecordedResults",
    "describe_run",
    "discover_run",
    "discover_runs_root",
    "enter_project_root",
    "figure_formats",
    "find_latest_run",
    "find_project_root",
    "find_runs_of_kind",
    "is_smoke_run",
    "open_store",
    "record_results",
    "run_dir_for",
    "run_folder_name",
    "run_header",
    "save_figure",
    "show_run_header",
    "stage_config",
    "static_export_problem",
    "steps_run",
]

DEFAULT_OUT_ROOT = "outputs/runs"
RESULTS_FILE = "results.json"


# -- the project --------------------------------------------------------------------------------


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


# -- the run folder and the config -------------------------------------------------------------


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
        payload = load_yaml_mapping(Path(stage_file))
        config = str(payload.get("name") or Path(stage_file).stem)
    config = config or (Path(params_file).stem if params_file else "") or "default"
    config = config.removeprefix(f"{stem}_") or config  # params/notebooks/pretrain_smoke -> smoke
    seed = parameters.get("seed")
    return run_name(
        stem,
        config,
        parameters.get("game"),
        None if seed is None else f"s{seed}",
    )


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
    built = load_config(cls, values, overrides or {}, overrides_source="overrides")
    return built, name or "custom"


def open_store(data: str | os.PathLike, game: str = "Pong", collect_steps: int = 0, seed: int = 0):
    """Open the TransitionStore at ``data``; if it is missing and ``collect_steps`` > 0, first
    collect a Random dataset of that many steps there (so a notebook can start from nothing)."""

    path = Path(data)
    if path.exists() or collect_steps <= 0:
        return TransitionStore(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Lines, not a tqdm widget: a notebook saved by papermill would keep the widget at 0%.
    print(f"collecting {int(collect_steps):,} Random steps of {game} into {path} ...")
    started = time.perf_counter()
    store = collect_random(game, int(collect_steps), path, seed=seed, progress=False)
    print(f"collected {len(store):,} steps in {time.perf_counter() - started:.0f} s")
    return store


# -- the runs a notebook reads -----------------------------------------------------------------


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

    try:
        return canonical_env_game(a) == canonical_env_game(b)
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
        for folder in run_folders(root):
            if folder in found or not (folder / _RESULT_FILE[kind]).is_file():
                continue
            if run_kind(folder) not in (kind, "") or read_status(folder).get("state") != "finished":
                continue
            recorded = _recorded_game(folder) if game else None
            if game and recorded and not _same_game(recorded, game):
                continue
            found[folder] = (folder / "status.json").stat().st_mtime
    # A run with a few steps (a test's, or a README example with tiny overrides) is newest after
    # every Lab session: the largest budget actually run comes first, whatever its parameter
    # set is called; among equal budgets full runs before smoke runs, then the newest.
    return sorted(found, key=lambda p: (-steps_run(p), is_smoke_run(p), -found[p], str(p)))


def steps_run(folder: str | os.PathLike) -> int:
    """The steps a run actually ran (its status.json's ``step``; 0 when not recorded)."""
    step = (read_status(folder) or {}).get("step")
    try:
        return max(int(step), 0)
    except (TypeError, ValueError):
        return 0


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
                "picked automatically (the finished run with the most steps run, then the newest); "
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
        _kaleido_server()
        # the figure's own size (a four-column figure squeezed into kaleido's 700x500 is
        # unreadable); a failing export costs the static copy, never the notebook
        size = {k: v for k in ("width", "height") if (v := getattr(fig.layout, k, None))}
        for fmt in formats:
            try:
                fig.write_image(folder / f"{name}.{fmt}", format=fmt, **size)
            except Exception as exc:  # noqa: BLE001  (kaleido/Chromium fail in many ways)
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                warnings.warn(f"{name}.{fmt} not written: {first}", stacklevel=2)
    return path


@functools.cache
def _kaleido_server() -> None:
    """Keep one Chromium for the process's static figures (kaleido >= 1.0's sync server): about
    0.2 s a PNG instead of 3.5 s for a browser started per image (measured on 2026-11-26)."""
    with contextlib.suppress(Exception):
        import kaleido  # noqa: PLC0415  (optional: the `export` extra)

        start = getattr(kaleido, "start_sync_server", None)
        if start is not None:
            start(silence_warnings=True)


class RecordedResults(dict):
    """A notebook's recorded results: a plain dict that a notebook shows as a short table
    (`sgi_lab.viz.tables.results_frame`: rounded numbers, long lists summarised) rather than
    the raw dict with every digit."""

    def _frame(self):
        # lazy: the table loads pandas, which `sgi-lab run --help` (this module) needs not
        from sgi_lab.viz.tables import results_frame

        return results_frame(self)

    def _repr_html_(self) -> str:
        return self._frame().to_html(index=False, border=0)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text("{...}" if cycle else self._frame().to_string(index=False))


def record_results(out_dir: str | os.PathLike, results: dict[str, Any]) -> dict[str, Any]:
    """The last cell of every notebook: write ``results.json`` in the run folder and return it
    (a `RecordedResults`: the dict, shown as a short table).

    `sgi_lab.launch.notebook_runner.run_notebook` copies it into ``status.json`` and `sgi_lab.launch.sweep` into ``sweep.json``.
    """
    payload = jsonable(results)
    path = Path(out_dir) / RESULTS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(payload, indent=2, default=str))
    return RecordedResults(payload)
