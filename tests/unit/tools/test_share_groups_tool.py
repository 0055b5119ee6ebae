"""`lockgate share-groups`: the option checks refuse what Kafka 4.4's kafka-share-groups.sh
refuses, with its words, and the tables are laid out as it prints them (the expected texts
below are what Kafka's tool printed against Apache Kafka 4.4 for the same data)."""

from __future__ import annotations

import pytest

from lockgate.cli import build_parser, main
from lockgate.client.admin_share_groups import (
    ShareGroupDescription,
    ShareGroupListing,
    ShareMemberDescription,
    SharePartitionOffset,
)
from lockgate.client.cluster import TopicPartition
from lockgate.client.errors import ErrorCode, error_for
from lockgate.tools.common import ToolError
from lockgate.tools.share_groups import (
    assignment_text,
    check_options,
    offset_rows,
    parse_states,
    render_deleted_groups,
    render_deleted_offsets,
    render_export,
    render_listing,
    render_members,
    render_offsets,
    render_reset,
    render_state,
)


def refusal(*argv: str) -> str | None:
    args = build_parser().parse_args(["share-groups", *argv])
    try:
        check_options(args)
    except ToolError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            (),
            "Command must include exactly one action: --list, --describe, --delete, "
            "--reset-offsets, --delete-offsets.",
        ),
        (("--describe",), "Option [describe] takes one of these options: [all-groups], [group]"),
        (
            ("--list", "--describe"),
            "Option [describe] takes one of these options: [all-groups], [group]",
        ),
        (
            ("--describe", "--group", "g", "--members", "--state"),
            "Option [describe] takes at most one of these options: [members], [offsets], [state]",
        ),
        (
            ("--describe", "--group", "g", "--state", "Stable"),
            "Option [describe] does not take a value for [state]",
        ),
        (("--delete",), "Option [delete] takes the options [group] or [all-groups]."),
        (
            ("--delete", "--group", "g", "--all-groups"),
            "Option [delete] takes either [group] or [all-groups], not both.",
        ),
        (
            ("--delete", "--group", "g", "--topic", "t"),
            "Option [delete] does not take the options [topic] or [all-topics].",
        ),
        (
            ("--describe", "--group", "g", "--all-groups"),
            'Option "[group]" can\'t be used with option "[all-groups]"',
        ),
        (("--list", "--group", "g"), 'Option "[group]" can\'t be used with option "[list]"'),
        (
            ("--describe", "--group", "g", "--topic", "t"),
            'Option "[topic]" can\'t be used with option "[describe]"',
        ),
        (
            ("--list", "--members"),
            "Option(s) [members] are unavailable given other options on the command line",
        ),
        (
            ("--list", "--verbose"),
            "Option(s) [verbose] are unavailable given other options on the command line",
        ),
        (
            ("--delete-offsets", "--group", "g"),
            "Option [delete-offsets] takes the following options: [group], [topic]",
        ),
        (
            ("--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest"),
            "Option [reset-offsets] takes the option: [execute] or [dry-run]",
        ),
        (
            (
                "--reset-offsets",
                "--group",
                "g",
                "--topic",
                "t",
                "--to-earliest",
                "--execute",
                "--dry-run",
            ),
            "Option [reset-offsets] only accepts one of [execute] and [dry-run]",
        ),
        (
            ("--reset-offsets", "--all-groups", "--topic", "t", "--to-earliest", "--dry-run"),
            "Option [reset-offsets] takes the option: [group]",
        ),
        (
            ("--reset-offsets", "--group", "g", "--to-earliest", "--execute"),
            "Option [reset-offsets] takes one of these options: [all-topics], [from-file], [topic]",
        ),
        (
            ("--reset-offsets", "--group", "g", "--topic", "t", "--execute"),
            "Option [reset-offsets] takes one of these options: [by-duration], [from-file], "
            "[to-current], [to-datetime], [to-earliest], [to-latest], [to-offset]",
        ),
        (
            (
                "--reset-offsets",
                "--group",
                "g",
                "--topic",
                "t",
                "--to-earliest",
                "--to-latest",
                "--dry-run",
            ),
            'Option "[to-earliest]" can\'t be used with option "[to-latest]"',
        ),
        (
            (
                "--reset-offsets",
                "--group",
                "g",
                "--topic",
                "t",
                "--to-offset",
                "3",
                "--to-current",
                "--dry-run",
            ),
            'Option "[to-offset]" can\'t be used with option "[to-current]"',
        ),
        (
            (
                "--reset-offsets",
                "--group",
                "g",
                "--topic",
                "t",
                "--all-topics",
                "--to-earliest",
                "--dry-run",
            ),
            'Option "[topic]" can\'t be used with option "[all-topics]"',
        ),
        (
            (
                "--reset-offsets",
                "--group",
                "g",
                "--group",
                "h",
                "--topic",
                "t",
                "--to-earliest",
                "--dry-run",
            ),
            "Found multiple arguments for option group, but you asked for only one",
        ),
    ],
)
def test_refused_combinations_get_kafkas_message(argv: tuple[str, ...], message: str) -> None:
    assert refusal(*argv) == message


