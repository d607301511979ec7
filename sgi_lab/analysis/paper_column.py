"""Which of the paper's columns a finetuning run is compared with, and why: the one decision
the finetune notebook, the ablation explorer and ``sgi-lab report`` all use (`paper_column`).

A run's configuration is the params name it was launched with (``status.json``'s ``params``,
recorded by ``sgi-lab finetune --params ...`` or ``finetune(..., params=NAME)``) and, for runs
that start from a pretraining run, that run's params name (``pretrain_params``).
`sgi_lab.metrics.paper_column_for` maps the pair to the paper's config ("SGI-M", "Naive",
"SGI-None", ...). Names the paper knows decide first; else what the run was: its finetuning
config (scheme, SSL, pretrained or not) and its pretraining run's config (objectives, encoder)
and data (the store's source); runs of unknown configurations (smoke sets) get no column.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sgi_lab.base.files import read_mapping
from sgi_lab.data.store_format import read_manifest
from sgi_lab.envs.minatar import is_minatar
from sgi_lab.metrics import paper_column_for, paper_configs
from sgi_lab.runs.folder import recorded_config

__all__ = ["DATA_NAMES", "PaperColumn", "paper_column", "paper_config", "run_label"]


def run_label(
    params: str | None, pretrain_params: str | None = None, pretrained: bool = True
) -> str:
    """The one method label of a run: ``reduced_lr@sgi_m`` (pretrained), ``sgi_none``, ...

    Args:
        params: the finetuning params name (``"unnamed"`` when None).
        pretrain_params: the pretraining run's params name, when known.
        pretrained: whether the run starts from a pretraining run (else the suffix is dropped).
    """
    label = params or "unnamed"
    return f"{label}@{pretrain_params}" if pretrained and pretrain_params else label


def paper_config(
    params: str | None,
    pretrained: bool,
    pretrain_params: str | None = None,
    fallback: bool = False,
) -> str | None:
    """The paper's config key for a run (`sgi_lab.metrics.paper_column_for` of its params).

    Args:
        params: the finetuning params name (``reduced_lr``, ``naive``, ``sgi_none``...).
        pretrained: whether the run started from a pretraining run.
        pretrain_params: that pretraining run's params name (``sgi_m``, ``s_g``...), if known;
            unknown means SGI-M, the paper's default.
        fallback: when the names are not the paper's (smoke sets), try the pretraining name
            alone, then answer ``"SGI-M"`` for a pretrained run and ``"SGI-None"`` for one from
            scratch, instead of None (for a notebook that always draws the paper's column).

    Returns:
        A key of `sgi_lab.metrics.paper_configs`, or None (only when ``fallback`` is false).
    """
    candidates = [(params, pretrain_params if pretrained else "none")] if params else []
    if fallback and pretrained and pretrain_params:
        candidates.append((pretrain_params, None))
    for name, base in candidates:
        try:
            return paper_column_for(name, pretrain=base)
        except KeyError:
            continue
    if not fallback:
        return None
    return "SGI-M" if pretrained else "SGI-None"


@dataclass(frozen=True)
class PaperColumn:
    """Which of the paper's columns a run is compared with, and why.

    Attributes:
        config: a key of `sgi_lab.metrics.paper_configs`, or None when no column matches.
        reason: what decided it, with how the run differs from the paper's configuration (data,
            encoder) where it is the nearest column rather than the same one; for None, why
            none matches.
    """

    config: str | None
    reason: str

    def __str__(self) -> str:
        return f"{self.config or 'none'} ({self.reason})"


DATA_NAMES = {"R": "Random", "E": "Exploratory", "W": "Weak", "M": "Mixed"}
"""The paper's datasets by the letter of its configs (SGI-R, SGI-E, SGI-W, SGI-M)."""
_ENCODER_NAMES = {"nature": "Nature CNN", "resnet": "ResNet", "resnet_l": "large ResNet"}
_FINETUNE_VARIANTS = {
    ("reduced_lr", "spr"): None,  # SGI's default: the pretraining's own column
    ("naive", "spr"): "Naive",
    ("frozen", "spr"): "Frozen",
    ("reduced_lr", "none"): "No SPR",
    ("reduced_lr", "all"): "Full SSL",
}


