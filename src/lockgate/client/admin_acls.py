# client/admin_acls.py — ACLs as Kafka's Admin offers them: create bindings, describe and
# delete the bindings a filter matches (CreateAcls 30, DescribeAcls 29, DeleteAcls 31). The
# model (bindings, filters, the enums with Kafka's codes) is lockgate.security.acls'. Any
# broker answers: in a cluster every broker reads and writes the same ACLs.
#
# Functions take a Cluster; Admin (admin.py) exposes them as methods.
from __future__ import annotations

from collections.abc import Sequence

from lockgate.client.cluster import Cluster
from lockgate.client.errors import raise_for
from lockgate.protocol.api import ApiKey
from lockgate.security.acls import (
    AclBinding,
    AclBindingFilter,
)


async def create_acls(cluster: Cluster, bindings: Sequence[AclBinding]) -> None:
    """Raises the first creation's error (nothing is half-known: valid ones are stored)."""
    connection = await cluster.any_connection()
    response = await connection.request(
        ApiKey.CREATE_ACLS,
        {
            "creations": [
                {
                    "resource_type": b.pattern.resource_type,
                    "resource_name": b.pattern.name,
                    "resource_pattern_type": b.pattern.pattern_type,
                    "principal": b.entry.principal,
                    "host": b.entry.host,
                    "operation": b.entry.operation,
                    "permission_type": b.entry.permission,
                }
                for b in bindings
            ]
        },
    )
    for binding, result in zip(bindings, response.results, strict=True):
        raise_for(result.error_code, result.error_message, f"CreateAcls {binding}")


def _filter_body(wanted: AclBindingFilter) -> dict[str, object]:
    return {
        "resource_type_filter": wanted.resource_type,
        "resource_name_filter": wanted.name,
        "pattern_type_filter": wanted.pattern_type,
        "principal_filter": wanted.principal,
        "host_filter": wanted.host,
        "operation": wanted.operation,
        "permission_type": wanted.permission,
    }


async def describe_acls(cluster: Cluster, wanted: AclBindingFilter) -> list[AclBinding]:
    connection = await cluster.any_connection()
    response = await connection.request(ApiKey.DESCRIBE_ACLS, _filter_body(wanted))
    raise_for(response.error_code, response.error_message, "DescribeAcls")
    return [
        AclBinding.from_codes(
            resource.resource_type,
            resource.resource_name,
            resource.pattern_type,
            acl.principal,
            acl.host,
            acl.operation,
            acl.permission_type,
        )
        for resource in response.resources
        for acl in resource.acls
    ]


async def delete_acls(
    cluster: Cluster, filters: Sequence[AclBindingFilter]
) -> list[list[AclBinding]]:
    """The bindings each filter removed."""
    connection = await cluster.any_connection()
    response = await connection.request(
        ApiKey.DELETE_ACLS, {"filters": [_filter_body(f) for f in filters]}
    )
    removed = []
    for result in response.filter_results:
        raise_for(result.error_code, result.error_message, "DeleteAcls")
        removed.append(
            [
                AclBinding.from_codes(
                    m.resource_type,
                    m.resource_name,
                    m.pattern_type,
                    m.principal,
                    m.host,
                    m.operation,
                    m.permission_type,
                )
                for m in result.matching_acls
            ]
        )
    return removed
