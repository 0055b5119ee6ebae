# console/views_groups.py — the group pages (groups.py gathers their data): the paginated
# list, a group's detail with its live lag (a fragment the page's script refreshes, sampled by
# the shared Sampler while someone views it), the reset's dry run (a GET: anyone may look),
# and the two mutations, applying a reset and deleting a group, behind auth.mutation.
#
# Invariant: an applied reset commits exactly the offsets of the plan that was shown (carried
# in the form as TOPIC:PARTITION=OFFSET), never a plan computed anew at confirmation time.
from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import quote

from markupsafe import Markup
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from lockgate.client.admin import Admin
from lockgate.client.cluster import TopicPartition
from lockgate.console import groups
from lockgate.console.auth import mutation
from lockgate.console.charts import Series, line_chart
from lockgate.console.errors import BadInput, ConsoleError
from lockgate.console.params import whole_number
from lockgate.console.sampler import levels
from lockgate.console.web import clients, render, sampler
from lockgate.tools.common import ToolError
from lockgate.tools.group_resets import GroupNotInactiveError, ResetKind

FRAGMENT_LAG = "lag"


class GroupNotEmpty(ConsoleError):
    status = 409
    title = "The group has members"


def _page_number(text: str | None) -> int:
    return max(1, whole_number(text, "page") or 1)


def encode_plan(plan: groups.ResetPlan) -> str:
    """The plan as the form carries it: TOPIC:PARTITION=OFFSET, comma-separated (topic names
    hold only letters, digits, '.', '_' and '-', so the separators are unambiguous)."""
    return ",".join(
        f"{p.topic_partition.topic}:{p.topic_partition.partition}={p.new}" for p in plan.offsets
    )


def decode_plan(text: str) -> dict[TopicPartition, int]:
    plan: dict[TopicPartition, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        where, _, offset = item.rpartition("=")
        topic, _, partition = where.rpartition(":")
        try:
            tp, value = TopicPartition(topic, int(partition)), int(offset)
        except ValueError:
            raise BadInput(f"unreadable reset plan entry {item!r}") from None
        if not topic or value < 0:
            raise BadInput(f"unreadable reset plan entry {item!r}")
        plan[tp] = value
    if not plan:
        raise BadInput("the reset plan is empty: nothing to apply")
    return plan


async def groups_page(request: Request) -> Response:
    admin = await clients(request).admin()
    name_filter = request.query_params.get("q", "")
    page = await groups.list_groups(
        admin, name_filter=name_filter, page=_page_number(request.query_params.get("page"))
    )
    return render(request, "groups/index.html", {"page": page, "title": "Groups"})


async def _lag_chart(request: Request, detail: groups.GroupDetail) -> Markup:
    async def measure() -> dict[str, float]:
        return {"lag": float(detail.total_lag)}

    samples = await sampler(request).sample(f"group:{detail.group_id}", measure)
    return line_chart(
        [Series("total lag", levels(samples, "lag"))], title="Lag (records)", unit="records"
    )


async def _plan_from(
    admin: Admin, group_id: str, kind: str, value: str, topic: str
) -> groups.ResetPlan:
    try:
        target = groups.parse_target(kind, value)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    try:
        return await groups.plan_reset(admin, group_id, target, topic.strip() or None)
    except GroupNotInactiveError as exc:
        raise GroupNotEmpty(str(exc)) from None
    except ToolError as exc:
        raise BadInput(str(exc)) from None


async def group_page(request: Request) -> Response:
    group_id = request.path_params["group_id"]
    admin = await clients(request).admin()
    detail = await groups.describe_group(admin, group_id)
    chart = await _lag_chart(request, detail)
    context = {"group": detail, "chart": chart, "title": f"Group {group_id}"}
    if request.query_params.get("fragment") == FRAGMENT_LAG:
        return render(request, "groups/lag.html", context)
    query = request.query_params
    plan = None
    if query.get("reset"):
        plan = await _plan_from(
            admin, group_id, query["reset"], query.get("value", ""), query.get("topic", "")
        )
    return render(
        request,
        "groups/detail.html",
        {
            **context,
            "plan": plan,
            "plan_text": encode_plan(plan) if plan is not None else "",
            "reset_kinds": [kind.value for kind in ResetKind],
            "query": query,
        },
    )


async def _reset_preview(request: Request, form: FormData) -> Sequence[tuple[str, str]]:
    group_id = str(form.get("group", ""))
    admin = await clients(request).admin()
    committed = await admin.list_group_offsets(group_id)
    plan = decode_plan(str(form.get("plan", "")))
    return [
        (str(tp), f"{committed.get(tp, '–')} → {offset}") for tp, offset in sorted(plan.items())
    ]


@mutation("reset a group's offsets", preview=_reset_preview)
async def reset_offsets(request: Request, form: FormData) -> Response:
    group_id = str(form.get("group", ""))
    plan = decode_plan(str(form.get("plan", "")))
    admin = await clients(request).admin()
    try:
        await groups.apply_reset(admin, group_id, plan)
    except ToolError as exc:  # members joined since the dry run (GroupNotInactiveError or the
        raise GroupNotEmpty(str(exc)) from None  # commit's UNKNOWN_MEMBER_ID)
    return RedirectResponse(f"/groups/{quote(group_id, safe='')}?done=reset", status_code=303)


async def _delete_preview(request: Request, form: FormData) -> Sequence[tuple[str, str]]:
    group_id = str(form.get("group", ""))
    detail = await groups.describe_group(await clients(request).admin(), group_id)
    return [
        ("group", detail.group_id),
        ("state", detail.state),
        ("members", str(len(detail.members))),
        (
            "partitions with offsets",
            str(sum(1 for p in detail.partitions if p.committed is not None)),
        ),
    ]


@mutation("delete a group", preview=_delete_preview)
async def delete_group(request: Request, form: FormData) -> Response:
    group_id = str(form.get("group", ""))
    await groups.delete_group(
        await clients(request).admin(), group_id, str(form.get("group_type", ""))
    )
    return RedirectResponse(f"/groups?deleted={quote(group_id, safe='')}", status_code=303)


ROUTES: list[BaseRoute] = [
    Route("/groups", groups_page),
    Route("/groups/reset", reset_offsets, methods=["POST"]),
    Route("/groups/delete", delete_group, methods=["POST"]),
    Route("/groups/{group_id:path}", group_page),
]
