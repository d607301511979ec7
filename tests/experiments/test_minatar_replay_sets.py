"""MinAtar-Replay's Weak and Mixed sets as the objective study's data
(params/experiments/minatar_objectives_replay.yaml): read where minatar_replay.yaml writes
them, selected as its params name, and refused, with the command that makes them, while they
are not made (the agents that make them cost ~2 CPU-hours a game); what the dry run counts
for those agents."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sgi_lab import experiments as ex
from sgi_lab.config import ConfigError
from sgi_lab.data.replay_select import mixed_segments
from sgi_lab.data.store import TransitionStore
from sgi_lab.data.store_writer import TransitionStoreWriter
from sgi_lab.envs.spec import minatar_spec
from sgi_lab.launch.cli import main

ROOT = Path(__file__).resolve().parents[2]
REPLAY = ROOT / "params" / "experiments" / "minatar_replay.yaml"
OBJECTIVES = ROOT / "params" / "experiments" / "minatar_objectives_replay.yaml"
GAME = "minatar-breakout"
ROWS = 101_000  # 101 segments of 1,000: Mixed's 100k rows are 100 of them


def _made_up_replay(path: Path) -> TransitionStore:
    """A replay store of ``ROWS`` Breakout rows whose action and reward number the row (t % 3,
    t), episodes of 500 rows, as `sgi-lab export replay` would leave it (source replay)."""
    spec = minatar_spec("breakout")
    agent = {"run": "maker", "steps": ROWS, "checkpoints": [50_000, ROWS], "curve": []}
    writer = TransitionStoreWriter.create(
        path, game="minatar/breakout", source="replay", params=agent, num_actions=3,
        chunk_size=20_000, sticky_action_prob=0.1, env_protocol="minatar", observation_spec=spec,
    )  # fmt: skip
    t = np.arange(ROWS)
    writer.append_many(
        frame=np.zeros((ROWS, *spec.frame_shape), np.uint8),
        action=t % 3,
        reward=t.astype(np.float32),
        terminal=(t % 500 == 499).astype(np.uint8),
        first=(t % 500 == 0).astype(np.uint8),
    )
    writer.close()
    return TransitionStore(path)


def _objectives(replay_out: Path, out: Path) -> ex.Graph:
    experiment = ex.load_experiment(OBJECTIVES, {"minatar_replay": str(replay_out)})
    return ex.expand(experiment, out)


def test_a_run_before_the_sets_are_made_refuses_naming_the_command(tmp_path, capsys):
    replay_out, out = tmp_path / "replay", tmp_path / "objectives"
    command = (
        "OMP_NUM_THREADS=1 nice sgi-lab experiment params/experiments/minatar_replay.yaml "
        f"--out {replay_out} --max-parallel 2"
    )
    args = ["experiment", str(OBJECTIVES), "--out", str(out), "--param"]
    assert main([*args, f"minatar_replay={replay_out}", "--no-progress"]) != 0
    error = capsys.readouterr().err.strip()
    assert error.splitlines() == [
        f"sgi-lab experiment: error: data.weak: {replay_out}/data/weak__minatar-asterix is not "
        f"made yet; make it first with: {command}"
    ]
    assert not out.exists()  # refused before anything is written
    graph = _objectives(replay_out, out)
    with pytest.raises(ConfigError, match="make it first with"):
        ex.run_graph(graph, progress=False)
    # the dry run plans it all the same, and says what is not made yet
    assert main([*args, f"minatar_replay={replay_out}", "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert f"not made yet: data.mixed: {replay_out}/data/mixed__minatar-asterix" in printed


def test_the_weak_and_mixed_sets_are_what_the_replay_params_name(tmp_path):
    replay_out = tmp_path / "replay"
    made = ex.expand(ex.load_experiment(REPLAY), replay_out)
    weak, mixed = made.task(f"data/weak__{GAME}"), made.task(f"data/mixed__{GAME}")
    assert weak.argv[3:] == ("--weak", "0.1")
    assert mixed.argv[3:] == ("--mixed", "100000", "--seed", "0", "--segment", "1000")
    # the agent's export, faked, then the two selections as the experiment runs them
    replay = _made_up_replay(Path(weak.argv[1]))
    assert Path(mixed.argv[1]) == replay.path
    assert main(list(weak.argv)) == 0 and main(list(mixed.argv)) == 0

    kept = TransitionStore(weak.folder)
    assert kept.manifest.source == "replay_weak" and len(kept) == ROWS // 10
    assert kept.manifest.params["fraction"] == 0.1
    assert np.array_equal(kept.rewards, np.arange(ROWS // 10, dtype=np.float32))
    assert kept.manifest.params["agent"]["checkpoints"] == []  # none within its 10,100 steps

    drawn = TransitionStore(mixed.folder)
    segments = mixed_segments(ROWS, 100_000, 1000, 0)
    assert drawn.manifest.source == "replay_mixed" and len(drawn) == 100_000
    assert drawn.manifest.params["segments"] == segments and len(segments) == 100
    rows = np.concatenate([np.arange(a, a + n) for a, n in segments])
    assert np.array_equal(drawn.rewards, rows.astype(np.float32))
    assert np.array_equal(drawn.actions, rows % 3)
    assert all(drawn.firsts[np.arange(0, 100_000, 1000)])  # each segment starts an episode

    # the objective study pretrains on exactly those stores, once they are made
    graph = _objectives(replay_out, tmp_path / "objectives")
    for name, store in (("sgi_w", weak.folder), ("sgi_m", mixed.folder), ("s", mixed.folder)):
        argv = graph.task(f"pretrain/{name}__{GAME}").argv
        assert argv[argv.index("--data") + 1] == str(store)
    assert not [line for line in graph.missing_data if GAME in line]  # Breakout's are made
    assert graph.missing_data[0].startswith("data.weak: ")  # Asterix's are not


def test_the_makers_cost_is_counted_at_their_update_period(tmp_path):
    """The makers update every 4 steps (``update_every: 4``): the dry run counts each step at
    0.15 + 0.85 / 4 of the MinAtar rate measured at an update a step (39 steps/s, one thread):
    1M steps, 2.58 CPU-hours a game, where every step's update would be 7.12."""
    from sgi_lab.experiments.cost import MINATAR_UPDATE_SHARE, _step_scale

    graph = ex.expand(ex.load_experiment(REPLAY), tmp_path / "replay")
    maker = graph.task(f"pretrain/maker__{GAME}")
    assert maker.config["update_every"] == 4 and maker.config["updates_per_step"] == 1
    scale = 1 - MINATAR_UPDATE_SHARE + MINATAR_UPDATE_SHARE / 4
    assert _step_scale(maker) == pytest.approx(scale)
    hours = ex.estimate_cost(graph)["stages"]["finetune"]["hours"]["cpu"]
    for task in graph.tasks:  # the same makers, updating every step
        if task.id.startswith("pretrain/maker__"):
            task.config["update_every"] = 1
    whole = ex.estimate_cost(graph)["stages"]["finetune"]["hours"]["cpu"]
    makers = 5 * 1_000_000 / 39.0 / 3600
    assert whole - hours == pytest.approx(makers * (1 - scale), rel=1e-6)
    assert makers * scale / 5 == pytest.approx(2.58, abs=0.01)
