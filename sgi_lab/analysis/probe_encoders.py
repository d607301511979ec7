"""Loading the frozen encoders that probes read: a pretraining run's, a finetuning run's, a model
or checkpoint file's, or a random initialization's, and where each one's results go
(``RUN/probes.json``, ``RUN/probes_ckpt_N.json`` for a checkpoint). The loaders use the training
stages' readers, so they sit above them; `sgi_lab.probes.encoder_probe` (the probing) needs no training
code and pretraining can call it.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from sgi_lab.base.files import read_mapping
from sgi_lab.config import ConfigError
from sgi_lab.envs.spec import ObservationSpec
from sgi_lab.nets import SGIModel
from sgi_lab.probes.encoder_probe import PROBES_FILE, ProbeEncoder, random_init_model
from sgi_lab.probes.probe_data import ProbeInputError, file_stamp
from sgi_lab.runs.checkpoints import CheckpointError, load_checkpoint
from sgi_lab.runs.folder import foreign_model_problem
from sgi_lab.runs.status import read_status, require_finished
from sgi_lab.runs.status import run_kind as kind_of
from sgi_lab.train.evaluate import load_run_model
from sgi_lab.train.transfer import Pretrained, load_pretrained, observation_args

__all__ = ["initial_model", "load_probe_encoder", "probes_path", "random_probe_encoder"]

INITIAL_SOURCE = (
    "rebuilt: torch.manual_seed({seed}), SGIModel(**model_args), as pretraining builds it"
)
"""How a pretraining run's step-0 weights are recorded as obtained (`initial_model`)."""


def initial_model(pretrained: Pretrained) -> tuple[SGIModel, str] | None:
    """The weights a pretraining run started from (its step 0), and how they were obtained;
    None when the file records no seed (or is a finetuned agent's, which started from a
    scratch agent's initialisation, not this architecture's).

    Pretraining saves no checkpoint at step 0, but it builds its model right after
    ``torch.manual_seed(config.seed)`` (`sgi_lab.train.pretrain_step.build_state`), so the same
    seed and recorded model arguments rebuild those weights exactly (tested against
    `build_state`), as long as the network code has not changed since the run.
    """
    config = pretrained.config or {}
    seed = config.get("seed")
    if pretrained.source_kind != "pretrain" or not isinstance(seed, int):
        return None
    with torch.random.fork_rng(devices=[]):  # the caller's random stream is left as it was
        torch.manual_seed(seed)
        model = SGIModel(**pretrained.model_args)
    return model.eval(), INITIAL_SOURCE.format(seed=seed)


def probes_path(file: Path) -> Path:
    """Where the probes of a model file go: ``RUN/probes.json`` for ``RUN/model.pt``,
    ``RUN/probes_ckpt_N.json`` for ``RUN/checkpoints/ckpt_N.pt``, else beside the file."""
    if file.name == "model.pt":
        return file.parent / PROBES_FILE
    folder = file.parent.parent if file.parent.name == "checkpoints" else file.parent
    return folder / f"probes_{file.stem}.json"


