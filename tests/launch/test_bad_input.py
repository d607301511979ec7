"""Bad input, one row per case: the exit code, a message naming the culprit, no traceback, and
the file tree untouched (paths and hashes before and after). CLI commands run in-process."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from conftest import build_store

from sgi_lab.config import PretrainConfig, load_config, to_dict
from sgi_lab.data.dqn_replay_importer import checkpoint_files
from sgi_lab.launch.cli import main
from sgi_lab.runs.folder import RunDir

SMOKE = "params/pretrain/smoke.yaml"
EPISODES = [{"length": 30, "terminal": True}, {"length": 25}]


def snapshot(root: Path) -> dict[str, str | None]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        if p.is_file()
        else None
        for p in sorted(root.rglob("*"))
    }


def _gz_npy(path: Path, array: np.ndarray) -> None:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    path.write_bytes(gzip.compress(buffer.getvalue()))


class Evil:
    def __reduce__(self):
        return (print, ("pwned",))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Everything the rows point at, built once: stores, runs, params files, a thesis folder."""
    root = tmp_path_factory.mktemp("world")
    w = {"root": root}
    w["store"] = build_store(root / "store", EPISODES, chunk_size=16).path
    w["store2"] = build_store(root / "store2", EPISODES[:1], chunk_size=16).path
    thesis = root / "thesis"
    thesis.mkdir()
    (thesis / "chapter1.tex").write_text("years of work")
    (thesis / "config.yaml").write_text("advisor: happy\n")
    w["thesis"] = thesis
    (root / "empty_src").mkdir()
    w["empty_src"] = root / "empty_src"

    def broken_store(name, breaker):
        path = build_store(root / name, EPISODES, chunk_size=16).path
        breaker(path)
        return path

    w["list_manifest"] = broken_store(
        "list_manifest", lambda p: (p / "manifest.json").write_text("[1, 2]")
    )
    w["truncated"] = broken_store(
        "truncated",
        lambda p: (p / "chunks/frame_00001.npy").write_bytes(
            (p / "chunks/frame_00001.npy").read_bytes()[:500]
        ),
    )
    w["missing"] = broken_store("missing", lambda p: (p / "chunks/action_00002.npy").unlink())
    w["pickled_chunk"] = broken_store(
        "pickled_chunk",
        lambda p: np.save(
            p / "chunks/reward_00000.npy", np.array([Evil()] * 16), allow_pickle=True
        ),
    )

    def fewer_actions(p):
        manifest = json.loads((p / "manifest.json").read_text())
        manifest["num_actions"] = 3
        (p / "manifest.json").write_text(json.dumps(manifest))

    w["too_many_actions"] = broken_store("too_many_actions", fewer_actions)

    def eighteen_actions(p):
        manifest = json.loads((p / "manifest.json").read_text())
        manifest["num_actions"] = 18  # Pong has 6: a claim the data do not belie, the game does
        (p / "manifest.json").write_text(json.dumps(manifest))

    w["eighteen_actions"] = broken_store("eighteen_actions", eighteen_actions)

    def flip(p):
        data = bytearray((p / "chunks/frame_00001.npy").read_bytes())
        data[-1] ^= 0xFF
        (p / "chunks/frame_00001.npy").write_bytes(bytes(data))

    w["flipped"] = broken_store("flipped", flip)

    # A params folder, a YAML tag, a pickled DQN-Replay observation file.
    (root / "params_dir").mkdir()
    w["params_dir"] = root / "params_dir"
    (root / "afile.txt").write_text("not weights\n")
    w["afile"] = root / "afile.txt"
    (root / "tag.yaml").write_text("config: !!python/object/apply:os.system ['echo pwned']\n")
    w["tag"] = root / "tag.yaml"
    src = root / "pickled_src"
    src.mkdir()
    for name, path in checkpoint_files(src, 0).items():
        _gz_npy(path, np.array([Evil()] * 4) if name == "observation" else np.zeros(4, np.int32))
    w["pickled_src"] = src

    # Runs: an unfinished finetuning run, a finished pretraining run, one started on store2,
    # and runs whose only checkpoint is foreign or pickled.
    smoke = to_dict(load_config(PretrainConfig, SMOKE))
    ft = RunDir.open(root / "ft_unfinished", "finetune", {"game": "Pong"})
    ft.start(0, params="t")
    (ft.path / "eval.json").write_text(json.dumps({"game": "Pong", "mean": 1.0, "step": 5}))
    w["ft_unfinished"] = ft.path
    done = RunDir.open(root / "pre_done", "pretrain", smoke)
    done.start(0)
    (done.path / "model.pt").write_bytes(b"model")
    done.finish(30)
    w["pre_done"] = done.path
    other = RunDir.open(root / "pre_store2", "pretrain", smoke, inputs={"data": "0123abcd"})
    other.start(0)
    w["pre_store2"] = other.path
    for name, payload in (("pre_foreign", {"weights": torch.zeros(2)}), ("pre_pickled", Evil())):
        run = RunDir.open(root / name, "pretrain", smoke)
        run.start(0)
        run.checkpoints_dir.mkdir()
        torch.save(payload, run.checkpoints_dir / "ckpt_00000010.pt")
        w[name] = run.path
    return w


