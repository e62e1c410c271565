"""What a tool is, who is calling it, and how a call becomes MCP's CallToolResult.

A tool is a function of (Call, its arguments' pydantic model). It resolves its workspace (the argument, else the
connection's `X-Honcho-Workspace-ID`), authorizes as the v3 route it stands for (`Call.authorize`: the same
`precis.auth` rules, the same Access), then calls the layer function that route calls, with the key (what a key
reads beyond the route's ids is that function's to bound: `precis.auth.Reach`). Its answer becomes the
result's text; a bad argument or one of Precis's own errors (NotFound, Invalid, Conflict...) becomes a result with
`isError: true` and the error's sentence, so the agent can correct itself. A key outside its scope is not a tool
result: `Forbidden` leaves the call for the endpoint to answer 403 (MCP's authorization: insufficient scope).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from precis.auth import Access, Principal, authorize, authorize_view
from precis.errors import Forbidden, Invalid, PrecisError, Throttled
from precis.llm import meter
from precis.schemas import ID_MAX, is_id
from precis.sizes import ANSWER_BUDGET, answer_bytes

MISSING_WORKSPACE = (
    "workspace_id: missing. Pass workspace_id, or set the X-Honcho-Workspace-ID header on the "
    "connection so that it is used when the argument is left out (a workspace's key implies its own)."
)


class Arguments(BaseModel):
    """A tool's arguments: unknown ones are refused by name; built on first use, not at cold start."""

    model_config = ConfigDict(extra="forbid", defer_build=True)


@dataclass
class Call:
    """Who calls: the key's principal (None when the deployment checks no keys, as `make dev` by default) and the
    connection's default workspace."""

    principal: Principal | None
    default_workspace: str | None = None

    @cached_property
    def db(self):
        from precis.store.db import get_db

        return get_db()

    def workspace(self, given: str | None) -> str:
        """The argument, else the connection's header, else a scoped key's own workspace (a client that cannot set
        headers, such as an AgentCore Gateway target, still needs no workspace_id with a workspace's key)."""
        workspace = given or self.default_workspace or (self.principal.workspace if self.principal else None)
        if not workspace:
            raise Invalid(MISSING_WORKSPACE)
        if not is_id(workspace):  # the header is checked only here
            raise Invalid(
                f"X-Honcho-Workspace-ID: '{workspace[:ID_MAX]}' is not a workspace id (1-{ID_MAX} letters, digits, "
                "_ and -); fix the header or pass workspace_id"
            )
        meter.use_workspace(workspace)  # the call's model calls are this workspace's (precis.llm.meter)
        return workspace

    def authorize(
        self,
        access: Access,
        workspace: str | None,
        *,
        peer: str | None = None,
        session: str | None = None,
        body: dict[str, Any] | None = None,
        view: dict[str, str | None] | None = None,
    ) -> None:
        """Forbidden unless the key may make the v3 request of `access` on these ids (`view`: the peer perspective
        asked for, as the route's query); nothing to check when keys are off."""
        principal = self.principal
        if principal is None:
            return

        def is_member(session_id: str) -> bool:
            from precis.store import resources

            if workspace is None:  # (authorize asks only once the call's workspace is the key's)
                return False
            return resources.is_member(self.db, workspace, session_id, principal.peer)

        authorize(principal, access, workspace=workspace, peer=peer, session=session, body=body, is_member=is_member)
        authorize_view(principal, {k: v for k, v in (view or {}).items() if v is not None})


@dataclass(frozen=True)
class Tool:
    name: str
    title: str
    description: str
    arguments: type[Arguments]
    run: Callable[[Call, Any], Any]
    read_only: bool
    destructive: bool = False
    idempotent: bool = False

    def definition(self) -> dict[str, Any]:
        """The tool as tools/list describes it (the same for every caller and era)."""
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": input_schema(self.arguments),
            "annotations": {
                "title": self.title,
                "readOnlyHint": self.read_only,
                "destructiveHint": self.destructive,
                "idempotentHint": self.read_only or self.idempotent,
                "openWorldHint": False,
            },
        }


