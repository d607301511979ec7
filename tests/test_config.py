"""Configs reject bad keys/types by name; run folders write atomically and resume cleanly."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from sgi_lab.base.files import atomic_torch_save
from sgi_lab.config import (
    ConfigError,
    FinetuneConfig,
    PretrainConfig,
    build_config,
    load_config,
    parse_overrides,
    read_params,
)
from sgi_lab.runs.checkpoints import CheckpointError, load_checkpoint, restore_generator
from sgi_lab.runs.folder import RunDir, run_name


def test_defaults_follow_the_paper():
    p = PretrainConfig()
    assert (p.batch_size, p.spr_coefficient, p.inverse_weight, p.goal_weight) == (
        256,
        2.0,
        1.0,
        1.0,
    )
    assert (p.lr, p.adam_eps, p.ema_tau) == (1e-4, 1.5e-4, 0.99)
    assert p.steps == 10 * 6_000_000 // 256
    f = FinetuneConfig()
    assert (f.batch_size, f.n_step, f.num_atoms, f.spr_coefficient, f.learning_starts) == (
        32,
        10,
        51,
        2.0,  # SPR's spr_weight 5 on mean_k(2 - 2 cos), K = 5
        2000,
    )
    assert (f.encoder_lr_scale, round(f.pretrained_lr_scale, 4)) == (0.01, 0.3333)


def test_unknown_key_is_named():
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['sprr_weight'\]"):
        build_config(PretrainConfig, {"sprr_weight": 1.0})


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("batch_size", "big", "batch_size: expected an integer"),
        ("batch_size", 2.5, "batch_size: expected an integer"),
        ("augment", "yes", "augment: expected true/false"),
        ("lr", "1e-4", "lr: expected a number.*dot"),
        ("encoder", "vgg", r"encoder: 'vgg' is not one of"),
    ],
)
def test_wrong_types_are_named(key, value, message):
    with pytest.raises(ConfigError, match=message):
        build_config(PretrainConfig, {key: value})


@pytest.mark.parametrize(
    "cls,values,message",
    [
        (PretrainConfig, {"batch_size": 0}, "batch_size: must be positive, got 0"),
        (PretrainConfig, {"spr_coefficient": -1.0}, r"spr_coefficient: must be >= 0, got -1.0"),
        (
            PretrainConfig,
            {"spr_coefficient": 0.0, "goal_weight": 0.0, "inverse_weight": 0.0},
            "spr_coefficient, .*bc_weight: every weight is 0, nothing to learn",
        ),
        (PretrainConfig, {"atc_weight": 1.0}, "atc_weight: ATC is a baseline on its own"),
        (PretrainConfig, {"n_step": 6}, r"n_step: must lie in 1..spr_steps \(5\).*got 6"),
        (FinetuneConfig, {"dueling": False}, "dueling: SGIModel's C51 head is always dueling"),
        (FinetuneConfig, {"spr_steps": 0}, "spr_steps: ssl 'spr' needs K >= 1"),
        (FinetuneConfig, {"eval_max_frames": 1_001}, "eval_max_frames: must be a multiple of 4"),
    ],
)
def test_ranges_and_cross_field_checks_name_the_key_however_the_config_is_made(
    cls, values, message
):
    with pytest.raises(ConfigError, match=message):
        build_config(cls, values)
    with pytest.raises(ConfigError, match=message):
        cls(**values)
    with pytest.raises(ConfigError, match=message):
        dataclasses.replace(cls(), **values)


def test_cross_field_checks_accept_what_the_other_fields_allow():
    atc = {"spr_coefficient": 0.0, "goal_weight": 0.0, "inverse_weight": 0.0, "atc_weight": 1.0}
    assert build_config(PretrainConfig, atc).atc_weight == 1.0
    assert build_config(PretrainConfig, {"n_step": 6, "spr_steps": 6}).n_step == 6
    assert build_config(PretrainConfig, {"n_step": 9, "goal_weight": 0.0}).n_step == 9
    assert build_config(FinetuneConfig, {"spr_steps": 0, "ssl": "none"}).spr_steps == 0


def test_ints_widen_to_floats_and_optional_none():
    cfg = build_config(FinetuneConfig, {"lr": 1, "pretrained": None})
    assert cfg.lr == 1.0 and isinstance(cfg.lr, float) and cfg.pretrained is None


def test_params_file_and_overrides(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("name: t\nconfig:\n  encoder: nature\n  lr: 3.0e-4\n")
    cfg = load_config(
        PretrainConfig, path, parse_overrides(["steps=10", "augment=false", "lr=1e-3"])
    )
    assert (cfg.encoder, cfg.steps, cfg.augment, cfg.lr) == ("nature", 10, False, 1e-3)
    path.write_text("config:\n  bogus: 1\n")
    with pytest.raises(ConfigError, match=r"p.yaml: unknown key\(s\) \['bogus'\]"):
        load_config(PretrainConfig, path)
    path.write_text("confg: {}\n")
    with pytest.raises(ConfigError, match=r"unknown top-level key\(s\) \['confg'\]"):
        read_params(path)
    path.write_text("config: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        read_params(path)
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides(["steps"])


PAPER_FINETUNE = ("all_ssl", "frozen", "naive", "no_ssl", "reduced_lr", "sgi_none")


def test_env_protocol_round_trips_and_the_paper_finetune_params_use_the_authors_env(tmp_path):
    import typing
    from pathlib import Path

    import yaml

    from sgi_lab.config import to_dict
    from sgi_lab.envs import ENV_PROTOCOLS

    # The config's words are make_env's (Atari's two, MinAtar's one).
    hints = typing.get_type_hints(FinetuneConfig)
    assert typing.get_args(hints["env_protocol"]) == ENV_PROTOCOLS
    assert FinetuneConfig().env_protocol == "dopamine"
    root = Path(__file__).resolve().parents[1]
    for name in PAPER_FINETUNE:
        cfg = load_config(FinetuneConfig, root / f"params/finetune/{name}.yaml")
        assert cfg.env_protocol == "rlpyt", name
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({"name": name, "config": to_dict(cfg)}))
        assert load_config(FinetuneConfig, path) == cfg
    assert load_config(FinetuneConfig, root / "params/finetune/smoke.yaml").env_protocol == (
        "dopamine"
    )
    assert not any("env_protocol" in f.read_text() for f in root.glob("params/notebooks/*"))
    cli = load_config(FinetuneConfig, None, parse_overrides(["env_protocol=rlpyt"]))
    assert cli.env_protocol == "rlpyt"
    with pytest.raises(ConfigError, match=r"env_protocol: 'gym' is not one of \['dopamine'"):
        load_config(FinetuneConfig, None, {"env_protocol": "gym"})


def test_run_name():
    assert run_name("pretrain", "sgi_m", "ALE/Pong-v5", "s0") == "pretrain__sgi_m__ALE-Pong-v5__s0"


def test_checkpoints_atomic_pruned_and_validated(tmp_path):
    run = RunDir(tmp_path / "run", keep_checkpoints=2)
    for step in (10, 20, 30):
        run.save_checkpoint(step, {"w": torch.full((2,), float(step))}, kind="pretrain")
    assert [p.name for p in run.checkpoints()] == ["ckpt_00000020.pt", "ckpt_00000030.pt"]
    assert not list(run.checkpoints_dir.glob("*.tmp"))
    latest = run.load_latest("pretrain")
    assert latest["step"] == 30 and latest["w"][0].item() == 30.0
    with pytest.raises(CheckpointError, match="'pretrain' checkpoint, expected 'finetune'"):
        run.load_latest("finetune")
    # Truncated file.
    path = run.latest_checkpoint()
    path.write_bytes(path.read_bytes()[:50])
    with pytest.raises(CheckpointError, match="ckpt_00000030.pt: not a PyTorch checkpoint"):
        load_checkpoint(path)
    # Foreign (valid torch file, not ours).
    foreign = tmp_path / "foreign.pt"
    atomic_torch_save({"state_dict": {}}, foreign)
    with pytest.raises(CheckpointError, match="foreign"):
        load_checkpoint(foreign)


def test_metrics_resume_drops_rows_after_checkpoint(tmp_path):
    run = RunDir(tmp_path / "run")
    with run.metrics_logger() as log:
        for step in (100, 200, 300):
            log.log(step, loss=1.0 / step, nan=float("nan"))
    with open(run.metrics_path, "a") as fh:
        fh.write('{"step": 400, "loss"')  # torn line from a crash
    with run.metrics_logger(resume_step=200) as log:
        log.log(300, loss=0.5)
    rows = run.read_metrics()
    assert [r["step"] for r in rows] == [100, 200, 300]
    assert rows[-1]["loss"] == 0.5 and rows[0]["nan"] is None


def test_status_round_trip(tmp_path):
    run = RunDir(tmp_path / "run")
    assert run.status()["state"] == "new"
    run.set_status("running", step=5)
    run.set_status("finished")
    status = json.loads((run.path / "status.json").read_text())
    assert status["state"] == "finished" and status["step"] == 5 and run.finished


def test_restore_generator_round_trip_and_foreign_state():
    g = torch.Generator().manual_seed(11)
    state = g.get_state()
    expected = torch.rand(3, generator=g)
    fresh = torch.Generator()
    assert restore_generator(fresh, state.clone())
    torch.testing.assert_close(torch.rand(3, generator=fresh), expected)
    # A CUDA generator's state (16 bytes) cannot go into a CPU generator: reseeded, the same way
    # every time, and the caller is told so.
    foreign = torch.arange(16, dtype=torch.uint8)
    a, b = torch.Generator(), torch.Generator()
    assert not restore_generator(a, foreign) and not restore_generator(b, foreign)
    torch.testing.assert_close(torch.rand(3, generator=a), torch.rand(3, generator=b))


def test_finetune_config_canonicalises_the_game_once():
    from sgi_lab.config import FinetuneConfig, build_config
    from sgi_lab.envs import UnknownGameError

    assert FinetuneConfig(game="pong") == FinetuneConfig(game="Pong") == FinetuneConfig()
    assert build_config(FinetuneConfig, {"game": "ALE/MsPacman-v5"}).game == "MsPacman"
    with pytest.raises(UnknownGameError, match="game: unknown Atari 100k game 'pongg'"):
        FinetuneConfig(game="pongg")


def test_metrics_written_before_the_shared_namespace_are_renamed_on_read(tmp_path):
    from sgi_lab.base.files import read_jsonl

    path = tmp_path / "metrics.jsonl"
    path.write_text(
        '{"step": 1, "loss/total": 2.0, "perf/samples_per_s": 9.0, "repr/cosine_similarity": 0.5}\n'
        '{"step": 2, "losses/total": 1.0, "charts/sps": 3.0}\n{"step": 3, "los'
    )
    assert read_jsonl(path) == [
        {
            "step": 1,
            "losses/total": 2.0,
            "charts/samples_per_s": 9.0,
            "charts/cosine_similarity": 0.5,
        },
        {"step": 2, "losses/total": 1.0, "charts/sps": 3.0},
    ]


# -- the shared fields, declared once, each with its range rule ---------------------------------


def test_the_stages_share_one_declaration_of_their_common_fields():
    from sgi_lab.config import StageConfig

    shared = {f.name for f in dataclasses.fields(StageConfig)}
    pretrain = {f.name for f in dataclasses.fields(PretrainConfig)}
    finetune = {f.name for f in dataclasses.fields(FinetuneConfig)}
    assert shared == pretrain & finetune and len(shared) == 27  # hidden_size too
    assert issubclass(PretrainConfig, StageConfig) and issubclass(FinetuneConfig, StageConfig)
    # Only a stage default is restated; type, doc and range rule are the base's.
    for name in ("batch_size", "steps", "n_step", "log_every"):
        base = StageConfig.__dataclass_fields__[name].metadata
        for cls in (PretrainConfig, FinetuneConfig):
            assert cls.__dataclass_fields__[name].metadata["rules"] == base["rules"], name
            assert cls.__dataclass_fields__[name].metadata["doc"].startswith(base["doc"]), name
    assert (PretrainConfig().batch_size, FinetuneConfig().batch_size) == (256, 32)
    assert (PretrainConfig().n_step, FinetuneConfig().n_step) == (1, 10)
    assert (PretrainConfig().goal_double_q, FinetuneConfig().goal_double_q) == (True, False)
    # lambda_SPR is 2 in both stages' defaults: declared once, not restated
    assert "spr_coefficient" not in PretrainConfig.__dict__ and "spr_coefficient" in shared
    assert (PretrainConfig().spr_coefficient, FinetuneConfig().spr_coefficient) == (2.0, 2.0)


@pytest.mark.parametrize(
    "cls,key,bad,good,message",
    [
        (PretrainConfig, "batch_size", 0, 1, "must be positive"),
        (FinetuneConfig, "batch_size", -3, 1, "must be positive"),
        (PretrainConfig, "goal_weight", -0.5, 0.0, "must be >= 0"),
        (FinetuneConfig, "learning_starts", -1, 0, "must be >= 0"),
        (FinetuneConfig, "eval_max_frames", 402, 400, "must be a multiple of 4"),
        (FinetuneConfig, "lr", float("nan"), 1.0, "must be a finite number"),
    ],
)
def test_each_range_rule_sits_beside_its_field(cls, key, bad, good, message):
    from sgi_lab.config import check_key_value

    assert check_key_value(cls, key, good) == good
    with pytest.raises(ConfigError, match=f"^{key}: {message}, got"):
        check_key_value(cls, key, bad)
    with pytest.raises(ConfigError, match=f"^{key}: {message}"):
        build_config(cls, {key: bad})


def test_is_a_term_on_is_derived_once_on_the_config():
    assert PretrainConfig().uses_goal_rl and not PretrainConfig(goal_weight=0.0).uses_goal_rl
    assert not FinetuneConfig().uses_goal_rl and FinetuneConfig(ssl="all").uses_goal_rl
    # finetuning: ssl is the switch; goal_weight only weighs the term
    assert FinetuneConfig(ssl="all", goal_weight=0.0).uses_goal_rl
    assert (FinetuneConfig().rollout_steps, FinetuneConfig(ssl="none").rollout_steps) == (5, 0)
    atc = {"spr_coefficient": 0.0, "goal_weight": 0.0, "inverse_weight": 0.0, "atc_weight": 0.5}
    assert PretrainConfig(**atc).uses_atc and not PretrainConfig().uses_atc


def test_the_spr_coefficient_is_what_multiplies_spr_in_both_stages():
    from sgi_lab.train.sgi_loss import finetuning_settings, pretraining_settings

    for config in (PretrainConfig(spr_coefficient=0.4), FinetuneConfig(spr_coefficient=0.4)):
        settings = (
            pretraining_settings if isinstance(config, PretrainConfig) else finetuning_settings
        )(config)
        assert settings.weight("spr") == config.spr_coefficient == 0.4  # as written, any K
    assert pretraining_settings(PretrainConfig(spr_coefficient=0.0)).terms == {"goal_rl", "inverse"}


# -- where a bad key or value came from ------------------------------------------------------


SMOKE = "params/pretrain/smoke.yaml"


@pytest.mark.parametrize(
    "pair,message",
    [
        (
            "stepz=10",
            r"^--set: unknown key\(s\) \['stepz'\] for PretrainConfig; did you mean steps\?$",
        ),
        ("steps=ten", r"^--set steps: expected an integer, got 'ten'$"),
        ("batch_size=0", r"^--set batch_size: must be positive, got 0$"),
        ("lr=[1,", r"^--set lr: '\[1,': not valid YAML"),
        ("steps", r"^--set: override 'steps' must look like key=value$"),
    ],
)
def test_set_errors_name_set_not_the_params_file(pair, message):
    root = __import__("pathlib").Path(__file__).resolve().parents[1]
    with pytest.raises(ConfigError, match=message) as info:
        load_config(PretrainConfig, root / SMOKE, parse_overrides([pair]))
    assert "smoke.yaml" not in str(info.value) and "valid keys" not in str(info.value)


def test_the_params_file_is_blamed_for_its_own_keys_and_a_label_for_notebook_overrides(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("config:\n  stepz: 10\n")
    with pytest.raises(
        ConfigError, match=r"^.*p.yaml: unknown key\(s\) \['stepz'\].*did you mean steps\?$"
    ):
        load_config(PretrainConfig, path)
    path.write_text("config:\n  batch_size: 0\n")
    with pytest.raises(ConfigError, match=r"p.yaml: batch_size: must be positive, got 0$"):
        load_config(PretrainConfig, path, {"steps": 3})
    with pytest.raises(ConfigError, match=r"^overrides steps: expected an integer"):
        load_config(PretrainConfig, None, {"steps": "x"}, overrides_source="overrides")
    # a check across keys names both sources
    path.write_text("config:\n  spr_steps: 2\n")
    with pytest.raises(ConfigError, match=r"p.yaml with --set: n_step: must lie in 1..spr_steps"):
        load_config(PretrainConfig, path, {"n_step": 3})


def test_a_long_value_is_cut_in_the_message():
    with pytest.raises(ConfigError) as info:
        build_config(PretrainConfig, {"device": ["x" * 500] * 50})
    assert len(str(info.value)) < 120


def test_a_params_file_with_a_duplicate_key_or_an_alias_bomb_is_refused_fast(tmp_path):
    import time

    path = tmp_path / "p.yaml"
    path.write_text("name: p\nconfig:\n  steps: 10\n  lr: 1.0e-3\n  steps: 20\n")
    with pytest.raises(
        ConfigError, match=r"p.yaml: line 5: duplicate key 'steps' \(first at line 3\)"
    ):
        read_params(path)
    lines = ['  a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    path.write_text("name: p\nconfig:\n  augment:\n  " + "\n  ".join(lines) + "\n")
    started = time.perf_counter()
    with pytest.raises(ConfigError, match="p.yaml: aliases expand to more than"):
        load_config(PretrainConfig, path)
    assert time.perf_counter() - started < 1.0


def test_seed_is_bounded_to_what_the_generators_take():
    """A seed every generator accepts, [0, 2**63): one line naming seed, not numpy's overflow."""
    assert FinetuneConfig(seed=2**63 - 1).seed == 2**63 - 1
    for stage in (PretrainConfig, FinetuneConfig):
        with pytest.raises(ConfigError, match=r"^--set seed: must be below 2\*\*63, got 9999"):
            load_config(stage, None, parse_overrides(["seed=99999999999999999999999"]))
        with pytest.raises(ConfigError, match="^--set seed: must be >= 0"):
            load_config(stage, None, parse_overrides(["seed=-1"]))


