"""SQS's timing in moto as AWS keeps it (local/moto_sqs.py): the template's queue attributes and redrive, 12 hours of
visibility counted from the receive, and the local stack's delay scale."""

from __future__ import annotations

import json

import pytest
from moto.sqs.models import sqs_backends

from local import moto_sqs
from tests.stack import wait_for

QUEUE = "precis-webhook-local"


def test_the_queues_have_the_templates_timing_and_redrive(aws):
    sqs = aws["sqs"]
    url = sqs.get_queue_url(QueueName=QUEUE)["QueueUrl"]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["VisibilityTimeout"] == "360" and attributes["MessageRetentionPeriod"] == "172800"
    assert json.loads(attributes["RedrivePolicy"]) == {
        "deadLetterTargetArn": "arn:aws:sqs:us-east-1:123456789012:precis-webhook-dlq-local",
        "maxReceiveCount": 12,
    }


def test_a_message_received_12_times_goes_to_the_dead_letter_queue_on_the_next_receive(aws):
    sqs = aws["sqs"]
    url, dlq = (sqs.get_queue_url(QueueName=q)["QueueUrl"] for q in (QUEUE, "precis-webhook-dlq-local"))
    sqs.send_message(QueueUrl=url, MessageBody="m")
    for count in range(1, 13):
        (got,) = sqs.receive_message(QueueUrl=url, AttributeNames=["All"])["Messages"]
        assert got["Attributes"]["ApproximateReceiveCount"] == str(count)
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=got["ReceiptHandle"], VisibilityTimeout=0)
    assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []
    assert [m["Body"] for m in sqs.receive_message(QueueUrl=dlq)["Messages"]] == ["m"]


def test_twelve_hours_of_visibility_count_from_the_receive_not_the_send(aws):
    sqs = aws["sqs"]
    url = sqs.get_queue_url(QueueName=QUEUE)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="m")
    (message,) = sqs_backends["123456789012"]["us-east-1"].queues[QUEUE]._messages
    message.sent_timestamp -= 10 * 3600 * 1000  # sent ten hours ago
    (got,) = sqs.receive_message(QueueUrl=url)["Messages"]
    # A retry 6 hours on (webhook deliveries' longest delay): 16 hours after the send, within 12 of the receive.
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=got["ReceiptHandle"], VisibilityTimeout=6 * 3600)
    message.received_at_ms -= 7 * 3600 * 1000  # received seven hours ago: 6 more would pass the 12
    with pytest.raises(sqs.exceptions.ClientError, match="beyond the limit"):
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=got["ReceiptHandle"], VisibilityTimeout=6 * 3600)


def test_the_delay_scale_shortens_visibility_timeouts(aws):
    sqs = aws["sqs"]
    url = sqs.get_queue_url(QueueName=QUEUE)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="m")
    moto_sqs.configure(0.001)
    try:
        (got,) = sqs.receive_message(QueueUrl=url)["Messages"]  # hidden for the queue's 360 s: 0.36 s here
        assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []
        (again,) = wait_for(lambda: sqs.receive_message(QueueUrl=url).get("Messages"), 10)
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=again["ReceiptHandle"], VisibilityTimeout=1800)
        assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []  # 1.8 s here
        wait_for(lambda: sqs.receive_message(QueueUrl=url).get("Messages"), 10)
    finally:
        moto_sqs.configure(1.0)


@pytest.mark.parametrize("raw", ["0", "-1", "2", "fast"])
def test_a_bad_delay_scale_is_named(raw):
    with pytest.raises(moto_sqs.DelayScaleError, match="PRECIS_LOCAL_SQS_DELAY_SCALE"):
        moto_sqs.scale_from_env({"PRECIS_LOCAL_SQS_DELAY_SCALE": raw})
    assert moto_sqs.scale_from_env({}) == 1.0
