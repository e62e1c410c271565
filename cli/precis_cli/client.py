"""HTTP to a Precis service: where it is, errors as one line, and only the retries that are safe to make."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

import httpx

DEFAULT_URL = "http://127.0.0.1:8000"
# The API's throttling and the gateway's transient answers; a keyed message post may also meet its own key still
# claimed by an earlier attempt (409 "still being processed") and must wait for it.
TRANSIENT = {429, 500, 502, 503, 504}
RETRY_FOR_S = 90.0  # longer than a claimed Idempotency-Key can outlive its request (the function's timeout)


class ServiceError(Exception):
    """The service refused: its status and its own words."""

    def __init__(self, status: int, reason: str, detail: str):
        super().__init__(f"{status} {reason}: {detail}")
        self.status = status
        self.detail = detail


class Unreachable(Exception):
    """Nothing answers at the URL, or not in time."""

    @classmethod
    def refused(cls, url: str) -> Unreachable:
        return cls(f"no Precis at {url} (is `make dev` running?)")


def dev_stack_url(cwd: Path | None = None) -> str | None:
    """The URL a running `make dev` announced in `.precis/dev.json` (PRECIS_DEV_JSON, else this directory or a
    parent, else this checkout's root), if the stack that wrote it is still alive."""
    if os.environ.get("PRECIS_DEV_JSON"):
        candidates = [Path(os.environ["PRECIS_DEV_JSON"])]
    else:
        here = (cwd or Path.cwd()).resolve()
        candidates = [d / ".precis" / "dev.json" for d in (here, *here.parents)]
        candidates.append(Path(__file__).resolve().parents[2] / ".precis" / "dev.json")  # an editable install
    for path in candidates:
        try:
            announced = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(announced, dict) and isinstance(announced.get("url"), str) and _alive(announced.get("pid")):
            return announced["url"]
    return None


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int):
        return True  # not ours to judge
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False  # a stack that died without removing its announcement
    except PermissionError:
        pass
    return True


def detail_of(response: httpx.Response) -> str:
    """The service's `detail` on one line (a 422's list of field errors joined)."""
    try:
        body = response.json()
    except ValueError:
        return " ".join(response.text.split())[:300] or response.reason_phrase
    detail = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, list):
        parts = []
        for error in detail:
            if isinstance(error, dict):
                where = ".".join(str(p) for p in error.get("loc") or [])
                parts.append(f"{where}: {error.get('msg')}" if where else str(error.get("msg")))
            else:
                parts.append(str(error))
        detail = "; ".join(parts)
    if not isinstance(detail, str):
        detail = json.dumps(body, ensure_ascii=False)
    return " ".join(detail.split())


def _retryable_conflict(response: httpx.Response) -> bool:
    """A 409 about a key still claimed by another attempt (not one reused with another body)."""
    detail = detail_of(response)
    return "still being processed" in detail or "is being reused" in detail


