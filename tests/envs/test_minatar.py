"""MinAtar behind the environment factory: names, the spec, observations, labels, options, and
a clear line when the optional package is missing."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import sgi_lab.envs.minatar as minatar_module
from sgi_lab.envs import (
    UnknownGameError,
    action_names,
    canonical_env_game,
    env_protocol,
    make_env,
    num_actions,
    observation_spec,
)
from sgi_lab.envs.minatar import (
    INSTALL_HINT,
    LABEL_NAMES,
    MINATAR_GAMES,
    MINIMAL_ACTIONS,
    MinAtarMissingError,
    canonical_minatar_game,
    is_minatar,
)
from sgi_lab.envs.pool import EnvPool
from sgi_lab.envs.spec import ATARI_SPEC, MINATAR_CHANNELS, MINATAR_MAX_CHANNELS

minatar = pytest.importorskip("minatar")


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("minatar/breakout", "minatar/breakout"),
        ("MinAtar/Breakout", "minatar/breakout"),
        ("minatar-space-invaders", "minatar/space_invaders"),
        ("MINATAR_SpaceInvaders", "minatar/space_invaders"),
        ("minatar/seaquest", "minatar/seaquest"),
    ],
)
def test_names_in_any_case_and_separator(name, canonical):
    assert is_minatar(name)
    assert canonical_minatar_game(name) == canonical == canonical_env_game(name)


def test_a_mistyped_name_gets_did_you_mean_and_the_list():
    with pytest.raises(UnknownGameError) as err:
        canonical_env_game("minatar/breakot")
    message = str(err.value)
    assert "did you mean minatar/breakout?" in message and "\n" not in message
    assert all(g in message for g in MINATAR_GAMES)
    # A bare Atari name stays Atari (MinAtar's games are all Atari names too).
    assert canonical_env_game("breakout") == "Breakout"
    with pytest.raises(UnknownGameError, match="MinAtar games: minatar/asterix"):
        canonical_env_game("brekaout_xyz")


def test_tables_match_the_installed_package():
    for game in MINATAR_CHANNELS:
        env = minatar.Environment(game)
        assert env.state_shape() == [10, 10, MINATAR_CHANNELS[game]]
        assert tuple(env.minimal_action_set()) == MINIMAL_ACTIONS[game]
        labels = minatar_module._LABELS[game](env.env)
        assert tuple(labels) == LABEL_NAMES[game]


@pytest.mark.parametrize("game", MINATAR_GAMES)
def test_observations_follow_the_spec_and_the_game_state(game):
    spec = observation_spec(game)
    env = make_env(game, seed=1, record_labels=True)
    assert env.observation_space.shape == spec.stacked_shape == (spec.channels, 10, 10)
    assert env.action_space.n == num_actions(game) == len(action_names(game))
    obs, info = env.reset()
    state = env.unwrapped._env.state()  # (10, 10, C) bool
    np.testing.assert_array_equal(obs, np.moveaxis(state, -1, 0).astype(np.uint8) * 255)
    assert obs.dtype == np.uint8 and set(np.unique(obs)) <= {0, 255}
    assert set(info["labels"]) == set(LABEL_NAMES[game.removeprefix("minatar/")])
    obs, reward, terminated, truncated, info = env.step(0)
    assert info["terminal"] == terminated and info["life_loss"] is False
    assert isinstance(info["raw_reward"], float)


def test_breakout_labels_are_the_games_fields():
    env = make_env("minatar/breakout", seed=0, record_labels=True)
    _, info = env.reset()
    game = env.unwrapped._env.env
    assert info["labels"] == {
        "paddle_x": game.pos,
        "ball_x": game.ball_x,
        "ball_y": game.ball_y,
        "ball_dir": game.ball_dir,
        "bricks": 30,  # three full rows of ten
    }
    # The paddle cell of the observation is where the label says.
    obs = env.unwrapped._observe(reset=False)
    assert obs[0, 9, info["labels"]["paddle_x"]] == 255


def test_seeded_envs_repeat_and_minatars_defaults_are_options():
    def play(**options):
        env = make_env("minatar/asterix", seed=7, **options)
        obs, _ = env.reset()
        frames = [obs]
        for a in np.random.default_rng(0).integers(env.action_space.n, size=200):
            obs, _, term, trunc, _ = env.step(int(a))
            frames.append(obs)
            if term or trunc:
                frames.append(env.reset()[0])
        return np.stack(frames), env

    a, env = play()
    b, _ = play()
    np.testing.assert_array_equal(a, b)
    assert env.unwrapped.sticky_action_prob == 0.1 and env.unwrapped.difficulty_ramping
    _, plain = play(sticky_action_prob=0.0, difficulty_ramping=False)
    assert plain.unwrapped._env.sticky_action_prob == 0.0
    assert plain.unwrapped._env.env.ramping is False


def test_sticky_actions_repeat_the_previous_action():
    env = make_env("minatar/breakout", seed=0, sticky_action_prob=1.0)  # always repeat
    env.reset()
    game = env.unwrapped._env
    env.step(1)  # LEFT, but the first "previous" action is NOOP
    assert game.last_action == 0


def test_frames_stack_and_episodes_are_capped():
    env = make_env("minatar/freeway", seed=0, frames=2, max_episode_steps=5)
    obs0, _ = env.reset()
    assert obs0.shape == (14, 10, 10) and not obs0[:7].any()  # zero padding before the start
    obs1, *_ = env.step(0)
    np.testing.assert_array_equal(obs1[:7], obs0[7:])  # oldest frame first
    truncated = [env.step(0)[3] for _ in range(4)]
    assert truncated == [False, False, False, True]
    assert observation_spec("minatar/freeway", frames=2).stacked_shape == (14, 10, 10)


def test_the_factory_names_protocols_and_refuses_atari_options():
    assert env_protocol("minatar/breakout") == "minatar"
    assert env_protocol("Pong", "rlpyt") == "rlpyt"
    assert observation_spec("Pong") == ATARI_SPEC
    assert num_actions("minatar/breakout", full_action_space=True) == 6
    assert action_names("minatar/breakout") == ("NOOP", "LEFT", "RIGHT")
    # The Atari defaults generic callers pass are accepted; anything else is refused.
    make_env("minatar/breakout", noop_max=30, preprocessing="dopamine", record_ram=False)
    with pytest.raises(ValueError, match="noop_max: an Atari option"):
        make_env("minatar/breakout", noop_max=3)
    with pytest.raises(ValueError, match="'rlpyt' is an Atari frame protocol"):
        make_env("minatar/breakout", preprocessing="rlpyt")
    with pytest.raises(ValueError, match="sticky_action_prob"):
        make_env("minatar/breakout", sticky_action_prob=1.5)


def test_a_pool_of_minatar_games_steps_them():
    pool = EnvPool(["minatar/breakout", "minatar/asterix"], seeds=[0, 1], train=True)
    try:
        obs = pool.reset()
        assert obs.shape == (2, 4, 10, 10)
        step = pool.step(np.zeros(2, np.int64))
        assert step[0].shape == (2, 4, 10, 10)
    finally:
        pool.close()


def test_without_the_package_one_line_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "minatar", None)  # `import minatar` now fails
    with pytest.raises(MinAtarMissingError) as err:
        make_env("minatar/breakout")
    message = str(err.value)
    assert INSTALL_HINT == "pip install 'sgi-lab[minatar]'" and INSTALL_HINT in message
    assert "\n" not in message and isinstance(err.value, ImportError)
    # What needs no emulator still works: names, specs, action counts.
    assert observation_spec("minatar/seaquest").channels == 10
    assert num_actions("minatar/seaquest") == 6


def test_padded_channels_give_all_five_games_one_shape():
    assert MINATAR_MAX_CHANNELS == 10
    shapes = set()
    for game in MINATAR_GAMES:
        env = make_env(game, seed=0, channels=MINATAR_MAX_CHANNELS)
        obs, _ = env.reset()
        own = MINATAR_CHANNELS[game.removeprefix("minatar/")]
        state = env.unwrapped._env.state()
        np.testing.assert_array_equal(obs[:own], np.moveaxis(state, -1, 0) * np.uint8(255))
        assert not obs[own:].any()  # the padding is empty
        shapes.add(obs.shape)
        assert observation_spec(game, channels=10).stacked_shape == obs.shape
    assert shapes == {(10, 10, 10)}
    with pytest.raises(ValueError, match="channels: at least seaquest's 10 channels, got 4"):
        observation_spec("minatar/seaquest", channels=4)


@pytest.mark.parametrize("game", MINATAR_GAMES)
def test_the_games_step_as_minatars_own_environment_does(game):
    """`sgi_lab.envs.minatar_games.Environment` (no display imports) against the package's
    ``minatar.Environment``: the same states, rewards and ends for 3,000 steps of random play
    with sticky actions and ramping, through resets and a re-seed."""
    from sgi_lab.envs.minatar_games import Environment

    name = game.removeprefix("minatar/")
    ours, theirs = Environment(name, 0.1, True), minatar.Environment(name, 0.1, True)
    actions = np.random.default_rng(1).integers(0, 6, 3000)
    for env in (ours, theirs):
        env.seed(7)
        env.reset()
    ends = 0
    for t, a in enumerate(actions):
        if t == 1500:  # a seeded reset mid-run, as MinAtarEnv.reset(seed=...) does
            for env in (ours, theirs):
                env.seed(11)
                env.last_action = 0
                env.reset()
        step = ours.act(int(a)), theirs.act(int(a))
        assert step[0] == step[1], (t, step)
        np.testing.assert_array_equal(ours.state(), theirs.state(), err_msg=f"step {t}")
        assert ours.last_action == theirs.last_action
        if step[0][1]:
            ends += 1
            ours.reset()
            theirs.reset()
    assert ends > 0 or game == "minatar/freeway"  # the episodes end and restart alike
    assert ours.minimal_action_set() == theirs.minimal_action_set()


def test_making_a_minatar_env_imports_no_display_library():
    import subprocess

    code = (
        "import sys; from sgi_lab.envs import make_env; e = make_env('minatar/seaquest', seed=0);"
        " e.reset(seed=0); e.step(0);"
        " print(sorted(m for m in ('minatar', 'seaborn', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stderr
