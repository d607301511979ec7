"""The paper's reported results, loaded from ``metrics/data/paper_results.json``.

Every number here was transcribed from ``paper/sgi_paper.tex`` and checked by recomputing the
printed aggregate rows from the per-game columns. Results are keyed by *config*: a stable name
for one paper configuration ("SGI-M", "SGI-M/S", "Naive", "S+G", ...), the same whichever table
prints it (tab:all_abl_scores heads SGI-M as "SGI"; tab:IQMs calls Naive "SGI-M (Naive)").
`paper_column_for` maps this project's parameter-set names (``sgi_m``, ``naive``, ``s_g``) to
those configs, so a result can be placed beside the paper's column for the same configuration.

Discrepancies between the paper's tables (a swapped header, aggregates that differ between
tables) are listed by `paper_notes`; the loaders return the numbers as printed.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "paper_aggregates",
    "paper_clique_scores",
    "paper_column_for",
    "paper_config_info",
    "paper_configs",
    "paper_data",
    "paper_notes",
    "paper_per_game",
    "paper_per_game_table",
    "paper_tables",
]

PER_GAME_TABLES = ("tab:all_scores", "tab:all_ft_control_scores", "tab:all_abl_scores")
"""Labels of the paper's per-game score tables (appendix "Full Results on Atari100k")."""


@functools.lru_cache(maxsize=1)
def _data() -> dict[str, Any]:
    path = resources.files("sgi_lab.metrics") / "data" / "paper_results.json"
    return json.loads(path.read_text(encoding="utf-8"))


def paper_data() -> dict[str, Any]:
    """Returns a copy of the whole ``paper_results.json`` document.

    Returns:
        A dict with keys ``games``, ``game_display_names``, ``reference_scores``, ``configs``,
        ``per_game_scores``, ``per_game_tables``, ``aggregate_tables``, ``clique_scores`` and
        ``notes``. It is a deep copy, so callers may modify it freely.
    """
    return copy.deepcopy(_data())


def paper_tables() -> list[str]:
    """Returns the labels of every table stored: the per-game ones, then the aggregate ones."""
    return [*_data()["per_game_tables"], *_data()["aggregate_tables"]]


def paper_configs(per_game: bool | None = None, kind: str | None = None) -> list[str]:
    """Returns the config keys the paper reports results for.

    Args:
        per_game: If True, only configs with per-game scores (usable with `paper_per_game`);
            if False, only configs the paper reports as aggregates alone; if None, all.
        kind: Keep only configs of this kind: ``"reference"`` (Random, Human), ``"baseline"``,
            ``"sgi"`` (pretraining data / encoder variants), ``"finetune"`` (finetuning
            variants), ``"pretrain_ablation"`` (S, G, I, ...) or ``"data"`` (data collectors).

    Returns:
        Config keys such as ``"SGI-M"``, ``"SGI-M/S"``, ``"Naive"``, ``"S+G"``.
    """
    configs = _data()["configs"]
    return [
        name
        for name, info in configs.items()
        if (per_game is None or info["per_game"] == per_game)
        and (kind is None or info["kind"] == kind)
    ]


def _check_config(config: str) -> str:
    if config in _data()["configs"]:
        return config
    raise KeyError(
        f"unknown paper config {config!r}; known: {', '.join(_data()['configs'])} "
        "(parameter-set names such as 'sgi_m' go through paper_column_for)"
    )


def paper_config_info(config: str) -> dict[str, Any]:
    """Returns what the paper's config is: kind, one-line description and where it is printed.

    Args:
        config: A config key, e.g. ``"Frozen"``.

    Returns:
        ``{"kind": str, "description": str, "per_game": bool, "tables": [label, ...]}``.
    """
    return copy.deepcopy(_data()["configs"][_check_config(config)])


def paper_per_game(config: str) -> pd.Series:
    """Returns the paper's mean return per game for one config.

    Args:
        config: A config key with per-game scores (see ``paper_configs(per_game=True)``), or a
            parameter-set name accepted by `paper_column_for`.

    Returns:
        A float Series indexed by the 26 games (paper order), named after the config. Each value
        is the mean over the paper's 10 seeds of the evaluation return after 100k steps.

    Raises:
        KeyError: The config is unknown or the paper reports it only as aggregates.
    """
    if config not in _data()["configs"]:
        config = paper_column_for(config)
    scores = _data()["per_game_scores"].get(config)
    if scores is None:
        raise KeyError(
            f"the paper prints no per-game scores for {config!r}, only aggregates: see "
            f"{paper_config_info(config)['tables']} through paper_aggregates()"
        )
    series = pd.Series(scores, dtype=float, name=config)
    series.index.name = "game"
    return series