def load_probe_encoder(source: str | os.PathLike, allow_unfinished: bool = False) -> ProbeEncoder:
    """The encoder of a pretraining run, a finetuning run, or a model/checkpoint file.

    Uses the project's loaders: `sgi_lab.train.transfer.load_pretrained` for pretraining runs
    and files, `sgi_lab.train.evaluate.load_run_model` for finetuning runs.

    Raises:
        ProbeInputError: no such path, a folder that is not a run of ours, a file that holds no
            encoder (the message names it).
        UnfinishedRunError: a run that never finished, unless ``allow_unfinished``.
    """

    path = Path(source)
    if not path.exists():
        raise ProbeInputError(f"{path}: no such run folder or model file")
    if path.is_dir():
        kind = kind_of(path)
        if kind is None:
            raise ProbeInputError(
                f"{path}: not an encoder: no sgi-lab run here (no status.json of ours); probe a "
                "pretraining or finetuning run folder, or a model/checkpoint file"
            )
        unfinished = not require_finished(path, "probe", allow_unfinished)
        status = read_status(path) or {}
        if kind == "finetune":
            model, info = load_run_model(path)
            file = path / "model.pt" if (path / "model.pt").is_file() else None
            if file is not None:
                config = info.get("config")
                check_model_of_run(path, file, config if isinstance(config, dict) else None)
            return ProbeEncoder(
                model, str(path), "finetune", path / PROBES_FILE, status.get("params"),
                info.get("step"), stamp=file_stamp(file) if file else {"step": info.get("step")},
                unfinished=unfinished, game=read_mapping(path / "config.yaml").get("game"),
            )  # fmt: skip
        try:
            pretrained = load_pretrained(path, allow_unfinished=allow_unfinished)
        except (ConfigError, CheckpointError) as exc:
            raise ProbeInputError(f"{path}: not an encoder ({exc})") from exc
        check_model_of_run(path, pretrained.path, pretrained.config)
        return _with_initial(ProbeEncoder(
            pretrained.build_model(), str(path), "pretrain", path / PROBES_FILE,
            pretrained.params, pretrained.step, stamp=file_stamp(pretrained.path),
            unfinished=unfinished, game=pretrained.game,
        ), pretrained)  # fmt: skip
    payload = load_checkpoint(path, "cpu")  # CheckpointError names a foreign file
    kind = payload.get("kind")
    if kind in ("pretrained_model", "pretrain"):
        pretrained = load_pretrained(path)
        return _with_initial(ProbeEncoder(
            pretrained.build_model(), str(path), "pretrain", probes_path(path),
            pretrained.params, pretrained.step, stamp=file_stamp(path), game=pretrained.game,
        ), pretrained)  # fmt: skip
    if kind in ("finetuned_model", "finetune") and isinstance(payload.get("model_args"), dict):
        model = SGIModel(**payload["model_args"])
        model.load_state_dict(payload["model"])
        return ProbeEncoder(
            model.eval(), str(path), "finetune", probes_path(path), None, payload.get("step"),
            stamp=file_stamp(path), game=payload.get("game"),
        )  # fmt: skip
    raise ProbeInputError(f"{path}: a {kind!r} file, not an encoder (no model weights to probe)")


def _with_initial(encoder: ProbeEncoder, pretrained: Pretrained) -> ProbeEncoder:
    """``encoder`` with the weights its run started from (`initial_model`), when known."""
    initial = initial_model(pretrained)
    if initial is not None:
        encoder.initial, encoder.initial_source = initial
    return encoder


def check_model_of_run(run: Path, model_file: Path, model_config: dict | None) -> None:
    """Refuse a model file whose recorded config is not its run folder's ``config.yaml`` (a
    model copied in from another run would be labelled with this folder's params).

    Raises:
        ProbeInputError: naming the file and the keys that differ (runtime keys aside).
    """
    problem = foreign_model_problem(run, model_file, model_config)
    if problem:
        raise ProbeInputError(f"{problem}; probe the file itself, or the run it came from")


def random_probe_encoder(
    out: str | os.PathLike,
    num_actions: int,
    encoder: str = "nature",
    seed: int = 0,
    spec: ObservationSpec | None = None,
) -> ProbeEncoder:
    """A randomly initialized encoder (the random-init baseline), its results in folder ``out``;
    ``spec``: the store's observation spec, for its input channels and size (a MinAtar store's;
    None: Atari's 4 x 84 x 84).

    Raises:
        ProbeInputError: ``out`` exists and holds something other than probe results.
    """
    out = Path(out)
    if out.exists() and (
        not out.is_dir()
        or any(p.name != PROBES_FILE and not p.name.startswith(".") for p in out.iterdir())
    ):
        raise ProbeInputError(
            f"{out}: exists and holds more than {PROBES_FILE}; a random-init probe writes only "
            "there: choose another --out"
        )
    sizes = observation_args(spec) if spec is not None else {}
    model = random_init_model(num_actions, encoder, seed, **sizes)
    return ProbeEncoder(model, "random_init", "random_init", out / PROBES_FILE, seed=seed)
