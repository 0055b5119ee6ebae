# tools/topics.py — `lockgate topics create|list|describe|delete|alter`, a kafka-topics.sh for
# any Kafka-compatible broker. Output follows kafka-topics.sh where it has an equivalent.
#
# `describe --remote-config FILE` (tiered storage) adds to each partition line its local size
# (DescribeLogDirs of its leader) and what the object store holds of it (its manifests, read
# by tools/remote.py); without the option the output is kafka-topics.sh's.
from __future__ import annotations

import argparse

from lockgate.client.admin import Admin, ConfigSource, TopicDescription
from lockgate.client.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError
from lockgate.storage.object_store import ObjectStore
from lockgate.tools.common import (
    EXIT_OK,
    ToolError,
    connection_options,
    parse_assignments,
    positive_int,
    tool,
)
from lockgate.tools.remote import (
    RemotePartition,
    open_store,
    remote_options,
    remote_partitions,
    remote_tool,
)

PartitionKey = tuple[str, int]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser("topics", help="create, list, describe, delete and alter topics")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    common = connection_options()

    create = actions.add_parser("create", parents=[common], help="create a topic")
    create.add_argument("--topic", required=True)
    create.add_argument(
        "--partitions", type=positive_int, help="number of partitions (default: the broker's)"
    )
    create.add_argument(
        "--replication-factor", type=positive_int, help="replicas per partition (broker default)"
    )
    create.add_argument(
        "--config", action="append", default=[], metavar="NAME=VALUE", help="a topic config"
    )
    create.add_argument(
        "--if-not-exists", action="store_true", help="succeed when the topic already exists"
    )
    create.set_defaults(func=tool(_create))

    listing = actions.add_parser("list", parents=[common], help="list topic names")
    listing.add_argument(
        "--include-internal", action="store_true", help="also list __consumer_offsets & co."
    )
    listing.set_defaults(func=tool(_list))

    describe = actions.add_parser(
        "describe",
        parents=[common, remote_options()],
        help="partitions, leaders, replicas and configs",
    )
    describe.add_argument("--topic", action="append", help="a topic (default: all)")
    describe.set_defaults(func=remote_tool(_describe))

    delete = actions.add_parser("delete", parents=[common], help="delete a topic")
    delete.add_argument("--topic", action="append", required=True)
    delete.add_argument(
        "--if-exists", action="store_true", help="succeed when the topic does not exist"
    )
    delete.set_defaults(func=tool(_delete))

    alter = actions.add_parser(
        "alter", parents=[common], help="change topic configs or add partitions"
    )
    alter.add_argument("--topic", required=True)
    alter.add_argument(
        "--add-config", action="append", default=[], metavar="NAME=VALUE", help="set a config"
    )
    alter.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="NAME",
        help="remove a config override (back to the broker's default)",
    )
    alter.add_argument(
        "--partitions", type=positive_int, help="raise the partition count to this total"
    )
    alter.set_defaults(func=tool(_alter))


def _admin(args: argparse.Namespace) -> Admin:
    return Admin(
        args.bootstrap_server,
        client_id=args.client_id,
        request_timeout_ms=args.request_timeout_ms,
    )


async def _create(args: argparse.Namespace) -> int:
    configs = parse_assignments(args.config, "--config")
    async with _admin(args) as admin:
        try:
            await admin.create_topic(
                args.topic,
                args.partitions if args.partitions is not None else -1,
                args.replication_factor if args.replication_factor is not None else -1,
                configs,
            )
        except TopicAlreadyExistsError:
            if not args.if_not_exists:
                raise
            return EXIT_OK
    print(f"Created topic {args.topic}.")
    return EXIT_OK


