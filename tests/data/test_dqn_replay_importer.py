"""DQN Replay importer: files written exactly as Dopamine's circular replay buffer saves them."""

from __future__ import annotations

import gzip
import json
import re

import numpy as np
import pytest
from conftest import decode_rows, encode_row

from sgi_lab.data import TransitionStore, TransitionStoreWriter
from sgi_lab.data import dqn_replay_importer as dqn_replay
from sgi_lab.data.dqn_replay_importer import (
    DQNReplayError,
    NpyGzipStream,
    available_checkpoints,
    checkpoint_files,
    clean_replay_rows,
    import_dqn_replay,
)

CAPACITY = 64
STACK = 4
HORIZON = 1


class FakeDopamineBuffer:
    """Dopamine's ``OutOfGraphReplayBuffer`` add/save logic, with frames naming their transition.

    Each real transition gets a global id ``uid`` (its frame is ``encode_row(uid)``); ``slot_uid``
    says which uid each buffer slot holds (-1 for padding) so tests know the truth independently
    of the importer.
    """

    def __init__(self) -> None:
        self.store = {
            "observation": np.zeros((CAPACITY, 84, 84), np.uint8),
            "action": np.zeros(CAPACITY, np.int32),
            "reward": np.zeros(CAPACITY, np.float32),
            "terminal": np.zeros(CAPACITY, np.uint8),
        }
        self.slot_uid = np.full(CAPACITY, -2)  # -2: never written
        self.add_count = np.array(0)
        self.invalid_range = np.zeros(STACK)  # float zeros, as Dopamine initialises it

    def cursor(self) -> int:
        return int(self.add_count % CAPACITY)

    def add(self, uid: int, action: int, reward: float, terminal: bool) -> None:
        if self.add_count == 0 or self.store["terminal"][self.cursor() - 1] == 1:
            for _ in range(STACK - 1):
                self._add(np.zeros((84, 84), np.uint8), 0, 0.0, 0, -1)
        self._add(encode_row(uid), action, reward, int(terminal), uid)

    def _add(self, frame, action, reward, terminal, uid) -> None:
        c = self.cursor()
        self.store["observation"][c] = frame
        self.store["action"][c] = action
        self.store["reward"][c] = reward
        self.store["terminal"][c] = terminal
        self.slot_uid[c] = uid
        self.add_count += 1
        c = self.cursor()
        self.invalid_range = np.array(
            [(c - HORIZON + i) % CAPACITY for i in range(STACK + HORIZON)]
        )

    def save(self, folder, number: int) -> None:
        arrays = {f"$store$_{k}": v for k, v in self.store.items()}
        arrays |= {"add_count": self.add_count, "invalid_range": self.invalid_range}
        for name, array in arrays.items():
            with open(folder / f"{name}_ckpt.{number}.gz", "wb") as fh:
                with gzip.GzipFile(fileobj=fh, mode="wb") as out:
                    np.save(out, array, allow_pickle=False)

    def expected_uids(self) -> list[int]:
        """Real transitions in chronological order, minus Dopamine's invalid range."""
        held = min(int(self.add_count), CAPACITY)
        order = [(int(self.add_count) - held + k) % CAPACITY for k in range(held)]
        invalid = set(self.invalid_range.astype(int).tolist())
        return [int(self.slot_uid[s]) for s in order if self.slot_uid[s] >= 0 and s not in invalid]


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    """Two checkpoints: 0 before the buffer wraps, 1 wrapped with its cursor mid-buffer."""
    folder = tmp_path_factory.mktemp("replay_logs")
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 16, size=100)
    steps = iter([(ep, step, n) for ep, n in enumerate(lengths) for step in range(n)])
    buffer = FakeDopamineBuffer()
    truth = {}  # uid -> (episode, step, action, reward, terminal)
    expected = {}
    uid = 0
    for number, add_count in ((0, 50), (1, 2 * CAPACITY + 23)):
        while buffer.add_count < add_count:
            episode, step, length = next(steps)
            a, r, t = int(rng.integers(6)), float(rng.choice([-1, 0, 1])), step == length - 1
            truth[uid] = (episode, step, a, r, t)
            buffer.add(uid, a, r, t)
            uid += 1
        buffer.save(folder, number)
        expected[number] = buffer.expected_uids()
    # Checkpoint 1 continues the episode in progress when checkpoint 0 was saved.
    return folder, truth, expected


def _uids(store: TransitionStore) -> np.ndarray:
    return decode_rows(store.gather_frames(np.arange(len(store))))