def test_a_minatar_game_is_a_finetuning_game_with_its_own_protocol():
    from pathlib import Path

    cfg = FinetuneConfig(game="MinAtar/Breakout", encoder="minatar")
    assert (cfg.game, cfg.env_protocol) == ("minatar/breakout", "minatar")
    assert FinetuneConfig(game="minatar/asterix", encoder="minatar_l").encoder == "minatar_l"
    assert FinetuneConfig().env_protocol == "dopamine"  # Atari's default unchanged
    with pytest.raises(ConfigError, match="^hidden_size: must be positive"):
        FinetuneConfig(game="minatar/breakout", encoder="minatar", hidden_size=0)
    root = Path(__file__).resolve().parents[1]
    for path in sorted(root.glob("params/finetune/minatar_*.yaml")):
        ft = load_config(FinetuneConfig, path)
        assert (ft.encoder, ft.env_protocol, ft.hidden_size) == ("minatar", "minatar", 128)
    names = {p.stem for p in root.glob("params/pretrain/minatar_*.yaml")}
    assert {"minatar_sgi", "minatar_s"} <= names
    for name in names:
        assert load_config(PretrainConfig, root / f"params/pretrain/{name}.yaml").encoder == (
            "minatar"
        )


def test_minatar_frames_and_channels_have_an_upper_bound_named_in_the_message():
    from sgi_lab.config import FinetuneConfig

    base = {"game": "minatar/breakout", "encoder": "minatar"}
    with pytest.raises(ConfigError, match=r"channels: 1 to 64, or null, got 1000000"):
        build_config(FinetuneConfig, {**base, "channels": 1_000_000})
    with pytest.raises(ConfigError, match=r"frames: at most 16, got 100"):
        build_config(FinetuneConfig, {**base, "frames": 100})
    assert build_config(FinetuneConfig, {**base, "channels": 10, "frames": 4}).channels == 10