@pytest.mark.parametrize(
    "argv",
    [
        ("--list",),
        ("--list", "--state"),
        ("--list", "--state", "stable,empty"),
        ("--describe", "--group", "g"),
        ("--describe", "--all-groups", "--members", "--verbose"),
        ("--describe", "--group", "g", "--group", "h", "--state"),
        ("--describe", "--group", "g", "--offsets", "--verbose"),
        ("--delete", "--group", "g", "--group", "h"),
        ("--delete", "--all-groups"),
        ("--delete-offsets", "--group", "g", "--topic", "t", "--topic", "u"),
        ("--reset-offsets", "--group", "g", "--topic", "t:0,2", "--to-offset", "-1", "--dry-run"),
        ("--reset-offsets", "--group", "g", "--all-topics", "--to-latest", "--execute"),
        ("--reset-offsets", "--group", "g", "--from-file", "x.csv", "--dry-run", "--export"),
        ("--reset-offsets", "--group", "g", "--topic", "t", "--by-duration", "PT1H", "--execute"),
    ],
)
def test_accepted_combinations(argv: tuple[str, ...]) -> None:
    assert refusal(*argv) is None


def test_bad_options_exit_2_before_any_broker_is_asked(capsys: pytest.CaptureFixture[str]) -> None:
    # port 9 (discard): nothing listens there, and nothing is asked
    assert main(["share-groups", "--bootstrap-server", "127.0.0.1:9", "--describe"]) == 2
    assert capsys.readouterr().err == (
        "lockgate share-groups: error: Option [describe] takes one of these options: "
        "[all-groups], [group]\n"
    )
    assert (
        main(["share-groups", "--bootstrap-server", "127.0.0.1:9", "--list", "--state", "x"]) == 2
    )


def test_states_are_read_without_case_and_unknown_ones_refused() -> None:
    assert parse_states("stable, EMPTY,Stable") == ["Stable", "Empty"]
    assert parse_states("dead") == ["Dead"]
    with pytest.raises(ToolError) as refused:
        parse_states("bogus")
    assert str(refused.value) == "Invalid state list 'bogus'. Valid states are: Stable, Dead, Empty"


def test_list_with_state() -> None:
    listings = [ShareGroupListing("g1", "Empty", 1), ShareGroupListing("g2", "Stable", 1)]
    assert render_listing(listings) == (
        "GROUP           STATE\ng1              Empty\ng2              Stable\n"
    )
    assert render_listing([]) == "GROUP           STATE\n"
    wide = render_listing([ShareGroupListing("a-rather-long-group-name", "", 1)])
    assert wide.splitlines()[1] == "a-rather-long-group-name Unknown"


def test_offsets_table_as_kafka_prints_it() -> None:
    offsets = {
        TopicPartition("t1", 2): SharePartitionOffset(0, 0, 6),
        TopicPartition("t1", 0): SharePartitionOffset(0, 0, 0),
        TopicPartition("t1", 1): SharePartitionOffset(None, None, None),
    }
    rows = offset_rows(offsets)
    assert render_offsets("g1", rows, verbose=False) == (
        "\nGROUP           TOPIC           PARTITION  START-OFFSET  LAG"
        "\ng1              t1              0          0             0"
        "\ng1              t1              1          -             -"
        "\ng1              t1              2          0             6\n"
    )
    assert render_offsets("g1", rows, verbose=True) == (
        "\nGROUP           TOPIC           PARTITION  LEADER-EPOCH  START-OFFSET  LAG"
        "\ng1              t1              0          0             0             0"
        "\ng1              t1              1          -             -             -"
        "\ng1              t1              2          0             0             6\n"
    )
    assert render_offsets("g1", [], verbose=False) == (
        "\nShare group 'g1' has no offset information.\n"
    )