def pretrain_args(world, *extra, data="store", out="new_run"):
    out = world[out] if out in world else world["root"] / out
    return ["pretrain", "--params", SMOKE, "--data", str(world[data]), "--out", str(out), *extra]


def collect_args(world, out, *extra):
    out = world[out] if out in world else world["root"] / out
    args = ["collect", "random", "--game", "pong", "--steps", "20", "--out", str(out)]
    return [*args, "--no-progress", *extra]


def import_args(world, src, out, *extra, checkpoints="0"):
    out = world[out] if out in world else world["root"] / out
    args = ["import", "dqn-replay", "--src", str(world[src]), "--game", "pong"]
    return [*args, "--checkpoints", checkpoints, "--out", str(out), "--no-progress", *extra]


# (id, argv builder, exit code, text the message must contain: the culprit)
CASES = [
    # data loss (items 1, 2)
    ("collect-overwrite-thesis", lambda w: collect_args(w, "thesis", "--overwrite"), 2, "thesis"),
    ("import-overwrite-thesis", lambda w: import_args(w, "empty_src", "thesis", "--overwrite"), 2, "thesis"),
    ("pretrain-into-thesis", lambda w: pretrain_args(w, out="thesis"), 2, "thesis"),
    ("pretrain-overwrite-thesis", lambda w: pretrain_args(w, "--overwrite", out="thesis"), 2, "thesis"),
    ("pretrain-overwrite-finetune-run", lambda w: pretrain_args(w, "--overwrite", out="ft_unfinished"), 2, "finetune run"),
    # wrong results (items 3, 4, 5, 6)
    ("evaluate-unfinished", lambda w: ["evaluate", str(w["ft_unfinished"]), "--no-progress"], 2, "ft_unfinished"),
    ("report-unfinished", lambda w: ["report", str(w["ft_unfinished"])], 2, "--allow-unfinished"),
    ("pretrain-finished-other-lr", lambda w: pretrain_args(w, "--set", "lr=0.5", out="pre_done"), 2, "lr"),
    ("pretrain-finished-other-steps", lambda w: pretrain_args(w, "--set", "steps=99", out="pre_done"), 2, "steps"),
    ("pretrain-resume-other-store", lambda w: pretrain_args(w, out="pre_store2"), 2, "data"),
    ("pretrain-steps-0", lambda w: pretrain_args(w, "--set", "steps=0"), 2, "steps"),
    ("pretrain-steps-negative", lambda w: pretrain_args(w, "--set", "steps=-3"), 2, "steps"),
    ("pretrain-batch-0", lambda w: pretrain_args(w, "--set", "batch_size=0"), 2, "batch_size"),
    ("pretrain-lr-negative", lambda w: pretrain_args(w, "--set", "lr=-1.0"), 2, "lr"),
    ("pretrain-checkpoint-every-0", lambda w: pretrain_args(w, "--set", "checkpoint_every=0"), 2, "checkpoint_every"),
    # crash litter and validation (item 11)
    ("collect-chunk-size-0", lambda w: collect_args(w, "c0", "--chunk-size", "0"), 2, "chunk_size"),
    ("collect-seed-negative", lambda w: collect_args(w, "c1", "--seed", "-1"), 2, "seed"),
    ("collect-hold-p", lambda w: collect_args(w, "c2", "--hold-p", "1.5"), 2, "hold_p"),
    # bad input (item 12) and the cases that already worked
    ("params-is-a-folder", lambda w: ["pretrain", "--params", str(w["params_dir"]), "--data", str(w["store"]), "--out", str(w["root"] / "x")], 2, "params_dir"),
    ("params-yaml-tag", lambda w: ["pretrain", "--params", str(w["tag"]), "--data", str(w["store"]), "--out", str(w["root"] / "x")], 2, "tag.yaml"),
    ("pretrain-unknown-key", lambda w: pretrain_args(w, "--set", "sprr_weight=1.0"), 2, "sprr_weight"),
    ("pretrain-wrong-type", lambda w: pretrain_args(w, "--set", "batch_size=big"), 2, "batch_size"),
    ("pretrain-foreign-checkpoint", lambda w: pretrain_args(w, out="pre_foreign"), 2, "ckpt_00000010.pt"),
    ("pretrain-pickled-checkpoint", lambda w: pretrain_args(w, out="pre_pickled"), 2, "ckpt_00000010.pt"),
    ("pretrain-too-many-actions", lambda w: pretrain_args(w, data="too_many_actions"), 2, "3 actions"),
    ("manifest-not-an-object", lambda w: ["info", str(w["list_manifest"])], 2, "manifest.json"),
    ("truncated-chunk", lambda w: ["info", str(w["truncated"])], 2, "frame_00001.npy"),
    ("missing-chunk", lambda w: ["info", str(w["missing"])], 2, "action_00002.npy"),
    ("pickled-chunk", lambda w: ["info", str(w["pickled_chunk"])], 2, "reward_00000.npy"),
    ("verify-flipped-byte", lambda w: ["info", str(w["flipped"]), "--verify"], 1, "frame_00001.npy"),
    ("pretrain-on-flipped-store", lambda w: pretrain_args(w, data="flipped"), 2, "frame_00001.npy"),
    ("collect-unknown-game", lambda w: ["collect", "random", "--game", "pongg", "--steps", "5", "--out", str(w["root"] / "g")], 2, "pongg"),
    ("import-checkpoints-not-numbers", lambda w: import_args(w, "empty_src", "i0", checkpoints="a,b"), 2, "--checkpoints"),
    ("import-pickled-gz", lambda w: import_args(w, "pickled_src", "i1"), 2, "observation_ckpt.0.gz"),
    ("finetune-seed-negative", lambda w: ["finetune", "--params", "params/finetune/smoke.yaml", "--seed", "-1", "--out", str(w["root"] / "f0"), "--no-progress"], 2, "seed"),
    ("finetune-max-agents-zero", lambda w: ["finetune", "--params", "params/finetune/smoke.yaml", "--game", "pong,breakout", "--max-agents", "0", "--out", str(w["root"] / "f2"), "--no-progress"], 2, "--max-agents"),
    ("finetune-pretraining-params", lambda w: ["finetune", "--params", "params/pretrain/minatar_sgi.yaml", "--out", str(w["root"] / "f4"), "--no-progress"], 2, "minatar_sgi.yaml: a pretraining params file"),
    ("finetune-lr-negative", lambda w: ["finetune", "--params", "params/finetune/smoke.yaml", "--set", "lr=-1.0", "--out", str(w["root"] / "f1"), "--no-progress"], 2, "lr"),
    ("run-unknown-parameter", lambda w: ["run", "pretrain", "-p", "unknown_name", "1", "--out-root", str(w["root"] / "nb")], 2, "unknown_name"),
    # imprecise path messages: say what the path is and what was expected
    ("evaluate-a-model-file", lambda w: ["evaluate", str(w["pre_done"] / "model.pt"), "--no-progress"], 2, "model.pt: a file, expected a finetuning run folder"),
    ("finetune-pretrained-text-file", lambda w: ["finetune", "--params", "params/finetune/smoke.yaml", "--pretrained", str(w["afile"]), "--out", str(w["root"] / "f3"), "--no-progress"], 2, "afile.txt: not a PyTorch checkpoint"),
    ("run-params-is-a-folder", lambda w: ["run", "pretrain", "-f", str(w["params_dir"]), "--out-root", str(w["root"] / "nb")], 2, "params_dir: a folder, expected a YAML parameters file"),
    ("run-seed-not-a-number", lambda w: ["run", "pretrain", "-p", "seed", "abc", "--out-root", str(w["root"] / "nb")], 2, "seed: expected an integer"),
    ("verify-manifest-claims-18-actions", lambda w: ["info", str(w["eighteen_actions"]), "--verify"], 1, "the manifest says 18 actions, but Pong has 6"),
    # probes: the store verified, every option named
    ("probe-flipped-store", lambda w: ["probe", str(w["pre_done"]), "--data", str(w["flipped"])], 2, "damaged store, refusing to probe it"),
    ("probe-too-many-actions", lambda w: ["probe", str(w["pre_done"]), "--data", str(w["too_many_actions"])], 2, "too_many_actions"),
    ("probe-max-frames-0", lambda w: ["probe", str(w["pre_done"]), "--data", str(w["store"]), "--max-frames", "0"], 2, "--max-frames 0"),
    ("probe-split-seed-negative", lambda w: ["probe", str(w["pre_done"]), "--data", str(w["store"]), "--split-seed", "-1"], 2, "--split-seed -1"),
    ("probe-threads-negative", lambda w: ["probe", str(w["pre_done"]), "--data", str(w["store"]), "--threads", "-3"], 2, "--threads -3"),
    ("probe-seed-huge", lambda w: ["probe", "--random-init", "nature", "--seed", str(2**70), "--out", str(w["root"] / "r"), "--data", str(w["store"])], 2, "--seed"),
]  # fmt: skip


