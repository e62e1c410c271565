"""Chat routes of the v3 API (served by the chat function): a peer's and the workspace's dialectic
(docs/design.md, "Derived memory", Chat)."""

from typing import TYPE_CHECKING

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse

from precis.api.caller import caller
from precis.api.params import PeerId, WorkspaceId
from precis.chat.query import ChatQuery
from precis.chat.service import ChatAnswer, answer_chat
from precis.secrets import with_llm_key
from precis.settings import get_settings
from precis.store.db import get_db

router = Router()
# Documented for the OpenAPI document: a JSON answer, or (stream: true) its Server-Sent Events.
_ANSWERS: "dict[int, OpenAPIResponse]" = {
    200: {
        "description": "The answer: `{content, evidence?}`, or with `stream: true` Server-Sent Events "
        '(`data: {"delta": {"content"}, "done": false}` … `data: {"done": true}`)',
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["content"],
                    "properties": {
                        "content": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                        "evidence": {"type": "object"},
                    },
                }
            },
            # each event: a `data` line of JSON
            "text/event-stream": {
                "schema": {
                    "type": "object",
                    "required": ["data"],
                    "properties": {"data": {"type": "string"}, "event": {"type": "string"}},
                }
            },
        },
    }
}


def _respond(answer: ChatAnswer):
    if answer.stream:  # API Gateway HTTP APIs buffer it: the client gets every event at once (README)
        return Response(
            status_code=200, content_type="text/event-stream", body=answer.body, headers={"Cache-Control": "no-cache"}
        )
    return answer.body


@router.post("/v3/workspaces/<workspace_id>/peers/<peer_id>/chat", responses=_ANSWERS)
def peer_chat(workspace_id: WorkspaceId, peer_id: PeerId, body: ChatQuery):
    settings = with_llm_key(get_settings())
    return _respond(answer_chat(get_db(), settings, workspace_id, body, peer_id=peer_id, principal=caller()))


@router.post("/v3/workspaces/<workspace_id>/chat", responses=_ANSWERS)
def workspace_chat(workspace_id: WorkspaceId, body: ChatQuery):
    settings = with_llm_key(get_settings())
    return _respond(answer_chat(get_db(), settings, workspace_id, body, peer_id=None, principal=caller()))