def description(*members: ShareMemberDescription, state: str = "Stable") -> ShareGroupDescription:
    return ShareGroupDescription("g7", state, 3, 3, "simple", members, 1)


def test_state_table_as_kafka_prints_it() -> None:
    coordinator = "127.0.0.1:39092  (1)"
    assert render_state(description(state="Empty"), coordinator, verbose=False) == (
        "\nGROUP           COORDINATOR (ID)          STATE           #MEMBERS"
        "\ng7              127.0.0.1:39092  (1)      Empty           0\n"
    )
    assert render_state(description(state="Empty"), coordinator, verbose=True) == (
        "\nGROUP           COORDINATOR (ID)          STATE           GROUP-EPOCH  "
        "ASSIGNMENT-EPOCH  #MEMBERS"
        "\ng7              127.0.0.1:39092  (1)      Empty           3            3"
        "                 0\n"
    )


def test_members_table_as_kafka_prints_it() -> None:
    assigned = (TopicPartition("t1", 0), TopicPartition("t1", 1), TopicPartition("t1", 2))
    member = ShareMemberDescription(
        "member-one", None, 3, "hb-client", "/127.0.0.1", ("t1",), assigned
    )
    assert render_members(description(member), verbose=False) == (
        "\nGROUP           CONSUMER-ID     HOST            CLIENT-ID       #PARTITIONS  ASSIGNMENT"
        "\ng7              member-one      /127.0.0.1      hb-client       3            t1:0,1,2\n"
    )
    assert render_members(description(member), verbose=True) == (
        "\nGROUP           CONSUMER-ID     HOST            CLIENT-ID       #PARTITIONS  "
        "MEMBER-EPOCH  ASSIGNMENT"
        "\ng7              member-one      /127.0.0.1      hb-client       3            "
        "3             t1:0,1,2\n"
    )
    assert render_members(description(state="Empty"), verbose=False) == ""


def test_assignment_text_orders_topics_and_partitions() -> None:
    tps = [TopicPartition("b", 3), TopicPartition("a", 1), TopicPartition("b", 0)]
    assert assignment_text(tps) == "a:1;b:0,3"
    assert assignment_text([]) == ""


def test_reset_table() -> None:
    plan = {TopicPartition("t1", 2): 6, TopicPartition("t1", 0): 0}
    assert render_reset("g1", plan) == (
        "\nGROUP           TOPIC           PARTITION  NEW-OFFSET"
        "\ng1              t1              0          0"
        "\ng1              t1              2          6\n"
    )
    assert render_reset("g1", {}) == "\n"


def test_export_is_kafkas_csv() -> None:
    plan = {TopicPartition("t1", 2): 6, TopicPartition("t1", 0): 0}
    assert render_export("g1", plan) == "t1,0,0\nt1,2,6\n\n"
    assert render_export("g1", {}) == "\n"


def test_deleted_offsets_report_each_topic_with_the_brokers_words() -> None:
    unknown = error_for(
        ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition."
    )
    assert render_deleted_offsets({"t1": None, "nosuch": unknown}) == (
        "\nTOPIC           STATUS"
        "\nnosuch          Error: This server does not host this topic-partition."
        "\nt1              Successful\n"
    )


def test_deleted_groups_report() -> None:
    assert render_deleted_groups({"g2": None}) == (
        "Deletion of requested share groups ('g2') was successful.\n"
    )
    refused = error_for(ErrorCode.group_id_not_found, "Group 'nope' is not a share group.")
    assert render_deleted_groups({"nope": refused, "g2": None}) == (
        "\nError: Deletion of some share groups failed:"
        "\n* Group 'nope' could not be deleted due to: GROUP_ID_NOT_FOUND: Group 'nope' is not "
        "a share group."
        "\n\nThese share groups were deleted successfully: 'g2'\n"
    )