@pytest.mark.parametrize("argv,code,culprit", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input(world, capsys, argv, code, culprit):
    root = world["root"]
    before = snapshot(root)
    rc = main(argv(world))
    out, err = capsys.readouterr()
    assert rc == code, (out, err)
    assert culprit in err, err
    assert "Traceback" not in out + err
    assert snapshot(root) == before


def test_the_world_is_what_the_rows_say(world):
    """The rows fail for their own reason: the good store and a re-run of the same collect."""
    assert main(["info", str(world["store"]), "--verify"]) == 0
    for name in ("store", "store2"):
        assert yaml.safe_load((world[name] / "manifest.json").read_text())["checksums"]


def test_a_mistyped_store_or_experiment_file_gets_did_you_mean(tmp_path, capsys, monkeypatch):
    """`--data` stores and experiment files are matched against what exists, like games, params
    files and run folders, and nothing is created."""
    store = build_store(tmp_path / "data" / "pong_random", EPISODES, chunk_size=16).path
    smoke = Path(SMOKE).resolve()
    experiments = tmp_path / "experiments"
    experiments.mkdir()
    (experiments / "smoke.yaml").write_text("name: smoke\n")
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    argv = ["pretrain", "--params", str(smoke), "--data", "data/pong_randm"]
    assert main([*argv, "--out", "runs/x"]) == 2
    assert "did you mean data/pong_random?" in capsys.readouterr().err
    assert main(["experiment", "experiments/smok.yaml", "--dry-run"]) == 2
    assert "did you mean experiments/smoke.yaml" in capsys.readouterr().err
    assert snapshot(tmp_path) == before and store.exists()


def test_help_keeps_the_examples_line_breaks(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert (
        "--data outputs/data/pong_random \\\n        --out outputs/runs/pretrain__sgi_m__Pong"
        in out
    )


def test_a_sweep_with_a_bad_grid_key_creates_nothing(tmp_path, capsys):
    out = tmp_path / "sweep"
    argv = ["sweep", "pretrain", "-f", "params/notebooks/pretrain_smoke.yaml"]
    assert main([*argv, "--grid", "sede=1,2", "--sweep-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert "unknown notebook parameter(s) ['sede']" in err and "did you mean sede -> seed" in err
    assert not out.exists()


def test_collect_and_finetune_help_name_every_option_and_minatar(capsys):
    """Every collect option says what it does; finetune's help names MinAtar beside Atari."""
    for argv in (["--help"], ["collect", "--help"], ["finetune", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
    text = " ".join(capsys.readouterr().out.split())
    for phrase in (
        "transitions to collect",
        "rows per chunk file",
        "all 18 Atari actions",
        "mark a life loss terminal",
        "discard an existing store there",
        "or a MinAtar one (minatar/breakout)",
        "finetune on Atari 100k or MinAtar",
    ):
        assert phrase in text, phrase
