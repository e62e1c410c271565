"""DynamoDB stream events built from what is stored, shaped as Lambda delivers them."""

from __future__ import annotations

import itertools

_SEQUENCE = itertools.count(10**20)


def stream_record(image: dict, event_name: str = "INSERT") -> dict:
    """One Lambda stream record carrying `image` (typed AttributeValue JSON, as a scan returns it)."""
    number = str(next(_SEQUENCE))
    return {
        "eventID": f"evt-{number}",
        "eventName": event_name,
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": {
            "ApproximateCreationDateTime": 1764400000.0,
            "Keys": {"PK": image["PK"], "SK": image["SK"]},
            "NewImage": image,
            "SequenceNumber": number,
            "SizeBytes": 200,
            "StreamViewType": "NEW_IMAGE",
        },
        "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/precis-local/stream/2026-01-01T00:00:00.000",
    }


def message_records(client, ws: str = "ws1", session_id: str = "s1", first: int = 1, last: int | None = None) -> list:
    """Records for the stored messages first..last of a session, in seq order."""
    out = client.query(
        TableName="precis-local",
        KeyConditionExpression="PK = :p AND begins_with(SK, :m)",
        ExpressionAttributeValues={":p": {"S": f"WS#{ws}#S#{session_id}"}, ":m": {"S": "MSG#"}},
    )
    items = [i for i in out["Items"] if first <= int(i["seq"]["N"]) <= (last or 10**12)]
    return [stream_record(i) for i in items]
