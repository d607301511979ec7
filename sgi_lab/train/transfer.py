"""From a pretraining run to a finetuning model: load the pretrained weights, copy the tensors the
two models share, and say which learning rate each parameter trains with.

Every tensor whose name exists in both models with the same shape is copied; the rest of the
finetuning model starts fresh and tensors only the pretrained model has (goal head, inverse model,
ATC head) are ignored; a shared name with another shape is an error. The noisy layers' sigmas are
then reset (pretraining runs noise-free). A model with the RL head's own copy of the Q head's first
layers (``rl_hidden.``, `FinetuneConfig.rl_head_hidden`) gets it from the pretrained first layers
too. The learning-rate groups of each scheme are in `lr_group` and README.md.

Two controls use the same path (docs/experiments.md, "A study's question"): a *finetuned agent*
(a from-scratch agent's run folder, the positive control's source) is read like a pretraining
run, its Q output layers left out, so that it provides exactly the tensors a pretraining run
provides; and ``pretrained_values: initial`` (the negative control) keeps the finetuning model's
own initialization for the tensors the pretrained model provides while they train in the same
groups at the same learning rates.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from sgi_lab.augment.ops import GRID_SIDE
from sgi_lab.base.errors import SgiLabError
from sgi_lab.config import ConfigError, FinetuneConfig
from sgi_lab.envs.spec import ObservationSpec
from sgi_lab.nets import SGIModel, parameter_group
from sgi_lab.runs.checkpoints import CheckpointError, load_checkpoint
from sgi_lab.runs.folder import foreign_model_problem
from sgi_lab.runs.hub import is_hub_folder, read_hub_folder
from sgi_lab.runs.status import pretrained_source

__all__ = [
    "AGENT_KIND",
    "ARCHITECTURE_ARGS",
    "LR_GROUPS",
    "PRETRAINED_VALUES",
    "PRETRAINED_TARGET_PREFIXES",
    "Pretrained",
    "PretrainedMismatchError",
    "Transfer",
    "agent_part",
    "load_pretrained",
    "lr_group",
    "lr_scales",
    "model_args_for",
    "observation_args",
    "pretrained_target_part",
    "transfer_pretrained",
]

# SGIModel arguments that shape the tensors shared with a pretrained model; taken from it.
ARCHITECTURE_ARGS = ("in_channels", "image_size", "hidden_size", "width_scale", "goal_film")

# SGIModel's defaults for the sizes `observation_args` sets: Atari's observation, 512 units.
_SIZE_DEFAULTS = {"in_channels": 4, "image_size": 84, "hidden_size": 512}

LR_GROUPS = ("encoder_transition", "pretrained", "fresh")
"""Optimizer parameter groups, in this order (empty ones are left out)."""

PRETRAINED_TARGET_PREFIXES = ("encoder.", "head.advantage_hidden.", "head.value_hidden.")
"""What finetuning reads of a pretraining run's EMA target: SPR's target network, the encoder and
the projection (the Q head's first layers), as the reference's pretrained state holds its
``target_encoder`` and ``target_projection`` (docs/paper_vs_code.md row 32)."""


def pretrained_target_part(target_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The entries of a pretraining run's EMA target that finetuning can start SPR's target from
    (`PRETRAINED_TARGET_PREFIXES`). The rest (transition model, predictor, FiLM generator, goal
    and inverse heads: 70% of it for the Nature CNN, the FiLM generator alone 52 MB) no
    finetuning reads: SPR's target is an encoder and a projection; goal RL's targets start from
    the loaded online weights (`sgi_lab.train.population.Population.start_spr_target` keeps
    what the state lacks as built)."""
    return {k: v for k, v in target_state.items() if k.startswith(PRETRAINED_TARGET_PREFIXES)}


class PretrainedMismatchError(SgiLabError, ValueError):
    """The pretrained model does not fit the finetuning model (encoder or tensor shapes)."""


@dataclass(frozen=True)
class Pretrained:
    """A pretrained model as read from a pretraining run.

    Attributes:
        path: the file read (``RUN/model.pt`` or a checkpoint named explicitly).
        state: its state dict.
        model_args: SGIModel arguments it was built with (``encoder``, ``num_actions``...).
        step: pretraining steps behind it.
        game: game it was pretrained on (None if unrecorded).
        params: the pretraining params name from the run's status.json (None if unrecorded).
        config: the pretraining config recorded in the file (empty if unrecorded).
        target_state: the part of the pretraining run's EMA target that finetuning reads
            (`pretrained_target_part`: encoder and projection, also from older files that hold
            the whole target; None in files made before it was saved);
            `FinetuneConfig.spr_target_start` can start SPR's target from it.
    """

    path: Path
    state: dict[str, torch.Tensor]
    model_args: dict[str, Any]
    step: int
    game: str | None = None
    params: str | None = None
    config: dict[str, Any] | None = None
    target_state: dict[str, torch.Tensor] | None = None
    source_kind: str = "pretrain"  # "pretrain", or "agent": a finetuned agent's model

    def build_model(self) -> SGIModel:
        """The pretrained SGIModel itself, in eval mode (for analysis notebooks)."""
        model = SGIModel(**self.model_args)
        model.load_state_dict(self.state)
        return model.eval()


def load_pretrained(source: str | Path, allow_unfinished: bool = False) -> Pretrained:
    """Read a pretrained model: a finished pretraining run's ``model.pt``, a file named, or a
    folder ``sgi-lab export hub`` wrote (`sgi_lab.runs.hub`).

    A run folder without ``model.pt`` has not finished: it is refused rather than quietly
    finetuning from whatever its last checkpoint holds. Name a checkpoint file
    (``RUN/checkpoints/ckpt_00001000.pt``) to use one on purpose.

    Args:
        source: a pretraining run folder, a model/checkpoint file, or a hub folder.
        allow_unfinished: for looking at a run (analysis notebooks), not finetuning from it:
            an unfinished run folder gives its newest checkpoint.

    Raises:
        ConfigError: no such run or file, a run that never finished
            (`sgi_lab.runs.status.pretrained_source`), or a model whose recorded config is not
            its run folder's (copied in from another run: its objective is not the folder's
            label; `sgi_lab.runs.folder.foreign_model_problem`).
        CheckpointError: a truncated or foreign file.
    """
    path = Path(source)
    if is_hub_folder(path):  # `sgi-lab export hub`'s folder: its weights and what they are
        payload = read_hub_folder(path)
        return _pretrained(path, payload, payload["params"])
    checkpoints = sorted((path / "checkpoints").glob("ckpt_*.pt")) if path.is_dir() else []
    if allow_unfinished and path.is_dir() and not (path / "model.pt").is_file() and checkpoints:
        path = checkpoints[-1]
    path = pretrained_source(path)
    payload = load_checkpoint(path, "cpu")
    run_dir = path.parent.parent if path.parent.name == "checkpoints" else path.parent
    config = payload.get("config") if isinstance(payload.get("config"), dict) else None
    problem = foreign_model_problem(run_dir, path, config)
    if problem:
        raise ConfigError(f"pretrained: {problem}")
    try:
        status = json.loads((run_dir / "status.json").read_text())
    except (OSError, json.JSONDecodeError):
        status = {}
    return _pretrained(path, payload, status.get("params") if isinstance(status, dict) else None)


def _pretrained(path: Path, payload: dict[str, Any], params: str | None) -> Pretrained:
    """`Pretrained` of a model file's (or a hub folder's) payload, its kind checked."""
    if payload.get("kind") not in (*PRETRAINED_KINDS, AGENT_KIND):
        raise CheckpointError(
            f"{path}: a {payload.get('kind')!r} file, expected a pretrained model "
            f"('pretrained_model' or a 'pretrain' checkpoint) or a finetuned agent's "
            f"({AGENT_KIND!r})"
        )
    for key in ("model", "model_args"):
        if not isinstance(payload.get(key), dict):
            raise CheckpointError(f"{path}: no {key!r} entry; not a pretrained model")
    config = payload.get("config") if isinstance(payload.get("config"), dict) else None
    target = payload.get("target")
    agent = payload.get("kind") == AGENT_KIND
    return Pretrained(
        path=path,
        state=agent_part(payload["model"]) if agent else payload["model"],
        model_args=dict(payload["model_args"]),
        step=int(payload.get("step", 0)),
        game=payload.get("game"),
        params=params,
        config=config,
        # older files hold the whole target: cut it as model.pt now does, so that a file's age
        # never changes where finetuning starts
        target_state=pretrained_target_part(target) if isinstance(target, dict) else None,
        source_kind="agent" if agent else "pretrain",
    )


PRETRAINED_KINDS = ("pretrained_model", "pretrain")
AGENT_KIND = "finetuned_model"
"""A finetuned agent's ``model.pt``: the positive control's source (`agent_part`)."""


def agent_part(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """What finetuning loads of a finetuned agent's model: every tensor but the Q head's output
    layers (``q_output``), i.e. the encoder, transition model, the head's first layers (SPR's
    projection) and the predictor: the tensors an SGI pretraining run provides, so that a
    positive control transfers exactly what the pretrained arm transfers, at the same learning
    rates. The outputs are the agent's action values; loading them would transfer a policy,
    not a representation."""
    return {k: v for k, v in state.items() if parameter_group(k) != "q_output"}


@dataclass(frozen=True)
class Transfer:
    """Which tensors of the finetuning model came from the pretrained model.

    Attributes:
        loaded: names (parameters and buffers) copied from the pretrained model.
        fresh: names of the finetuning model left at their initialization.
        ignored: names only the pretrained model has.
        source: the file they came from (None: no pretraining).
        values: ``"loaded"``, or ``"initial"``: the ``loaded`` names count as loaded (their
            groups and learning rates) but kept the model's initialization (negative control).
        source_kind: ``"pretrain"``, or ``"agent"``: a finetuned agent (positive control).
    """

    loaded: tuple[str, ...] = ()
    fresh: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()
    source: str | None = None
    values: str = "loaded"  # "initial": the loaded names keep their initialization
    source_kind: str = "pretrain"  # "agent": the source is a finetuned agent

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "source_kind": self.source_kind,
            "values": self.values,
            "loaded": list(self.loaded),
            "fresh": list(self.fresh),
            "ignored": list(self.ignored),
        }


def transfer_pretrained(
    model: SGIModel, pretrained: Pretrained, values: str = "loaded"
) -> Transfer:
    """Copy every tensor the two models share by name (shapes must agree), then reset the noisy
    layers' sigmas (pretraining runs without noise). A model with ``rl_hidden.`` (the RL head's
    copy of the first layers, docs/paper_vs_code.md row 40) then gets ``head.*_hidden.`` copied
    into it, sigmas reset, as the reference's ``copy_base_params`` starts both copies from the
    pretrained first layers; it counts as loaded (its learning rate is the projection's).

    ``values="initial"`` (`FinetuneConfig.pretrained_values`, the negative control) copies
    nothing: the same tensors count as loaded, and so train in the same groups at the same
    learning rates, but keep the model's own initialization.

    Raises:
        PretrainedMismatchError: different encoders, or shared names with different shapes
            (listed with both shapes).
    """
    enc = pretrained.model_args.get("encoder")
    if enc is not None and enc != model.encoder_name:
        raise PretrainedMismatchError(
            f"{pretrained.path}: pretrained encoder is {enc!r} but finetuning builds "
            f"{model.encoder_name!r}; set encoder={enc} (or pretrain a {model.encoder_name})"
        )
    own = model.state_dict()
    theirs = pretrained.state
    mismatched = [
        f"{k}: pretrained {tuple(theirs[k].shape)} vs finetune {tuple(v.shape)}"
        for k, v in own.items()
        if k in theirs and tuple(theirs[k].shape) != tuple(v.shape)
    ]
    if mismatched:
        hint = ""
        their_actions = pretrained.model_args.get("num_actions")
        if their_actions is not None and their_actions != model.num_actions:
            hint = (
                f" (the pretrained model has {their_actions} actions, the finetuning model "
                f"{model.num_actions}: another game, or a different action set?)"
            )
        raise PretrainedMismatchError(
            f"{pretrained.path}: {len(mismatched)} tensor(s) differ in shape{hint}: "
            + "; ".join(mismatched)
        )
    if values not in PRETRAINED_VALUES:
        raise ValueError(f"values: one of {PRETRAINED_VALUES}, got {values!r}")
    loaded = tuple(k for k in own if k in theirs)
    if values == "loaded":
        model.load_state_dict({**own, **{k: theirs[k] for k in loaded}})
    model.reset_noise_parameters()
    loaded += _copy_rl_hidden(model, frozenset(loaded))
    got = frozenset(loaded)
    return Transfer(
        loaded=loaded,
        fresh=tuple(k for k in own if k not in got),
        ignored=tuple(k for k in theirs if k not in own),
        source=str(pretrained.path),
        values=values,
        source_kind=pretrained.source_kind,
    )


PRETRAINED_VALUES = ("loaded", "initial")


RL_HIDDEN = "rl_hidden."
"""Prefix of the RL head's copy of ``head.``'s first layers (names below it as below ``head.``)."""


def _copy_rl_hidden(model: SGIModel, loaded: frozenset[str]) -> tuple[str, ...]:
    """Copy ``head.*_hidden.*`` into ``rl_hidden.*`` where the model has the copy and the first
    layers were loaded; returns the names copied (none otherwise)."""
    state = model.state_dict()
    copies = {
        k: state["head." + k[len(RL_HIDDEN) :]]
        for k in state
        if k.startswith(RL_HIDDEN) and "head." + k[len(RL_HIDDEN) :] in loaded
    }
    model.load_state_dict({**state, **copies})
    return tuple(copies)


def observation_args(spec: ObservationSpec, hidden_size: int = 512) -> dict[str, Any]:
    """SGIModel's size arguments for observations of ``spec`` (``in_channels``, ``image_size``)
    and ``hidden_size``, each only where it is not SGIModel's default: an Atari model's
    recorded arguments stay as they always were, so its checkpoints resume and compare."""
    if spec.height != spec.width:
        raise ValueError(f"observation {spec.height}x{spec.width}: SGIModel reads square frames")
    sizes = {
        "in_channels": spec.input_channels,
        "image_size": spec.height,
        "hidden_size": int(hidden_size),
    }
    return {k: v for k, v in sizes.items() if v != _SIZE_DEFAULTS[k]}


def _observation_of(args: dict[str, Any]) -> tuple[int, int]:
    """(input channels, image size) of SGIModel arguments."""
    return (
        int(args.get("in_channels", _SIZE_DEFAULTS["in_channels"])),
        int(args.get("image_size", _SIZE_DEFAULTS["image_size"])),
    )


def model_args_for(
    config: FinetuneConfig, num_actions: int, pretrained: Pretrained | None = None
) -> dict[str, Any]:
    """SGIModel keyword arguments of the finetuning model (saved with it in ``model.pt``):
    sized for the game's observations (`sgi_lab.envs.observation_spec`), or as the pretrained
    model, which must read the same observations.

    Raises:
        PretrainedMismatchError: the pretrained model reads other observations than the game's
            (a MinAtar store's model finetuned on an Atari game, or the reverse), naming both.
    """
    spec = config.observation_spec
    args: dict[str, Any] = {
        "encoder": config.encoder,
        "num_actions": num_actions,
        "num_atoms": config.num_atoms,
        "v_min": config.v_min,
        "v_max": config.v_max,
        "noisy": config.noisy_std > 0,
        "noise_std": config.noisy_std,
        "rl_head": True,
        "goal_head": config.uses_goal_rl,
        "inverse_model": config.uses_goal_rl,
        **observation_args(spec, config.hidden_size),
    }
    # The second copy exists only beside goal RL: without it the reference's projection is the
    # RL head's own layer (one copy), so ``separate`` changes nothing there.
    if config.uses_goal_rl and config.rl_head_hidden == "separate":
        args["rl_hidden"] = True
    if pretrained is not None:
        theirs, ours = _observation_of(pretrained.model_args), _observation_of(args)
        # Another family (a 10x10 grid against 84x84 frames) or other channels; a narrower
        # image of the same family (the reference fixtures' 52x52) is the model's own choice.
        grids = (theirs[1] <= GRID_SIDE, ours[1] <= GRID_SIDE)
        if theirs[0] != ours[0] or grids[0] != grids[1]:
            raise PretrainedMismatchError(
                f"pretrained: {pretrained.path} reads {theirs[0]} channels of "
                f"{theirs[1]}x{theirs[1]} (pretrained on {pretrained.game or 'an unrecorded game'}"
                f"), {config.game} gives {ours[0]} channels of {ours[1]}x{ours[1]}; finetune it "
                "on a game of the same family and observation"
            )
        args.update(
            {k: pretrained.model_args[k] for k in ARCHITECTURE_ARGS if k in pretrained.model_args}
        )
    return args


def lr_group(
    name: str, loaded: set[str] | frozenset[str], scheme: str, groups: str = "text"
) -> str | None:
    """The optimizer group of parameter ``name``, or None when it is not trained.

    ``encoder_transition``: pretrained encoder and transition model; ``pretrained``: other
    pretrained parameters; ``fresh``: everything the pretrained model did not provide. With the
    frozen scheme the encoder is not trained at all. ``groups="reference"`` (the authors'
    ``sgim_finetune.sh``: ``encoder_lr``, ``q_l1_lr``, nothing else) puts only the encoder in
    the first group, only the Q head's first layers (SPR's projection) in the second, and every
    other parameter, the pretrained transition model and predictor included, in ``fresh``.
    """
    part = parameter_group(name)
    if scheme == "frozen" and part == "encoder":
        return None
    if name not in loaded:
        return "fresh"
    if groups == "reference":
        return {"encoder": "encoder_transition", "projection": "pretrained"}.get(part, "fresh")
    return "encoder_transition" if part in ("encoder", "transition") else "pretrained"


def lr_scales(config: FinetuneConfig) -> dict[str, float]:
    """Learning-rate multiplier of each group under ``config.scheme`` (naive: all 1)."""
    naive = config.scheme == "naive"
    return {
        "encoder_transition": 1.0 if naive else config.encoder_lr_scale,
        "pretrained": 1.0 if naive else config.pretrained_lr_scale,
        "fresh": 1.0,
    }
