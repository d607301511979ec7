"""An agent's whole replay as a transition store: the DQN Replay recipe, made by our own agents.

A finetuning run's replay (`sgi_lab.data.population_replay.PopulationReplay`) holds every
transition of the run (its capacity is the run's steps), and every checkpoint saves it whole
(`sgi_lab.train.finetune_agents.save_checkpoint`), so a finished run's last checkpoint holds
the agent's entire experience, in the order it was lived. `export_replay` writes it as a store
(source ``replay``): row ``t`` is environment step ``t + 1``'s transition, with the frames,
actions, raw rewards, learning terminals and episode starts exactly as the replay holds them
(a resumed run's fresh episode starts where it resumed; an episode cut by the end of the run
ends without a terminal). Its manifest's ``params`` record the making agent: its run folder's
name, its whole config and that config's SHA-256, the commits it ran on (each with the step it
took over at), its final evaluation (``eval.json``), its checkpoint steps (rows ``[0, step)``
were in its replay at each) and its learning curve per checkpoint interval (from
``metrics.jsonl``); the manifest's own keys carry
the env protocol, the game's sticky actions and the observation spec. Weak and Mixed are
selections of such a store (`sgi_lab.data.replay_select`), as the paper's are of a DQN run.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from sgi_lab.base.files import read_jsonl
from sgi_lab.base.paths import did_you_mean
from sgi_lab.data.store import TransitionStore
from sgi_lab.data.store_format import DEFAULT_CHUNK_SIZE, StoreError
from sgi_lab.data.store_writer import TransitionStoreWriter, check_store_target
from sgi_lab.envs.factory import observation_spec
from sgi_lab.envs.minatar import is_minatar
from sgi_lab.runs.checkpoints import checkpoint_files, load_checkpoint
from sgi_lab.runs.status import read_status, require_finished

__all__ = ["REPLAY_SOURCE", "config_sha256", "export_replay", "learning_curve"]

REPLAY_SOURCE = "replay"
"""The source of a store exported from an agent's replay (its selections: ``replay_weak``,
``replay_mixed``)."""
# What an agent's record keeps of its evaluation (eval.json).
EVAL_KEYS = ("mean", "std", "median", "episodes", "normalized_score", "normalization", "step")


def config_sha256(config: dict[str, Any]) -> str:
    """SHA-256 of a config as canonical JSON (sorted keys): the making agent's fingerprint."""
    text = json.dumps(config, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def learning_curve(rows: list[dict[str, Any]], boundaries: list[int]) -> list[dict[str, Any]]:
    """The training episodes of each checkpoint interval ``(previous, step]``: how many ended
    there, their mean return and mean length (None when none ended).

    Args:
        rows: ``metrics.jsonl`` rows; those with ``episode/return`` are episodes, counted at the
            step they ended.
        boundaries: the checkpoint steps, increasing.
    """
    ends = np.array([r["step"] for r in rows if "episode/return" in r], dtype=np.int64)
    returns = np.array([r["episode/return"] for r in rows if "episode/return" in r], float)
    lengths = np.array([r.get("episode/length", 0) for r in rows if "episode/return" in r], float)
    curve, low = [], 0
    for step in boundaries:
        inside = (ends > low) & (ends <= step)
        count = int(inside.sum())
        curve.append(
            {
                "step": int(step),
                "episodes": count,
                "mean_return": float(returns[inside].mean()) if count else None,
                "mean_length": float(lengths[inside].mean()) if count else None,
            }
        )
        low = step
    return curve


def _checkpoint_steps(config: dict[str, Any], steps: int) -> list[int]:
    """The steps at which the run checkpointed on schedule: every ``checkpoint_every`` and the
    last (a stop may have added others; a resume starts a fresh episode, `_resumed_at`)."""
    every = int(config.get("checkpoint_every") or steps)
    return sorted({*range(every, steps, every), steps})


def _resumed_at(status: dict[str, Any]) -> list[int]:
    """The steps a run resumed at (its status's provenance: one entry per start after 0)."""
    return sorted({int(p["step"]) for p in status.get("provenance", []) if p.get("step")})


def commit_history(status: dict[str, Any]) -> list[dict[str, Any]]:
    """Each sgi-lab commit the run trained on, in order, with the step it took over at (its
    status's provenance: a run resumed on newer code lists both)."""
    commits: list[dict[str, Any]] = []
    for entry in status.get("provenance", []):
        commit = entry.get("commit")
        if commit and (not commits or commits[-1]["commit"] != commit):
            commits.append({"commit": commit, "from_step": int(entry.get("step") or 0)})
    return commits


def _agent_record(run: Path, ckpt: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    """The manifest's ``params`` of an exported replay: the making agent and its curve."""
    config = dict(ckpt["config"])
    steps = int(ckpt["step"])
    boundaries = _checkpoint_steps(config, steps)
    evaluation = (
        json.loads((run / "eval.json").read_text()) if (run / "eval.json").is_file() else {}
    )
    started = (status.get("provenance") or [{}])[0]
    record = {
        "run": run.name,
        "steps": steps,
        "seed": config.get("seed"),
        "config_sha256": config_sha256(config),
        "config": config,
        "commit": started.get("commit"),
        "commits": commit_history(status),
        "cpu": started.get("cpu"),
        "final_evaluation": {k: evaluation.get(k) for k in EVAL_KEYS if k in evaluation},
        "checkpoints": boundaries,
        "resumed_at": _resumed_at(status),
        "curve": learning_curve(read_jsonl(run / "metrics.jsonl"), boundaries),
        # MinAtar has no lives; Atari's training env ends the learning episode at a life loss
        "terminal_on_life_loss": not is_minatar(str(ckpt["game"])),
    }
    return json.loads(json.dumps(record, default=str))  # as the manifest will read it back


def _last_checkpoint(run: Path) -> dict[str, Any]:
    """The finished run's newest checkpoint, which must be at its last step."""
    found = checkpoint_files(run)
    if not found:
        raise StoreError(
            f"{run}: no checkpoints (pruned, or restored from an archive): an agent's replay "
            "lives only in its checkpoints; train it again to export it"
        )
    ckpt = load_checkpoint(found[-1], "cpu", kind="finetune")
    steps = int(ckpt["config"]["steps"])
    size = int(ckpt["replay"]["size"])
    if int(ckpt["step"]) != steps or size != steps:
        raise StoreError(
            f"{found[-1]}: a checkpoint at step {ckpt['step']} holding {size} rows, but the run "
            f"has {steps} steps: its last checkpoint is missing; the whole replay is in that one"
        )
    return ckpt


def export_replay(
    run: str | os.PathLike,
    out: str | os.PathLike,
    overwrite: bool = False,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> TransitionStore:
    """Write a finished finetuning run's whole replay as a store at ``out`` (source ``replay``).

    Args:
        run: a finished finetuning run folder with its last checkpoint (a finished run keeps
            its newest two until ``sgi-lab prune``).
        out: the store (built in ``out.partial``, renamed when complete).
        overwrite: replace a store of ours at ``out``.
        chunk_size: rows per chunk file.

    Returns:
        The store. Re-running with the same run returns the existing store untouched.

    Raises:
        FileNotFoundError: no such run folder.
        UnfinishedRunError: the run has not finished.
        StoreError: the run has no checkpoint at its last step.
        StoreFolderError: ``out`` holds something else (or, without ``overwrite``, a store
            made from another run).
    """
    run = Path(run)
    if not run.is_dir():
        raise FileNotFoundError(did_you_mean(run, "run folder"))
    require_finished(run, "export replay")
    ckpt = _last_checkpoint(run)
    config, game = ckpt["config"], str(ckpt["game"])
    minatar = is_minatar(game)
    params = _agent_record(run, ckpt, read_status(run) or {})
    protocol = str(config.get("env_protocol") or ("minatar" if minatar else "dopamine"))
    done = check_store_target(out, game, REPLAY_SOURCE, params, overwrite, protocol)
    if done is not None:
        return done
    spec = observation_spec(game, config.get("frames"), config.get("channels"))
    replay = ckpt["replay"]
    frames = replay["frames"].numpy()
    if frames.shape[1:] != spec.frame_shape:
        raise StoreError(
            f"{run}: replay frames of shape {frames.shape[1:]}, the run's observation spec "
            f"{spec.frame_shape}"
        )
    writer = TransitionStoreWriter.create(
        out, game=game, source=REPLAY_SOURCE, params=params,
        num_actions=int(ckpt["model_args"]["num_actions"]), chunk_size=chunk_size,
        overwrite=overwrite, env_protocol=protocol, observation_spec=spec,
        # Atari 100k plays without sticky actions; a MinAtar game with its config's
        sticky_action_prob=float(config.get("sticky_action_prob", 0.0)) if minatar else 0.0,
    )  # fmt: skip
    columns = {
        "frame": frames,
        "action": replay["actions"].numpy().astype(np.int32),
        "reward": replay["rewards"].numpy().astype(np.float32),
        "terminal": replay["terminals"].numpy().astype(np.uint8),
        "first": replay["firsts"].numpy().astype(np.uint8),
    }
    try:
        for start in range(0, len(frames), chunk_size):
            writer.append_many(**{k: v[start : start + chunk_size] for k, v in columns.items()})
        writer.close()
    except BaseException:
        writer.abort()
        raise
    return TransitionStore(out)
