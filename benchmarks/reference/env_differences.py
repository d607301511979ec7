"""Sizes of the differences between sgi-lab's default Atari protocol and the authors' env.

Measured on the reference env fixtures (``tests/fixtures/reference/env_<game>.npz``, see
``env_fixtures.py``) with the project's virtualenv; the numbers are those of
``docs/paper_vs_code.md``'s environment rows::

    .venv/bin/python benchmarks/reference/env_differences.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

import test_reference_env as T  # noqa: E402

from sgi_lab.envs.atari import NoopResetWrapper  # noqa: E402
from sgi_lab.envs.rlpyt_frames import RlpytAtariPreprocessing  # noqa: E402


def resize(game: str) -> str:
    """Default (area) vs reference (bilinear) frames while both play the same game."""
    ref = T._fixture(game, "eval")
    env = T._make(game, "eval", "dopamine")
    T._force_noops(env, NoopResetWrapper, (ref["reset_noops"] + 1).tolist())
    ours, _ = T._play(env, ref["actions"])
    lives = np.concatenate([ref["reset_lives"][:1], ref["lives"]])
    losses = np.flatnonzero((lives[1:] < lives[:-1]) & (lives[1:] > 0))
    first = int(min([*losses[:1], *np.flatnonzero(ref["traj_done"])[:1]]))
    steps = ref["frame_steps"][ref["frame_steps"] < first]
    delta = np.abs(ours["frames"][steps].astype(int) - ref["frames"][: len(steps)].astype(int))
    desync = np.flatnonzero(ours["game_score"] != ref["game_score"])
    return (
        f"resize: {len(steps)} frames before step {first}: mean |d| {delta.mean():.2f}, "
        f"max {delta.max()} grey levels, {100 * (delta > 0).mean():.1f}% of pixels differ; "
        f"first life loss at step {losses[0] if losses.size else None}, first raw-score "
        f"difference at step {desync[0] if desync.size else None}"
    )


def life_loss_noops_and_game_over_frames(game: str) -> str:
    """Rewards the reference drops in its post-life-loss NOOP frames; how far its game-over
    frame is from the previous step's (the default repeats that one)."""
    ref = T._fixture(game, "eval")
    env = T._make(game, "eval", "rlpyt")
    T._force_noops(env, RlpytAtariPreprocessing, ref["reset_noops"].tolist())
    wrapper = T._find(env, RlpytAtariPreprocessing)
    dropped = []
    base_step = wrapper.env.step

    def noop() -> dict:
        _, reward, _, _, info = base_step(0)
        dropped.append(float(reward))
        return info

    wrapper._noop = noop
    ours, _ = T._play(env, ref["actions"])
    ends = np.flatnonzero(ref["traj_done"])
    delta = [
        np.abs(ours["frames"][t].astype(int) - ours["frames"][t - 1].astype(int)) for t in ends
    ]
    stack = T._fixture(game, "train")
    emptied = int((stack["obs_digest"] != ref["obs_digest"]).any(axis=1).sum())
    losses = int((stack["done"] & ~stack["traj_done"]).sum())
    after_losses = len(dropped) - int((1 + ref["reset_noops"]).sum())
    return (
        f"NOOP frames {len(dropped)} ({after_losses} after life losses), their nonzero rewards "
        f"{sum(r != 0 for r in dropped)}; game-over frame vs previous: "
        + ", ".join(f"{(d > 0).sum()} px, mean |d| {d.mean():.2f}" for d in delta)
        + f"; train vs eval observations differ at {emptied} steps for {losses} life losses"
    )


def main() -> None:
    for game in T.GAMES:
        print(game)
        print("  " + resize(game))
        print("  " + life_loss_noops_and_game_over_frames(game))


if __name__ == "__main__":
    main()
