"""What the terminal shows: the context's budget bar, summaries and messages. Pure: strings in, strings out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import click

SUMMARY_NAMES = {"honcho_chat_summary_short": "short", "honcho_chat_summary_long": "long", "rolling": "rolling"}
# Without colour each part keeps a character of its own, so the bar still reads in a log or a pipe.
PARTS = (("summary", "=", "magenta"), ("messages", "#", "cyan"), ("unused", ".", None))


@dataclass(frozen=True)
class Budget:
    """How a context spends its budget, in tokens."""

    limit: int
    summary: int
    messages: int
    message_count: int
    skipped: int

    @property
    def unused(self) -> int:
        return max(self.limit - self.summary - self.messages, 0)


def budget_of(context: dict[str, Any], limit: int) -> Budget:
    summary = context.get("summary") or {}
    messages = context.get("messages") or []
    return Budget(
        limit=limit,
        summary=int(summary.get("token_count") or 0),
        messages=sum(int(m.get("token_count") or 0) for m in messages),
        message_count=len(messages),
        skipped=int(context.get("messages_skipped") or 0),
    )


def split_width(amounts: list[int], width: int) -> list[int]:
    """`width` cells shared in proportion to `amounts` (largest remainders), every non-zero amount at least one cell
    when there is room, and exactly `width` cells in all."""
    total = sum(amounts)
    if total <= 0 or width <= 0:
        return [0] * len(amounts)
    exact = [a * width / total for a in amounts]
    cells = [int(e) for e in exact]
    for i in sorted(range(len(amounts)), key=lambda i: exact[i] - cells[i], reverse=True)[: width - sum(cells)]:
        cells[i] += 1
    for i, amount in enumerate(amounts):
        if amount > 0 and cells[i] == 0:  # visible, taken from the widest part
            widest = max(range(len(cells)), key=cells.__getitem__)
            if cells[widest] > 1:
                cells[widest] -= 1
                cells[i] = 1
    return cells


def budget_bar(budget: Budget, width: int, color: bool) -> list[str]:
    """The bar (summary | messages | unused, to scale) and its legend with the token counts."""
    amounts = [budget.summary, budget.messages, budget.unused]
    cells = split_width(amounts, max(width, 10))
    bar = "".join(_paint(char, colour, n, color) for (_, char, colour), n in zip(PARTS, cells, strict=True))
    legend = []
    for (name, char, colour), amount in zip(PARTS, amounts, strict=True):
        mark = _paint(char, colour, 1, color)
        extra = f" in {budget.message_count} message{'s' * (budget.message_count != 1)}" if name == "messages" else ""
        legend.append(f"{mark} {name} {amount:,}{extra}")
    used = budget.summary + budget.messages
    lines = [f"context: {used:,} of {budget.limit:,} tokens", f"[{bar}]", "  ".join(legend)]
    if budget.skipped:
        older = f"{budget.skipped:,} older message{'s' * (budget.skipped != 1)}"
        lines.append(f"{older} after the summary did not fit" if budget.summary else f"{older} did not fit")
    return lines


def _paint(char: str, colour: str | None, n: int, color: bool) -> str:
    """`n` cells of one part: its own character when plain, a coloured block (unused: a dim shade) otherwise."""
    if not color:
        return char * n
    if not n:
        return ""
    return click.style("█" * n, fg=colour) if colour else click.style("░" * n, dim=True)


def summary_label(summary: dict[str, Any]) -> str:
    kind = summary.get("summary_type") or "?"
    return f"{SUMMARY_NAMES.get(kind, kind)} summary ({kind})"


def summary_block(summary: dict[str, Any], through_seq: int | None, color: bool) -> list[str]:
    """A summary's heading (its type, what it covers, its size) and its text."""
    covers = f"messages 1–{through_seq}" if through_seq else f"through message {summary.get('message_id')}"
    head = f"{summary_label(summary)} · covers {covers} · {summary.get('token_count', 0):,} tokens"
    if summary.get("created_at"):
        head += f" · {summary['created_at']}"
    return [click.style(head, bold=True) if color else head, *_indented(summary.get("content") or "")]