async def _list(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        names = await admin.list_topics(include_internal=args.include_internal)
    for name in names:
        print(name)
    return EXIT_OK


async def _describe(args: argparse.Namespace) -> int:
    return await describe(args, open_store(args))


async def describe(args: argparse.Namespace, store: ObjectStore | None) -> int:
    """The command, with the object store of --remote-config (None: without it)."""
    async with _admin(args) as admin:
        descriptions = await admin.describe_topics(args.topic)
        sizes = None if store is None else await _sizes(admin, store, descriptions)
        for description in descriptions:
            configs = await admin.describe_configs(description.name)
            overrides = {
                name: entry.value
                for name, entry in sorted(configs.items())
                if entry.source is ConfigSource.DYNAMIC_TOPIC_CONFIG and not entry.sensitive
            }
            _print_description(description, overrides, sizes)
    return EXIT_OK


Sizes = tuple[dict[PartitionKey, int], dict[PartitionKey, RemotePartition]]


async def _sizes(admin: Admin, store: ObjectStore, descriptions: list[TopicDescription]) -> Sizes:
    """Each partition's bytes on its leader's disk (DescribeLogDirs of the leader, every log
    directory of it but a future one) and in the object store (its manifests)."""
    leaders = {p.leader_id for d in descriptions for p in d.partitions if p.leader_id >= 0}
    wanted = {d.name: [p.partition for p in d.partitions] for d in descriptions}
    local: dict[PartitionKey, int] = {}
    if leaders:
        answer = await admin.describe_log_dirs(sorted(leaders), wanted)
        led = {(d.name, p.partition): p.leader_id for d in descriptions for p in d.partitions}
        for broker, directories in answer.items():
            for directory in directories:
                for key, replica in directory.replicas.items():
                    if led.get(key) == broker and not replica.is_future:
                        local[key] = local.get(key, 0) + replica.size
    ids = {d.name: d.topic_id for d in descriptions if d.topic_id is not None}
    return local, await remote_partitions(store, ids)


def _print_description(
    description: TopicDescription,
    overrides: dict[str, str | None],
    sizes: Sizes | None = None,
) -> None:
    config_text = ",".join(f"{name}={value}" for name, value in overrides.items())
    print(
        f"Topic: {description.name}\tTopicId: {description.topic_id or '-'}\t"
        f"PartitionCount: {len(description.partitions)}\t"
        f"ReplicationFactor: {description.replication_factor}\tConfigs: {config_text}"
    )
    for partition in description.partitions:
        offline = (
            f"\tOffline: {_ids(partition.offline_replicas)}" if partition.offline_replicas else ""
        )
        leader = "none" if partition.leader_id < 0 else str(partition.leader_id)
        epoch = "-" if partition.leader_epoch < 0 else str(partition.leader_epoch)
        stored = ""
        if sizes is not None:
            key = (description.name, partition.partition)
            local, remote = sizes[0].get(key), sizes[1].get(key)
            stored = (
                f"\tLocalSize: {'-' if local is None else local}"
                f"\tRemoteSize: {0 if remote is None else remote.size}"
                f"\tRemoteSegments: {0 if remote is None else len(remote.segments)}"
            )
        print(
            f"\tTopic: {description.name}\tPartition: {partition.partition}\tLeader: {leader}\t"
            f"LeaderEpoch: {epoch}\tReplicas: {_ids(partition.replicas)}\t"
            f"Isr: {_ids(partition.isr)}{offline}{stored}"
        )


def _ids(ids: tuple[int, ...]) -> str:
    return ",".join(str(i) for i in ids)


async def _delete(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        for name in args.topic:
            try:
                await admin.delete_topics([name])
            except UnknownTopicOrPartitionError:
                if not args.if_exists:
                    raise
                continue
            print(f"Deleted topic {name}.")
    return EXIT_OK


async def _alter(args: argparse.Namespace) -> int:
    set_configs = parse_assignments(args.add_config, "--add-config")
    delete_configs = [name.strip() for name in args.delete_config]
    if not set_configs and not delete_configs and args.partitions is None:
        raise ToolError("nothing to alter: give --add-config, --delete-config or --partitions")
    async with _admin(args) as admin:
        if set_configs or delete_configs:
            await admin.alter_configs(
                args.topic, set_configs=set_configs, delete_configs=delete_configs
            )
            print(f"Updated configs of topic {args.topic}.")
        if args.partitions is not None:
            await admin.create_partitions({args.topic: args.partitions})
            print(f"Topic {args.topic} now has {args.partitions} partitions.")
    return EXIT_OK
