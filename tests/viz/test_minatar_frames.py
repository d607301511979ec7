"""MinAtar frames drawn as coloured channel grids: each channel in its own
colour, several channels on one cell mixed, an empty cell white, a grid line between cells."""

from __future__ import annotations

import numpy as np
import pytest
from plotly.colors import hex_to_rgb

from sgi_lab.viz.common import (
    CHANNEL_COLORS,
    channel_image,
    channel_names,
    frame_trace,
)


def test_channel_image_colours_cells_by_channel_hand_computed():
    frame = np.zeros((2, 2, 3), np.uint8)  # 2 channels of 2 x 3 cells
    frame[0, 0, 0] = 255  # channel 0 alone
    frame[1, 0, 0] = 255  # ... and channel 1 on the same cell: their mean colour
    frame[1, 1, 2] = 255  # channel 1 alone
    image = channel_image(frame, cell=4)
    assert image.shape == (8, 12, 3) and image.dtype == np.uint8
    c0, c1 = (np.array(hex_to_rgb(CHANNEL_COLORS[i])) for i in (0, 1))
    np.testing.assert_array_equal(image[1, 1], np.round((c0 + c1) / 2))  # inside cell (0, 0)
    np.testing.assert_array_equal(image[5, 9], c1)  # inside cell (1, 2)
    np.testing.assert_array_equal(image[5, 5], [255, 255, 255])  # empty cell (1, 1)
    np.testing.assert_array_equal(image[4, 5], [225, 225, 225])  # grid line above row 1
    np.testing.assert_array_equal(image[1, 4], [225, 225, 225])  # grid line left of column 1
    with pytest.raises(ValueError, match=r"needs a \(C, H, W\) frame, got shape \(84, 84\)"):
        channel_image(np.zeros((84, 84), np.uint8))


def test_frame_trace_keeps_grey_frames_as_heatmaps():
    assert frame_trace(np.zeros((84, 84), np.uint8)).type == "heatmap"
    trace = frame_trace(np.zeros((4, 10, 10), np.uint8))
    assert trace.type == "image" and np.asarray(trace.z).shape == (120, 120, 3)


def test_channel_names_from_minatar_padded_channels_empty():
    pytest.importorskip("minatar")
    assert channel_names("minatar/breakout", 4) == ("paddle", "ball", "trail", "brick")
    assert channel_names("minatar/breakout", 6)[4:] == ("empty", "empty")
    assert channel_names("Pong", 2) == ("channel 0", "channel 1")


def test_frame_strip_and_nearest_frames_of_a_minatar_store(tmp_path):
    pytest.importorskip("minatar")
    import pandas as pd

    from sgi_lab import viz
    from sgi_lab.data.collect import collect_random

    store = collect_random("minatar/breakout", 60, tmp_path / "mb", seed=0, progress=False)
    fig = viz.frame_strip(store, episode=0, count=3, stride=1)
    images = [t for t in fig.data if t.type == "image"]
    assert len(images) == 3
    expected = channel_image(store.gather_frames(np.array([int(store.episode_starts[0])]))[0])
    np.testing.assert_array_equal(np.asarray(images[0].z), expected)
    legend = [t.name for t in fig.data if t.type == "scatter"]
    assert legend == ["paddle", "ball", "trail", "brick"] and fig.layout.showlegend

    nearest = pd.DataFrame({"row": [1, 2], "episode": [0, 0], "step": [1, 2], "cosine": [0.9, 0.8]})
    strip = viz.nearest_frames_figure(store, nearest)
    assert [t.type for t in strip.data] == ["image", "image", *["scatter"] * 4]
