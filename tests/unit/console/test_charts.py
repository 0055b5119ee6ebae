"""Server-side SVG charts: scaled into the frame, labels escaped, no inline style."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree

from lockgate.console.charts import Series, line_chart, nice_ceiling


def test_nice_ceiling() -> None:
    assert [nice_ceiling(v) for v in (0, 0.7, 1, 3, 7, 26, 101)] == [1, 1, 1, 5, 10, 50, 200]


def test_a_chart_is_well_formed_svg_within_its_frame() -> None:
    svg = line_chart(
        [Series("msg/s", [(0, 0), (5, 40), (10, 80)]), Series("<b>&", [(0, 1), (10, 2)])],
        title="Throughput <live>",
        width=400,
        height=100,
    )
    root = ElementTree.fromstring(str(svg))
    assert root.tag.endswith("svg") and "style" not in str(svg)
    lines = [e for e in root.iter() if e.tag.endswith("polyline")]
    assert len(lines) == 2
    for line in lines:
        for pair in line.attrib["points"].split():
            x, y = (float(v) for v in pair.split(","))
            assert 56 <= x <= 388 and 24 <= y <= 72
    text = "".join(root.itertext())
    assert "Throughput <live>" in text and "<b>&" in text and "-10s" in text
    assert re.search(r">100<", str(svg))  # the axis' rounded maximum


def test_an_empty_chart_says_it_is_collecting() -> None:
    assert "collecting samples" in str(line_chart([Series("x", [])], title="t"))
