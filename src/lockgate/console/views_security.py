# console/views_security.py — the security page (security.py gathers its data): ACL bindings
# filtered by principal and resource, SCRAM users (mechanisms and iterations only) and client
# quotas; creating and deleting one ACL binding behind auth.mutation.
from __future__ import annotations

from collections.abc import Sequence

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from lockgate.console import security
from lockgate.console.auth import mutation
from lockgate.console.errors import BadInput
from lockgate.console.web import clients, render
from lockgate.security.acls import AclBinding, Operation, PatternType, Permission, ResourceType

BINDING_FIELDS = (
    "resource_type",
    "resource_name",
    "pattern_type",
    "principal",
    "host",
    "operation",
    "permission",
)


def _choices(kind: type[ResourceType | PatternType | Operation | Permission]) -> list[str]:
    return [m.name for m in kind if m.name not in ("UNKNOWN", "ANY", "MATCH")]


async def security_page(request: Request) -> Response:
    query = request.query_params
    admin = await clients(request).admin()
    acls = await security.list_acls(
        admin,
        principal_filter=query.get("principal", ""),
        resource_filter=query.get("resource", ""),
    )
    return render(
        request,
        "security/index.html",
        {
            "acls": acls,
            "users": await security.list_scram_users(admin),
            "quotas": await security.list_quotas(admin),
            "resource_types": _choices(ResourceType),
            "pattern_types": _choices(PatternType),
            "operations": _choices(Operation),
            "permissions": _choices(Permission),
            "title": "Security",
        },
    )


def _binding(form: FormData) -> AclBinding:
    values = [str(form.get(name, "")) for name in BINDING_FIELDS]
    try:
        return security.parse_binding(*values)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


async def _binding_preview(request: Request, form: FormData) -> Sequence[tuple[str, str]]:
    binding = _binding(form)
    return [
        ("resource", f"{binding.pattern.resource_type.name}:{binding.pattern.name}"),
        ("pattern", binding.pattern.pattern_type.name),
        ("principal", binding.entry.principal),
        ("host", binding.entry.host),
        ("operation", binding.entry.operation.name),
        ("permission", binding.entry.permission.name),
    ]


async def create_acl(request: Request, form: FormData) -> Response:
    await security.create_acl(await clients(request).admin(), _binding(form))
    return RedirectResponse("/security?created=1", status_code=303)


async def delete_acl(request: Request, form: FormData) -> Response:
    deleted = await security.delete_acl(await clients(request).admin(), _binding(form))
    return RedirectResponse(f"/security?deleted={deleted}", status_code=303)


ROUTES: list[BaseRoute] = [
    Route("/security", security_page),
    Route(
        "/security/acls/create",
        mutation("create an ACL binding", preview=_binding_preview)(create_acl),
        methods=["POST"],
    ),
    Route(
        "/security/acls/delete",
        mutation("delete an ACL binding", preview=_binding_preview)(delete_acl),
        methods=["POST"],
    ),
]