def test_clean_replay_rows_hand_computed():
    # capacity 12, add_count 15: cursor 3, oldest row 3. Chronological positions:
    # 3 4 5 6 7 8 9 10 11 0 1 2 ; terminal at position 7 -> padding 8, 9, 10.
    terminal = np.zeros(12, np.uint8)
    terminal[7] = 1
    invalid = np.array([2, 3, 4, 5, 6])  # cursor - 1 .. cursor + 3
    rows = clean_replay_rows(terminal, 15, invalid)
    # 3-6 invalid; 7 survives; padding 8-10; 11, 0, 1 start an episode; 2 invalid.
    np.testing.assert_array_equal(rows.positions, [7, 11, 0, 1])
    np.testing.assert_array_equal(rows.first, [1, 1, 0, 0])
    np.testing.assert_array_equal(rows.padding, [8, 9, 10])
    # Even with a shorter invalid range, the 3 oldest rows of a wrapped buffer (3, 4, 5) go:
    # they could be padding whose terminal was overwritten.
    rows = clean_replay_rows(terminal, 15, np.array([2]))
    np.testing.assert_array_equal(rows.positions, [6, 7, 11, 0, 1])
    np.testing.assert_array_equal(rows.first, [1, 0, 1, 0, 0])
    # Not wrapped (add_count 9): rows 0-2 are the start padding, 8 pads after the terminal.
    rows = clean_replay_rows(terminal, 9, np.array([8, 9, 10, 11, 0]))
    np.testing.assert_array_equal(rows.positions, [3, 4, 5, 6, 7])
    np.testing.assert_array_equal(rows.first, [1, 0, 0, 0, 0])
    np.testing.assert_array_equal(rows.padding, [0, 1, 2, 8])


def test_files_are_dopamines_format(replay):
    folder, _, _ = replay
    assert available_checkpoints(folder) == [0, 1]
    files = checkpoint_files(folder, 1)
    assert files["observation"].name == "$store$_observation_ckpt.1.gz"
    assert files["add_count"].name == "add_count_ckpt.1.gz"
    with gzip.open(files["observation"]) as fh:
        assert np.load(fh, allow_pickle=False).shape == (CAPACITY, 84, 84)
    with NpyGzipStream(files["add_count"]) as stream:
        assert int(stream.read()) > 2 * CAPACITY  # wrapped twice


def test_import_two_checkpoints_with_sample_limits(replay, tmp_path):
    folder, truth, expected = replay
    assert len(expected[1]) > 30 and min(expected[1]) > max(expected[0])
    store = import_dqn_replay(folder, "pong", [1, 0], 30, tmp_path / "weak", progress=False)

    # The right rows in the right order: each checkpoint's first 30 real transitions.
    uids = _uids(store)
    np.testing.assert_array_equal(uids, expected[1][:30] + expected[0][:30])
    assert (uids >= 0).all()  # no zero padding survived
    assert len(store) == 60
    assert store.manifest.sticky_action_prob == 0.25  # DQN Replay: sticky actions, unlike 100k

    # Fields preserved.
    np.testing.assert_array_equal(store.actions, [truth[u][2] for u in uids])
    np.testing.assert_array_equal(store.rewards, [truth[u][3] for u in uids])
    np.testing.assert_array_equal(store.terminals, [truth[u][4] for u in uids])

    # first=1 exactly where an episode starts, after the seam, and at each slice start.
    prev = np.concatenate([[-10], uids[:-1]])
    want_first = np.array([truth[u][1] == 0 for u in uids]) | (prev != uids - 1)
    want_first[30] = True
    np.testing.assert_array_equal(store.firsts, want_first)
    seam = np.flatnonzero(prev != uids - 1)
    assert any(truth[uids[i]][1] > 0 for i in seam), "seam should cut an episode for this test"

    # Stacks never mix episodes and hold consecutive frames of the row's own episode.
    stacks = decode_rows(store.stack(np.arange(len(store))))
    for row, stack in zip(uids, stacks, strict=True):
        real = stack[stack >= 0]
        assert real[-1] == row
        np.testing.assert_array_equal(real, np.arange(row - len(real) + 1, row + 1))
        assert {truth[u][0] for u in real} == {truth[row][0]}

    m = json.loads((tmp_path / "weak" / "manifest.json").read_text())
    assert m["source"] == "dqn_replay" and m["rewards_clipped"] is True
    assert m["game"] == "Pong" and m["num_actions"] == 6
    assert m["params"]["checkpoints"] == [1, 0] and m["params"]["samples"] == 30


def test_import_all_rows_and_warn_when_samples_exceed(replay, tmp_path, monkeypatch):
    folder, _, expected = replay
    monkeypatch.setattr(dqn_replay, "READ_BLOCK_ROWS", 5)  # many blocks, gaps across blocks
    with pytest.warns(UserWarning, match="fewer than samples") as warned:
        store = import_dqn_replay(
            folder, "Pong", [0], 10_000, tmp_path / "all", progress=False, chunk_size=7
        )
    assert warned[0].filename == __file__  # the warning points at the caller's line
    np.testing.assert_array_equal(_uids(store), expected[0])
    store = import_dqn_replay(folder, "Pong", [0, 1], None, tmp_path / "mixed", progress=False)
    np.testing.assert_array_equal(_uids(store), expected[0] + expected[1])


