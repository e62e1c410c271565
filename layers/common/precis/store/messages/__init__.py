"""Messages: exactly-ordered, all-or-nothing batch ingestion, seq-range pages, reads and metadata updates; the face the
rest of the code imports.

Ranked inside, lowest first: `items` (the item, its id and view), `reads`, `writes`; each imports only those
below it."""

from __future__ import annotations

from precis.store.messages.items import (
    RESPONSE_BUDGET_BYTES,
    VIEW_FIELDS,
    Base,
    MessageItem,
    NewMessage,
    as_message,
    base_of,
    check_text,
    json_bytes,
    make_message_id,
    message_view,
    seq_of,
)
from precis.store.messages.reads import (
    get_message,
    is_fence,
    is_placeholder,
    last_message,
    list_messages,
    locate_message,
    messages_at,
    messages_by_key,
    messages_in_token_range,
    read_from,
    read_range,
    read_tail,
    senders_from,
    tail_seq,
    with_bodies,
)
from precis.store.messages.writes import (
    TRANSACTION_BUDGET_BYTES,
    append_messages,
    copy_item,
    index_unit,
    update_message_metadata,
)

__all__ = [
    "Base",
    "MessageItem",
    "NewMessage",
    "RESPONSE_BUDGET_BYTES",
    "TRANSACTION_BUDGET_BYTES",
    "VIEW_FIELDS",
    "append_messages",
    "as_message",
    "base_of",
    "check_text",
    "copy_item",
    "get_message",
    "index_unit",
    "is_fence",
    "is_placeholder",
    "json_bytes",
    "last_message",
    "list_messages",
    "locate_message",
    "make_message_id",
    "message_view",
    "messages_at",
    "messages_by_key",
    "messages_in_token_range",
    "read_from",
    "read_range",
    "read_tail",
    "senders_from",
    "seq_of",
    "tail_seq",
    "update_message_metadata",
    "with_bodies",
]
