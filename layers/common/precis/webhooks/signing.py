"""How a delivery is signed, and how a receiver checks it: pure, no I/O.

Two schemes side by side on every delivery: Standard Webhooks (`webhook-id`, `webhook-timestamp`, `webhook-signature`:
`v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">` under the endpoint's own secret, one signature per live secret
while a rotation overlaps), and Honcho's `X-Honcho-Signature` (hex HMAC-SHA256 of the body alone under the
deployment's one secret), so a receiver written for Honcho works unchanged.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Iterable, Mapping

PREFIX = "whsec_"
SECRET_BYTES = 32  # Standard Webhooks asks for 24 to 64 random bytes
TOLERANCE_S = 300  # the Standard Webhooks libraries' default: older (or newer) deliveries are refused


class BadSignature(Exception):
    """A delivery a receiver must refuse: no signature matches, a header is missing, or it is too old or too new."""


def new_secret() -> str:
    """A fresh endpoint secret, `whsec_` and the base64 of random bytes."""
    return PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")


def _key(secret: str) -> bytes:
    """The HMAC key of a `whsec_` secret: its base64 part decoded (the prefix is optional, as in the libraries)."""
    try:
        return base64.b64decode(secret.removeprefix(PREFIX), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("a webhook secret is 'whsec_' and base64") from None


def signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """One Standard Webhooks signature, `v1,<base64>`."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(_key(secret), signed, hashlib.sha256).digest()).decode("ascii")


def honcho_signature(deployment_secret: str, body: bytes) -> str:
    """Honcho's `X-Honcho-Signature`: the hex HMAC-SHA256 of the body under the deployment's secret (its UTF-8)."""
    return hmac.new(deployment_secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def headers(
    secrets_: Iterable[str], message_id: str, timestamp: int, body: bytes, *, deployment_secret: str | None = None
) -> dict[str, str]:
    """The signing headers of one delivery attempt: one `v1` signature per live secret (newest first), and Honcho's
    signature when the deployment has its secret."""
    signed = {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(signature(s, message_id, timestamp, body) for s in secrets_),
    }
    if deployment_secret:
        signed["X-Honcho-Signature"] = honcho_signature(deployment_secret, body)
    return signed


def verify(secret: str, received: Mapping[str, str], body: bytes, *, now: int, tolerance_s: int = TOLERANCE_S) -> None:
    """Check a delivery as a Standard Webhooks receiver does; BadSignature when it must be refused."""
    lowered = {k.lower(): v for k, v in received.items()}
    try:
        message_id, stamp, sent = (lowered[h] for h in ("webhook-id", "webhook-timestamp", "webhook-signature"))
    except KeyError as exc:
        raise BadSignature(f"missing header {exc.args[0]}") from None
    try:
        timestamp = int(stamp)
    except ValueError:
        raise BadSignature("webhook-timestamp is not a number of seconds") from None
    if abs(now - timestamp) > tolerance_s:
        raise BadSignature(f"webhook-timestamp is more than {tolerance_s} s from now")
    expected = signature(secret, message_id, timestamp, body).encode()
    if not any(hmac.compare_digest(expected, candidate.encode()) for candidate in sent.split(" ") if candidate):
        raise BadSignature("no signature matches")
