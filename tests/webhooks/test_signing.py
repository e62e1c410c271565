"""Signing as a receiver checks it: Standard Webhooks' published vector, an independent reference, Honcho's header."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

import pytest

from precis.webhooks import signing
from precis.webhooks.signing import BadSignature

# Standard Webhooks' (and Svix's) published test vector.
VECTOR_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
VECTOR_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
VECTOR_TS = 1614265330
VECTOR_BODY = b'{"test": 2432232314}'
VECTOR_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def reference_signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """The spec's rule written out here, apart from the module: key = base64 after 'whsec_'."""
    key = base64.b64decode(secret[len("whsec_") :])
    mac = hmac.new(key, message_id.encode() + b"." + str(timestamp).encode() + b"." + body, "sha256")
    return "v1," + base64.b64encode(mac.digest()).decode()


def test_the_published_vector():
    assert signing.signature(VECTOR_SECRET, VECTOR_ID, VECTOR_TS, VECTOR_BODY) == VECTOR_SIGNATURE
    received = {"webhook-id": VECTOR_ID, "webhook-timestamp": str(VECTOR_TS), "webhook-signature": VECTOR_SIGNATURE}
    signing.verify(VECTOR_SECRET, received, VECTOR_BODY, now=VECTOR_TS)


@pytest.mark.parametrize("body", [b"{}", json.dumps({"type": "test.event", "data": {"é": "ü"}}).encode(), b"x" * 5000])
def test_a_new_secret_signs_as_the_reference_does(body):
    secret = signing.new_secret()
    assert secret.startswith("whsec_") and len(base64.b64decode(secret[6:])) == signing.SECRET_BYTES
    ours = signing.signature(secret, "msg_1", 1700000000, body)
    assert ours == reference_signature(secret, "msg_1", 1700000000, body)
    assert signing.new_secret() != secret


def test_honcho_signature_is_the_hex_hmac_of_the_body_under_the_deployment_secret():
    body = b'{"type":"test.event","data":{"workspace_id":"ws1"},"timestamp":"2025-01-01T00:00:00Z"}'
    expected = hmac.new(b"deployment-secret", body, hashlib.sha256).hexdigest()
    assert signing.honcho_signature("deployment-secret", body) == expected
    sent = signing.headers([signing.new_secret()], "msg_1", 1, body, deployment_secret="deployment-secret")
    assert sent["X-Honcho-Signature"] == expected
    assert "X-Honcho-Signature" not in signing.headers([signing.new_secret()], "msg_1", 1, body)


def test_during_a_rotation_either_secret_verifies():
    old, new = signing.new_secret(), signing.new_secret()
    sent = signing.headers([new, old], "msg_2", 1000, b"{}")
    assert len(sent["webhook-signature"].split(" ")) == 2
    for secret in (old, new):
        signing.verify(secret, sent, b"{}", now=1000)
    with pytest.raises(BadSignature, match="no signature matches"):
        signing.verify(signing.new_secret(), sent, b"{}", now=1000)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda h, b: (h, b + b" "), "no signature matches"),  # the body altered
        (lambda h, b: ({**h, "webhook-id": "msg_other"}, b), "no signature matches"),  # replayed under another id
        (lambda h, b: ({**h, "webhook-timestamp": "1001"}, b), "no signature matches"),  # a re-stamped replay
        (lambda h, b: ({k: v for k, v in h.items() if k != "webhook-signature"}, b), "missing header"),
        (lambda h, b: ({**h, "webhook-timestamp": "soon"}, b), "not a number"),
    ],
)
def test_a_receiver_refuses_what_was_not_signed(change, why):
    secret = signing.new_secret()
    sent, body = change(signing.headers([secret], "msg_3", 1000, b'{"a":1}'), b'{"a":1}')
    with pytest.raises(BadSignature, match=why):
        signing.verify(secret, sent, body, now=1000)


@pytest.mark.parametrize(("now", "ok"), [(1000, True), (1300, True), (700, True), (1301, False), (699, False)])
def test_the_timestamp_tolerance(now, ok):
    secret = signing.new_secret()
    sent = signing.headers([secret], "msg_4", 1000, b"{}")
    if ok:
        signing.verify(secret, sent, b"{}", now=now)
    else:
        with pytest.raises(BadSignature, match="from now"):
            signing.verify(secret, sent, b"{}", now=now)
