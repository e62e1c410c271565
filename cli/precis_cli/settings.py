"""`precis config`: summary and retention settings as `key=value` assignments, checked by the layer's own validation.

A level (workspace or session) keeps Honcho's keys in `configuration.summary`, Precis's in
`configuration.summarizer` and its retention in `configuration.retention`; `precis.configuration.summary_config` and
`retention_days` merge a workspace's with a session's and say what is wrong, exactly as the service does, so nothing
invalid is ever sent.
"""

from __future__ import annotations

import copy
import json
import types
import typing
from dataclasses import dataclass
from functools import cache
from typing import Any

from precis.configuration import RETENTION_SECTION, retention_days, summary_config
from precis.errors import PrecisError

PRECIS_SECTION = "summarizer"
HONCHO_SECTION = "summary"
SECTIONS = (PRECIS_SECTION, HONCHO_SECTION)
# Honcho's only key whose name differs from the setting it feeds; a bare key goes to Precis's section otherwise.
_HONCHO_ONLY = {"custom_instructions": "instructions"}


class SettingError(ValueError):
    """An assignment that cannot be sent: malformed, or refused by the layer's validation."""


@dataclass(frozen=True)
class Assignment:
    section: str
    key: str
    value: Any
    unset: bool = False


@cache
def _model() -> type:
    """The settings model the layer validates against (wherever the layer keeps it)."""
    return type(summary_config(None, deployment={}))


def _is_text(section: str, key: str) -> bool:
    """Whether the setting takes text, so `model=4` or `instructions=true` stay strings."""
    name = _HONCHO_ONLY.get(key, key) if section == HONCHO_SECTION else key
    field = _model().model_fields.get(name)
    if field is None:
        return False
    leaves = _leaf_types(field.annotation)
    return bool(leaves) and all(t is str for t in leaves)


def _leaf_types(annotation: Any) -> list[Any]:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return [type(v) for v in typing.get_args(annotation)]
    if origin in (typing.Union, types.UnionType):
        return [t for a in typing.get_args(annotation) if a is not type(None) for t in _leaf_types(a)]
    if origin is typing.Annotated:
        return _leaf_types(typing.get_args(annotation)[0])
    return [annotation]


def parse_assignment(text: str) -> Assignment:
    """`key=value`, `summarizer.key=value` or `summary.key=value`; the value is JSON (`8000`, `true`, `0.2`) unless
    the setting takes text; `null` removes the key (the level then inherits it)."""
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise SettingError(f"'{text}': expected key=value (e.g. strategy=rolling)")
    section, dot, key = name.partition(".")
    if not dot:
        section, key = (HONCHO_SECTION if name in _HONCHO_ONLY else PRECIS_SECTION), name
    if section not in (*SECTIONS, RETENTION_SECTION) or not key or "." in key:
        raise SettingError(
            f"'{name}': a setting is key, {PRECIS_SECTION}.key, {HONCHO_SECTION}.key or {RETENTION_SECTION}.days"
        )
    if raw.strip() == "null":
        return Assignment(section, key, None, unset=True)
    if section in SECTIONS and _is_text(section, key) and not raw.startswith('"'):
        return Assignment(section, key, raw)
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return Assignment(section, key, value)


def apply(configuration: dict[str, Any] | None, assignments: list[Assignment]) -> dict[str, Any]:
    """A copy of a level's whole configuration (other sections kept) with the assignments made."""
    updated = copy.deepcopy(configuration or {})
    for a in assignments:
        section = updated.get(a.section)
        if not isinstance(section, dict):
            section = updated[a.section] = {}
        if a.unset:
            section.pop(a.key, None)
        else:
            section[a.key] = a.value
    for name in SECTIONS:
        if updated.get(name) == {} and name not in (configuration or {}):
            del updated[name]  # unsetting in a section the level never had leaves no trace
    if updated.get(RETENTION_SECTION) == {}:
        del updated[RETENTION_SECTION]  # days unset: the level inherits (an empty section means the same)
    return updated


def effective(workspace: dict[str, Any] | None, session: dict[str, Any] | None = None) -> dict[str, Any]:
    """The merged settings the service would use (the layer's validation); SettingError with its message."""
    try:
        # The service merges its own deployment defaults; this machine's environment is not the deployment's.
        return summary_config(workspace, session, deployment={}).model_dump(mode="json")
    except PrecisError as exc:
        raise SettingError(exc.detail) from None


def effective_retention(workspace: dict[str, Any] | None, session: dict[str, Any] | None = None) -> dict[str, Any]:
    """`{"days": N}` the service keeps a session's new messages (the layer's rule: the session's value wins, 0 there
    keeps them whatever the workspace says); `{"days": None}`: for ever. SettingError with the layer's message."""
    try:
        return {"days": retention_days(workspace, session)}
    except PrecisError as exc:
        raise SettingError(exc.detail) from None


def sections(configuration: dict[str, Any] | None) -> dict[str, Any]:
    """The summary and retention sections of a level's configuration, as set there."""
    return {name: (configuration or {}).get(name) or {} for name in (*SECTIONS, RETENTION_SECTION)}