def paper_per_game_table(table: str = "tab:all_scores") -> pd.DataFrame:
    """Returns one of the paper's per-game tables as printed, with config keys as columns.

    Args:
        table: ``"tab:all_scores"``, ``"tab:all_ft_control_scores"`` or ``"tab:all_abl_scores"``
            (the ``tab:`` prefix may be left out).

    Returns:
        A (26 games × columns) DataFrame of mean returns, columns in the printed order and named
        by config key. For tab:all_abl_scores the two columns whose headers the paper swapped are
        named by what they hold (see `paper_notes`); ``df.attrs["headers"]`` maps each config
        back to the printed header.
    """
    label = _table_label(table, _data()["per_game_tables"])
    columns = _data()["per_game_tables"][label]["columns"]
    df = pd.DataFrame({c["config"]: _data()["per_game_scores"][c["config"]] for c in columns})
    df.index.name = "game"
    df.attrs["table"] = label
    df.attrs["headers"] = {c["config"]: c["header"] for c in columns}
    return df


def _table_label(table: str, tables: Mapping[str, Any]) -> str:
    label = table if table.startswith("tab:") else f"tab:{table}"
    if label not in tables:
        raise KeyError(f"unknown paper table {table!r}; known: {', '.join(tables)}")
    return label


_CI_SUFFIXES = ("_lower", "_upper")


def paper_aggregates(table: str, tidy: bool = False) -> pd.DataFrame:
    """Returns a table of the paper's aggregate human-normalized scores.

    Works for the aggregate tables (``tab:HNS``, ``tab:controls_hns``,
    ``tab:finetune_controls_hns``, ``tab:ssl_ft``, ``tab:IQMs``, ``tab:pretrain_data``) and for
    the aggregate rows printed under the per-game tables (``tab:all_scores``, ...).

    Args:
        table: A table label; the ``tab:`` prefix may be left out.
        tidy: If False, one row per printed row. If True, one row per (method, metric) with
            columns ``method, metric, value, lower, upper`` (CIs only in tab:IQMs, else NaN),
            the shape `sgi_lab.metrics.aggregate.aggregate_with_ci` returns, so the two concat.

    Returns:
        Wide: columns ``table, group, label, config`` then the printed metrics among
        ``iqm(_lower/_upper), median(...), mean(...), games_above_human, games_above_zero,
        games_above_spr, data``, and ``footnote`` where the paper has one. ``config`` is the
        stable key (``label`` is the text printed in that table). Tidy: ``method`` is the config
        key; ``table``, ``group`` and ``label`` are kept.
    """
    data = _data()
    if table in PER_GAME_TABLES or f"tab:{table}" in PER_GAME_TABLES:
        label = _table_label(table, data["per_game_tables"])
        spec = data["per_game_tables"][label]
        headers = {c["config"]: c["header"] for c in spec["columns"]}
        rows = [
            {"group": None, "label": headers[cfg], "config": cfg, **metrics}
            for cfg, metrics in spec["aggregate_rows"].items()
        ]
    else:
        label = _table_label(table, data["aggregate_tables"])
        rows = copy.deepcopy(data["aggregate_tables"][label]["rows"])
    wide = pd.DataFrame(rows)
    wide.insert(0, "table", label)
    if not tidy:
        return wide
    metrics = [
        c
        for c in wide.columns
        if c not in ("table", "group", "label", "config", "data", "footnote")
        and not c.endswith(_CI_SUFFIXES)
    ]
    records = []
    for _, row in wide.iterrows():
        for metric in metrics:
            records.append(
                {
                    "method": row["config"],
                    "metric": metric,
                    "value": float(row[metric]),
                    "lower": float(row.get(f"{metric}_lower", np.nan)),
                    "upper": float(row.get(f"{metric}_upper", np.nan)),
                    "table": label,
                    "group": row["group"],
                    "label": row["label"],
                }
            )
    return pd.DataFrame.from_records(records)


