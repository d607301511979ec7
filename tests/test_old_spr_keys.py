"""``spr_coefficient`` is what multiplies SPR's loss (-sum_k cos) in both stages; files written
before it (``spr_weight``, read in a convention: ``spr_weight_convention``) still load, to the
coefficient the old code computed, bit for bit, with a one-line FutureWarning: params files,
``--set`` overrides, experiment files, and, silently, what runs and archives recorded."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import yaml

from sgi_lab.base.files import read_mapping
from sgi_lab.config import (
    ConfigError,
    FinetuneConfig,
    PretrainConfig,
    build_config,
    load_config,
    to_dict,
)
from sgi_lab.runs.folder import config_changes, recorded_config
from sgi_lab.train.sgi_loss import finetuning_settings, loss_weights_note, pretraining_settings

ROOT = Path(__file__).resolve().parents[1]


def old_coefficient(stage: str, values: dict) -> float:
    """What the code before spr_coefficient multiplied -sum_k cos by (its `spr_coefficient`)."""
    w, k = values["spr_weight"], values.get("spr_steps", 5)
    convention = "reference" if stage == "finetune" else values.get("spr_weight_convention", "text")
    return 2.0 * w / max(1, k) if convention == "reference" else w


def write_params(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump({"name": path.stem, "config": config}))
    return path


def loaded(cls, params, overrides=None):
    """The config, and the FutureWarnings loading it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = load_config(cls, params, overrides)
    return config, [w for w in caught if issubclass(w.category, FutureWarning)]


@pytest.mark.parametrize(
    ("cls", "old", "new"),
    [
        # the paper params files before and after: the authors' weight 1 on mean_k(2 - 2 cos)
        (PretrainConfig, {"spr_weight": 1.0, "spr_weight_convention": "reference"}, 0.4),
        (PretrainConfig, {"spr_weight": 2.0}, 2.0),  # the text's convention, the default
        (PretrainConfig, {"spr_weight": 2.0, "spr_weight_convention": "text"}, 2.0),
        (PretrainConfig, {"spr_weight": 0.0, "spr_weight_convention": "reference"}, 0.0),
        # finetuning read spr_weight as SPR's code does, always: 5 on mean_k(2 - 2 cos)
        (FinetuneConfig, {"spr_weight": 5.0}, 2.0),
        (FinetuneConfig, {"spr_weight": 5.0, "spr_steps": 2}, 5.0),  # 2 x 5 / 2
    ],
)
def test_an_old_params_file_and_its_new_form_give_the_same_coefficient(tmp_path, cls, old, new):
    stage = "finetune" if cls is FinetuneConfig else "pretrain"
    old_config, caught = loaded(cls, write_params(tmp_path / "old.yaml", old))
    rest = {k: v for k, v in old.items() if k not in ("spr_weight", "spr_weight_convention")}
    new_file = write_params(tmp_path / "new.yaml", {**rest, "spr_coefficient": new})
    new_config, none = loaded(cls, new_file)
    # bit-equal: the old code's arithmetic, and the value the new file writes
    assert old_config.spr_coefficient == new_config.spr_coefficient == new
    assert old_config.spr_coefficient == old_coefficient(stage, old)
    assert old_config == new_config and not none
    settings = (finetuning_settings if stage == "finetune" else pretraining_settings)(old_config)
    assert settings.weight("spr") == new
    (warning,) = caught
    message = str(warning.message)
    assert "\n" not in message and message.startswith(f"{tmp_path / 'old.yaml'}: spr_weight: ")
    assert f"is spr_coefficient: {new:g}, the weight on -sum_k cos; write that" in message


def test_old_keys_mix_with_new_ones_across_a_file_and_its_overrides(tmp_path):
    old = write_params(
        tmp_path / "old.yaml", {"spr_weight": 1.0, "spr_weight_convention": "reference"}
    )
    new = write_params(tmp_path / "new.yaml", {"spr_coefficient": 0.4})
    # an override wins whichever key it names; a convention overridden reads the file's weight
    assert loaded(PretrainConfig, old, {"spr_coefficient": 0.0})[0].spr_coefficient == 0.0
    assert loaded(PretrainConfig, new, {"spr_weight": 0.0})[0].spr_coefficient == 0.0
    text = loaded(PretrainConfig, old, {"spr_weight_convention": "text"})[0]
    assert text.spr_coefficient == 1.0
    assert loaded(PretrainConfig, old, {"spr_steps": 2})[0].spr_coefficient == 1.0  # 2 x 1 / 2
    # the old key in --set, named as it came: "--set spr_weight: ..."
    _, (warning,) = loaded(PretrainConfig, new, {"spr_weight": 2.0})
    assert str(warning.message).startswith("--set spr_weight: 2 (text) is spr_coefficient: 2")
    # both keys in one place, or a convention with no weight to read: one line naming them
    both = write_params(tmp_path / "both.yaml", {"spr_weight": 1.0, "spr_coefficient": 0.4})
    with pytest.raises(ConfigError, match=r"both.yaml: spr_weight: replaced by spr_coefficient"):
        load_config(PretrainConfig, both)
    with pytest.raises(ConfigError, match=r"--set: spr_weight_convention: replaced by spr_coeff"):
        load_config(PretrainConfig, new, {"spr_weight_convention": "reference"})
    with pytest.raises(ConfigError, match=r"spr_weight_convention: 'paper' is not one of"):
        build_config(PretrainConfig, {"spr_weight": 1.0, "spr_weight_convention": "paper"})
    with pytest.raises(ConfigError, match=r"old.yaml: spr_weight: expected a number"):
        load_config(PretrainConfig, write_params(old, {"spr_weight": "high"}))


