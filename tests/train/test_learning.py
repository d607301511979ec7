"""The finetuning learner learns: the whole loop (acting, replay, the Rainbow + SPR update,
evaluation) solves a task whose answer is known, for every agent of a population at once.

Atari games take hours to show learning on a CPU, so the environments are swapped for a cue
task with Atari's interface (4 stacked 84 x 84 uint8 frames, raw reward and learning terminal
in ``info``). An episode lasts D = ``CueTask.delay`` = 3 steps: its first frame lights the left
or the right half of the screen, the first action decides whether the last step pays 1 (D - 1
steps after the decision), later actions do nothing. Random play scores 1 / num_actions, the
optimal policy 1, and the optimal values are known: Q*(s_0, answer) = gamma^(D-1) and
Q*(s_t) = gamma^(D-1-t) after the right answer. Each agent has its own game's action count and
cue -> action map, so an agent that learned its companion's answer, a shifted action or reward,
a wrong discount or sign, or a broken mask fails.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sgi_lab.envs.pool as pool_module
from sgi_lab.config import FinetuneConfig
from sgi_lab.envs.atari import num_actions
from sgi_lab.train.evaluate import load_run_model
from sgi_lab.train.finetune import finetune_population, population_configs

# The rewarded first action for the left and the right cue, per game (Pong 6 actions,
# Breakout 4): the last of Pong's actions exists in Pong only, so a learner that confused the
# agents' action masks could not find it.
ANSWERS = {"Pong": (1, 5), "Breakout": (2, 0)}


class CueTask:
    """An episode of ``delay`` steps; `make_env`'s signature and step/reset interface."""

    delay = 3

    def __init__(self, game: str, seed: int | None = None, train: bool = True, **_: object):
        self.actions = num_actions(game)
        self.answers = ANSWERS[game]
        self.rng = np.random.default_rng(seed)

    def _frame(self) -> np.ndarray:
        frame = np.zeros((84, 84), np.uint8)
        frame[:, 42 * self.cue : 42 * (self.cue + 1)] = 200
        if self.t and self.right:  # the state shows what was chosen: the task is Markov
            frame[:42] = 255
        frame[80:, 10 * self.t : 10 * (self.t + 1)] = 255  # and the time
        return frame

    def _push(self) -> np.ndarray:
        self.stack = np.concatenate([self.stack[1:], self._frame()[None]])
        return self.stack.copy()

    def reset(self, **_: object) -> tuple[np.ndarray, dict]:
        self.t, self.cue, self.right = 0, int(self.rng.integers(2)), False
        self.stack = np.zeros((4, 84, 84), np.uint8)  # zero-padded, as the Atari stack
        return self._push(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        assert 0 <= action < self.actions, f"action {action} of a {self.actions}-action game"
        if self.t == 0:
            self.right = int(action) == self.answers[self.cue]
        self.t += 1
        done = self.t == self.delay
        reward = float(done and self.right)
        info = {"raw_reward": reward, "terminal": done, "life_loss": False}
        return self._push(), reward, done, False, info

    def close(self) -> None:
        pass


SMALL = {
    "encoder": "nature",
    "steps": 300,
    "learning_starts": 100,
    "batch_size": 8,
    "updates_per_step": 1,
    "eps_steps": 101,
    "eval_episodes": 20,
    "eval_envs": 4,
    "log_every": 50,
    "checkpoint_every": 10**6,
    "device": "cpu",
    "cpu_amp": False,
    "channels_last": False,
}


def learn_cue_task(tmp_path, monkeypatch, **overrides):
    monkeypatch.setattr(pool_module, "make_env", CueTask)
    base = FinetuneConfig(**{**SMALL, **overrides})
    configs = population_configs(base, ["pong", "breakout"], [0])
    return finetune_population(configs, [tmp_path / c.game for c in configs], progress=False)


def task_values(run, cue: int) -> dict[str, np.ndarray]:
    """The learned Q values (noise-free) of the task's states: the cue's first state, and the
    states after the right first action (those after a wrong one are rarely visited once the
    agent knows better, so their values are whatever the network generalises)."""
    model, info = load_run_model(run.path)
    model.set_noise(False)
    env = CueTask(info["game"])
    answer = env.answers[cue]

    def q(stack: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return model.q_values(model.encode(torch.as_tensor(stack[None])))[0].numpy()

    def states_after(action: int) -> list[np.ndarray]:
        env.reset()
        env.cue, env.stack[:] = cue, 0
        out = [env._push()]
        for _ in range(CueTask.delay - 1):
            out.append(env.step(action if env.t == 0 else 0)[0])
        return out

    right = states_after(answer)
    return {
        "s0": q(right[0]),
        "right": np.array([q(x).max() for x in right[1:]]),
    }


def check_learned(runs, gamma: float) -> None:
    optimal = gamma ** np.arange(CueTask.delay - 1, -1, -1)  # Q* of s_0..s_{DELAY-1}, right
    for run, game in zip(runs, ("Pong", "Breakout"), strict=True):
        m = run.metrics()
        early = m.loc[m.step <= 100, "episode/return"].dropna().mean()
        assert early < 1 / num_actions(game) + 0.25, game  # epsilon 1 before learning starts
        result = run.evaluation
        assert result["episodes"] == 20 and result["mean"] >= 0.9, (game, result["scores"])
        for cue, answer in enumerate(ANSWERS[game]):
            values = task_values(run, cue)
            assert values["s0"].argmax() == answer, (game, cue, values["s0"])
            assert abs(values["s0"][answer] - optimal[0]) < 0.1, (game, cue, values["s0"])
            np.testing.assert_allclose(values["right"], optimal[1:], atol=0.1)


@pytest.mark.usefixtures("one_thread")
def test_a_population_learns_each_agents_answer_and_its_values(tmp_path, monkeypatch):
    """The paper's update with small batches: C51, dueling, noisy nets, double Q, 10-step
    returns, prioritized replay, SPR with K 5, augmentation. Both agents start at chance and
    end answering every cue right, with Q values at the task's discounted optimum."""
    check_learned(learn_cue_task(tmp_path, monkeypatch), FinetuneConfig().gamma)


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_one_step_returns_carry_a_late_reward_back_through_the_target(tmp_path, monkeypatch):
    """n = 1: the reward two steps after the decision reaches it only by bootstrapping
    through the distributional target (projection, discount, terminal mask, double Q)."""
    check_learned(learn_cue_task(tmp_path, monkeypatch, n_step=1, steps=600), 0.99)


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_the_resnet_population_learns_too(tmp_path, monkeypatch):
    """The ResNet's batch norm: per-agent statistics in the update, running statistics when
    acting and in the evaluation (a mix-up of the two shows as an evaluation below training)."""
    runs = learn_cue_task(tmp_path, monkeypatch, encoder="resnet", steps=600)
    check_learned(runs, FinetuneConfig().gamma)
