"""sgi_lab.train.capacity: what one agent holds, how many fit, and how a larger set splits."""

from __future__ import annotations

import itertools
import json

import pytest

from sgi_lab.config import FinetuneConfig
from sgi_lab.nets import SGIModel
from sgi_lab.train import capacity
from sgi_lab.train.transfer import model_args_for


@pytest.mark.parametrize(("encoder", "update_mb"), [("nature", 264), ("resnet", 810)])
def test_agent_bytes_counts_networks_adam_replay_and_the_measured_update(encoder, update_mb):
    config = FinetuneConfig(encoder=encoder)
    model = SGIModel(**model_args_for(config, 18))
    params = sum(p.numel() for p in model.parameters()) * 4
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    got = capacity.agent_bytes(config)
    assert got["networks"] == 2 * (params + buffers)  # online + SPR target (no separate Q)
    assert got["adam"] == 2 * params
    assert got["replay"] == pytest.approx(711e6, rel=1e-3)  # 100k steps, as measured
    assert got["update"] == pytest.approx(update_mb * 1e6)
    assert got["total"] == pytest.approx(sum(v for k, v in got.items() if k != "total"))
    # Half the steps and batch: half the replay and working memory; a separate Q target: 3 nets.
    small = capacity.agent_bytes(
        FinetuneConfig(encoder=encoder, steps=50_000, batch_size=16, target_update_period=2)
    )
    assert small["replay"] == pytest.approx(got["replay"] / 2)
    assert small["update"] == pytest.approx(got["update"] / 2)
    assert small["networks"] == pytest.approx(got["networks"] * 1.5)


