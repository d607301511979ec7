"""Environment fixtures from the authors' Atari wrapper (mila-iqia/SGI ``src/rlpyt_atari_env.py``).

Runs the reference ``AtariEnv`` for a fixed seed and a fixed random action sequence, as rlpyt's
sampler drives it (``reset()`` whenever ``traj_done``), and writes what it returned at every
step to ``tests/fixtures/reference/env_<game>.npz`` plus ``env.json`` (commits, versions,
settings). ``tests/envs/test_reference_env.py`` replays the same actions through sgi-lab's env and
compares.

Runs in the reference's own virtualenv, never the project's (see ``README.md``, "Environment")::

    /work/ref/venv/bin/python benchmarks/reference/env_fixtures.py \\
        --sgi /work/ref/SGI --rlpyt /work/ref/rlpyt

Three runs per game, one ``AtariEnv`` each, all with the same seed and actions:

- ``train``: the reference's training env (``episodic_lives=True``, ``clip_reward=True``);
- ``eval``: its evaluation env (``episodic_lives=False``, ``clip_reward=False``);
- ``horizon``: training settings with a short horizon, to pin when a timeout ends an episode.

Per step: the action, ``reward``, ``env_info.game_score``, ``done``, ``env_info.traj_done``,
the ALE's lives and episode frame number, and a BLAKE2b digest of the whole ``(4, 84, 84)``
observation; the newest frame in full every ``FRAME_EVERY`` steps and around every terminal. Per
reset (the constructor's first one included): the no-op count the reference drew from its
seeded ``RandomState``, the step it followed (-1: the first), the digest and newest frame.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SEED = 7
ACTION_SEED = 2024
FRAME_EVERY = 10
DIGEST_BYTES = 16
GAMES = {
    # game (atari_py name): steps. Pong has no lives: the episode end and +-1 rewards; Breakout:
    # five lives, short episodes; MsPacman: three lives and raw rewards above 1 (clipping).
    "pong": 1_000,
    "breakout": 600,
    "ms_pacman": 1_400,
}
HORIZON = 40
HORIZON_STEPS = 100
MODES = {
    "train": {"episodic_lives": True, "clip_reward": True},
    "eval": {"episodic_lives": False, "clip_reward": False},
    "horizon": {"episodic_lives": True, "clip_reward": True, "horizon": HORIZON},
}


def digest(obs: np.ndarray) -> np.ndarray:
    return np.frombuffer(
        hashlib.blake2b(np.ascontiguousarray(obs).tobytes(), digest_size=DIGEST_BYTES).digest(),
        dtype=np.uint8,
    )


def import_reference(sgi: Path, rlpyt: Path):
    """The reference env module, shims first on ``sys.path`` (see README)."""
    sys.path[:0] = [str(HERE / "shims"), str(sgi), str(rlpyt)]
    from src import rlpyt_atari_env

    return rlpyt_atari_env


class RecordingRandomState(np.random.RandomState):
    """The reference's ``np_random`` with every ``randint`` draw recorded (the no-op counts)."""

    def __init__(self, rng: np.random.RandomState):
        super().__init__()
        self.set_state(rng.get_state())
        self.draws: list[tuple[int, int, int]] = []

    def randint(self, low, high=None, size=None, dtype=int):
        value = super().randint(low, high, size, dtype)
        self.draws.append((int(low), int(high), int(value)))
        return value


def make_reference_env(ref, game: str, settings: dict):
    seeding = ref.seeding
    real_np_random = seeding.np_random

    def recording_np_random(seed=None):
        rng, seed = real_np_random(seed)
        return RecordingRandomState(rng), seed

    seeding.np_random = recording_np_random
    try:
        env = ref.AtariEnv(game=game, seed=SEED, **settings)
    finally:
        seeding.np_random = real_np_random
    return env


