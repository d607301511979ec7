"""Weak and Mixed of an agent's replay (`sgi-lab select`) on a hand-made 50-row replay store
whose frames number their rows: which rows each keeps, the flags at the cuts, the provenance,
the refusals; and the dataset card `sgi-lab export minari` writes beside a selection."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sgi_lab.data.dataset_card import dataset_card
from sgi_lab.data.replay_select import mixed_segments, select_mixed, select_weak, weak_rows
from sgi_lab.data.sampler import SequenceSampler
from sgi_lab.data.store import TransitionStore
from sgi_lab.data.store_format import StoreFolderError
from sgi_lab.data.store_writer import TransitionStoreWriter
from sgi_lab.envs.spec import minatar_spec
from sgi_lab.launch.cli import main

ROWS = 50
# Episodes of 7 rows: rows 0, 7, 14, ... start one; every other ends in a terminal (6, 20, 34,
# 48); the run's last episode (49) is cut.
FIRST = (np.arange(ROWS) % 7 == 0).astype(np.uint8)
TERMINAL = np.isin(np.arange(ROWS), [6, 20, 34, 48]).astype(np.uint8)
AGENT = {
    "run": "maker",
    "steps": ROWS,
    "seed": 3,
    "config": {"ssl": "none", "encoder": "minatar", "updates_per_step": 1, "update_every": 4},
    "config_sha256": "abc",
    "commit": "aaa",
    "commits": [{"commit": "aaa", "from_step": 0}, {"commit": "bbb", "from_step": 30}],
    "final_evaluation": {"mean": 4.5, "episodes": 10, "step": 50},
    "checkpoints": [10, 20, 30, 40, 50],
    "curve": [{"step": s, "episodes": 1, "mean_return": 1.0, "mean_length": 7.0}
              for s in (10, 20, 30, 40, 50)],
}  # fmt: skip


def _replay(path: Path, source: str = "replay") -> TransitionStore:
    """A 50-row replay store of MinAtar Breakout frames: row t's frame is all t, its action
    t % 3, its reward t / 10; chunks of 16 rows."""
    spec = minatar_spec("breakout")
    writer = TransitionStoreWriter.create(
        path, game="minatar/breakout", source=source, params=AGENT, num_actions=3,
        chunk_size=16, sticky_action_prob=0.1, env_protocol="minatar", observation_spec=spec,
    )  # fmt: skip
    t = np.arange(ROWS)
    writer.append_many(
        frame=np.broadcast_to(t[:, None, None, None], (ROWS, *spec.frame_shape)).astype(np.uint8),
        action=t % 3,
        reward=(t / 10).astype(np.float32),
        terminal=TERMINAL,
        first=FIRST,
    )
    writer.close()
    return TransitionStore(path)


def test_weak_rows_and_mixed_segments_by_hand():
    assert weak_rows(50, 0.3) == 15 and weak_rows(50, 1.0) == 50 and weak_rows(7, 0.5) == 3
    for bad in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="fraction"):
            weak_rows(50, bad)
    with pytest.raises(ValueError, match="selects none"):
        weak_rows(50, 0.01)
    # 25 rows in segments of 10: 3 of the run's 5 aligned segments, the last cut to 5 rows
    segments = mixed_segments(50, 25, 10, seed=4)
    chosen = np.sort(np.random.default_rng(4).choice(5, 3, replace=False))
    assert segments == [[10 * chosen[0], 10], [10 * chosen[1], 10], [10 * chosen[2], 5]]
    assert mixed_segments(50, 50, 10, seed=0) == [[0, 10], [10, 10], [20, 10], [30, 10], [40, 10]]
    with pytest.raises(ValueError, match="5 whole segments"):
        mixed_segments(50, 51, 10, seed=0)
    with pytest.raises(ValueError, match="segment"):
        mixed_segments(50, 10, 1, seed=0)


def test_weak_keeps_the_first_rows_and_cuts_the_agents_record(tmp_path):
    replay = _replay(tmp_path / "replay")
    weak = select_weak(replay, tmp_path / "weak", 0.3)
    assert len(weak) == 15 and weak.manifest.source == "replay_weak"
    assert np.array_equal(weak.gather_frames(np.arange(15))[:, 0, 0, 0], np.arange(15))
    assert np.array_equal(weak.actions, np.arange(15) % 3)
    assert np.array_equal(weak.firsts, FIRST[:15].astype(bool))  # starts at 0, 7, 14
    assert np.array_equal(weak.terminals, TERMINAL[:15].astype(bool))  # row 14 is cut, no terminal
    p = weak.manifest.params
    assert (p["selection"], p["fraction"], p["rows"]) == ("weak", 0.3, 15)
    assert p["of"] == {"source": "replay", "fingerprint": replay.fingerprint, "rows": 50}
    assert p["agent"]["checkpoints"] == [10] and [c["step"] for c in p["agent"]["curve"]] == [10]
    assert p["agent"]["final_evaluation"]["mean"] == 4.5
    assert (weak.manifest.env_protocol, weak.manifest.sticky_action_prob) == ("minatar", 0.1)
    assert weak.verify() == []


def test_mixed_keeps_whole_segments_each_starting_an_episode(tmp_path):
    replay = _replay(tmp_path / "replay")
    mixed = select_mixed(replay, tmp_path / "mixed", rows=25, seed=4, segment=10)
    segments = mixed_segments(50, 25, 10, seed=4)
    source_rows = np.concatenate([np.arange(a, a + n) for a, n in segments])
    assert len(mixed) == 25 and mixed.manifest.source == "replay_mixed"
    assert np.array_equal(mixed.gather_frames(np.arange(25))[:, 0, 0, 0], source_rows)
    assert np.array_equal(mixed.rewards, (source_rows / 10).astype(np.float32))
    assert np.array_equal(mixed.terminals, TERMINAL[source_rows].astype(bool))
    starts = np.cumsum([0] + [n for _, n in segments[:-1]])
    expected_first = FIRST[source_rows].astype(bool)
    expected_first[starts] = True
    assert np.array_equal(mixed.firsts, expected_first)
    p = mixed.manifest.params
    assert (p["selection"], p["rows"], p["seed"], p["segment"]) == ("mixed", 25, 4, 10)
    assert p["segments"] == segments and p["agent"]["checkpoints"] == AGENT["checkpoints"]
    # no K-step sequence crosses from one segment into the next
    batch = SequenceSampler(mixed, batch_size=64, K=5, n_step=3, goal_window=10).sample()
    frames = batch.obs[:, :, -1, 0, 0].astype(int)  # each step's newest frame: its source row
    for row, valid in zip(frames, batch.valid, strict=True):
        steps = row[valid]
        assert np.all(np.diff(steps) == 1)
        assert len({next(i for i, (a, n) in enumerate(segments) if a <= s < a + n)
                    for s in steps}) == 1  # fmt: skip
    assert mixed.verify() == []


def test_selections_are_idempotent_and_refuse_what_they_should(tmp_path):
    replay = _replay(tmp_path / "replay")
    select_mixed(replay, tmp_path / "mixed", rows=20, seed=1, segment=10)
    manifest = (tmp_path / "mixed" / "manifest.json").read_bytes()
    select_mixed(replay, tmp_path / "mixed", rows=20, seed=1, segment=10)  # the same: untouched
    assert (tmp_path / "mixed" / "manifest.json").read_bytes() == manifest
    with pytest.raises(StoreFolderError, match="other settings"):
        select_mixed(replay, tmp_path / "mixed", rows=20, seed=2, segment=10)
    assert (
        select_mixed(replay, tmp_path / "mixed", 20, 2, 10, overwrite=True).manifest.params["seed"]
        == 2
    )
    random = _replay(tmp_path / "random", source="random")
    with pytest.raises(ValueError, match="select from an agent's replay"):
        select_weak(random, tmp_path / "w", 0.5)


def test_cli_select_and_export_minari_with_a_dataset_card(tmp_path, capsys):
    _replay(tmp_path / "replay")
    weak, mixed = tmp_path / "weak", tmp_path / "mixed"
    assert main(["select", str(tmp_path / "replay"), str(weak), "--weak", "0.4"]) == 0
    assert json.loads(capsys.readouterr().out)["transitions"] == 20
    argv = ["select", str(tmp_path / "replay"), str(mixed), "--mixed", "30", "--segment", "10"]
    assert main(argv) == 0 and len(TransitionStore(mixed)) == 30
    assert main(["select", str(tmp_path / "replay"), str(tmp_path / "x"), "--weak", "2"]) == 2
    assert main(["select", str(weak), str(tmp_path / "x"), "--weak", "0.5"]) == 2  # not a replay
    assert main(["select", str(tmp_path / "nowhere"), str(tmp_path / "x"), "--weak", "0.5"]) == 2
    assert not (tmp_path / "x").exists()
    card = dataset_card(TransitionStore(mixed), "sgi-lab/minatar-breakout/replay_mixed-v0")
    assert card.startswith("---\nlicense: gpl-3.0\n") and "GPL-3.0" in card
    assert "**Mixed**: 30 rows" in card and "3 segments of 10 rows (seed 0)" in card
    assert "1 update(s) every 4 steps" in card  # the maker's update period, as it trained
    assert "sgi-lab commit `aaa`, resumed at step 30 on `bbb`," in card  # the code it ran
    assert "mean return 4.5 over 10 episodes" in card and "| 50 | 1 | 1.000 | 7.0 |" in card
    pytest.importorskip("minari", reason="Minari (the `minari` extra) is not installed")
    pytest.importorskip("h5py", reason="Minari's HDF5 storage needs h5py (minari[hdf5])")
    out = tmp_path / "minari"
    assert main(["export", "minari", str(weak), str(out)]) == 0
    text = (out / "README.md").read_text()
    assert "# sgi-lab/minatar-breakout/replay_weak-v0" in text
    assert "**Weak**: the first 0.4 of one agent's training run" in text
    assert "| transitions | 20 |" in text and "| sticky actions | 0.1 |" in text
    back = tmp_path / "back"
    assert main(["import", "minari", "--src", str(out), "--out", str(back)]) == 0
    assert TransitionStore(back).fingerprint == TransitionStore(weak).fingerprint