def test_every_archived_run_config_loads_with_the_coefficient_it_ran_with():
    """The archived studies' run folders under results/ (config.yaml) and resolved params files:
    read as records (silently), each gives the old code's coefficient and builds its stage's
    config."""
    paths = sorted((ROOT / "results").rglob("config.yaml"))
    paths += sorted((ROOT / "results").glob("*/params/*.yaml"))
    seen = {"pretrain": set(), "finetune": set()}
    for path in paths:
        payload = read_mapping(path)
        values = payload.get("config", payload) if path.parent.name == "params" else payload
        if "spr_weight" not in values:
            continue
        stage = "finetune" if "game" in values else "pretrain"
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)  # a record is read silently
            record = recorded_config(values)
        assert record["spr_coefficient"] == old_coefficient(stage, values), path
        cls = FinetuneConfig if stage == "finetune" else PretrainConfig
        known = {k: v for k, v in record.items() if k in cls.__dataclass_fields__}
        assert build_config(cls, known).spr_coefficient == record["spr_coefficient"]
        seen[stage].add(record["spr_coefficient"])
    # the objective studies' S, G, I and SGI pretraining (0.4, 0.0), every finetuning (2.0)
    assert {0.0, 0.4} <= seen["pretrain"] and seen["finetune"] == {2.0}, seen


def test_a_resumed_or_reused_run_compares_what_the_coefficients_are():
    old = {"steps": 10, "spr_weight": 1.0, "spr_weight_convention": "reference"}
    assert config_changes(old, {"steps": 10, "spr_coefficient": 0.4}) == {}
    assert config_changes(old, {"steps": 10, "spr_coefficient": 2.0}) == {
        "spr_coefficient": (0.4, 2.0)
    }
    finetuned = to_dict(FinetuneConfig())
    before = {k: v for k, v in finetuned.items() if k != "spr_coefficient"}
    assert config_changes({**before, "spr_weight": 5.0}, finetuned) == {}


def test_an_experiment_file_may_set_the_old_key(tmp_path):
    from sgi_lab.experiments.spec import load_experiment

    def pretraining(overrides: dict):
        sgi = {"name": "g_i", "params": str(ROOT / "params/pretrain/minatar_sgi.yaml")}
        experiment = {
            "name": "e",
            "games": ["minatar/breakout"],
            "seeds": [0],
            "data": {"random": {"source": "random", "steps": 100}},
            "pretrain": [{**sgi, "data": "random", "set": overrides}],
            "finetune": [
                {
                    "name": "f",
                    "params": str(ROOT / "params/finetune/minatar_naive.yaml"),
                    "pretrain": ["g_i"],
                }
            ],
        }
        (tmp_path / "e.yaml").write_text(yaml.safe_dump(experiment))
        spec = load_experiment(tmp_path / "e.yaml").pretrain[0]
        return loaded(PretrainConfig, spec.params, spec.set)[0].spr_coefficient

    assert pretraining({}) == 0.4
    assert pretraining({"spr_weight": 0.0}) == pretraining({"spr_coefficient": 0.0}) == 0.0


def test_an_archived_task_keeps_its_fingerprint_across_the_rename():
    from sgi_lab.experiments.archive import _as_archived

    new = {
        "name": "s",
        "config": to_dict(load_config(PretrainConfig, ROOT / "params/pretrain/s.yaml")),
    }
    old_config = {k: v for k, v in new["config"].items() if k != "spr_coefficient"}
    old = {**new, "config": {**old_config, "spr_weight": 1.0, "spr_weight_convention": "reference"}}
    assert yaml.safe_dump(_as_archived(new, old)) == yaml.safe_dump(old)
    # another coefficient than the archive's is another task: it runs again
    other = {**new, "config": {**new["config"], "spr_coefficient": 2.0}}
    assert _as_archived(other, old) != old


def test_the_effective_coefficient_is_in_the_run_log_line():
    assert loss_weights_note(finetuning_settings(FinetuneConfig())) == (
        "SGI loss weights: 2 x spr (-sum_k cos, the config's spr_coefficient)"
    )
    config = load_config(PretrainConfig, ROOT / "params/pretrain/sgi_m.yaml")
    assert loss_weights_note(pretraining_settings(config)) == (
        "SGI loss weights: 0.4 x spr (-sum_k cos, the config's spr_coefficient), "
        "1 x goal_rl, 1 x inverse"
    )
    assert loss_weights_note(finetuning_settings(FinetuneConfig(ssl="none"))) == (
        "SGI loss weights: none (no SGI loss is learned)"
    )