def paper_notes(config: str | None = None, table: str | None = None) -> list[str]:
    """Returns the transcription notes: discrepancies between the paper's tables and how the
    per-game columns were assigned to configs.

    Args:
        config: Keep only notes about this config key.
        table: Keep only notes about this table label (``tab:`` prefix optional).

    Returns:
        The notes' text, one string per note.
    """
    label = None if table is None else (table if table.startswith("tab:") else f"tab:{table}")
    return [
        note["text"]
        for note in _data()["notes"]
        if (config is None or config in note["configs"])
        and (label is None or label in note["tables"])
    ]


def paper_clique_scores() -> pd.DataFrame:
    """Returns tab:clique_scores: pretraining on one game vs. on its clique of similar games.

    Returns:
        A DataFrame indexed by game (the 11 games of the table) with columns ``Single`` and
        ``Clique``, mean returns after finetuning for 100k steps.
    """
    df = pd.DataFrame(_data()["clique_scores"]["scores"])
    df.index.name = "game"
    return df


# --- this project's parameter sets -> paper configs --------------------------------------------


def _key(name: str) -> str:
    """Lowercase, separators collapsed to '_': 'SGI-M/S' -> 'sgi_m_s', 'S+G' -> 's_g'."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


# Names that do not follow from normalizing a config key. Finetuning parameter sets describe how
# SGI-M's pretrained encoder is finetuned; "reduced_lr" is SGI's default, i.e. SGI-M itself.
_ALIASES = {
    "reduced_lr": "SGI-M",
    "reduced_lrs": "SGI-M",
    "default": "SGI-M",
    "sgi": "SGI-M",
    "s_g_i": "SGI-M",
    "none": "SGI-None",
    "no_pretrain": "SGI-None",
    "no_pretraining": "SGI-None",
    "no_ssl": "No SPR",
    "no_s": "No SPR",
    "all_ssl": "Full SSL",
    "all_sgi": "Full SSL",
    "all_losses": "Full SSL",
    "atc": "ATC-M",
    "bc": "BC-M",
    "bc_0": "BC-M@0",
}

# Pretraining configs meaning "no pretraining": the only base besides SGI-M on which the paper
# varies the finetuning (tab:ssl_ft, no SSL during finetuning).
_NO_PRETRAIN = {"SGI-None"}


def _resolve(name: str) -> str | None:
    key = _key(Path(name).stem if name.endswith((".yaml", ".yml")) else name)
    if key in _ALIASES:
        return _ALIASES[key]
    by_key = {_key(cfg): cfg for cfg in _data()["configs"]}
    return by_key.get(key)


def paper_column_for(name: str, pretrain: str | None = None) -> str:
    """Maps a parameter-set name (or a paper config) to the paper's config key.

    Pretraining sets map by their objectives/data/encoder (``sgi_m`` -> SGI-M, ``sgi_m_s`` ->
    SGI-M/S, ``s_g`` -> S+G, ``atc`` -> ATC-M, ``bc`` -> BC-M); finetuning sets by their scheme
    (``reduced_lr`` -> SGI-M, ``naive`` -> Naive, ``frozen`` -> Frozen, ``no_ssl`` -> No SPR,
    ``all_ssl`` -> Full SSL, ``sgi_none`` -> SGI-None). Paths such as
    ``params/finetune/naive.yaml`` and paper spellings (``"SGI-M/S"``, ``"s+g"``) work too.

    Args:
        name: The parameter-set name, path or config key.
        pretrain: For a finetuning set, the pretraining set it starts from, when not SGI-M. The
            default scheme (``reduced_lr``) then maps to the pretraining config (``reduced_lr`` on
            ``g`` -> G); ``no_ssl`` without pretraining (``sgi_none``/``none``) -> SGI-None
            (No SPR). Other combinations are not in the paper.

    Returns:
        A config key of `paper_configs`; `paper_per_game` accepts it when the paper prints
        per-game scores for it.

    Raises:
        KeyError: No paper config matches, or the paper does not report the combination.
    """
    config = _resolve(name)
    if config is None:
        raise KeyError(
            f"no paper config matches {name!r}; known configs: {', '.join(_data()['configs'])}"
        )
    if pretrain is None:
        return config
    base = paper_column_for(pretrain)
    if base == "SGI-M" or config == base:
        return config
    if config == "SGI-M":  # the default finetuning scheme on another pretraining config
        return base
    if config == "No SPR" and base in _NO_PRETRAIN:
        return "SGI-None (No SPR)"
    raise KeyError(
        f"the paper reports finetuning scheme {config!r} only with SGI-M pretraining, "
        f"not with {base!r}"
    )