@dataclass
class Catalogue:
    tools: dict[str, Tool] = field(default_factory=dict)

    def tool(
        self,
        name: str,
        title: str,
        arguments: type[Arguments],
        *,
        read_only: bool = False,
        destructive: bool = False,
        idempotent: bool = False,
    ):
        """Register the decorated function as the tool `name`; its docstring is the description."""

        def register(run: Callable[[Call, Any], Any]) -> Callable[[Call, Any], Any]:
            assert name not in self.tools, name
            description = " ".join(line.strip() for line in (run.__doc__ or "").strip().splitlines())
            self.tools[name] = Tool(name, title, description, arguments, run, read_only, destructive, idempotent)
            return run

        return register

    def definitions(self) -> list[dict[str, Any]]:
        """tools/list's tools, generated from the models (what catalogue.json holds)."""
        return [tool.definition() for tool in self.tools.values()]

    def call(self, name: str, arguments: dict[str, Any], call: Call) -> dict[str, Any]:
        """MCP's CallToolResult for one call of the registered tool `name`; Forbidden propagates."""
        tool = self.tools[name]
        try:
            args = tool.arguments.model_validate(arguments)
        except ValidationError as exc:
            return error_result(arguments_problem(exc))
        try:
            return fitted_result(text_result(tool.run(call, args)))
        except Forbidden:
            raise
        except PrecisError as exc:
            return error_result(exc.detail)
        except Exception as exc:
            throttled = _throttled(exc)
            if throttled is None:
                raise
            return error_result(throttled.detail)


def arguments_problem(exc: ValidationError) -> str:
    """A sentence per wrong argument, naming it (the input is not echoed: it may be large, or a secret)."""
    lines = []
    for error in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(part) for part in error.get("loc", ())) or "arguments"
        message = "unknown argument" if error.get("type") == "extra_forbidden" else error.get("msg", "invalid")
        lines.append(f"{where}: {message}")
    return "invalid arguments: " + "; ".join(lines)


def _throttled(exc: Exception) -> Throttled | None:
    from botocore.exceptions import ClientError

    from precis.store.db import is_throttling

    if isinstance(exc, ClientError) and is_throttling(exc):
        return Throttled("the table is throttling requests; retry with backoff")
    return None


def text_result(value: Any) -> dict[str, Any]:
    text = (
        value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    )
    return {"content": [{"type": "text", "text": text}], "isError": False}


def fitted_result(result: dict[str, Any]) -> dict[str, Any]:
    """`result` when it fits one Lambda answer (its text is a JSON string in the JSON-RPC answer, itself a string in
    Lambda's payload: escaped twice), else a tool error the agent can act on (docs/design.md, "Limits")."""
    cost = answer_bytes(result)
    if cost <= ANSWER_BUDGET:
        return result
    return error_result(
        f"this result comes to {cost:,} bytes, past the {ANSWER_BUDGET:,} an answer holds; ask for less "
        "(a smaller size, limit, top_k or tokens)"
    )


def error_result(message: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": message}], "isError": True}


def input_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON Schema as an agent reads it best: references inlined, no titles, and an optional argument
    typed as what it takes (not `anyOf [X, null]`): leaving it out is how a caller says "none"."""
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})

    def simplify(node: Any, key: str | None = None) -> Any:
        if isinstance(node, list):
            return [simplify(n) for n in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            return simplify(
                {**definitions[node["$ref"].rsplit("/", 1)[1]], **{k: v for k, v in node.items() if k != "$ref"}}
            )
        options = node.get("anyOf")
        if options and node.get("default", ...) is None and {"type": "null"} in options:
            rest = [o for o in options if o != {"type": "null"}]
            return simplify(
                {
                    **{k: v for k, v in node.items() if k not in ("anyOf", "default")},
                    **(rest[0] if len(rest) == 1 else {"anyOf": rest}),
                },
                key,
            )
        return {k: simplify(v, k) for k, v in node.items() if not (k == "title" and key != "properties")}

    return simplify(schema)


CATALOGUE = Catalogue()  # every tool, in the order tools/list gives them (precis.mcp.tools registers them)
