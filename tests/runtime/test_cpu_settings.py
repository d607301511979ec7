"""CPU settings chosen by measurement: candidates, the fastest wins, the cache, explicit wins."""

from __future__ import annotations

import json

import pytest

from sgi_lab.base.files import cpu_model
from sgi_lab.runtime import cpu_settings
from sgi_lab.runtime.cpu_settings import busy_note, choose_cpu_settings, time_step


@pytest.fixture(autouse=True)
def idle_machine(monkeypatch):
    """The tests below measure on a pretend idle machine unless they say otherwise (the real
    load average of a shared test machine would keep every measurement out of the cache)."""
    monkeypatch.setattr(cpu_settings, "load_average", lambda: 0.0)


def fake_times(table):
    calls = []

    def measure(bf16, channels_last):
        calls.append((bf16, channels_last))
        return table[(bf16, channels_last)]

    return measure, calls


TABLE = {(False, False): 0.30, (False, True): 0.25, (True, False): 0.20, (True, True): 0.40}


def test_the_fastest_of_the_four_settings_wins_and_is_cached(tmp_path):
    cache = tmp_path / "cpu.json"
    measure, calls = fake_times(TABLE)
    choice = choose_cpu_settings("w", "auto", "auto", measure, cache, native_bf16=True)
    assert (choice.bf16, choice.channels_last, choice.source) == (True, False, "measured")
    assert sorted(calls) == sorted(TABLE) and len(choice.times) == 4
    assert cpu_model() in choice.key and "|w" in choice.key
    # Second run: from the cache, nothing measured.
    measure, calls = fake_times(TABLE)
    again = choose_cpu_settings("w", "auto", "auto", measure, cache, native_bf16=True)
    assert calls == [] and again.source == "cache" and again.bf16 and not again.channels_last
    stored = json.loads(cache.read_text())
    assert stored[choice.key]["bf16=True,channels_last=False"] == 0.20
    # Another workload is measured on its own.
    measure, calls = fake_times(TABLE)
    choose_cpu_settings("other", "auto", "auto", measure, cache, native_bf16=True)
    assert len(calls) == 4


def test_a_measurement_on_a_busy_machine_chooses_but_is_not_cached(tmp_path, caplog):
    """Measured at load 3.0 on 2 cores: the fastest still wins for this run, but nothing is
    written to the cache, a one-line warning and the choice's note say why, and the next run
    (now idle) measures again and caches."""
    cache = tmp_path / "cpu.json"
    cores = __import__("os").cpu_count() or 1
    measure, calls = fake_times(TABLE)
    with caplog.at_level("WARNING", logger="sgi_lab.runtime.cpu_settings"):
        choice = choose_cpu_settings(
            "w", "auto", "auto", measure, cache, native_bf16=True, load=lambda: 2.0 * cores
        )
    assert (choice.bf16, choice.channels_last, choice.source) == (True, False, "measured")
    assert len(calls) == 4 and not cache.exists()
    assert choice.note.startswith("cpu settings measured on a busy machine (load ")
    assert "not cached" in choice.note and "\n" not in choice.note
    assert choice.to_json()["note"] == choice.note
    assert [r.getMessage() for r in caplog.records] == [choice.note]
    # An idle measurement is cached (and carries no note).
    measure, calls = fake_times(TABLE)
    idle = choose_cpu_settings("w", "auto", "auto", measure, cache, native_bf16=True)
    assert len(calls) == 4 and idle.note == "" and "note" not in idle.to_json()
    assert idle.key in json.loads(cache.read_text())
    # Once cached, a busy machine reads the cache: nothing measured, nothing to warn about.
    measure, calls = fake_times(TABLE)
    busy = choose_cpu_settings(
        "w", "auto", "auto", measure, cache, native_bf16=True, load=lambda: 9.0 * cores
    )
    assert calls == [] and busy.source == "cache" and busy.note == ""


def test_the_busy_rule_is_half_the_cores():
    assert busy_note(0.9, cores=2) == "" and busy_note(None, cores=2) == ""
    assert "load 1.0 on 2 cores" in busy_note(1.0, cores=2)
    assert busy_note(7.5, cores=16) == ""  # below half the cores: idle enough
    assert busy_note(8.0, cores=16) != ""


def test_the_cache_is_keyed_by_the_installed_code(tmp_path, monkeypatch):
    """Two clones (or virtualenvs) sharing one home cache never share measurements."""
    cache = tmp_path / "cpu.json"
    monkeypatch.setattr(cpu_settings, "CODE_FOLDER", "/clone-a/sgi_lab")
    measure, calls = fake_times(TABLE)
    a = choose_cpu_settings("w", "auto", "auto", measure, cache, native_bf16=True)
    assert a.key.endswith("|code /clone-a/sgi_lab") and "|threads " in a.key
    monkeypatch.setattr(cpu_settings, "CODE_FOLDER", "/clone-b/sgi_lab")
    measure, calls = fake_times(TABLE)
    b = choose_cpu_settings("w", "auto", "auto", measure, cache, native_bf16=True)
    assert len(calls) == 4 and b.source == "measured" and b.key != a.key
    assert set(json.loads(cache.read_text())) == {a.key, b.key}


