"""The notebook API's stage_config: a mistyped override names the notebook's `overrides` (not the
CLI's `--set`) and suggests the nearest key."""

from __future__ import annotations

from pathlib import Path

import pytest

from sgi_lab import notebook
from sgi_lab.config import ConfigError, PretrainConfig

SMOKE = Path(__file__).resolve().parents[2] / "params" / "pretrain" / "smoke.yaml"


def test_a_mistyped_override_names_the_notebooks_overrides_and_the_nearest_key():
    with pytest.raises(
        ConfigError, match=r"^overrides: unknown key\(s\) \['stepz'\].*did you mean steps"
    ):
        notebook.stage_config(PretrainConfig, str(SMOKE), overrides={"stepz": 3})


def test_an_override_reaches_the_config():
    config, name = notebook.stage_config(PretrainConfig, str(SMOKE), overrides={"steps": 7})
    assert config.steps == 7 and name == "smoke"
