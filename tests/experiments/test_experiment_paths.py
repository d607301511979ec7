"""An experiment file cannot write outside its --out (names are one safe
path part; every resolved path stays under --out), hostile YAML does not hang, and bad values
are refused up front naming them. Each case: exit code, one line naming the culprit, no
traceback, every file outside the run's own untouched."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from sgi_lab import experiments as ex
from sgi_lab.config import ConfigError
from sgi_lab.launch.cli import main

ROOT = Path(__file__).resolve().parents[2]
SMOKE = str(ROOT / "params/pretrain/smoke.yaml")


def snapshot(root: Path) -> dict[str, str | None]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        if p.is_file() and not p.is_symlink()
        else None
        for p in sorted(root.rglob("*"))
    }


def run_cli(capsys, argv) -> tuple[int, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, err.strip()


def experiment_file(tmp_path: Path, **changes) -> Path:
    spec = {
        "name": "paths",
        "games": ["Pong"],
        "data": {"random": {"source": "random", "steps": 1000}},
        "pretrain": [{"name": "s", "params": SMOKE, "data": "random", "set": {"steps": 2}}],
        "probe": [{"name": "p", "data": "random", "pretrain": ["s"]}],
    }
    spec.update(changes)
    file = tmp_path / "exp.yaml"
    file.write_text(yaml.safe_dump(spec))
    return file


@pytest.mark.parametrize(
    ("where", "name", "culprit"),
    [
        ("pretrain", "../../../../victim/notes", "'.' at position 0"),
        ("pretrain", "sgi/m", "'/' at position 3"),
        ("probe", "p\\x", "'\\\\' at position 1"),
        ("name", "..", "'.' at position 0"),
        ("data", "ra ndom", "' ' at position 2"),
        ("probe", "-p", "'-' at position 0"),
    ],
)
def test_a_name_that_is_not_one_path_part_is_refused(tmp_path, capsys, where, name, culprit):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "notes.yaml").write_text("my notes\n")
    if where == "pretrain":
        entry = {"name": name, "params": SMOKE, "data": "random"}
        file = experiment_file(
            tmp_path, pretrain=[entry], probe=[{"name": "p", "data": "random", "pretrain": [name]}]
        )
        key = "pretrain[0].name"
    elif where == "probe":
        file = experiment_file(tmp_path, probe=[{"name": name, "data": "random"}])
        key = "probe[0].name"
    elif where == "name":
        file = experiment_file(tmp_path, name=name)
        key = ": name"
    else:
        file = experiment_file(
            tmp_path,
            data={name: {"source": "random", "steps": 10}},
            pretrain=[],
            probe=[{"name": "p", "data": name, "pretrain": ["none"]}],
        )
        key = "data."
    before = snapshot(tmp_path)
    out = tmp_path / "a" / "b" / "c" / "d"
    for extra in (["--dry-run"], ["--no-progress"]):
        rc, err = run_cli(capsys, ["experiment", file, "--out", out, *extra])
        assert rc == 2 and len(err.splitlines()) == 1, err
        assert key in err and culprit in err and "safe path part" in err, err
    assert snapshot(tmp_path) == before  # the victim's file, and nothing created


def test_a_path_resolving_outside_out_is_refused_before_writing(tmp_path, capsys):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "pretrain__s.yaml").write_text("my notes\n")
    out = tmp_path / "exp"
    out.mkdir()
    (out / "params").symlink_to(victim)  # a link someone left leads out of --out
    file = experiment_file(tmp_path)
    before = snapshot(tmp_path)
    rc, err = run_cli(capsys, ["experiment", file, "--out", out, "--no-progress"])
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "params file" in err and "outside the experiment folder" in err, err
    assert str(victim / "pretrain__s.yaml") in err
    assert snapshot(tmp_path) == before
    # run_graph checks a graph built by hand too.
    graph = ex.expand(ex.load_experiment(experiment_file(tmp_path)), tmp_path / "other")
    moved = graph.params_files | {str(victim / "x.yaml"): {}}
    import dataclasses

    with pytest.raises(ConfigError, match="outside the experiment folder"):
        ex.run_graph(dataclasses.replace(graph, params_files=moved), progress=False)
    assert snapshot(tmp_path) == before


def test_params_files_are_named_from_the_cleaned_task_ids(tmp_path):
    graph = ex.expand(ex.load_experiment(experiment_file(tmp_path)), tmp_path / "exp")
    out = (tmp_path / "exp").resolve()
    assert sorted(Path(p).relative_to(out).as_posix() for p in graph.params_files) == [
        "params/pretrain__s.yaml"
    ]


# -- item 8: hostile YAML in an experiment file ---------------------------------------------------

BOMB = "\n".join(
    ["a: &a [x, x, x, x, x, x, x, x, x]"]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
)  # nine levels of nine: 9**9 strings once expanded


@pytest.mark.parametrize("where", ["description", "set"])
def test_an_alias_bomb_is_refused_in_bounded_time_and_memory(tmp_path, where):
    text = yaml.safe_dump(
        {
            "name": "bomb",
            "games": ["Pong"],
            "data": {"r": {"source": "random", "steps": 10}},
            "pretrain": [{"name": "s", "params": SMOKE, "data": "r"}],
            "probe": [{"name": "p", "data": "r", "pretrain": ["s"]}],
        }
    )
    # The anchors sit under a key the file may hold (parameters), the bomb where it hurts.
    anchors = "parameters:\n" + "\n".join("  x_" + line for line in BOMB.splitlines())
    if where == "description":
        text = f"{anchors}\ndescription: *i\n{text}"
    else:
        text = f"{anchors}\n" + text.replace("  params: ", "  set: {augment: *i}\n  params: ", 1)
    file = tmp_path / "bomb.yaml"
    file.write_text(text)
    code = (
        "import resource, sys; "
        "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)); "
        "from sgi_lab.launch.cli import main; "
        f"sys.exit(main(['experiment', {str(file)!r}, '--out', {str(tmp_path / 'o')!r}, "
        "'--dry-run']))"
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert time.monotonic() - started < 30
    err = done.stderr.strip()
    assert done.returncode == 2 and "Traceback" not in err, err
    assert len(err.splitlines()) == 1 and str(file) in err, err
    assert "alias" in err and len(err) < 400, err
    assert not (tmp_path / "o").exists()


def test_a_duplicate_key_and_a_long_value_are_named_shortly(tmp_path, capsys):
    file = experiment_file(tmp_path)
    file.write_text(file.read_text() + "name: again\n")
    rc, err = run_cli(capsys, ["experiment", file, "--out", tmp_path / "o", "--dry-run"])
    assert rc == 2 and "duplicate key 'name'" in err and "line" in err, err
    file = experiment_file(tmp_path, name="n" * 100_000)
    rc, err = run_cli(capsys, ["experiment", file, "--out", tmp_path / "o", "--dry-run"])
    assert rc == 2 and ": name: 'nnnn" in err and len(err) < 400, err
    file = experiment_file(tmp_path, pretrain=["p" * 100_000])
    rc, err = run_cli(capsys, ["experiment", file, "--out", tmp_path / "o", "--dry-run"])
    assert rc == 2 and "pretrain" in err and len(err) < 400, err
    assert not (tmp_path / "o").exists()


def test_a_probe_only_experiment_whose_probes_failed_says_so(tmp_path):
    from sgi_lab.experiments.scheduler import _run_report

    graph = ex.expand(ex.load_experiment(experiment_file(tmp_path)), tmp_path / "exp")
    report = graph.task("report")
    states = {t.id: "failed" for t in graph.tasks}
    states["report"] = "pending"
    info = {"report": {"attempts": 0}}
    _run_report(graph, report, states, info, None, lambda *a: None)
    assert states["report"] == "blocked"
    assert info["report"]["error"].startswith("no probe task finished"), info
