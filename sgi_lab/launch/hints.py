"""What the command line says about arguments its parser does not take."""

from __future__ import annotations

import dataclasses

__all__ = ["pretraining_params_problem", "unrecognized"]


def unrecognized(extra: list[str]) -> str:
    """argparse's message for arguments no option takes, with a hint where one is a config key
    written as an option (``--device cuda``: ``--set device=cuda``)."""
    # lazy: the CLI starts without torch; a command loads what it runs
    from sgi_lab.config import FinetuneConfig, PretrainConfig

    keys = {f.name for cls in (PretrainConfig, FinetuneConfig) for f in dataclasses.fields(cls)}
    hints = []
    for i, arg in enumerate(extra):
        key = arg.removeprefix("--").split("=", 1)[0].replace("-", "_")
        if arg.startswith("--") and key in keys:
            value = arg.split("=", 1)[1] if "=" in arg else (extra[i + 1 : i + 2] or ["VALUE"])[0]
            hints.append(f"--set {key}={value}")
    message = "unrecognized arguments: " + " ".join(extra)
    if hints:
        message += f" ({', '.join(hints)}: config keys are set with --set KEY=VALUE)"
    return message


def pretraining_params_problem(params: dict, path: object) -> str | None:
    """What is wrong when ``finetune --params`` is given a pretraining params file (its config
    keys are pretraining's, not finetuning's), or None."""
    # lazy: the CLI starts without torch; a command loads what it runs
    from sgi_lab.config import FinetuneConfig, PretrainConfig

    keys = set(params.get("config") or {})
    finetune = {f.name for f in dataclasses.fields(FinetuneConfig)}
    pretrain = {f.name for f in dataclasses.fields(PretrainConfig)}
    foreign = sorted(keys - finetune)
    if not foreign or not set(foreign) <= pretrain:
        return None
    return (
        f"--params {path}: a pretraining params file ({', '.join(foreign)} are pretraining "
        "keys); finetune takes params/finetune/NAME.yaml, and the pretraining run with "
        "--pretrained RUN"
    )