def test_interrupted_import_resumes(replay, tmp_path, monkeypatch):
    folder, _, expected = replay
    calls = {"n": 0}
    append_many = TransitionStoreWriter.append_many

    def crash_after_two(self, **columns):
        calls["n"] += 1
        if calls["n"] > 2:
            raise KeyboardInterrupt
        append_many(self, **columns)

    monkeypatch.setattr(TransitionStoreWriter, "append_many", crash_after_two)
    with pytest.raises(KeyboardInterrupt):
        import_dqn_replay(
            folder, "Pong", [0, 1], None, tmp_path / "s", progress=False, chunk_size=5
        )
    partial = json.loads((tmp_path / "s.partial" / "manifest.json").read_text())
    assert partial["num_transitions"] > len(expected[0]) and not (tmp_path / "s").exists()
    monkeypatch.setattr(TransitionStoreWriter, "append_many", append_many)
    monkeypatch.setattr(TransitionStoreWriter, "create", None)  # must resume, not restart
    store = import_dqn_replay(
        folder, "Pong", [0, 1], None, tmp_path / "s", progress=False, chunk_size=5
    )
    np.testing.assert_array_equal(_uids(store), expected[0] + expected[1])


def _rewrite(path, array, allow_pickle=False):
    with open(path, "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb") as out:
        np.save(out, array, allow_pickle=allow_pickle)


def _break_missing(files):
    files["reward"].unlink()
    return files["reward"].name


def _break_length(files):
    _rewrite(files["action"], np.zeros(CAPACITY - 1, np.int32))
    return files["action"].name


def _break_dtype(files):
    _rewrite(files["observation"], np.zeros((CAPACITY, 84, 84), np.float32))
    return files["observation"].name


def _break_shape(files):
    _rewrite(files["observation"], np.zeros((CAPACITY, 84, 80), np.uint8))
    return files["observation"].name


def _break_object(files):
    _rewrite(files["terminal"], np.array([None] * CAPACITY, dtype=object), allow_pickle=True)
    return files["terminal"].name


def _break_padding(files):
    with gzip.open(files["action"]) as fh:
        action = np.load(fh, allow_pickle=False)
    action[1] = 3  # row 1 is part of the zero padding before the buffer's first frame
    _rewrite(files["action"], action)
    return files["action"].name


def _break_truncated_gzip(files):
    data = files["observation"].read_bytes()
    files["observation"].write_bytes(data[: len(data) // 2])
    return files["observation"].name


def _break_not_gzip(files):
    files["add_count"].write_bytes(b"this is not gzip data")
    return files["add_count"].name


@pytest.mark.parametrize(
    "breaker",
    [
        _break_missing,
        _break_length,
        _break_dtype,
        _break_shape,
        _break_object,
        _break_padding,
        _break_truncated_gzip,
        _break_not_gzip,
    ],
)
def test_errors_name_the_file(replay, tmp_path, breaker):
    folder, _, _ = replay
    src = tmp_path / "src"
    src.mkdir()
    for path in checkpoint_files(folder, 0).values():
        (src / path.name).write_bytes(path.read_bytes())
    name = breaker(checkpoint_files(src, 0))
    with pytest.raises(DQNReplayError, match=re.escape(name)):
        import_dqn_replay(src, "Pong", [0], None, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def test_import_from_several_runs_one_after_another(replay, tmp_path):
    """The Weak dataset's shape: checkpoint 0 of several DQN runs, each slice starting an
    episode, the runs recorded in the manifest; a folder twice, or a missing one, is refused."""
    import shutil

    folder, _, expected = replay
    runs = [tmp_path / "runs" / str(r) / "replay_logs" for r in (1, 2)]
    for r in runs:
        shutil.copytree(folder, r)
    store = import_dqn_replay(runs, "pong", [0], 20, tmp_path / "weak", progress=False)
    uids = _uids(store)
    np.testing.assert_array_equal(uids, expected[0][:20] + expected[0][:20])
    assert store.firsts[0] and store.firsts[20]  # the second run starts an episode
    m = json.loads((tmp_path / "weak" / "manifest.json").read_text())
    assert m["params"]["src"] == [str(r.resolve()) for r in runs]
    # Re-running with the same runs is a no-op; one folder alone keeps the old format.
    again = import_dqn_replay(runs, "pong", [0], 20, tmp_path / "weak", progress=False)
    assert len(again) == 40
    one = import_dqn_replay(runs[0], "pong", [0], 20, tmp_path / "one", progress=False)
    assert json.loads((tmp_path / "one" / "manifest.json").read_text())["params"]["src"] == str(
        runs[0].resolve()
    )
    assert len(one) == 20
    with pytest.raises(ValueError, match="the same folder twice"):
        import_dqn_replay([runs[0], runs[0]], "pong", [0], 20, tmp_path / "x", progress=False)
    with pytest.raises(DQNReplayError, match="3/replay_logs: no such DQN Replay folder"):
        missing = tmp_path / "runs" / "3" / "replay_logs"
        import_dqn_replay([runs[0], missing], "pong", [0], 20, tmp_path / "y", progress=False)
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
