"""Issue 35 items 1, 8, 9: an experiment file cannot write outside its --out (names are one safe
path part; every resolved path stays under --out), hostile YAML does not hang, and bad values
are refused up front naming them. Each case: exit code, one line naming the culprit, no
traceback, every file outside the run's own untouched."""

from __future__ import annotations

import hashlib
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
