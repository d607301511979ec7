"""The observation spec: shapes, the JSON a manifest keeps, and bad specs refused by name."""

from __future__ import annotations

import pytest

from sgi_lab.envs.spec import ATARI_SPEC, ObservationSpec, minatar_spec, spec_from_json


def test_atari_and_minatar_shapes():
    assert ATARI_SPEC == ObservationSpec(1, 84, 84, "uint8", 4)
    assert ATARI_SPEC.stacked_shape == (4, 84, 84) and ATARI_SPEC.input_channels == 4
    assert ATARI_SPEC.frame_shape == (84, 84)  # the frame row every Atari store holds
    seaquest = minatar_spec("seaquest")
    assert seaquest.frame_shape == (10, 10, 10) and seaquest.stacked_shape == (10, 10, 10)
    stacked = minatar_spec("breakout", frames=4)
    assert stacked.stacked_shape == (16, 10, 10) and stacked.input_channels == 16


def test_json_round_trip_and_refusals():
    for spec in (ATARI_SPEC, minatar_spec("freeway", 2)):
        assert spec_from_json(spec.to_json()) == spec
    with pytest.raises(ValueError, match="ObservationSpec.frames must be a positive integer"):
        ObservationSpec(4, 10, 10, "uint8", 0)
    with pytest.raises(ValueError, match="dtype must be 'uint8'"):
        ObservationSpec(4, 10, 10, "float32")
    with pytest.raises(ValueError, match="observation: needs keys channels, height, width"):
        spec_from_json({"channels": 4, "height": 10, "colour": True})
    with pytest.raises(ValueError, match="observation: must be an object"):
        spec_from_json([4, 10, 10])
