"""bench/seed.py's `write_conclusions` stores what the conclusions route stores: a collection posted through
`POST .../conclusions` and the same texts loaded in bulk read back the same through the list, the query and the
context (with `peer_target` and `search_query`), cost the same requests and bytes to query, and are stored as the same
items, kind by kind, attribute by attribute.

Left out, as legitimately different: the conclusion ids (drawn from the clock and randomness: compared by the
content they carry), the creation times, and the workspace's name."""

from __future__ import annotations

import re
from typing import Any

import pytest

from bench.common import Requests
from bench.front import AWS, call
from bench.seed import write_conclusions
from local.template import template

FRONT, SEEDED, PEER = "front", "seeded", "alice"
TEXTS = [
    "alice moved to Lisbon in March",
    "alice works as a nurse at the city hospital",
    "alice has a sister called Ana who studies law",
    "alice prefers green tea to coffee",
    "alice runs ten kilometres every Sunday morning",
    "alice is learning Portuguese with a tutor",
    "alice booked flights to Tokyo for October",
    "alice adopted a grey cat named Pixel",
    "alice dislikes crowded trains in the morning",
    "alice keeps her invoices in a green folder",
    "alice plays the cello in an amateur orchestra",
    "alice grew up near the river in Porto",
]
QUERIES = ("where did alice move", "what does alice drink", "alice sister", "orchestra cello")


@pytest.fixture(scope="module")
def both():
    """In-process moto with the template's resources, TEXTS posted to FRONT through the route and loaded into SEEDED by
    bench/seed.py; the test's own clients."""
    import boto3
    from moto import mock_aws

    from local import iam, moto_patches
    from local.template import create_resources

    moto_patches.install()
    with mock_aws():
        clients = {name: iam.exempt(boto3.client(name)) for name in ("dynamodb", "s3", "sqs")}
        create_resources(template(), clients["dynamodb"], clients["s3"], clients["sqs"])
        for ws in (FRONT, SEEDED):
            assert call("POST", "/v3/workspaces", {"id": ws}).status in (200, 201)
            assert call("POST", f"/v3/workspaces/{ws}/peers", {"id": PEER}).status in (200, 201)
            assert call("POST", f"/v3/workspaces/{ws}/sessions", {"id": "s1", "peers": {PEER: {}}}).status in (200, 201)
        body = {"conclusions": [{"content": t, "observer_id": PEER, "observed_id": PEER} for t in TEXTS]}
        reply = call("POST", f"/v3/workspaces/{FRONT}/conclusions", body)
        assert reply.status in (200, 201), reply.body
        ids = write_conclusions(clients["dynamodb"], template().table_name, SEEDED, PEER, PEER, TEXTS)
        assert len(set(ids)) == len(TEXTS)
        yield clients


def _contents(answer: Any) -> list[str]:
    items = answer["items"] if isinstance(answer, dict) else answer
    return [c["content"] for c in items]


def test_the_list_holds_the_same_conclusions(both):
    lists = [
        call("POST", f"/v3/workspaces/{ws}/conclusions/list", {"filters": {"observer_id": PEER}})
        for ws in (FRONT, SEEDED)
    ]
    assert all(r.status == 200 for r in lists), [r.body for r in lists]
    assert sorted(_contents(lists[0].body)) == sorted(_contents(lists[1].body)) == sorted(TEXTS)


@pytest.mark.parametrize("query", QUERIES)
def test_a_query_answers_the_same_at_the_same_cost(both, query):
    answers, costs = [], []
    for ws in (FRONT, SEEDED):
        body = {"query": query, "top_k": 5, "filters": {"observer_id": PEER, "observed_id": PEER}}
        with Requests(AWS) as counted:
            reply = call("POST", f"/v3/workspaces/{ws}/conclusions/query", body)
        assert reply.status == 200, reply.body
        answers.append(_contents(reply.body))
        costs.append((counted.by_op(), counted.bytes))
    assert answers[0] == answers[1] and answers[0]
    assert costs[0][0] == costs[1][0]
    # The answers carry ids of the same length and times of the same form: the bytes read differ only by the
    # workspace's name (6 characters against 5), at most once per item read.
    assert abs(costs[0][1] - costs[1][1]) <= 64 * len(TEXTS)


def test_the_context_recalls_the_same_representation(both):
    answers = []
    for ws in (FRONT, SEEDED):
        reply = call(
            "GET", f"/v3/workspaces/{ws}/sessions/s1/context", tokens=2000, peer_target=PEER, search_query="Lisbon tea"
        )
        assert reply.status == 200, reply.body
        # each conclusion is shown with the time it was stored: the route's now, the loader's fixed one
        answers.append(re.sub(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\]", "[time]", reply.body["peer_representation"]))
    assert answers[0] == answers[1] and "Lisbon" in answers[0]


def _stored(client, ws: str) -> dict[str, list[tuple[str, ...]]]:
    """Every item of the workspace (its partitions: the setup's workspace, peer and session items are in both), by
    kind (an item without one, such as a collection's HEAD, by its sort key's first word): the sorted attribute
    names of each, with a HEAD's count."""
    pages = client.get_paginator("scan").paginate(TableName=template().table_name)
    out: dict[str, list[tuple[str, ...]]] = {}
    for item in (item for page in pages for item in page["Items"]):
        pk = item["PK"]["S"]
        if pk != f"WS#{ws}" and not pk.startswith(f"WS#{ws}#"):
            continue
        kind = item["kind"]["S"] if "kind" in item else item["SK"]["S"].split("#")[0]
        count = (f"count={item['count']['N']}",) if "count" in item else ()
        out.setdefault(kind, []).append((*sorted(item), *count))
    return {kind: sorted(names) for kind, names in out.items()}


def test_the_stored_items_are_the_same_kind_by_kind(both):
    front, seeded = _stored(both["dynamodb"], FRONT), _stored(both["dynamodb"], SEEDED)
    assert {"conclusion", "cvector", "cdedupe", "cpointer", "ctext", "collection", "HEAD"} <= set(front)
    assert sorted(seeded) == sorted(front)
    for kind in sorted(front):
        names = {name for item in front[kind] for name in item}
        mine = {name for item in seeded[kind] for name in item}
        assert (sorted(mine - names), sorted(names - mine)) == ([], []), f"{kind}: (only loaded, only posted)"
        assert seeded[kind] == front[kind], f"{kind}: items differ in count or attributes"