def _data_letter(store: str | Path | None) -> str | None:
    """R/E/W/M from a store's manifest (its source; DQN Replay's checkpoint 0 alone is Weak)."""
    if not store:
        return None

    manifest = read_manifest(store)
    if manifest is None:
        return None
    if manifest.source == "random":
        return "R"
    if manifest.source == "exploratory":
        return "E"
    if manifest.source == "dqn_replay":
        return "W" if list((manifest.params or {}).get("checkpoints") or []) == [0] else "M"
    return None


def _pretraining_column(folder: Path) -> tuple[str | None, str]:
    """The paper's pretraining config nearest to a pretraining run folder, and why."""
    config = recorded_config(read_mapping(folder / "config.yaml"))  # old runs' spr_weight too
    status = read_mapping(folder / "status.json")
    letter = _data_letter(status.get("data"))
    data = f"{DATA_NAMES[letter]} data" if letter else "data of unrecorded kind"
    encoder = str(config.get("encoder", "resnet"))
    encoder_name = _ENCODER_NAMES.get(encoder, encoder)
    if float(config.get("atc_weight") or 0) > 0:
        return f"ATC-{letter or 'M'}", f"ATC pretraining on {data}"
    if float(config.get("bc_weight") or 0) > 0:
        note = "" if letter in (None, "M") else " (the paper's is on Mixed data)"
        return "BC-M", f"behavioural cloning on {data}{note}"
    objectives = [
        name
        for name, key in (("S", "spr_coefficient"), ("G", "goal_weight"), ("I", "inverse_weight"))
        if float(config.get(key, 1.0) or 0) > 0
    ]
    if not objectives:
        return None, "its pretraining run has no objective (every weight is 0)"
    what = "+".join(objectives)
    if len(objectives) < 3:
        differs = [
            text
            for text, same in ((data, letter in (None, "M")), (encoder_name, encoder == "resnet"))
            if not same
        ]
        note = f" (the paper's: Mixed data, ResNet; this run's: {', '.join(differs)})"
        return what, f"pretrained with {what} only" + (note if differs else "")
    if encoder == "resnet":
        note = "" if letter else " (taken as Mixed: the store's kind is not recorded)"
        return f"SGI-{letter or 'M'}", f"SGI pretraining (S+G+I) of a ResNet on {data}{note}"
    column = "SGI-M/S" if encoder == "nature" else "SGI-M/L"
    note = "" if letter in (None, "M") else f" (the paper's is on Mixed data, this run's on {data})"
    return column, f"SGI pretraining (S+G+I) of a {encoder_name}{note}"


def _column_from_config(
    config: dict[str, Any], pretrained: bool, base_by_name: str | None = None
) -> PaperColumn | None:
    """The column from the run's own config and its pretraining run's folder (or the paper
    config its pretraining set is named after); None when the config does not record its
    finetuning or the pretraining run cannot be read."""
    if "scheme" not in config and "ssl" not in config:
        return None
    scheme, ssl = str(config.get("scheme", "reduced_lr")), str(config.get("ssl", "spr"))
    if (scheme, ssl) not in _FINETUNE_VARIANTS:
        return PaperColumn(
            None, f"the paper does not report finetuning scheme {scheme!r} with ssl {ssl!r}"
        )
    variant = _FINETUNE_VARIANTS[(scheme, ssl)]
    encoder = str(config.get("encoder", "resnet"))
    if not pretrained:
        if variant not in (None, "No SPR"):
            return PaperColumn(
                None, f"the paper reports {variant} only from SGI-M pretraining; this run has none"
            )
        column = "SGI-None" if variant is None else "SGI-None (No SPR)"
        spr = "with SPR" if variant is None else "without SSL"
        note = ""
        if encoder != "resnet":
            note = (
                f" (the paper's is a ResNet, this run's a {_ENCODER_NAMES.get(encoder, encoder)})"
            )
        return PaperColumn(column, f"no pretraining, finetuned {spr}{note}")
    folder = Path(str(config.get("pretrained") or ""))
    if base_by_name:
        base, why = base_by_name, f"its pretraining set is named after {base_by_name}"
    elif not config.get("pretrained") or not (folder / "config.yaml").is_file():
        return None
    else:
        base, why = _pretraining_column(folder)
    if base is None:
        return PaperColumn(None, why)
    if variant is None:
        return PaperColumn(base, f"{why}; SGI's default finetuning (reduced lrs, SPR)")
    if base == "SGI-M":
        return PaperColumn(variant, f"{why}; finetuned {scheme} with ssl {ssl}")
    return PaperColumn(
        None,
        f"the paper reports {variant} only from SGI-M pretraining; this run's pretraining is "
        f"{base}: {why}",
    )