class Precis:
    """One workspace of one Precis service, as the routes of the v3 API (the service's /openapi.json)."""

    def __init__(
        self,
        url: str,
        key: str | None,
        workspace: str,
        *,
        timeout: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
        transport: httpx.BaseTransport | None = None,  # (tests: the handlers in-process, as the SDKs' http_client)
    ):
        self.url = url.rstrip("/")
        self.workspace = workspace
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._http = httpx.Client(
            base_url=self.url, headers=headers, timeout=httpx.Timeout(timeout, connect=5.0), transport=transport
        )
        self._sleep = sleep

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, *, retry: bool = False, **kwargs: Any) -> Any:
        """The JSON answer of one request. `retry`: the request may be repeated (a read, or a keyed post): throttling,
        transient errors, timeouts and a key still claimed are retried with backoff for up to RETRY_FOR_S."""
        deadline = time.monotonic() + RETRY_FOR_S
        delay = 0.1
        while True:
            try:
                response = self._http.request(method, path, **kwargs)
            except httpx.ConnectError:
                raise Unreachable.refused(self.url) from None
            except (httpx.TimeoutException, httpx.RemoteProtocolError, httpx.ReadError) as exc:
                if not retry or time.monotonic() > deadline:
                    raise Unreachable(f"no answer from {self.url} ({type(exc).__name__})") from None
            except httpx.TransportError as exc:
                raise Unreachable(f"cannot reach {self.url}: {exc}") from None
            else:
                again = response.status_code in TRANSIENT or (
                    response.status_code == 409 and _retryable_conflict(response)
                )
                if response.is_success or not (retry and again) or time.monotonic() > deadline:
                    break
            self._sleep(delay)
            delay = min(delay * 2, 3.0)
        if not response.is_success:
            raise ServiceError(response.status_code, response.reason_phrase, detail_of(response))
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    # ------------------------------------------------------------ workspaces and sessions

    def _ws(self) -> str:
        return f"/v3/workspaces/{self.workspace}"

    def read_workspace(self) -> dict[str, Any] | None:
        """The workspace, or None when it does not exist; created only when the key cannot list workspaces
        (`POST /v3/workspaces` is the one read a workspace key has, and it is get-or-create)."""
        try:
            page = self.request("POST", "/v3/workspaces/list", json={"filters": {"id": self.workspace}}, retry=True)
        except ServiceError as exc:
            if exc.status != 403:
                raise
            return self.request("POST", "/v3/workspaces", json={"id": self.workspace})
        return next(iter(page["items"]), None)

    def create_workspace(self, configuration: dict[str, Any] | None = None) -> dict[str, Any]:
        body = {"id": self.workspace, **({"configuration": configuration} if configuration is not None else {})}
        return self.request("POST", "/v3/workspaces", json=body)

    def ensure_workspace(self) -> None:
        """Create the workspace unless it exists (posting messages creates their session, not its workspace); a key
        that may not create it (a session or peer key) leaves it to the post to say whether it exists."""
        try:
            self.create_workspace()
        except ServiceError as exc:
            if exc.status != 403:
                raise

    def update_workspace(self, configuration: dict[str, Any]) -> dict[str, Any]:
        return self.request("PUT", self._ws(), json={"configuration": configuration})

    def read_session(self, session: str) -> dict[str, Any] | None:
        """The session, or None when it does not exist (created, like the workspace, only for a session key)."""
        try:
            page = self.request("POST", f"{self._ws()}/sessions/list", json={"filters": {"id": session}}, retry=True)
        except ServiceError as exc:
            if exc.status != 403:
                raise
            return self.request("POST", f"{self._ws()}/sessions", json={"id": session})
        return next(iter(page["items"]), None)

    def create_session(self, session: str, configuration: dict[str, Any] | None = None) -> dict[str, Any]:
        body = {"id": session, **({"configuration": configuration} if configuration is not None else {})}
        return self.request("POST", f"{self._ws()}/sessions", json=body)

    def update_session(self, session: str, configuration: dict[str, Any]) -> dict[str, Any]:
        return self.request("PUT", f"{self._ws()}/sessions/{session}", json={"configuration": configuration})

    # ------------------------------------------------------------ keys

    def mint_key(self, *, workspace: str | None, peer: str | None, session: str | None, expires_at: str | None) -> str:
        params = {
            k: v
            for k, v in (
                ("workspace_id", workspace),
                ("peer_id", peer),
                ("session_id", session),
                ("expires_at", expires_at),
            )
            if v is not None
        }
        return self.request("POST", "/v3/keys", params=params)["key"]

    # ------------------------------------------------------------ messages, context, summaries

    def _session(self, session: str) -> str:
        return f"{self._ws()}/sessions/{session}"

    def context(
        self, session: str, tokens: int, *, summary: bool = True, whole_runs: bool | None = None
    ) -> dict[str, Any]:
        params = {"tokens": tokens, "summary": str(summary).lower()}
        if whole_runs is not None:  # absent: the session's configured default applies
            params["whole_runs"] = str(whole_runs).lower()
        return self.request("GET", f"{self._session(session)}/context", params=params, retry=True)

    def usage(self, workspace: str, first: str | None = None, last: str | None = None) -> dict[str, Any]:
        params = {k: v for k, v in (("from", first), ("to", last)) if v}
        return self.request("GET", f"/v3/workspaces/{workspace}/usage", params=params, retry=True)

    # ------------------------------------------------------------ webhooks

    def webhooks(self, page: int = 1, size: int = 50) -> dict[str, Any]:
        return self.request("GET", f"{self._ws()}/webhooks", params={"page": page, "size": size}, retry=True)

    def create_webhook(self, url: str, event_types: list[str] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"url": url, **({"event_types": event_types} if event_types is not None else {})}
        # Not retried: a retry of a create that was made would answer the endpoint without its secret.
        return self.request("POST", f"{self._ws()}/webhooks", json=body)

    def delete_webhook(self, endpoint_id: str) -> None:
        self.request("DELETE", f"{self._ws()}/webhooks/{endpoint_id}")

    def rotate_webhook(self, endpoint_id: str) -> dict[str, Any]:
        return self.request("POST", f"{self._ws()}/webhooks/{endpoint_id}/rotate")

    def webhook_deliveries(self, endpoint_id: str, page: int = 1, size: int = 50) -> dict[str, Any]:
        path = f"{self._ws()}/webhooks/{endpoint_id}/deliveries"
        return self.request("GET", path, params={"page": page, "size": size}, retry=True)

    def test_webhooks(self) -> Any:
        return self.request("GET", f"{self._ws()}/webhooks/test", retry=True)

    def summaries(self, session: str) -> dict[str, Any]:
        return self.request("GET", f"{self._session(session)}/summaries", retry=True)

    def message(self, session: str, message_id: str) -> dict[str, Any]:
        return self.request("GET", f"{self._session(session)}/messages/{message_id}", retry=True)

    def delete_message(self, session: str, message_id: str) -> None:
        # Not retried: a delete that was made would answer 404 the second time.
        self.request("DELETE", f"{self._session(session)}/messages/{message_id}")

    def messages_page(
        self, session: str, page: int = 1, size: int = 100, filters: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return self.request(
            "POST",
            f"{self._session(session)}/messages/list",
            params={"page": page, "size": size},
            json={"filters": filters} if filters else None,
            retry=True,
        )

    def last_seq(self, session: str) -> int:
        """The seq of the session's newest message (0 for an empty or unknown session)."""
        try:
            return self.messages_page(session, size=1)["total"]
        except ServiceError as exc:
            if exc.status == 404:
                return 0
            raise

    def post_messages(self, session: str, messages: list[dict[str, Any]], idempotency_key: str) -> list[dict]:
        """Post one batch exactly once: the key makes every retry (and every later run) replay the first answer."""
        return self.request(
            "POST",
            f"{self._session(session)}/messages",
            json={"messages": messages},
            headers={"Idempotency-Key": idempotency_key},
            retry=True,
        )

    # ------------------------------------------------------------ a whole workspace's export and import (jobs)

    def start_export(self) -> dict[str, Any]:
        return self.request("POST", f"{self._ws()}/exports")

    def job(self, kind: str, job_id: str) -> dict[str, Any]:
        """An export's or import's status (`kind`: "exports" or "imports")."""
        return self.request("GET", f"{self._ws()}/{kind}/{job_id}", retry=True)

    def upload_import(self, data: bytes) -> str:
        """PUT `data` where the service says (a presigned URL, no bearer key); the upload's id."""
        target = self.request("POST", f"{self._ws()}/imports/uploads")
        self.transfer("PUT", target["url"], content=data)
        return target["upload_id"]

    def erase_peer(self, peer: str) -> dict[str, Any]:
        # Retried safely: a repeat answers the same erasure (its job, or its receipt once done).
        return self.request("DELETE", f"{self._ws()}/peers/{peer}", retry=True)

    def erasure(self, peer: str) -> dict[str, Any]:
        return self.request("GET", f"{self._ws()}/peers/{peer}/erasure", retry=True)

    def start_import(self, upload_id: str) -> dict[str, Any]:
        return self.request("POST", f"{self._ws()}/imports", json={"upload_id": upload_id})

    def transfer(self, method: str, url: str, **kwargs: Any) -> bytes:
        """One request to a presigned URL (its own signature: no bearer key), retried while transient; its body."""
        deadline = time.monotonic() + RETRY_FOR_S
        delay = 0.5
        with httpx.Client(timeout=httpx.Timeout(300.0, connect=10.0)) as http:
            while True:
                try:
                    response = http.request(method, url, **kwargs)
                    if response.is_success:
                        return response.content
                    if response.status_code not in TRANSIENT or time.monotonic() > deadline:
                        raise ServiceError(response.status_code, response.reason_phrase, response.text[:300])
                except (httpx.TimeoutException, httpx.TransportError) as exc:
                    if time.monotonic() > deadline:
                        raise Unreachable(f"no answer from the bucket ({type(exc).__name__})") from None
                self._sleep(delay)
                delay = min(delay * 2, 5.0)
