"""The GPU session's scripts run (on a CPU, tiny sizes): a broken script costs device time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.smoke
def test_population_phases_runs_and_reports_every_phase(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import population_phases

    out = tmp_path / "phases.json"
    argv = ["population_phases.py", "--agents", "2", "--encoders", "nature", "--batch-size", "4"]
    argv += ["--rows", "120", "--steps", "1", "--batching", "vmap", "--json", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    population_phases.main()
    (row,) = json.loads(out.read_text())
    assert row["agents"] == 2 and row["batching"] == "vmap" and row["updates_per_step"] == 2
    for phase in ("act", "append", "sample", "update", "write_priorities", "learn", "step"):
        assert row[phase]["median_s"] > 0 and row[phase]["ops"] > 0
    # The learning step is sample + update + priorities; a step adds acting, an append and two.
    assert row["learn"]["ops"] >= row["update"]["ops"] + row["sample"]["ops"]
    assert row["envs"] is None and row["gpu_busy"] is None
    assert row["projected_100k_min"] == pytest.approx(row["step"]["median_s"] * 1e5 / 60)


def test_gpu_scripts_parse():
    for script in ("prepare.sh", "run.sh"):
        subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / "gpu" / script)], check=True)
