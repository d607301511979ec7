"""`sgi_lab.config_values`, the configs' stage-free machinery: every name it holds is still
importable from `sgi_lab.config` (where the whole project imports it from), and it knows no
stage (nothing of the configs or the games imported)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from sgi_lab import config, config_values

MOVED = (
    "ConfigError",
    "RangeCheck",
    "F",
    "stage_default",
    "TOP_LEVEL_KEYS",
    "check_value",
    "check_known_keys",
    "check_key_value",
    "check_range",
    "load_yaml_mapping",
    "read_params",
    "parse_value",
    "parse_overrides",
)


@pytest.mark.parametrize("name", MOVED)
def test_each_name_is_the_same_object_from_either_module(name):
    assert getattr(config, name) is getattr(config_values, name)


def test_it_imports_no_stage_and_no_game():
    tree = ast.parse(Path(config_values.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not {m for m in imported if m and m.startswith(("sgi_lab.config", "sgi_lab.envs"))}
    assert {m for m in imported if m and m.startswith("sgi_lab")} <= {
        "sgi_lab.base.errors",
        "sgi_lab.base.paths",
        "sgi_lab.base.yaml_io",
    }


def test_a_field_declared_here_checks_its_range_in_a_stage_config():
    # F's rule travels with the field: PretrainConfig refuses a negative atc_weight by name
    with pytest.raises(config.ConfigError, match="atc_weight: must be >= 0"):
        config.build_config(config.PretrainConfig, {"atc_weight": -1.0})
    assert config_values.parse_overrides(["lr=3.0e-4", "augment=false"]) == {
        "lr": 3.0e-4,
        "augment": False,
    }
