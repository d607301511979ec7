"""The authors' frame protocol: rlpyt's ``AtariEnv`` as SPR and SGI modified it.

``make_env(..., preprocessing="rlpyt")`` uses `RlpytAtariPreprocessing` in place of the default
stack (`NoopResetWrapper`, gymnasium's ``AtariPreprocessing``, ``TimeLimit`` and
``FrameStackObservation``), so that the same seed, no-op counts and actions give the frames,
rewards and terminals of mila-iqia/SGI's ``src/rlpyt_atari_env.py`` (checked step by step
against fixtures made by running it: ``tests/envs/test_reference_env.py``). Where it differs from the
default, per ``docs/paper_vs_code.md``:

- frames are resized to 84x84 bilinearly (``cv2.INTER_LINEAR``), not by area averaging;
- a reset plays one NOOP frame, then 1..``noop_max`` no-op frames (the default: 0..``noop_max``
  and no extra frame);
- a life loss (with lives left) is followed by one NOOP frame inside the same agent step, whose
  reward is dropped and whose screen is the step's newest frame;
- in training mode a life loss also empties the frame stack (``[0, 0, 0, f]``, as after a reset)
  and the max-pool partner of its newest frame;
- the step that ends the game still plays all four frames (the emulator ignores them), so the
  newest frame is the game-over screen rather than the previous step's;
- the frame cap ends the episode one step late (after ``cap + 1`` agent steps, ``>=`` on a
  counter checked before it is incremented) and ends it as ``terminated``, so learning does not
  bootstrap across it.

Not reproduced, because they never occurred in the checked runs: a life lost during the reset
no-ops resets the game again and then, in the reference, plays the rest of the first no-ops; and
the reference notices a life loss only below the lives count of its last reset or loss, so a
loss that only cancels a bonus life is not terminal there (here it is, as in the default stack).
"""

from __future__ import annotations

from typing import Any

import cv2
import gymnasium as gym
import numpy as np

__all__ = ["RlpytAtariPreprocessing"]

_RAW_SHAPE = (210, 160)


class RlpytAtariPreprocessing(gym.Wrapper):
    """Frame skip, two-frame max-pool, bilinear 84x84 resize, frame stack, no-op starts and the
    episode cap, the way the authors' env does them.

    Sits on a frame-skip-1 grayscale ALE env. Observations are ``uint8`` ``(4, 84, 84)``, oldest
    frame first; ``info["noop_frames"]`` at reset holds the drawn no-op count (the extra NOOP
    frame not included) and ``info["life_loss_noop"]`` at a step whether the extra frame after a
    life loss was played.

    Args:
        env: ``ALE/<Game>-v5`` made with ``frameskip=1``, ``obs_type="grayscale"``.
        train: Training mode: a life loss empties the frame stack.
        noop_max: No-op frames at reset are uniform in ``[1, noop_max]`` (0: none).
        horizon: The episode ends after ``horizon + 1`` agent steps; ``None``: no cap.
        frame_skip: Raw frames per agent step.
        frame_stack: Frames per observation.
        screen_size: Height and width of a frame.
    """

    def __init__(
        self,
        env: gym.Env,
        train: bool,
        noop_max: int = 30,
        horizon: int | None = 27_000,
        frame_skip: int = 4,
        frame_stack: int = 4,
        screen_size: int = 84,
    ):
        super().__init__(env)
        if noop_max < 0:
            raise ValueError(f"noop_max must be >= 0, got {noop_max}")
        if env.unwrapped.get_action_meanings()[0] != "NOOP":
            raise ValueError("the rlpyt protocol plays NOOP frames: action 0 must be NOOP")
        if frame_skip < 2:
            raise ValueError(f"frame_skip must be >= 2 (max-pool of two frames), got {frame_skip}")
        self.train = train
        self.noop_max = noop_max
        self.horizon = horizon
        self.frame_skip = frame_skip
        self.screen_size = screen_size
        self.ale = env.unwrapped.ale
        self.observation_space = gym.spaces.Box(
            0, 255, (frame_stack, screen_size, screen_size), np.uint8
        )
        self._stack = np.zeros(self.observation_space.shape, np.uint8)
        self._pool_partner = np.zeros(_RAW_SHAPE, np.uint8)
        self._screen = np.zeros(_RAW_SHAPE, np.uint8)
        self._lives = 0
        self._steps = 0

    def draw_noops(self) -> int:
        """The number of no-op frames of a reset, from the base env's seeded ``np_random``."""
        if self.noop_max == 0:
            return 0
        return int(self.env.unwrapped.np_random.integers(1, self.noop_max + 1))

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        self.env.reset(seed=seed, options=options)
        self._clear_frames()
        info = self._noop()  # the reference's "advance from the lost-life state", also at reset
        self._lives = self.ale.lives()
        noops = self.draw_noops()
        for _ in range(noops):
            info = self._noop()
            if self._lost_life():  # never seen: start over in a fresh game (module docstring)
                return self.reset(options=options)
        self._push_frame()
        self._steps = 0
        return self._stack.copy(), {**info, "noop_frames": noops}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        reward = 0.0
        for _ in range(self.frame_skip - 1):
            reward += float(self.env.step(action)[1])
        self.ale.getScreenGrayscale(self._pool_partner)
        _, last_reward, _, _, info = self.env.step(action)
        reward += float(last_reward)
        lost_life = self._lost_life()
        if lost_life:
            info = self._noop()  # its reward is not counted, as in the reference
            if self.train:
                self._clear_frames()
        self._push_frame()
        timeout = self.horizon is not None and self._steps >= self.horizon
        self._steps += 1
        terminated = self.ale.game_over() or timeout
        return self._stack.copy(), reward, terminated, False, {**info, "life_loss_noop": lost_life}

    def _noop(self) -> dict[str, Any]:
        return self.env.step(0)[4]

    def _lost_life(self) -> bool:
        lives = self.ale.lives()
        lost = 0 < lives < self._lives
        self._lives = lives
        return lost

    def _clear_frames(self) -> None:
        self._stack[:] = 0
        self._pool_partner[:] = 0

    def _push_frame(self) -> None:
        self.ale.getScreenGrayscale(self._screen)
        pooled = np.maximum(self._pool_partner, self._screen)
        frame = cv2.resize(
            pooled, (self.screen_size, self.screen_size), interpolation=cv2.INTER_LINEAR
        )
        self._stack[:-1] = self._stack[1:]
        self._stack[-1] = frame
