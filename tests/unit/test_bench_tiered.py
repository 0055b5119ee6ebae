"""The pure parts of bench.tiered: its options and the table of medians and ratios."""

from __future__ import annotations

import math

import pytest

from bench.tiered import MIB, Hold, Round, disk_line, hold_line, parse_args, ratio, table


def test_options_and_their_defaults() -> None:
    options = parse_args([])
    assert (options.mib, options.segment_mib, options.rounds, options.hold) == (200, 8, 1, 0.0)
    options = parse_args(["--mib", "16", "--segment-mib", "1", "--rounds", "3", "--hold", "60"])
    assert (options.mib, options.segment_mib, options.rounds, options.hold) == (16, 1, 3, 60.0)
    with pytest.raises(SystemExit):
        parse_args(["--rounds", "0"])


def round_of(produce: tuple[float, float], lockgate: tuple[float, float], disk: int) -> Round:
    return Round(
        produce_local=produce[1], produce_tiered=produce[0],
        read_local={"lockgate": lockgate[1], "confluent-kafka": 50.0},
        read_tiered={"lockgate": lockgate[0], "confluent-kafka": 25.0},
        remote_share=0.9, disk_max=disk, copy_wait_s=1.0,
    )  # fmt: skip


def test_the_table_shows_medians_and_tiered_over_local() -> None:
    rounds = [round_of((40.0, 50.0), (10.0, 20.0), 3 * MIB),
              round_of((60.0, 50.0), (30.0, 20.0), 5 * MIB),
              round_of((50.0, 50.0), (20.0, 20.0), 4 * MIB)]  # fmt: skip
    lines = table(rounds).splitlines()
    assert "median of 3" in lines[0]
    produce, lockgate, confluent = (line.split() for line in lines[1:])
    assert produce[-3:] == ["50.0", "50.0", "1.00×"]
    assert lockgate[-3:] == ["20.0", "20.0", "1.00×"]
    assert confluent[-3:] == ["25.0", "50.0", "0.50×"]
    assert "at most 5.0 MiB" in disk_line(rounds, MIB, MIB)
    assert "90% of its offsets remote" in disk_line(rounds, MIB, MIB)


def test_ratio_of_nothing_is_not_a_number() -> None:
    assert ratio(1.0, 4.0) == 0.25
    assert math.isnan(ratio(1.0, 0.0))


def test_the_paced_run_line() -> None:
    hold = Hold(60.0, 300_000_000, 3 * MIB, 2 * MIB, MIB, MIB)
    assert hold_line(hold).startswith("paced run: 300 MB in 60 s; partition directory at most 3.0")