MINATAR_REASON = "the paper has no MinAtar results (it reports Atari 100k games only)"


def paper_column(
    config: Mapping[str, Any] | None,
    params: str | None = None,
    pretrain_params: str | None = None,
    pretrained: bool | None = None,
    chosen: str | None = None,
) -> PaperColumn:
    """The paper's column a finetuning run is compared with: the one decision every view uses
    (the finetune notebook, the ablation explorer, ``sgi-lab report``).

    In this order: ``chosen`` (a notebook's ``paper_config`` parameter); the parameter-set names
    when they are the paper's (``reduced_lr`` on ``sgi_r`` -> SGI-R, ``frozen`` -> Frozen:
    `paper_config`), unless the run is pretrained and its pretraining set is unnamed; else the
    run itself: its finetuning config (``scheme``, ``ssl``) gives a variant (Naive, Frozen, No
    SPR, Full SSL) or SGI's default, and its pretraining run's folder (``config["pretrained"]``:
    objectives, encoder, and its store's source for the data) the base column (SGI-R/E/W/M,
    SGI-M/S, SGI-M/L, S, G+I, ..., ATC-M; SGI-None without pretraining). Where the run's data or
    encoder is not the paper's for that column, or its names and configs disagree, the reason
    says so.

    Args:
        config: the finetuning config (``config.yaml`` or ``to_dict(FinetuneConfig)``).
        params: the finetuning parameter set's name.
        pretrain_params: the pretraining run's parameter set's name.
        pretrained: whether the run starts from a pretraining run (default: from ``config``).
        chosen: a paper config chosen by hand; it must be one of `sgi_lab.metrics.paper_configs`.

    Returns:
        A `PaperColumn`; ``config`` None with the reason when the paper reports no such run.

    Raises:
        ValueError: ``chosen`` is not a paper config (the message lists them).
    """

    config = dict(config or {})
    if pretrained is None:
        pretrained = bool(config.get("pretrained"))
    if chosen:
        if chosen not in paper_configs():
            raise ValueError(
                f"paper_config: {chosen!r} is not one of the paper's columns: "
                + ", ".join(paper_configs())
            )
        return PaperColumn(chosen, "chosen in the paper_config parameter")
    if is_minatar(str(config.get("game") or "")):  # whatever its names say
        return PaperColumn(None, MINATAR_REASON)
    try:
        base_by_name = paper_column_for(pretrain_params) if pretrained and pretrain_params else None
    except KeyError:
        base_by_name = None
    from_config = _column_from_config(config, pretrained, base_by_name)
    if not pretrained and "pretrained" not in config:
        # The run does not record how it started: a name is read as the paper's configuration
        # (sgi_m -> SGI-M, frozen -> Frozen), not as that scheme from scratch.
        by_names = paper_config(params, True, pretrain_params) or paper_config(
            params, False, pretrain_params
        )
    else:
        by_names = paper_config(params, pretrained, pretrain_params)
    names = run_label(params, pretrain_params, pretrained)
    if by_names and (from_config is None or pretrain_params or not pretrained):
        reason = f"its parameter sets are named {names!r}"
        if from_config is not None and from_config.config != by_names:
            reason += (
                f"; from its configs alone it would be {from_config.config or 'none'}: "
                f"{from_config.reason}"
            )
        return PaperColumn(by_names, reason)
    if from_config is not None:
        return from_config
    if pretrained and not config.get("pretrained"):
        why = "its pretraining run is not recorded"
    elif pretrained:
        why = f"its pretraining run {config.get('pretrained')!r} is not readable"
    else:
        why = "its finetuning config is not recorded"
    return PaperColumn(None, f"{why}, and the names {names!r} are not the paper's")
