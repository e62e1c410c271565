"""What every item family of the table shares: timestamps, JSON attributes, Honcho pages and batched deletes."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, overload

from precis.errors import Throttled
from precis.sizes import fit_page
from precis.store import keys
from precis.store.db import Db, to_item

if TYPE_CHECKING:
    from types_boto3_dynamodb.type_defs import WriteRequestOutputTypeDef, WriteRequestTypeDef
    from types_boto3_s3.type_defs import ObjectIdentifierTypeDef


def utcnow() -> str:
    return datetime.now(UTC).isoformat()


def json_object(raw: str | None) -> dict[str, Any]:
    """A JSON attribute as a dict ({} when absent)."""
    return json.loads(raw) if raw else {}


@overload
def json_text(value: dict[str, Any]) -> str: ...
@overload
def json_text(value: None) -> None: ...
@overload
def json_text(value: dict[str, Any] | None) -> str | None: ...


def json_text(value: dict[str, Any] | None) -> str | None:
    """A dict as the compact JSON text stored in an attribute (None stays None)."""
    return None if value is None else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def session_of(item: dict[str, Any]) -> tuple[str, str]:
    """(workspace, session) of an item in a session's partition (a message, a summary), by its keys."""
    return keys.parse_session_pk(item.get("PK", ""))


def workspace_of(item: dict[str, Any]) -> str:
    """The workspace of an item in a workspace's partition (a session, a peer), by its keys."""
    pk: str = item.get("PK", "")
    return pk.removeprefix("WS#")


def page(records: Sequence[Any], page_no: int, size: int, reverse: bool = False, *, fit: bool = True) -> dict[str, Any]:
    """A Honcho page of already-filtered records (pages are exact); TooLarge (413) naming the size that would fit when
    its records pass one Lambda answer (`fit=False`: records to be replaced by the caller, who fits the page)."""
    if reverse:
        records = records[::-1]
    start = (page_no - 1) * size
    answer = {
        "items": records[start : start + size] if start < len(records) else [],
        "total": len(records),
        "page": page_no,
        "size": size,
        "pages": math.ceil(len(records) / size),
    }
    return fit_page(answer) if fit else answer


def delete_versions(db: Db, prefix: str, *, exact: bool = False, after: str | None = None) -> int:
    """Delete every version and delete marker of the objects under `prefix` (`exact`: of that key alone; `after`:
    those whose keys sort after it); how many. Raises if S3 refuses any of them."""
    deleted = 0
    for page in db.s3.get_paginator("list_object_versions").paginate(Bucket=db.bucket, Prefix=prefix):
        deleted += delete_object_versions(
            db,
            [
                {"Key": v["Key"], "VersionId": v["VersionId"]}
                for v in (*page.get("Versions", ()), *page.get("DeleteMarkers", ()))
                if (not exact or v["Key"] == prefix) and (after is None or v["Key"] > after)
            ],
            f"under {prefix}",
        )
    return deleted


def delete_object_versions(db: Db, objects: Sequence[ObjectIdentifierTypeDef], where: str) -> int:
    """Delete these object versions, 1,000 a request (DeleteObjects' most); how many. Raises if S3 refuses any of
    them, naming `where` they were and the first refusal."""
    for start in range(0, len(objects), 1000):
        out = db.s3.delete_objects(Bucket=db.bucket, Delete={"Objects": objects[start : start + 1000], "Quiet": True})
        if out.get("Errors"):
            first = out["Errors"][0]
            raise RuntimeError(
                f"S3 refused to delete {len(out['Errors'])} object(s) {where}, e.g. "
                f"{first.get('Key')}: {first.get('Code')} {first.get('Message')}"
            )
    return len(objects)


def delete_keys(db: Db, key_iter: Iterable[dict[str, str]]) -> int:
    """Delete the items at these keys (25 a request, unprocessed ones retried); how many were asked."""
    batch: list[WriteRequestTypeDef] = []
    count = 0
    for key in key_iter:
        batch.append({"DeleteRequest": {"Key": to_item(key)}})
        count += 1
        if len(batch) == 25:
            write_batch(db, batch)
            batch = []
    if batch:
        write_batch(db, batch)
    return count


def write_batch(db: Db, requests: Sequence[WriteRequestTypeDef]) -> None:
    """One BatchWriteItem of at most 25 requests, unprocessed ones retried with backoff."""
    pending: Mapping[str, Sequence[WriteRequestTypeDef | WriteRequestOutputTypeDef]] = {db.table: requests}
    for attempt in range(20):
        pending = db.client.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}
        if not pending:
            return
        time.sleep(min(0.05 * 2**attempt, 1.0))  # unprocessed items mean throttling: back off before retrying
    raise Throttled("the table is throttling writes; retry with backoff")
