"""What a chat reads (precis.chat.Memory): the first retrieval and the search tools, each read recorded as evidence.

A peer chat reads the observer's view of the observed peer: the card and the conclusions chosen as a representation
chooses them (nearest the query, most derived, newest; `precis.store.representation`), fitted to the memory's share
of the budget, and with a session its summary and newest messages (the session context, within the other half).
Its message search sees the observed peer's messages in the sessions the observer has joined (or the allowlist, or
the session). A workspace chat reads the newest conclusions of the workspace and the messages its search finds.
Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from precis.chat import TOOL_RESULT_TOKENS, Evidence, Gathered, conclusion_line, message_line
from precis.context import compose
from precis.context.fit import fit
from precis.store import conclusions, representation, resources, search
from precis.store.db import Db
from precis.store.messages import Base
from precis.store.representation import SEMANTIC, Chosen
from precis.tokens import count_text

MAX_CONCLUSIONS = 30  # chosen for the first retrieval before fitting
FIRST_SEARCH = 10  # messages a workspace chat's first retrieval searches for


class Recall:
    """One chat's reads. `observer` None: a workspace chat. `sessions`: an allowlist (explicit conclusions and
    messages of those sessions only). `bound`: the sessions the caller's key reads (precis.auth.Reach.bound; None:
    every one), asked only when a message search names none."""

    def __init__(
        self,
        db: Db,
        ws: str,
        *,
        observer: str | None,
        observed: str | None,
        session_id: str | None,
        sessions: tuple[str, ...] | None,
        embed: Callable[[str], list[float]],
        semantic: Callable[[str], list[float]] | None,
        base: Base | None = None,
        bound: Callable[[], tuple[str, ...] | None] = lambda: None,
    ):
        self.db, self.ws = db, ws
        self.observer, self.observed = observer, observed
        self.session_id, self.sessions = session_id, sessions
        self._embed, self._semantic = embed, semantic
        self._base = base  # a clone's: the parent's messages it inherited are searched as its own
        self._bound = cache(bound)  # one Query at most for a peer key, however many searches the model asks for
        self.evidence = Evidence()
        self.searches_conclusions = observer is not None
        self._observer_sessions: list[str] | None = None

    # ------------------------------------------------------------ the first retrieval

    def gather(self, query: str, budget: int) -> Gathered:
        session_share = budget // 2 if self.session_id else 0
        if self.observer is None:
            gathered = self._gather_workspace(query, budget - session_share)
        else:
            gathered = self._gather_peer(query, budget - session_share)
        if self.session_id:
            read = compose.read_context(self.db, self.ws, self.session_id, session_share)
            gathered.summary = (read.get("summary") or {}).get("content")
            shown = {m["id"] for m in read["messages"]}
            gathered.messages = read["messages"] + [m for m in gathered.messages if m["id"] not in shown]
            self.evidence.read_messages(read["messages"])
        return gathered

    def _gather_peer(self, query: str, budget: int) -> Gathered:
        assert self.observer is not None and self.observed is not None
        request = representation.Request(
            self.observer, self.observed, MAX_CONCLUSIONS, True, query, sessions=self.sessions
        )
        read = representation.start(self.db, self.ws, request, self._embed)()
        fitted = fit(read.conclusions, read.card, budget, count_text)
        chosen = sorted(fitted.conclusions, key=lambda c: (-c.share, c.at, c.id))  # the most relevant first
        views = [self._view(c) for c in chosen]
        self.evidence.read_conclusions(views)
        nearest = [view for view, c in zip(views, chosen) if c.share == SEMANTIC]
        return Gathered(card=fitted.card, conclusions=views, nearest=nearest)

    def _gather_workspace(self, query: str, budget: int) -> Gathered:
        found = self.search_messages(query, FIRST_SEARCH)
        newest = conclusions.list_conclusions(self.db, self.ws, None, 1, MAX_CONCLUSIONS, False)["items"]
        if self.sessions is not None:
            newest = [c for c in newest if c.get("level") == "explicit" and c.get("session_id") in self.sessions]
        kept, used = [], sum(count_text(message_line(m)) + 1 for m in found)
        for view in newest:
            used += count_text(conclusion_line(view)) + 1
            if used > budget:
                break
            kept.append(view)
        self.evidence.read_conclusions(kept)
        return Gathered(conclusions=kept, messages=found)

    def _view(self, chosen: Chosen) -> dict[str, Any]:
        return {
            "id": chosen.id,
            "level": chosen.level,
            "content": chosen.content,
            "created_at": chosen.created_at,
            "session_id": chosen.session_id,
            "observer_id": self.observer,
            "observed_id": self.observed,
            "source_ids": list(chosen.source_ids),
        }

    # ------------------------------------------------------------ the tools

    def search_conclusions(self, query: str, top_k: int) -> list[dict[str, Any]]:
        """The observer's conclusions about the observed nearest `query`, nearest first (explicit ones of the
        allowlist only, under one)."""
        if self.observer is None:
            return []
        filters: dict[str, Any] = {"observer_id": self.observer, "observed_id": self.observed}
        wanted = top_k
        if self.sessions is not None:
            filters["level"] = "explicit"
            wanted = min(100, top_k * 4)
        found = conclusions.query(self.db, self.ws, query, wanted, None, filters, embedder=_Embedder(self._embed))
        if self.sessions is not None:
            found = [c for c in found if c.get("session_id") in self.sessions]
        found = _within(found[:top_k], conclusion_line)
        self.evidence.read_conclusions(found)
        return found

    def search_messages(self, query: str, limit: int) -> list[dict[str, Any]]:
        """The messages this chat may see that best match `query`, best first."""
        within: dict[str, str] = {}
        allowed: tuple[str, ...] | list[str] | None = self.sessions
        if self.session_id:
            within["session_id"] = self.session_id
        else:
            if allowed is None:  # a key that reads some sessions only searches those
                allowed = self._bound()
            if self.observer is not None:
                assert self.observed is not None
                within["peer_id"] = self.observed
                if allowed is None and self.observer != self.observed and not self.observer.startswith("scope."):
                    allowed = self._sessions_of_observer()
        filters = {"session_id": {"in": list(allowed)}} if allowed is not None else None
        if allowed is not None and not allowed:
            return []
        found = search.search(
            self.db,
            self.ws,
            query,
            limit,
            filters,
            semantic=self._semantic,
            base=self._base if self.session_id else None,
            session_id=within.get("session_id"),
            peer_id=within.get("peer_id"),
        )
        found = _within(found, message_line)
        self.evidence.read_messages(found)
        return found

    def _sessions_of_observer(self) -> list[str]:
        if self._observer_sessions is None:
            assert self.observer is not None
            self._observer_sessions = resources.peer_session_ids(self.db, self.ws, self.observer)
        return self._observer_sessions


class _Embedder:
    """The route's embedding function in the shape conclusions.query takes."""

    def __init__(self, embed: Callable[[str], list[float]]):
        self._embed = embed

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [self._embed(t) for t in texts]


def _within(views: list[dict[str, Any]], line: Callable[[dict[str, Any]], str]) -> list[dict[str, Any]]:
    """The first views whose lines fit one tool result: what the model is shown is what counts as read."""
    kept, used = [], 0
    for view in views:
        used += count_text(line(view)) + 1
        if used > TOOL_RESULT_TOKENS:
            break
        kept.append(view)
    return kept
