"""``sgi-lab export hub RUN OUT``: a finished run's model as a Hugging Face Hub folder with its
model card (`sgi_lab.runs.hub` is the folder's format and reads it back).

The card says what a reader needs to trust the weights: the objective (each loss's weight),
the data (its store's source, size, env protocol, sticky actions and content fingerprint), the
encoder, the steps, the code that made it, the run's probe results and, for a finetuned agent,
its evaluation; and how to load it (``sgi-lab finetune --pretrained FOLDER``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from sgi_lab.base.files import read_mapping
from sgi_lab.base.yaml_io import front_matter
from sgi_lab.data.store_format import read_manifest
from sgi_lab.probes.results import read_probes
from sgi_lab.runs.checkpoints import CheckpointError, load_checkpoint
from sgi_lab.runs.folder import recorded_config
from sgi_lab.runs.hub import write_hub_folder
from sgi_lab.runs.status import pretrained_source
from sgi_lab.train.transfer import AGENT_KIND, PRETRAINED_KINDS

__all__ = ["export_hub", "model_card"]

# The objective's weights, in the paper's words (`sgi_lab.config.PretrainConfig`).
OBJECTIVE_WEIGHTS = {
    "spr_coefficient": "SPR",
    "goal_weight": "goal-conditioned RL",
    "inverse_weight": "inverse dynamics",
    "atc_weight": "ATC",
    "bc_weight": "behavioural cloning",
}


def _data_info(status: dict[str, Any]) -> dict[str, Any]:
    """What the run trained on: the store's fingerprint and, when the store is still there,
    its manifest's description."""
    data: dict[str, Any] = {
        "fingerprint": (status.get("inputs") or {}).get("data"),
        "path": status.get("data"),
        "env_protocol": status.get("data_env_protocol") or status.get("env_protocol"),
    }
    manifest = read_manifest(status["data"]) if status.get("data") else None
    if manifest is not None:
        data.update(
            source=manifest.source,
            game=manifest.game,
            transitions=manifest.num_transitions,
            episodes=manifest.num_episodes,
            sticky_action_prob=manifest.sticky_action_prob,
            observation=manifest.observation,
        )
    return data


def _probe_lines(entries: list[dict[str, Any]]) -> list[str]:
    """One line per probe result: the store probed, the readout and the mean F1."""
    lines = []
    for entry in entries:
        f1 = [
            v.get("f1") for v in (entry.get("variables") or {}).values() if v.get("f1") is not None
        ]
        store = entry.get("store") or {}
        lines.append(
            f"| {store.get('game')} ({store.get('source')}, {store.get('fingerprint')}) | "
            f"{entry.get('readout')} | {len(f1)} | " + (f"{np.mean(f1):.3f} |" if f1 else "- |")
        )
    return lines


def model_card(info: dict[str, Any]) -> str:
    """``README.md`` of a hub folder: Hub front matter, then what the weights are."""
    config = recorded_config(info.get("config") or {})  # an old run's spr_weight too
    data = info.get("data") or {}
    game = str(info.get("game") or data.get("game") or "unknown")
    family = "minatar" if game.startswith("minatar/") else "atari"
    objective = ", ".join(
        f"{name} x{config[key]:g}"
        for key, name in OBJECTIVE_WEIGHTS.items()
        if isinstance(config.get(key), (int, float)) and config[key]
    )
    front = {
        "library_name": "sgi-lab",
        "license": "mit",
        "tags": ["reinforcement-learning", "self-supervised-learning", "sgi", family],
    }
    code = (info.get("provenance") or [{}])[-1]
    rows = [
        ("kind", "finetuned agent" if info.get("kind") == AGENT_KIND else "pretrained model"),
        ("params", info.get("params")),
        ("game", game),
        ("objective", objective or "none recorded"),
        ("encoder", f"{config.get('encoder')} (hidden size {config.get('hidden_size')})"),
        ("steps", f"{info.get('step')} (batch {config.get('batch_size')})"),
        ("data", f"{data.get('source')}: {data.get('transitions')} transitions, "
         f"{data.get('episodes')} episodes of {data.get('game')}"),
        ("data fingerprint", data.get("fingerprint")),
        ("env protocol", data.get("env_protocol")),
        ("sticky actions", data.get("sticky_action_prob")),
        ("code", f"sgi-lab {code.get('sgi_lab')}, commit {code.get('commit')}"
         + (" (dirty)" if code.get("dirty") else "")),
        ("exported", info.get("exported")),
    ]  # fmt: skip
    parts = [
        front_matter(front),
        "",
        f"# {info.get('params') or 'sgi-lab'} on {game}",
        "",
        "An encoder (with its transition model and heads) trained by sgi-lab, a workbench "
        "for SGI (Schwarzer et al., 2021: pretraining representations for data-efficient RL).",
        "",
        "| | |",
        "|---|---|",
        *[f"| {k} | {v} |" for k, v in rows],
        "",
    ]
    if info.get("probes"):
        parts += ["## Probes", "", "| store | readout | variables | mean F1 |", "|---|---|---|---|"]
        parts += [*_probe_lines(info["probes"]), ""]
    evaluation = info.get("evaluation") or {}
    if evaluation:
        parts += [
            "## Evaluation",
            "",
            f"{evaluation.get('episodes')} episodes of {evaluation.get('game')}: mean return "
            f"{evaluation.get('mean')}, {evaluation.get('normalization', 'HNS')} "
            f"{evaluation.get('normalized_score', evaluation.get('hns'))}.",
            "",
        ]
    parts += [
        "## Use",
        "",
        "```",
        "huggingface-cli download USER/NAME --local-dir pretrained",
        "sgi-lab finetune --params PARAMS.yaml --game GAME --pretrained pretrained",
        "```",
        "",
        "`model.safetensors` holds the weights, `target.safetensors` the EMA target's encoder "
        "and projection (when saved), `config.yaml` the run's config, `sgi_lab.json` what they "
        "are and each file's SHA-256.",
        "",
    ]
    return "\n".join(parts)


def export_hub(run: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Write finished run ``run``'s model as a hub folder ``out`` (`sgi_lab.runs.hub`).

    Args:
        run: a finished pretraining run (or a finetuned agent's run) folder, or a model file.
        out: a new (or empty) folder.

    Raises:
        ConfigError: ``run`` is no finished run (`pretrained_source`).
        CheckpointError: its model is not a pretrained model or a finetuned agent's.
        FileExistsError: ``out`` exists and is not empty.
    """
    model_file = pretrained_source(run)
    payload = load_checkpoint(model_file, "cpu")
    if payload.get("kind") not in (*PRETRAINED_KINDS, AGENT_KIND):
        raise CheckpointError(f"{model_file}: a {payload.get('kind')!r} file, not a model")
    run_dir = (
        model_file.parent.parent if model_file.parent.name == "checkpoints" else model_file.parent
    )
    status = read_mapping(run_dir / "status.json")
    config_file = run_dir / "config.yaml"
    config_text = (
        config_file.read_text()
        if config_file.is_file()
        else yaml.safe_dump(payload.get("config") or {}, sort_keys=False)
    )
    info = {
        "params": status.get("params"),
        "data": _data_info(status),
        "source_run": str(run_dir),
        "source_file": model_file.name,
        "provenance": status.get("provenance"),
        "exported": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "probes": read_probes(run_dir),
        "evaluation": read_mapping(run_dir / "eval.json"),
    }
    shown = {**info, **{k: payload.get(k) for k in ("kind", "step", "game", "config")}}
    return write_hub_folder(out, payload, info, config_text, model_card(shown))