def test_max_agents_fits_the_headroom_of_the_free_memory():
    config = FinetuneConfig(encoder="nature")
    per_agent = capacity.agent_bytes(config)["total"]
    assert capacity.max_agents(config, "cpu", free=int(10.5 * per_agent / 0.85)) == 10
    assert capacity.max_agents(config, "cpu", free=80 * 10**9) == int(80e9 * 0.85 // per_agent)
    assert capacity.max_agents(config, "cpu", free=0) == 1  # never fewer than one
    assert capacity.free_bytes("cpu") > 0


@pytest.mark.parametrize(
    ("games", "seeds", "limit"),
    [(26, 10, 60), (26, 10, 20), (26, 10, 26), (26, 10, 260), (3, 2, 4), (5, 3, 1), (7, 1, 3)],
)
def test_split_population_covers_every_pair_once_in_even_products(games, seeds, limit):
    g = [f"g{i}" for i in range(games)]
    s = list(range(seeds))
    parts = capacity.split_population(g, s, limit)
    pairs = [(a, b) for part_g, part_s in parts for a, b in itertools.product(part_g, part_s)]
    assert sorted(pairs) == sorted(itertools.product(g, s))  # each pair once
    sizes = [len(pg) * len(ps) for pg, ps in parts]
    assert max(sizes) <= limit
    if games * seeds <= limit:
        assert len(parts) == 1
    if games <= limit < games * seeds:  # all games together, seeds in as few groups as fit
        assert len(parts) == -(-seeds // (limit // games))
    assert max(sizes) - min(sizes) <= max(len(pg) for pg, _ in parts)


def test_split_population_hand_counted():
    assert capacity.split_population(["a", "b", "c", "d", "e"], [0], 2) == [
        (["a", "b"], [0]),
        (["c", "d"], [0]),
        (["e"], [0]),
    ]
    assert capacity.split_population(["a", "b"], [0, 1, 2, 3, 4], 5) == [
        (["a", "b"], [0, 1]),  # 2 seeds x 2 games = 4 <= 5; 3 seeds would be 6
        (["a", "b"], [2, 3]),
        (["a", "b"], [4]),
    ]
    with pytest.raises(ValueError, match="at least 1"):
        capacity.split_population(["a"], [0], 0)


@pytest.mark.parametrize(("n", "limit"), [(110, 110), (110, 40), (66, 33), (7, 3), (1, 5), (0, 2)])
def test_split_agents_keeps_order_and_even_sizes(n, limit):
    """A shared population's agents (any list, not games x seeds) as consecutive parts."""
    parts = capacity.split_agents(list(range(n)), limit)
    assert [a for part in parts for a in part] == list(range(n))  # in order, each once
    assert all(1 <= len(p) <= limit for p in parts)
    assert len(parts) == -(-n // limit)  # as few as fit
    assert not parts or max(map(len, parts)) - min(map(len, parts)) <= 1
    with pytest.raises(ValueError, match="at least 1"):
        capacity.split_agents([1], 0)


@pytest.mark.smoke
def test_max_agents_trains_a_larger_set_as_several_populations(tmp_path, capsys, monkeypatch):
    from population_helpers import LOOP

    import sgi_lab.train.finetune as ft
    from sgi_lab.launch.cli import main
    from sgi_lab.runs.folder import FinetuneRun

    populations = []
    real = ft.finetune_population

    def spy(configs, outs, **kwargs):
        populations.append([(c.game, c.seed, str(o)) for c, o in zip(configs, outs, strict=True)])
        return real(configs, outs, **kwargs)

    monkeypatch.setattr(ft, "finetune_population", spy)
    out = tmp_path / "pop"
    argv = ["finetune", "--params", "params/finetune/smoke.yaml", "--game", "pong,breakout"]
    argv += ["--seed", "0", "--max-agents", "1", "--out", str(out), "--no-progress", *LOOP]
    assert main(argv) == 0
    # Two populations of one, each in the folder the population of two would give it.
    folders = [out / "Pong__s0", out / "Breakout__s0"]
    assert populations == [[("Pong", 0, str(folders[0]))], [("Breakout", 0, str(folders[1]))]]
    summary = json.loads(capsys.readouterr().out)
    assert [s["run"] for s in summary] == [str(f) for f in folders]
    for f in folders:
        assert FinetuneRun(f).status()["state"] == "finished"
    assert main(["report", *map(str, folders)]) == 0


def test_finetune_in_parts_refuses_bad_sizes_and_non_products(tmp_path):
    from sgi_lab.config import ConfigError
    from sgi_lab.train.finetune import finetune_in_parts, population_configs

    configs = population_configs(FinetuneConfig(), ["Pong", "Breakout"], [0, 1])
    outs = [tmp_path / str(i) for i in range(4)]
    for bad in (0, -2, "many", True, 1.5):
        with pytest.raises(ConfigError, match="max_agents"):
            finetune_in_parts(configs, outs, bad)
    with pytest.raises(ConfigError, match="games x seeds"):
        finetune_in_parts(configs[:3], outs[:3], 2)
    with pytest.raises(ValueError, match="4 configs but 3 run folders"):
        finetune_in_parts(configs, outs[:3], 2)
    assert not any(tmp_path.iterdir())  # nothing written


def test_memory_share_divides_what_a_process_plans_for(monkeypatch):
    config = FinetuneConfig(encoder="nature")
    per_agent = capacity.agent_bytes(config)["total"]
    free = int(20.5 * per_agent / capacity.HEADROOM)
    assert capacity.max_agents(config, "cpu", free=free) == 20
    monkeypatch.setenv(capacity.MEMORY_SHARE_ENV, "0.5")
    assert capacity.memory_share() == 0.5
    assert capacity.max_agents(config, "cpu", free=free) == 10
    for bad in ("0", "1.5", "half"):
        monkeypatch.setenv(capacity.MEMORY_SHARE_ENV, bad)
        with pytest.raises(ValueError, match="SGI_LAB_MEMORY_SHARE"):
            capacity.memory_share()


def test_experiment_tasks_sharing_a_machine_get_their_share(monkeypatch, tmp_path):
    """The local executor's tasks each plan for 1 / max_parallel of the memory; a Ray task for
    its GPU fraction, or its CPUs' part of a CPU node."""
    import os

    from sgi_lab import experiments as ex
    from sgi_lab.experiments import executors

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # else the user's setting wins
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    env = ex._task_env(2, 0.5)
    assert env[capacity.MEMORY_SHARE_ENV] == "0.5" and env["OMP_NUM_THREADS"] == "2"
    assert ex._task_env(1)[capacity.MEMORY_SHARE_ENV] == "1"
    seen = {}

    def fake_run_command(argv, log, threads, cwd=None, memory_share=1.0):
        seen["share"] = memory_share
        return {"returncode": 0, "seconds": 0.0, "tail": ""}

    monkeypatch.setattr(executors, "run_command", fake_run_command)
    executor = ex.LocalExecutor(4, 1)
    task = ex.Task(id="t", kind="finetune", folder=tmp_path, deps=(), argv=("finetune",))
    executor.result(executor.submit(task, str(tmp_path / "log"), str(tmp_path)))
    executor.close()
    assert seen["share"] == 0.25
    assert ex._ray_memory_share({"num_gpus": 0.5, "num_cpus": 8}) == 0.5
    assert ex._ray_memory_share({"num_gpus": 1, "num_cpus": 8}) == 1.0
    assert ex._ray_memory_share({"num_cpus": 1}) == pytest.approx(min(1, 1 / os.cpu_count()))
