"""The forest plot: a row per contrast on the shared axis, filled where the test rejects, and
never written over a file that is not one of ours."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from sgi_lab.viz.forest import ForestRow, forest_svg, write_forest_svg

NS = "{http://www.w3.org/2000/svg}"


def test_each_row_has_its_interval_where_the_axis_puts_it(tmp_path):
    rows = [
        ForestRow("a vs none", 0.75, 0.5, 1.0, "above none", strong=True),
        ForestRow("b vs none", 0.25, 0.0, 0.5, "not separable"),
        ForestRow("c vs none", None, None, None, "running"),
    ]
    root = ET.fromstring(forest_svg(rows, "t"))
    circles = root.findall(f"{NS}circle")
    assert len(circles) == 2  # nothing drawn for the row still running
    # the axis runs from x=250 (0) to x=560 (1): 0.75 -> 482.5, 0.25 -> 327.5
    assert [float(c.get("cx")) for c in circles] == [482.5, 327.5]
    assert [c.get("fill") for c in circles] == ["#1f4e79", "white"]
    texts = [t.text for t in root.findall(f"{NS}text")]
    assert {"a vs none", "running", "above none"} <= set(texts)
    path = write_forest_svg(tmp_path / "f.svg", forest_svg(rows, "t"))
    write_forest_svg(path, forest_svg(rows[:1], "again"))  # ours: replaced
    assert "again" in path.read_text()
    mine = tmp_path / "mine.svg"
    mine.write_text("<svg/>")
    with pytest.raises(FileExistsError, match="not a forest plot of ours"):
        write_forest_svg(mine, forest_svg(rows, "t"))
    assert mine.read_text() == "<svg/>"
