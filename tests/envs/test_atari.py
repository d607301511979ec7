"""Atari 100k environment factory: protocol details, game table, vector env."""

from __future__ import annotations

import cv2
import gymnasium as gym
import numpy as np
import pytest

from sgi_lab.envs import (
    ATARI_100K_GAMES,
    GameInfo,
    UnknownGameError,
    canonical_game,
    game_info,
    make_env,
    make_vector_env,
    num_actions,
)


def _random_actions(n_actions: int, n: int, seed: int = 0) -> list[int]:
    return np.random.default_rng(seed).integers(n_actions, size=n).tolist()


# --- observations ------------------------------------------------------------------------------


def test_observation_is_uint8_stack_zero_padded_at_reset():
    env = make_env("Pong", seed=0)
    assert env.observation_space.shape == (4, 84, 84)
    assert env.observation_space.dtype == np.uint8
    for _ in range(2):  # the first reset and a later one
        obs, _ = env.reset()
        assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
        assert not obs[:3].any(), "frames before the episode start must be zeros"
        assert obs[3].any()
        first = obs[3].copy()
        obs, *_ = env.step(0)
        assert not obs[:2].any()
        np.testing.assert_array_equal(obs[2], first)
        assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8


def test_frame_is_max_of_last_two_raw_frames_resized():
    """Rebuilds each frame from a frame-skip-1 ALE env run alongside with the same seed."""
    seed, game = 3, "Breakout"
    env = make_env(game, seed=seed, train=False)
    obs, info = env.reset()
    raw = gym.make(
        f"ALE/{game}-v5",
        frameskip=1,
        repeat_action_probability=0.0,
        obs_type="grayscale",
        max_num_frames_per_episode=None,
    )
    frame, _ = raw.reset(seed=seed)
    for _ in range(info["noop_frames"]):
        frame, *_ = raw.step(0)

    def resize(frame: np.ndarray) -> np.ndarray:
        return cv2.resize(frame, (84, 84), interpolation=cv2.INTER_AREA)

    np.testing.assert_array_equal(obs[-1], resize(frame))
    pooling_mattered = False
    for action in _random_actions(env.action_space.n, 60):
        frames = [raw.step(action)[0] for _ in range(4)]
        obs, *_ = env.step(action)
        expected = resize(np.maximum(frames[2], frames[3]))
        np.testing.assert_array_equal(obs[-1], expected)
        pooling_mattered |= not np.array_equal(expected, resize(frames[3]))
    assert pooling_mattered


# --- determinism, sticky actions, no-ops --------------------------------------------------------


def test_no_sticky_actions_and_same_seed_same_trajectory():
    env_a, env_b = make_env("Breakout", seed=7), make_env("Breakout", seed=7)
    assert env_a.unwrapped.ale.getFloat("repeat_action_probability") == 0.0
    obs_a, info_a = env_a.reset()
    obs_b, info_b = env_b.reset()
    np.testing.assert_array_equal(obs_a, obs_b)
    assert info_a["noop_frames"] == info_b["noop_frames"]
    for action in _random_actions(env_a.action_space.n, 150):
        step_a, step_b = env_a.step(action), env_b.step(action)
        np.testing.assert_array_equal(step_a[0], step_b[0])
        assert step_a[1:4] == step_b[1:4]
        if step_a[2]:
            break


def test_noop_starts_are_seeded_and_within_zero_to_thirty():
    env = make_env("Pong")
    # A seeded reset reloads the ROM (~0.1 s), hence few seeds.
    counts = [env.reset(seed=seed)[1]["noop_frames"] for seed in range(10)]
    assert all(0 <= count <= 30 for count in counts)
    assert len(set(counts)) > 3
    assert [env.reset(seed=seed)[1]["noop_frames"] for seed in (3, 0)] == [counts[3], counts[0]]
    assert make_env("Pong", seed=0, noop_max=0).reset()[1]["noop_frames"] == 0


# --- life loss, rewards, frame cap --------------------------------------------------------------


@pytest.mark.parametrize("train", [True, False])
def test_life_loss_is_terminal_for_learning_only_in_training(train):
    env = make_env("Breakout", seed=0, train=train)
    obs, _ = env.reset()
    lives = env.unwrapped.ale.lives()
    frame_number = 0
    life_losses = 0
    for action in _random_actions(env.action_space.n, 3000):
        prev_obs = obs
        obs, _, terminated, truncated, info = env.step(action)
        # The game is never reset on a life loss: the stack and the frame counter continue.
        np.testing.assert_array_equal(obs[:3], prev_obs[1:])
        assert info["episode_frame_number"] > frame_number
        frame_number = info["episode_frame_number"]
        if terminated:
            assert info["terminal"]
            break
        assert not truncated
        if info["life_loss"]:
            life_losses += 1
            assert info["lives"] == lives - 1
            assert info["terminal"] is train
        else:
            assert not info["terminal"]
        lives = info["lives"]
    assert terminated, "random Breakout play should end the game well within 3000 steps"
    assert life_losses >= 3  # Breakout has 5 lives; all but the last are lost before game over


def test_rewards_sign_clipped_in_training_raw_in_evaluation():
    for train in (True, False):
        env = make_env("Asterix", seed=1, train=train)
        env.reset()
        big_rewards = 0
        for action in _random_actions(env.action_space.n, 300):
            _, reward, terminated, _, info = env.step(action)
            raw = info["raw_reward"]
            assert reward == (np.sign(raw) if train else raw)
            big_rewards += abs(raw) > 1
            if terminated:
                break
        assert big_rewards > 0, "Asterix pays 50 per item; random play collects some"