def test_explicit_settings_win_and_emulated_bf16_is_never_a_candidate(tmp_path):
    cache = tmp_path / "cpu.json"
    measure, calls = fake_times(TABLE)
    choice = choose_cpu_settings("w", False, True, measure, cache, native_bf16=True)
    assert (choice.bf16, choice.channels_last, choice.source) == (False, True, "explicit")
    assert calls == [] and not cache.exists()
    # Only the layout is auto: two candidates, bf16 fixed.
    choice = choose_cpu_settings("w", True, "auto", measure, cache, native_bf16=True)
    assert sorted(calls) == [(True, False), (True, True)] and not choice.channels_last
    # Without native bf16, "auto" never tries it.
    measure, calls = fake_times(TABLE)
    choice = choose_cpu_settings("x", "auto", "auto", measure, cache, native_bf16=False)
    assert sorted(calls) == [(False, False), (False, True)] and choice.channels_last
    with pytest.raises(ValueError, match="cpu_amp: expected true, false or 'auto'"):
        choose_cpu_settings("w", "yes", "auto", measure, cache)


def test_time_step_takes_the_fastest_after_warmup():
    seen = []
    durations = iter([5.0, 5.0, 0.3, 0.1, 0.2])
    import time as time_module

    real = time_module.perf_counter
    clock = [0.0]

    def step():
        seen.append(1)
        clock[0] += next(durations)

    time_module.perf_counter = lambda: clock[0]
    try:
        assert time_step(step, warmup=2, repeats=3) == pytest.approx(0.1)
    finally:
        time_module.perf_counter = real
    assert len(seen) == 5


def test_a_finetuning_run_measures_once_then_reads_the_cache(tmp_path, monkeypatch):
    """With cpu_amp/channels_last on "auto" (the default) and no override, the first run times
    the real update under each candidate, records the choice in status.json and log.txt, and a
    second run of the same workload reads the cache instead."""
    from sgi_lab.config import FinetuneConfig, build_config
    from sgi_lab.runs.folder import FinetuneRun
    from sgi_lab.train.finetune import finetune

    monkeypatch.delenv("SGI_LAB_CPU_SETTINGS", raising=False)
    monkeypatch.setenv("SGI_LAB_CACHE", str(tmp_path / "cache"))
    values = dict(
        encoder="nature", batch_size=4, updates_per_step=1, spr_steps=2, n_step=3, steps=25,
        learning_starts=20, eps_steps=21, eval_episodes=1, eval_envs=1, eval_max_frames=40,
        log_every=5, checkpoint_every=25,
    )  # fmt: skip
    config = build_config(FinetuneConfig, values)
    assert config.cpu_amp == "auto" and config.channels_last == "auto"
    first = finetune(config, tmp_path / "a", progress=False).status()["cpu_settings"]
    assert first["source"] == "measured" and len(first["times"]) in (2, 4)
    best = min(first["times"].values())
    label = f"bf16={first['bf16']},channels_last={first['channels_last']}"
    assert first["times"][label] == best
    assert "cpu settings (measured)" in (tmp_path / "a" / "log.txt").read_text()
    assert FinetuneRun(tmp_path / "a").config["cpu_amp"] == "auto"  # the run keeps "auto"
    second = finetune(
        build_config(FinetuneConfig, {**values, "seed": 1}), tmp_path / "b", progress=False
    ).status()["cpu_settings"]
    assert second["source"] == "cache" and second["times"] == first["times"]


def test_the_override_settles_auto_without_measuring(monkeypatch):
    import torch

    from sgi_lab.config import FinetuneConfig
    from sgi_lab.runtime.cpu_settings import settle

    monkeypatch.setenv("SGI_LAB_CPU_SETTINGS", "cpu_amp=false,channels_last=true")

    def measure(bf16, channels_last):
        raise AssertionError("measured despite the override")

    config, choice = settle(FinetuneConfig(), torch.device("cpu"), "w", measure)
    assert (config.cpu_amp, config.channels_last, choice.source) == (False, True, "explicit")
    config, _ = settle(FinetuneConfig(cpu_amp=True), torch.device("cpu"), "w", measure)
    assert config.cpu_amp is True  # an explicit value wins over the override
    monkeypatch.setenv("SGI_LAB_CPU_SETTINGS", "bf16=yes")
    with pytest.raises(ValueError, match="SGI_LAB_CPU_SETTINGS"):
        settle(FinetuneConfig(), torch.device("cpu"), "w", measure)
    # On a GPU nothing is measured: channels-last on.
    monkeypatch.delenv("SGI_LAB_CPU_SETTINGS")
    config, _ = settle(FinetuneConfig(), torch.device("cuda"), "w", measure)
    assert config.channels_last is True