def run(ref, game: str, mode: str, steps: int) -> dict[str, np.ndarray]:
    env = make_reference_env(ref, game, MODES[mode])
    n_actions = len(env._action_set)
    actions = np.random.default_rng([ACTION_SEED, *game.encode()]).integers(0, n_actions, steps)

    def newest(obs):
        return obs[-1, 0]

    rec = {k: [] for k in ("reward", "game_score", "done", "traj_done", "lives", "frame_number")}
    digests, frame_steps, frames = [], [], []
    # The constructor reset once already: its draw and observation are the first reset's.
    obs = env.get_obs()
    resets = {"step": [-1], "digest": [digest(obs[:, 0])], "frame": [newest(obs)]}
    resets["frame_number"] = [env.ale.getEpisodeFrameNumber()]
    resets["lives"] = [env.ale.lives()]
    draws_after = [0, len(env.np_random.draws)]
    keep_next = True
    for t, action in enumerate(actions):
        obs, reward, done, info = env.step(int(action))
        rec["reward"].append(reward)
        rec["game_score"].append(info.game_score)
        rec["done"].append(done)
        rec["traj_done"].append(info.traj_done)
        rec["lives"].append(env.ale.lives())
        rec["frame_number"].append(env.ale.getEpisodeFrameNumber())
        digests.append(digest(obs[:, 0]))
        if keep_next or done or t % FRAME_EVERY == 0:
            frame_steps.append(t)
            frames.append(newest(obs))
        keep_next = bool(done)
        if info.traj_done:
            obs = env.reset()
            draws_after.append(len(env.np_random.draws))
            resets["step"].append(t)
            resets["digest"].append(digest(obs[:, 0]))
            resets["frame"].append(newest(obs))
            resets["frame_number"].append(env.ale.getEpisodeFrameNumber())
            resets["lives"].append(env.ale.lives())
    draws = env.np_random.draws
    if any(b - a != 1 for a, b in zip(draws_after[:-1], draws_after[1:])):
        # A life lost during the no-ops makes the reference reset again and draw again; the
        # test forces one count per reset, so such a run would need another seed.
        raise RuntimeError(f"{game}/{mode}: a reset drew more than one no-op count: {draws}")
    if any((low, high) != (1, env._max_start_noops + 1) for low, high, _ in draws):
        raise RuntimeError(f"{game}/{mode}: unexpected no-op draw bounds: {draws}")
    return {
        "actions": actions.astype(np.int16),
        "reward": np.asarray(rec["reward"], np.float32),
        "game_score": np.asarray(rec["game_score"], np.float32),
        "done": np.asarray(rec["done"], bool),
        "traj_done": np.asarray(rec["traj_done"], bool),
        "lives": np.asarray(rec["lives"], np.int16),
        "frame_number": np.asarray(rec["frame_number"], np.int32),
        "obs_digest": np.stack(digests),
        "frame_steps": np.asarray(frame_steps, np.int32),
        "frames": np.stack(frames),
        "reset_step": np.asarray(resets["step"], np.int32),
        "reset_noops": np.asarray([value for _, _, value in draws], np.int16),
        "reset_digest": np.stack(resets["digest"]),
        "reset_frame": np.stack(resets["frame"]),
        "reset_frame_number": np.asarray(resets["frame_number"], np.int32),
        "reset_lives": np.asarray(resets["lives"], np.int16),
    }


def git_commit(repo: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sgi", type=Path, default=Path("/work/ref/SGI"))
    parser.add_argument("--rlpyt", type=Path, default=Path("/work/ref/rlpyt"))
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "reference")
    args = parser.parse_args(argv)
    ref = import_reference(args.sgi, args.rlpyt)
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {}
    for game, steps in GAMES.items():
        arrays = {}
        for mode in MODES:
            n = HORIZON_STEPS if mode == "horizon" else steps
            for key, value in run(ref, game, mode, n).items():
                arrays[f"{mode}/{key}"] = value
        path = args.out / f"env_{game}.npz"
        np.savez_compressed(path, **arrays)
        t = arrays
        summary[game] = {
            "steps": steps,
            "life_losses": int((t["train/done"] & ~t["train/traj_done"]).sum()),
            "episode_ends": int(t["eval/traj_done"].sum()),
            "bytes": path.stat().st_size,
        }
        print(game, summary[game], flush=True)
    settings = {
        "seed": SEED,
        "action_seed": ACTION_SEED,
        "actions": "np.random.default_rng([action_seed, *game.encode()]).integers(0, n, steps)",
        "frame_every": FRAME_EVERY,
        "digest": "blake2b of the (4, 84, 84) uint8 observation's bytes",
        "digest_bytes": DIGEST_BYTES,
        "modes": MODES,
        "reference_defaults": {
            "frame_skip": 4,
            "num_img_obs": 4,
            "max_start_noops": 30,
            "repeat_action_probability": 0.0,
            "horizon": 27000,
            "imagesize": 84,
            "grayscale": True,
            "full_action_set": False,
        },
    }
    meta = {
        "what": "mila-iqia/SGI src/rlpyt_atari_env.py AtariEnv, run; see benchmarks/reference",
        "sgi_commit": git_commit(args.sgi),
        "rlpyt_commit": git_commit(args.rlpyt),
        "ale_py": importlib.metadata.version("ale-py"),
        "opencv": importlib.metadata.version("opencv-python-headless"),
        "numpy": np.__version__,
        "python": sys.version.split()[0],
        "shims": ["atari_py (over ale-py)", "gym.utils.seeding (gym 0.17.3's draws)"],
        # gym 0.17.3, where installed as a regular package, takes precedence over the stand-in
        # (same draws); this says which one ran.
        "gym_seeding": (
            "stand-in (shims/gym/utils/seeding.py)"
            if "shims" in Path(ref.seeding.__file__).parts
            else f"gym {importlib.metadata.version('gym')}"
        ),
        "settings": settings,
        "games": summary,
    }
    (args.out / "env.json").write_text(json.dumps(meta, indent=2) + "\n")


if __name__ == "__main__":
    main()