def message_block(message: dict[str, Any], color: bool) -> list[str]:
    seq = f"#{message['seq']} " if message.get("seq") is not None else ""
    run = f" (run {message['run_id']})" if message.get("run_id") else ""
    head = f"{seq}{message.get('peer_id')}{run} · {message.get('token_count', 0):,} tokens"
    return [click.style(head, fg="cyan") if color else head, *_indented(message.get("content") or "")]


def _indented(text: str) -> list[str]:
    return ["    " + line for line in (text.splitlines() or [""])]


USAGE_COLUMNS = (
    ("day", "day"),
    ("role", "role"),
    ("model", "model"),
    ("calls", "calls"),
    ("input_tokens", "input"),
    ("cached_input_tokens", "cached"),
    ("output_tokens", "output"),
)


def usage_table(answer: dict[str, Any]) -> list[str]:
    """GET …/usage as a table: a row per (day, role, model), numbers right-aligned, the totals last, then the month's
    spend against its budget."""
    head = f"usage of workspace '{answer['workspace_id']}', {answer['from']} to {answer['to']}"
    rows = [
        [f"{row[k]:,}" if isinstance(row[k], int) else str(row[k]) for k, _ in USAGE_COLUMNS]
        for row in answer.get("usage") or []
    ]
    lines = [head]
    if rows:
        totals = answer.get("totals") or {}
        rows.append(["total", "", "", *(f"{int(totals.get(k) or 0):,}" for k, _ in USAGE_COLUMNS[3:])])
        table = [[name for _, name in USAGE_COLUMNS], *rows]
        widths = [max(len(r[i]) for r in table) for i in range(len(USAGE_COLUMNS))]
        for n, row in enumerate(table):
            cells = [c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
            lines.append("  ".join(cells).rstrip())
            if n == 0 or n == len(table) - 2:
                lines.append("  ".join("-" * w for w in widths))
    else:
        lines.append("no model calls")
    budget = answer.get("budget") or {}
    spent = int(budget.get("spent") or 0)
    limit = budget.get("monthly_token_budget")
    month = budget.get("month", "this month")
    if limit is None:
        lines.append(f"{month}: {spent:,} tokens spent, no monthly token budget")
    else:
        lines.append(f"{month}: {spent:,} of {int(limit):,} tokens of the monthly budget spent")
    if budget.get("paused"):
        lines.append("derivation paused: the monthly token budget is spent (it resumes next month or when raised)")
    if answer.get("capped"):
        lines.append("(a month held more usage items than one read takes: some are left out)")
    return lines


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """Rows under a header, each column as wide as its widest cell, two spaces apart."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [header, *rows]]


def webhooks_table(page: dict[str, Any]) -> list[str]:
    """GET …/webhooks: one line an endpoint (its id, state, event types, URL), then why a disabled one is."""
    items = page.get("items") or []
    if not items:
        return ["no webhook endpoints"]
    rows = [
        [
            e["id"],
            "disabled" if e.get("disabled") else "enabled",
            ",".join(e.get("event_types") or []) or "all",
            e["url"],
        ]
        for e in items
    ]
    lines = table(["id", "state", "events", "url"], rows)
    lines += [f"{e['id']} disabled at {e['disabled_at']}: {e['disabled_reason']}" for e in items if e.get("disabled")]
    return lines


def deliveries_table(page: dict[str, Any]) -> list[str]:
    """GET …/webhooks/{id}/deliveries: one line a delivery, newest first, its last error after it."""
    items = page.get("items") or []
    if not items:
        return ["no deliveries in the last 3 days"]
    rows = [
        [
            d["created_at"],
            d["id"],
            d["event_type"],
            d["status"],
            str(d["attempts"]),
            str(d["last_http_status"] or "-"),
            d.get("last_error") or "",
        ]
        for d in items
    ]
    lines = table(["created", "id", "event", "status", "attempts", "http", "last error"], rows)
    if page.get("pages", 1) > page.get("page", 1):
        lines.append(f"page {page['page']} of {page['pages']} ({page['total']} deliveries): --page for more")
    return lines
