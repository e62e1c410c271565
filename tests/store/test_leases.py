"""The store's one lease (precis.store.leases): a session's index repair and a workspace's delete hold it alike."""

from __future__ import annotations

import pytest

from local.template import template
from precis.store import keys, leases
from precis.store.db import Db, from_item, to_item
from precis.store.resources import get_or_create_workspace

KEY = keys.text_repair_lease("ws1", "s1")


@pytest.fixture
def db(aws) -> Db:
    return Db(client=aws["dynamodb"], s3=aws["s3"], table=template().table_name, bucket=template().bucket_name)


def stored(db: Db, key: dict[str, str]) -> dict | None:
    return from_item(db.client.get_item(TableName=db.table, Key=to_item(key), ConsistentRead=True).get("Item"))


def test_one_holder_at_a_time_until_its_time_ends_or_it_lets_go(db):
    assert leases.take(db, KEY, 160.0, 100.0)
    assert stored(db, KEY) == {**KEY, "until": 160}
    assert not leases.take(db, KEY, 219.0, 159.0)  # held until 160
    assert leases.take(db, KEY, 221.0, 161.0)  # its holder died: taken over once its time ended
    leases.release(db, KEY)
    assert stored(db, KEY) == KEY
    assert leases.take(db, KEY, 170.0, 110.0)  # let go: free at once


def test_a_lease_named_on_an_existing_item_is_not_taken_on_a_missing_one(db):
    workspace = keys.workspace("ws1")
    assert not leases.take(db, workspace, 60, 0, name="deleting_until", existing=True)
    assert stored(db, workspace) is None  # nothing was created
    get_or_create_workspace(db, "ws1")
    assert leases.take(db, workspace, 60, 0, name="deleting_until", existing=True)
    assert not leases.take(db, workspace, 90, 30, name="deleting_until", existing=True)
    leases.release(db, workspace, name="deleting_until")
    assert "deleting_until" not in (stored(db, workspace) or {})