def test_frame_cap_truncates_at_exact_step():
    env = make_env("Pong", seed=0, max_episode_frames=40)
    env.reset()
    for step in range(1, 11):
        _, _, terminated, truncated, info = env.step(0)
        assert not terminated and not info["terminal"]
        assert truncated is (step == 10)
    obs, _ = env.reset()
    assert not obs[:3].any()
    assert make_env("Pong").get_wrapper_attr("_max_episode_steps") == 27_000
    with pytest.raises(ValueError, match="multiple of 4"):
        make_env("Pong", max_episode_frames=42)


# --- action sets and the game table -------------------------------------------------------------


def test_minimal_and_full_action_sets():
    assert num_actions("Pong") == 6
    assert num_actions("pong", full_action_space=True) == 18
    assert make_env("Pong").action_space.n == 6
    assert make_env("Pong", full_action_space=True).action_space.n == 18
    assert num_actions("Breakout") == make_env("Breakout").action_space.n == 4


def test_game_table_matches_paper():
    assert len(ATARI_100K_GAMES) == 26
    assert game_info("alien") == GameInfo("Alien", "ALE/Alien-v5", "Alien", 227.8, 7127.7)
    assert (game_info("Pong").random_score, game_info("Pong").human_score) == (-20.7, 14.6)
    assert game_info("up_n_down").display_name == "Up N Down"
    for name, info in ATARI_100K_GAMES.items():
        assert info.name == name
        assert info.ale_id in gym.registry
        assert info.human_score > info.random_score


@pytest.mark.parametrize(
    ("spelling", "expected"),
    [
        ("Pong", "Pong"),
        ("pong", "Pong"),
        ("PONG", "Pong"),
        ("ALE/Pong-v5", "Pong"),
        ("PongNoFrameskip-v4", "Pong"),
        ("ms_pacman", "MsPacman"),
        ("MsPacman", "MsPacman"),
        ("ms-pacman", "MsPacman"),
        ("Ms Pacman", "MsPacman"),
        ("kung_fu_master", "KungFuMaster"),
        ("up_n_down", "UpNDown"),
        ("UpNDown", "UpNDown"),
        ("private_eye", "PrivateEye"),
        ("jamesbond", "Jamesbond"),
        ("james_bond", "Jamesbond"),
        ("BankHeist", "BankHeist"),
        ("Battle Zone", "BattleZone"),
    ],
)
def test_canonical_game_spellings(spelling, expected):
    assert canonical_game(spelling) == expected


def test_unknown_game_error_names_input_and_lists_games():
    with pytest.raises(UnknownGameError) as excinfo:
        canonical_game("Tetris")
    message = str(excinfo.value)
    assert "'Tetris'" in message
    assert all(name in message for name in ATARI_100K_GAMES)
    assert isinstance(excinfo.value, ValueError)
    with pytest.raises(UnknownGameError):
        make_env("Tetris")
    assert make_env("Tetris", allow_any_ale_game=True).reset()[0].shape == (4, 84, 84)


# --- vector env ---------------------------------------------------------------------------------


def test_vector_env_shapes_and_same_step_autoreset():
    envs = make_vector_env("Pong", 2, seed=0, asynchronous=False, max_episode_frames=40)
    try:
        obs, info = envs.reset()
        assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
        assert not obs[:, :3].any()
        for step in range(1, 11):
            obs, rewards, terminated, truncated, info = envs.step(np.zeros(2, dtype=np.int64))
            assert rewards.shape == terminated.shape == truncated.shape == (2,)
            for key in ("raw_reward", "life_loss", "terminal"):
                assert info[key].shape == (2,)
            assert bool(truncated.all()) is (step == 10)
        # The cap was hit: each env already shows its next episode, the last obs is kept apart.
        assert not obs[:, :3].any() and obs[:, 3].any()
        for i in range(2):
            final = info["final_obs"][i]
            assert final.shape == (4, 84, 84)
            assert final.reshape(4, -1).any(axis=1).all(), "10 steps in: no padding left"
        assert not info["terminal"].any()
    finally:
        envs.close()


def test_vector_env_reports_terminal_of_finished_episode():
    envs = make_vector_env("Breakout", 2, seed=0, train=True, asynchronous=False)
    try:
        envs.reset()
        rng = np.random.default_rng(0)
        life_loss_seen = False
        for _ in range(2000):
            actions = rng.integers(envs.single_action_space.n, size=2)
            obs, rewards, terminated, _, info = envs.step(actions)
            life_loss_seen |= bool(info["life_loss"].any())
            np.testing.assert_array_equal(info["terminal"][info["life_loss"]], True)
            if terminated.any():
                i = int(np.flatnonzero(terminated)[0])
                assert info["terminal"][i]
                assert not obs[i, :3].any()
                break
        assert terminated.any() and life_loss_seen
    finally:
        envs.close()


def test_async_vector_env_matches_sync():
    actions = np.random.default_rng(1).integers(4, size=(30, 2))
    results = []
    for asynchronous in (False, True):
        envs = make_vector_env(
            "Breakout", 2, seed=5, asynchronous=asynchronous, max_episode_frames=80
        )
        try:
            obs, _ = envs.reset()
            trajectory = [obs]
            for step_actions in actions:
                obs, rewards, terminated, truncated, info = envs.step(step_actions)
                trajectory += [obs, rewards, terminated, truncated, info["raw_reward"]]
            results.append(trajectory)
        finally:
            envs.close()
    for sync_item, async_item in zip(*results):
        np.testing.assert_array_equal(sync_item, async_item)
