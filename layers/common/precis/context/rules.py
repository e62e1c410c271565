"""The rules of the context route's peer and search parameters (Honcho's), checked before any read."""

from __future__ import annotations

import re

from precis.errors import Invalid
from precis.schemas import ID_MAX, ID_PATTERN

MAX_CONTEXT_TOKENS = 100_000  # the largest token budget a context read takes


def check_context_params(
    session_id: str,
    *,
    peer_target: str | None,
    peer_perspective: str | None,
    scope: str | None,
    sessions: list[str] | None,
    limit_to_session: bool,
) -> None:
    """Raise Invalid (422) for combinations Honcho refuses, naming the parameters."""
    if peer_perspective and not peer_target:
        raise Invalid("peer_perspective: needs peer_target")
    if scope is not None:
        if not peer_target:
            raise Invalid("scope: needs peer_target")
        if peer_perspective:
            raise Invalid("scope: cannot be combined with peer_perspective")
    if sessions is not None:
        if not peer_target:
            raise Invalid("sessions: needs peer_target")
        if scope is not None:
            raise Invalid("sessions: cannot be combined with scope")
        if limit_to_session:
            raise Invalid("sessions: cannot be combined with limit_to_session")
        # API Gateway joins repeated parameters with commas.
        ids = [s for part in sessions for s in part.split(",")]
        bad = [s for s in ids if not (0 < len(s) <= ID_MAX and re.fullmatch(ID_PATTERN, s))]
        if bad:
            raise Invalid(f"sessions: {bad[0]!r} is not a session id")
        if session_id not in ids:
            raise Invalid(f"sessions: must include this session ('{session_id}')")


def session_allowlist(
    session_id: str | None, chosen: str | list[str] | dict[str, list[str]] | None
) -> tuple[str, ...] | None:
    """The sessions a representation or chat may draw on: `session_id`, and `filters.session_id` (`chosen`: str,
    list, {"in": list}); both given: those in both; neither: None (no allowlist)."""
    sets = []
    if session_id is not None:
        sets.append({session_id})
    if isinstance(chosen, str):
        sets.append({chosen})
    elif isinstance(chosen, list):
        sets.append(set(chosen))
    elif isinstance(chosen, dict):
        if set(chosen) != {"in"}:
            raise Invalid(f"filters.session_id: only {{'in': [...]}} is accepted, got keys {sorted(chosen)}")
        sets.append(set(chosen["in"]))
    if not sets:
        return None
    return tuple(sorted(set.intersection(*sets)))
