"""A model folder ready for the Hugging Face Hub, and reading one back to finetune from.

The folder (`write_hub_folder`; `sgi_lab.analysis.hub_export` makes it from a run) holds:

* ``model.safetensors``: the model's weights (safetensors: plain tensors, nothing to unpickle);
* ``target.safetensors``: the part of the pretraining run's EMA target finetuning can start
  SPR's target from (when the run saved one);
* ``config.yaml``: the run's config, as the run wrote it;
* ``sgi_lab.json``: what the weights are (kind, model arguments, step, game, params name, the
  config as recorded with the weights, the data's fingerprint) and each file's SHA-256;
* ``README.md``: the model card.

``huggingface-cli upload USER/NAME FOLDER`` publishes it as it is; `read_hub_folder` gives the
payload a ``model.pt`` would (`sgi_lab.runs.checkpoints.load_checkpoint`), so a finetuning run's
``pretrained:`` may name the folder.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import torch

from sgi_lab.base.files import atomic_folder, atomic_write_text, file_digest
from sgi_lab.runs.checkpoints import CheckpointError

__all__ = [
    "CARD",
    "CONFIG",
    "HUB_FILE",
    "HUB_FORMAT",
    "TARGET",
    "WEIGHTS",
    "is_hub_folder",
    "read_hub_folder",
    "write_hub_folder",
]

HUB_FORMAT = "sgi-lab hub folder"
HUB_VERSION = 1
HUB_FILE = "sgi_lab.json"
WEIGHTS = "model.safetensors"
TARGET = "target.safetensors"
CONFIG = "config.yaml"
CARD = "README.md"


def is_hub_folder(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a folder `write_hub_folder` wrote (its ``sgi_lab.json`` is there)."""
    return (Path(path) / HUB_FILE).is_file()


def _sha256(path: Path) -> str:
    return file_digest(path, hashlib.sha256())


def _plain(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Tensors safetensors can save: on the CPU, contiguous, none sharing memory."""
    return {k: v.detach().to("cpu").contiguous().clone() for k, v in state.items()}


def write_hub_folder(
    out: str | os.PathLike,
    payload: dict[str, Any],
    info: dict[str, Any],
    config_text: str,
    card: str,
) -> Path:
    """Write a hub folder at ``out`` (built under a temporary name beside it, then renamed).

    Args:
        out: a new folder (or an empty one).
        payload: a model file's payload (`load_checkpoint`): ``model`` (and ``target``) tensors,
            ``kind``, ``model_args``, ``step``, ``game``, ``config``.
        info: more of what the weights are (params name, data, source run...), for
            ``sgi_lab.json``.
        config_text: ``config.yaml``'s text.
        card: ``README.md``'s text.

    Raises:
        FileExistsError: ``out`` exists and is not an empty folder (nothing is touched).
    """
    from safetensors.torch import save_file  # a dependency; imported where the format is

    out = Path(out)
    if out.exists() and not (out.is_dir() and not any(out.iterdir())):
        raise FileExistsError(f"{out} exists and is not empty; export into a new folder")
    with atomic_folder(out) as temp:
        save_file(_plain(payload["model"]), str(temp / WEIGHTS), metadata={"format": "pt"})
        files = [WEIGHTS]
        if isinstance(payload.get("target"), dict):
            save_file(_plain(payload["target"]), str(temp / TARGET), metadata={"format": "pt"})
            files.append(TARGET)
        atomic_write_text(temp / CONFIG, config_text)
        atomic_write_text(temp / CARD, card)
        described = {
            "format": HUB_FORMAT,
            "version": HUB_VERSION,
            **info,
            **{k: payload.get(k) for k in ("kind", "model_args", "step", "game", "config")},
            "sha256": {name: _sha256(temp / name) for name in [*files, CONFIG, CARD]},
        }
        atomic_write_text(temp / HUB_FILE, json.dumps(described, indent=2, default=str) + "\n")
    return out


def read_hub_folder(path: str | os.PathLike) -> dict[str, Any]:
    """A hub folder's weights and description as a model file's payload (``format``,
    ``kind``, ``model``, ``target`` or None, ``model_args``, ``step``, ``game``, ``config``),
    plus ``params`` (the params name it was made with) and ``info`` (all of ``sgi_lab.json``).

    Raises:
        CheckpointError: not a hub folder of ours, a file missing, or one whose SHA-256 is
            not the one recorded (a torn download).
    """
    from safetensors.torch import load_file  # a dependency; imported where the format is

    path = Path(path)
    try:
        info = json.loads((path / HUB_FILE).read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path / HUB_FILE}: unreadable ({exc})") from None
    if not isinstance(info, dict) or info.get("format") != HUB_FORMAT:
        raise CheckpointError(f"{path / HUB_FILE}: not an sgi-lab hub folder's description")
    recorded = info.get("sha256") or {}
    for name in (WEIGHTS, TARGET):
        if name not in recorded:
            continue
        if not (path / name).is_file():
            raise CheckpointError(f"{path / name}: missing (sgi_lab.json lists it)")
        if _sha256(path / name) != recorded[name]:
            raise CheckpointError(f"{path / name}: SHA-256 differs from sgi_lab.json's (torn?)")
    if WEIGHTS not in recorded:
        raise CheckpointError(f"{path / HUB_FILE}: lists no {WEIGHTS}")
    return {
        "format": "sgi-lab",
        "kind": info.get("kind"),
        "model": load_file(str(path / WEIGHTS)),
        "target": load_file(str(path / TARGET)) if TARGET in recorded else None,
        "model_args": info.get("model_args"),
        "step": info.get("step", 0),
        "game": info.get("game"),
        "config": info.get("config"),
        "params": info.get("params"),
        "info": info,
    }
