"""TransitionStore: round trips, chunked reads, stacks, crash safety and malformed stores."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import decode_rows, encode_row

from sgi_lab.data import StoreError, TransitionStore, TransitionStoreWriter
from sgi_lab.data.store_writer import check_store_target


def test_round_trip_across_chunks(store_factory):
    store = store_factory([{"length": 10, "terminal": True}, {"length": 9}], chunk_size=4)
    assert len(store) == 19
    assert store.manifest.chunks == [4, 4, 4, 4, 3]
    assert store.num_episodes == 2
    np.testing.assert_array_equal(decode_rows(store.gather_frames(np.arange(19))), np.arange(19))
    np.testing.assert_array_equal(store.actions, np.arange(19) % 6)
    assert store.terminals.sum() == 1 and store.terminals[9]
    np.testing.assert_array_equal(store.episode_starts, [0, 10])
    np.testing.assert_array_equal(store.episode_ends, [9, 18])
    # Random order and 2-D index shapes come back in the same shape.
    idx = np.array([[18, 0], [5, 13]])
    np.testing.assert_array_equal(decode_rows(store.gather_frames(idx)), idx)


def test_stack_zero_padded_at_episode_start_and_never_crosses(store_factory):
    store = store_factory([{"length": 5, "terminal": True}, {"length": 6}], chunk_size=3)
    stacks = decode_rows(store.stack(np.array([0, 2, 4, 5, 6, 10])))
    np.testing.assert_array_equal(stacks[0], [-1, -1, -1, 0])
    np.testing.assert_array_equal(stacks[1], [-1, 0, 1, 2])
    np.testing.assert_array_equal(stacks[2], [1, 2, 3, 4])
    np.testing.assert_array_equal(stacks[3], [-1, -1, -1, 5])  # new episode: no row 4
    np.testing.assert_array_equal(stacks[4], [-1, -1, 5, 6])
    np.testing.assert_array_equal(stacks[5], [7, 8, 9, 10])


def test_life_loss_terminal_does_not_break_the_stack(store_factory):
    store = store_factory([{"length": 8, "life_loss": [3], "terminal": True}])
    assert store.num_episodes == 1
    np.testing.assert_array_equal(decode_rows(store.stack(np.array([5])))[0], [2, 3, 4, 5])


def test_release_pages_keeps_reads_correct(store_factory):
    store = store_factory([{"length": 30}], chunk_size=8)
    store._release_every = 1  # release after every gather
    for _ in range(3):
        np.testing.assert_array_equal(
            decode_rows(store.gather_frames(np.arange(30))), np.arange(30)
        )


def test_summary_counts(store_factory):
    rewards = np.array([0, 1, 0, 0, 2, -1, 0], np.float32)
    store = store_factory([{"length": 4, "terminal": True}, {"length": 3}], rewards=rewards)
    s = store.summary()
    assert s["transitions"] == 7 and s["episodes"] == 2 and s["terminals"] == 1
    assert s["mean_episode_return"] == pytest.approx((1 + 1) / 2)
    assert s["reward_density"] == pytest.approx(3 / 7)
    np.testing.assert_allclose(store.episode_returns(), [1, 1])


def test_unfinished_store_never_opens_and_resumes(tmp_path):
    path = tmp_path / "s"
    writer = TransitionStoreWriter.create(path, game="Pong", source="t", chunk_size=4)
    for row in range(10):
        writer.append(encode_row(row), 0, 0.0, False, row == 0)
    # Simulate a crash: the writer is dropped without close().
    del writer
    assert not path.exists()
    with pytest.raises(StoreError, match="resume"):
        TransitionStore(path)
    resumed = TransitionStoreWriter.resume(path)
    assert resumed.num_rows == 8  # only the two finished chunks survived
    for row in range(8, 12):
        resumed.append(encode_row(row), 0, 0.0, False, row == 8)
    store = TransitionStore(resumed.close())
    assert len(store) == 12 and store.num_episodes == 2
    np.testing.assert_array_equal(decode_rows(store.gather_frames(np.arange(12))), np.arange(12))


@pytest.mark.parametrize("naming", ["runs", "legacy"])
def test_killed_writes_temp_files_are_ours_and_dropped_on_resume(tmp_path, naming):
    # A writer killed mid-write leaves temp files: files.atomic_write's ``.NAME.PID.tmp``, or
    # ``NAME.tmp`` in partial folders left by versions before it. Both must still resume.
    path = tmp_path / "s"
    writer = TransitionStoreWriter.create(path, game="Pong", source="t", chunk_size=4)
    for row in range(6):
        writer.append(encode_row(row), 0, 0.0, False, row == 0)
    del writer
    partial = tmp_path / "s.partial"
    assert not [p for p in partial.rglob("*") if p.name.endswith(".tmp")]
    tmp = (lambda name: f".{name}.999999.tmp") if naming == "runs" else (lambda n: f"{n}.tmp")
    litter = [partial / tmp("manifest.json"), partial / "chunks" / tmp("frame_00001.npy")]
    for p in litter:
        p.write_bytes(b"torn")
    (partial / "chunks" / "action_00001.npy").write_bytes(b"unrecorded chunk")
    assert check_store_target(path, "Pong", "t", {}) is None  # still an unfinished store of ours
    resumed = TransitionStoreWriter.resume(path)
    assert resumed.num_rows == 4
    assert not any(p.exists() for p in litter)
    assert not (partial / "chunks" / "action_00001.npy").exists()
    for row in range(4, 8):
        resumed.append(encode_row(row), 0, 0.0, False, False)
    store = TransitionStore(resumed.close())
    assert len(store) == 8 and store.verify() == []
    np.testing.assert_array_equal(decode_rows(store.gather_frames(np.arange(8))), np.arange(8))


def test_existing_store_is_not_overwritten(store_factory, tmp_path):
    store = store_factory([{"length": 3}])
    with pytest.raises(FileExistsError):
        TransitionStoreWriter.create(store.path, game="Pong", source="t")


@pytest.fixture
def good_store(store_factory):
    return store_factory([{"length": 10, "terminal": True}, {"length": 5}], chunk_size=4).path


def _edit_manifest(path, **changes):
    manifest = json.loads((path / "manifest.json").read_text())
    manifest.update(changes)
    (path / "manifest.json").write_text(json.dumps(manifest))


def test_missing_chunk_names_the_file(good_store):
    (good_store / "chunks" / "frame_00002.npy").unlink()
    with pytest.raises(StoreError, match=r"frame_00002\.npy: chunk file is missing"):
        TransitionStore(good_store)


def test_truncated_chunk_names_the_file(good_store):
    target = good_store / "chunks" / "frame_00001.npy"
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 2])
    with pytest.raises(StoreError, match=r"frame_00001\.npy: unreadable or truncated"):
        TransitionStore(good_store)


def test_wrong_length_names_the_file(good_store):
    _edit_manifest(good_store, chunks=[4, 5, 4, 2], num_transitions=15)
    with pytest.raises(
        StoreError, match=r"frame_00001\.npy: holds uint8\[4, 84, 84\].*expects uint8\[5, 84, 84\]"
    ):
        TransitionStore(good_store)


def test_inconsistent_counts(good_store):
    _edit_manifest(good_store, num_transitions=99)
    with pytest.raises(StoreError, match="num_transitions"):
        TransitionStore(good_store)


def test_unknown_format_version(good_store):
    _edit_manifest(good_store, format_version=99)
    with pytest.raises(StoreError, match="unknown store format version 99"):
        TransitionStore(good_store)


def test_corrupt_manifest_json(good_store):
    (good_store / "manifest.json").write_text("{not json")
    with pytest.raises(StoreError, match="manifest.json: manifest is not valid JSON"):
        TransitionStore(good_store)


def test_missing_manifest_and_missing_store(good_store, tmp_path):
    with pytest.raises(StoreError, match="no such store"):
        TransitionStore(tmp_path / "nowhere")
    (good_store / "manifest.json").unlink()
    with pytest.raises(StoreError, match="manifest is missing"):
        TransitionStore(good_store)


def test_incomplete_flag_and_unknown_keys(good_store):
    _edit_manifest(good_store, complete=False)
    with pytest.raises(StoreError, match="incomplete"):
        TransitionStore(good_store)
    _edit_manifest(good_store, complete=True, surprise=1)
    with pytest.raises(StoreError, match="surprise"):
        TransitionStore(good_store)


def test_foreign_dtype_chunk(good_store):
    np.save(good_store / "chunks" / "reward_00000.npy", np.zeros(4, np.float64))
    with pytest.raises(StoreError, match=r"reward_00000\.npy: holds float64"):
        TransitionStore(good_store)


def test_pickled_object_chunk_is_refused(good_store):
    np.save(
        good_store / "chunks" / "action_00000.npy", np.array([{}, {}, {}, {}]), allow_pickle=True
    )
    with pytest.raises(StoreError, match="action_00000.npy"):
        TransitionStore(good_store)


def test_resume_matching_continues_only_the_same_settings(tmp_path):
    out = tmp_path / "store"
    assert TransitionStoreWriter.resume_matching(out, "Pong", {"seed": 0}) is None  # nothing
    writer = TransitionStoreWriter.create(
        out, game="Pong", source="random", params={"seed": 0}, num_actions=6, chunk_size=4
    )
    for t in range(10):  # two durable chunks of 4, then 2 rows lost with the "crash"
        writer.append(encode_row(t), t % 6, 0.0, False, t == 0)
    del writer
    resumed = TransitionStoreWriter.resume_matching(out, "Pong", {"seed": 0})
    assert resumed is not None and resumed.num_rows == 8
    with pytest.raises(StoreError, match="different settings"):
        TransitionStoreWriter.resume_matching(out, "Pong", {"seed": 1})
    with pytest.raises(StoreError, match="different settings"):
        TransitionStoreWriter.resume_matching(out, "Breakout", {"seed": 0})
    (tmp_path / "store.partial" / "manifest.json").write_text("{not json")
    assert TransitionStoreWriter.resume_matching(out, "Pong", {"seed": 0}) is None  # start over
