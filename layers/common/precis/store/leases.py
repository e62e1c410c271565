"""A lease on an item: an attribute holding the epoch second it ends at, taken when absent or past, removed on release.

One writer at a time holds it (a session's index repair, a workspace's delete); a holder that dies frees it when its
time ends, without anyone cleaning up."""

from __future__ import annotations

from botocore.exceptions import ClientError

from precis.store.db import Db, error_code, to_item


def take(db: Db, key: dict[str, str], until: float, now: float, *, name: str = "until", existing: bool = False) -> bool:
    """Set `name` on the item at `key` to `until` unless another holder's lease ends after `now`; whether it was taken.
    `existing`: only on an item that is there (False too when it is not)."""
    condition = "attribute_not_exists(#until) OR #until < :now"
    try:
        db.client.update_item(
            TableName=db.table,
            Key=to_item(key),
            UpdateExpression="SET #until = :u",
            ConditionExpression=f"attribute_exists(PK) AND ({condition})" if existing else condition,
            ExpressionAttributeNames={"#until": name},
            ExpressionAttributeValues=to_item({":u": until, ":now": now}),
        )
        return True
    except ClientError as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise
        return False


def release(db: Db, key: dict[str, str], *, name: str = "until") -> None:
    """Let the lease go (whoever holds it: the caller is its holder)."""
    db.client.update_item(
        TableName=db.table,
        Key=to_item(key),
        UpdateExpression="REMOVE #until",
        ExpressionAttributeNames={"#until": name},
    )
