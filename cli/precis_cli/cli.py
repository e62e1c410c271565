"""The `precis` command: settings, keys, context, summaries, usage, import and export against any Precis URL.

Exit codes: 0 done, 1 the service refused (or is unreachable), 2 a usage error (caught before anything is sent).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click

from precis.webhooks.event_types import EVENT_TYPES
from precis_cli import render, settings, transfer
from precis_cli.client import DEFAULT_URL, Precis, ServiceError, Unreachable, dev_stack_url

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class Failure(click.ClickException):
    """One line on stderr and an exit code: 1 for the service's refusals, 2 for what the caller got wrong."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


class PrecisGroup(click.Group):
    """One line and an exit code for what goes wrong anywhere in a command: the service's refusals (1), and settings
    or files that cannot be sent (2)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (ServiceError, Unreachable) as exc:
            raise Failure(str(exc), 1) from None
        except (settings.SettingError, transfer.ImportFileError) as exc:
            raise Failure(str(exc), 2) from None


def target_options(command: Callable) -> Callable:
    """--url, --key and --workspace on a command too, so they may follow it (`precis context s1 -w demo`)."""

    @click.option("--url", "url_", metavar="URL", help="Precis base URL (as on `precis`).")
    @click.option("--key", "key_", metavar="KEY", help="Bearer key (as on `precis`).")
    @click.option("-w", "--workspace", "workspace_", metavar="ID", help="Workspace (as on `precis`).")
    @functools.wraps(command)
    def wrapper(*args: Any, url_: str | None, key_: str | None, workspace_: str | None, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        root = ctx.find_root().params
        url = url_ or root.get("url") or dev_stack_url() or DEFAULT_URL
        workspace = workspace_ or root.get("workspace") or "default"
        with Precis(url, key_ or root.get("key"), workspace) as client:
            return command(client, *args, **kwargs)

    return wrapper


def _use_color(flag: bool | None) -> bool:
    if flag is not None:
        return flag
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


color_option = click.option(
    "--color/--no-color",
    "color",
    default=None,
    help="Colour the output (default: when stdout is a terminal and NO_COLOR is unset).",
)


@click.group("precis", cls=PrecisGroup, context_settings=CONTEXT_SETTINGS)
@click.option(
    "--url",
    envvar="PRECIS_URL",
    metavar="URL",
    help=f"Precis base URL [env PRECIS_URL; default: the running `make dev` stack (.precis/dev.json), "
    f"else {DEFAULT_URL}].",
)
@click.option("--key", envvar="PRECIS_KEY", metavar="KEY", help="Bearer key [env PRECIS_KEY].")
@click.option(
    "-w",
    "--workspace",
    envvar="PRECIS_WORKSPACE",
    metavar="ID",
    help="Workspace [env PRECIS_WORKSPACE; default 'default'].",
)
def main(url: str | None, key: str | None, workspace: str | None) -> None:
    """Precis from the command line: summary settings, keys, a session's context, its summaries, deleting a message,
    import and export. Works with any Precis URL and key; `precis COMMAND --help` for each."""


# ---------------------------------------------------------------- config


@main.group(context_settings=CONTEXT_SETTINGS)
def config() -> None:
    """Summary and retention settings of a workspace or session.

    Honcho's keys (enabled, messages_per_short_summary, messages_per_long_summary, custom_instructions) live in
    `configuration.summary`, Precis's (strategy, engine, token_threshold, keep_recent_runs, keep_runs,
    instructions, model, max_output_tokens, temperature, ...) in `configuration.summarizer`, the days new messages
    are kept in `configuration.retention` (`retention.days`). A session's settings override its workspace's.
    """


def _level(client: Precis, session: str | None) -> tuple[dict | None, dict | None]:
    """(workspace, session) resources as they stand; None for one that does not exist."""
    workspace = client.read_workspace()
    if session is None or workspace is None:
        return workspace, None
    return workspace, client.read_session(session)


def _shown(client: Precis, session: str | None, ws_conf: dict | None, s_conf: dict | None) -> dict[str, Any]:
    own = s_conf if session else ws_conf
    return {
        "workspace": client.workspace,
        "session": session,
        **settings.sections(own),
        "effective": settings.effective(ws_conf, s_conf if session else None),
        "effective_retention": settings.effective_retention(ws_conf, s_conf if session else None),
    }


@config.command("get", context_settings=CONTEXT_SETTINGS)
@click.option("-s", "--session", metavar="ID", help="The session's settings (default: the workspace's).")
@target_options
def config_get(client: Precis, session: str | None) -> None:
    """Print the settings as JSON: this level's `summary`, `summarizer` and `retention` sections, the `effective`
    summary settings (the workspace's merged with the session's, as the service uses them) and the
    `effective_retention` (`days` the new messages are kept; null: for ever)."""
    workspace, found = _level(client, session)
    if workspace is None:
        raise Failure(f"workspace '{client.workspace}' not found", 1)
    if session and found is None:
        raise Failure(f"session '{session}' not found in workspace '{client.workspace}'", 1)
    shown = _shown(client, session, workspace.get("configuration"), (found or {}).get("configuration"))
    click.echo(json.dumps(shown, indent=2, ensure_ascii=False))


@config.command("set", context_settings=CONTEXT_SETTINGS)
@click.argument("assignments", nargs=-1, required=True, metavar="KEY=VALUE...")
@click.option("-s", "--session", metavar="ID", help="Set the session's settings (default: the workspace's).")
@click.option("--dry-run", is_flag=True, help="Validate and print the result without sending it.")
@target_options
def config_set(client: Precis, assignments: tuple[str, ...], session: str | None, dry_run: bool) -> None:
    """Change settings: `strategy=rolling token_threshold=4000`, `summary.enabled=false`, `model=null` (removes
    the key: the level inherits it), `retention.days=30` (new messages expire 30 days after they are stored;
    0 at a session keeps them whatever the workspace says; `retention.days=null` inherits).

    A bare key is Precis's (`summarizer.KEY`), except Honcho's `custom_instructions`; values are JSON (numbers,
    true/false) unless the setting takes text. The result is validated as the service validates it (a session's
    settings merged with its workspace's) before anything is sent; a workspace or session that does not exist yet
    is created with the settings. Prints the new settings as `config get` does.
    """
    changes = [settings.parse_assignment(a) for a in assignments]
    workspace, found = _level(client, session)
    ws_conf = (workspace or {}).get("configuration") or {}
    # `_shown` validates: a SettingError (exit 2) comes before anything is sent.
    if session is None:
        new_conf = settings.apply(ws_conf, changes)
        shown = _shown(client, None, new_conf, None)
    else:
        new_conf = settings.apply((found or {}).get("configuration") or {}, changes)
        shown = _shown(client, session, ws_conf, new_conf)  # merged with the workspace's
    if not dry_run:
        if session is None:
            if workspace is None:
                client.create_workspace(new_conf)
            else:
                client.update_workspace(new_conf)
        else:
            if workspace is None:
                client.create_workspace()
            if found is None:
                client.create_session(session, new_conf)
            else:
                client.update_session(session, new_conf)
    click.echo(json.dumps(shown, indent=2, ensure_ascii=False))


# ---------------------------------------------------------------- keys


@main.group(context_settings=CONTEXT_SETTINGS)
def keys() -> None:
    """Scoped keys (needs an admin key)."""


def _expiry(text: str | None) -> str | None:
    """`30m`, `12h`, `7d` from now, or an ISO 8601 time, as the ISO 8601 the service takes."""
    if text is None:
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if text[:-1].isdigit() and text[-1:] in units:
        return (datetime.now(UTC) + timedelta(seconds=int(text[:-1]) * units[text[-1]])).isoformat()
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter("a duration (30m, 12h, 7d) or an ISO 8601 time", param_hint="--expires") from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).isoformat()


@keys.command("mint", context_settings=CONTEXT_SETTINGS)
@click.option("--peer", metavar="ID", help="Narrow the key to this peer of the workspace.")
@click.option("--session", metavar="ID", help="Narrow the key to this session of the workspace.")
@click.option("--expires", metavar="WHEN", help="Expiry: 30m, 12h, 7d or an ISO 8601 time (default: never).")
@click.option("--admin", is_flag=True, help="An admin key (every workspace) instead of a workspace key.")
@target_options
def keys_mint(client: Precis, peer: str | None, session: str | None, expires: str | None, admin: bool) -> None:
    """Mint a key for the workspace (-w), or one of its peers or sessions, and print it."""
    if admin and (peer or session):
        raise click.UsageError("--admin cannot be combined with --peer or --session")
    click.echo(
        client.mint_key(
            workspace=None if admin else client.workspace, peer=peer, session=session, expires_at=_expiry(expires)
        )
    )


# ---------------------------------------------------------------- context and summaries


@main.command(context_settings=CONTEXT_SETTINGS)
@click.argument("session")
@click.option("-t", "--tokens", type=click.IntRange(1, 100_000), required=True, help="The budget, in tokens.")
@click.option(
    "--whole-runs/--split-runs",
    default=None,
    help="Never return part of a run / allow it; default: the session's configured whole_runs.",
)
@click.option("--no-summary", is_flag=True, help="Messages only, no summary.")
@click.option("--json", "as_json", is_flag=True, help="Print the service's answer as JSON.")
@color_option
@target_options
def context(
    client: Precis,
    session: str,
    tokens: int,
    whole_runs: bool | None,
    no_summary: bool,
    as_json: bool,
    color: bool | None,
) -> None:
    """A session's context for a token budget.

    Draws a bar of what the context holds (summary, messages, unused — to scale, with token counts), then lists the
    summary and the messages. Plain text when stdout is not a terminal or with --no-color."""
    answer = client.context(session, tokens, summary=not no_summary, whole_runs=whole_runs)
    if as_json:
        click.echo(json.dumps(answer, indent=2, ensure_ascii=False))
        return
    use_color = _use_color(color)
    width = min(shutil.get_terminal_size((80, 24)).columns, 100) - 2
    lines = render.budget_bar(render.budget_of(answer, tokens), width, use_color)
    if answer.get("summary"):
        lines += [
            "",
            *render.summary_block(answer["summary"], _through_seq(client, session, answer["summary"]), use_color),
        ]
    if answer.get("messages"):
        lines.append("")
    for message in answer.get("messages") or []:
        lines += render.message_block(message, use_color)
    click.echo("\n".join(lines), color=use_color)


def _through_seq(client: Precis, session: str, summary: dict[str, Any]) -> int | None:
    """The seq of the last message a summary covers (None when it cannot be read)."""
    try:
        return client.message(session, summary["message_id"]).get("seq")
    except (ServiceError, KeyError):
        return None


def _summary_lines(client: Precis, session: str, answer: dict[str, Any], color: bool) -> list[str]:
    lines: list[str] = []
    for slot in ("short_summary", "long_summary"):
        if answer.get(slot):
            lines += [
                *([""] if lines else []),
                *render.summary_block(answer[slot], _through_seq(client, session, answer[slot]), color),
            ]
    return lines


@main.command(context_settings=CONTEXT_SETTINGS)
@click.argument("session")
@click.option("--json", "as_json", is_flag=True, help="Print the service's answer as JSON.")
@color_option
@target_options
def summaries(client: Precis, session: str, as_json: bool, color: bool | None) -> None:
    """A session's current summaries.

    Which type each is, what it covers and its text."""
    answer = client.summaries(session)
    if as_json:
        click.echo(json.dumps(answer, indent=2, ensure_ascii=False))
        return
    use_color = _use_color(color)
    click.echo("\n".join(_summary_lines(client, session, answer, use_color)) or "no summaries yet", color=use_color)


def _fingerprint(summary: dict[str, Any] | None) -> tuple | None:
    if not summary:
        return None
    return summary.get("summary_type"), summary.get("message_id"), summary.get("content")


@main.command(context_settings=CONTEXT_SETTINGS)
@click.argument("session")
@click.option("--interval", type=click.FloatRange(0.05), default=2.0, show_default=True, help="Seconds between polls.")
@click.option("--count", type=click.IntRange(1), help="Exit after printing this many summaries.")
@click.option("--once", is_flag=True, help="Poll once, print the current summaries and exit.")
@color_option
@target_options
def tail(client: Precis, session: str, interval: float, count: int | None, once: bool, color: bool | None) -> None:
    """Watch a session's summaries change.

    Polls the session and prints each summary as it appears or changes (the current ones first) until Ctrl-C,
    --count or --once. A session that does not exist yet is waited for."""
    use_color = _use_color(color)
    seen: dict[str, tuple | None] = {}
    printed = 0
    waiting_said = False
    try:
        while True:
            try:
                answer = client.summaries(session)
            except ServiceError as exc:
                if exc.status != 404:
                    raise
                if not waiting_said:
                    click.echo(f"waiting for session '{session}' ({exc.detail})", err=True)
                    waiting_said = True
                answer = {}
            for slot in ("short_summary", "long_summary"):
                summary = answer.get(slot)
                if _fingerprint(summary) in (None, seen.get(slot)):
                    continue
                seen[slot] = _fingerprint(summary)
                stamp = datetime.now().strftime("%H:%M:%S")
                block = render.summary_block(summary, _through_seq(client, session, summary), use_color)
                click.echo("\n".join([f"[{stamp}] {block[0]}", *block[1:]]), color=use_color)
                printed += 1
                if count is not None and printed >= count:
                    return
            if once:
                return
            time.sleep(interval)
    except KeyboardInterrupt:
        return  # Ctrl-C is how a tail ends


# ---------------------------------------------------------------- usage


def _day(text: str | None, name: str) -> str | None:
    if text is None:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%d").date().isoformat()
    except ValueError:
        raise click.BadParameter("a day, YYYY-MM-DD", param_hint=name) from None


@main.command(context_settings=CONTEXT_SETTINGS)
@click.argument("workspace", required=False)
@click.option("--from", "first", metavar="DAY", help="First day, YYYY-MM-DD (UTC; default: the month's first).")
@click.option("--to", "last", metavar="DAY", help="Last day, YYYY-MM-DD (UTC; default: today); 92 days at most.")
@click.option("--json", "as_json", is_flag=True, help="Print the service's answer as JSON.")
@target_options
def usage(client: Precis, workspace: str | None, first: str | None, last: str | None, as_json: bool) -> None:
    """A workspace's model usage: calls and tokens (input, of it cached, output) by day, role (summarize, derive,
    card, dream, chat, embed) and model, then the month's spend against its token budget.

    WORKSPACE defaults to -w."""
    answer = client.usage(workspace or client.workspace, _day(first, "--from"), _day(last, "--to"))
    if as_json:
        click.echo(json.dumps(answer, indent=2, ensure_ascii=False))
        return
    click.echo("\n".join(render.usage_table(answer)))


# ---------------------------------------------------------------- webhooks


@main.group(context_settings=CONTEXT_SETTINGS)
def webhooks() -> None:
    """A workspace's webhook endpoints: register, list, delete, rotate a secret, read the delivery log, send a test
    event. Each delivery is signed (Standard Webhooks' webhook-id, webhook-timestamp, webhook-signature) with the
    endpoint's own secret, shown once when it is created or rotated."""


def _echo_json(answer: Any) -> None:
    click.echo(json.dumps(answer, indent=2, ensure_ascii=False))


@webhooks.command("list", context_settings=CONTEXT_SETTINGS)
@click.option("--json", "as_json", is_flag=True, help="Print the service's answer as JSON.")
@target_options
def webhooks_list(client: Precis, as_json: bool) -> None:
    """The workspace's endpoints (10 at most): id, enabled or disabled (and why), the event types, the URL."""
    answer = client.webhooks()
    if as_json:
        _echo_json(answer)
    else:
        click.echo("\n".join(render.webhooks_table(answer)))


@webhooks.command("create", context_settings=CONTEXT_SETTINGS)
@click.argument("url")
@click.option(
    "-e",
    "--event-type",
    "event_types",
    multiple=True,
    type=click.Choice(EVENT_TYPES),
    help="An event type to receive (repeat it for more; default: every one).",
)
@target_options
def webhooks_create(client: Precis, url: str, event_types: tuple[str, ...]) -> None:
    """Register URL (get-or-create: the same URL again answers its endpoint, re-enabled, with these event types if
    any are given). Prints the endpoint as JSON, with its secret when it is new: keep it, it is not shown again."""
    _echo_json(client.create_webhook(url, list(event_types) or None))


@webhooks.command("delete", context_settings=CONTEXT_SETTINGS)
@click.argument("endpoint_id")
@target_options
def webhooks_delete(client: Precis, endpoint_id: str) -> None:
    """Delete an endpoint: nothing more is sent to it."""
    client.delete_webhook(endpoint_id)
    click.echo(f"deleted webhook endpoint {endpoint_id}")


@webhooks.command("rotate", context_settings=CONTEXT_SETTINGS)
@click.argument("endpoint_id")
@target_options
def webhooks_rotate(client: Precis, endpoint_id: str) -> None:
    """A new secret for an endpoint (printed once, as JSON); the old one keeps signing beside it for 24 hours
    (`previous_secret_expires_at`), time to give the receiver the new one."""
    _echo_json(client.rotate_webhook(endpoint_id))


@webhooks.command("deliveries", context_settings=CONTEXT_SETTINGS)
@click.argument("endpoint_id")
@click.option("--page", default=1, show_default=True, type=click.IntRange(1), help="Page, newest first.")
@click.option("--size", default=50, show_default=True, type=click.IntRange(1, 100), help="Deliveries a page.")
@click.option("--json", "as_json", is_flag=True, help="Print the service's answer as JSON.")
@target_options
def webhooks_deliveries(client: Precis, endpoint_id: str, page: int, size: int, as_json: bool) -> None:
    """An endpoint's delivery log (3 days): each delivery's event, status, attempts, the receiver's last HTTP status
    and an excerpt of the last error."""
    answer = client.webhook_deliveries(endpoint_id, page, size)
    if as_json:
        _echo_json(answer)
    else:
        click.echo("\n".join(render.deliveries_table(answer)))


@webhooks.command("test", context_settings=CONTEXT_SETTINGS)
@target_options
def webhooks_test(client: Precis) -> None:
    """Send a test.event to the workspace's endpoints (Honcho's GET …/webhooks/test)."""
    answer = client.test_webhooks()
    if answer is None:
        click.echo("test event sent")
    else:
        _echo_json(answer)


@main.group(context_settings=CONTEXT_SETTINGS)
def messages() -> None:
    """A session's messages, one at a time."""


@messages.command("delete", context_settings=CONTEXT_SETTINGS)
@click.argument("session")
@click.argument("message_id")
@target_options
def messages_delete(client: Precis, session: str, message_id: str) -> None:
    """Delete a message with everything drawn from it: from the answer on, no read returns it or anything drawn from
    it (conclusions, summaries, cards, search); the service removes the rest in the background."""
    client.delete_message(session, message_id)
    click.echo(f"deleted message {message_id} of session {session}")


@main.group(context_settings=CONTEXT_SETTINGS)
def peers() -> None:
    """A workspace's peers."""


@peers.command("erase", context_settings=CONTEXT_SETTINGS)
@click.argument("peer")
@target_options
def peers_erase(client: Precis, peer: str) -> None:
    """Erase a peer: everything it said in every session, everything concluded about or by it, its cards, its
    membership and the peer itself (needs the workspace's or an admin key). Waits for the service's erasure job,
    its progress shown, then prints its receipt (counts only). Run again, it answers the same erasure."""
    job = _follow(lambda: client.erasure(peer), client.erase_peer(peer), f"erasing {peer}")
    counts = ", ".join(f"{n} {k}" for k, n in sorted(job["counts"].items()))
    click.echo(f"erased peer {peer} of workspace {client.workspace}: {counts or 'nothing stored'}")


# ---------------------------------------------------------------- import and export


@main.command("import", context_settings=CONTEXT_SETTINGS)
@click.argument("session")
@click.argument("file", required=False, metavar="FILE", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--peer-map", metavar="ROLE=PEER,...", help="Peer ids for roles or peer ids: user=alice,assistant=bot.")
@click.option(
    "--batch-size",
    type=click.IntRange(1, transfer.MAX_BATCH),
    default=transfer.MAX_BATCH,
    show_default=True,
    help="Messages per post.",
)
@click.option("--max-batches", type=click.IntRange(1), help="Stop after posting this many batches (resume later).")
@target_options
def import_(
    client: Precis, session: str, file: Path | None, peer_map: str | None, batch_size: int, max_batches: int | None
) -> None:
    """Import a conversation file into a session, in order; or (`precis import EXPORT -w NEW`) a whole workspace.

    FILE: JSONL of {peer_id, content, created_at?, run_id?, metadata?} (what `precis export SESSION` writes) or
    JSON/JSONL of OpenAI-style messages ({role, content}, alone or in {"messages": [...]}); the role is the peer
    unless --peer-map says otherwise.

    Each batch carries an Idempotency-Key made from the file's content hash and the batch's index, so running the
    same import again (after Ctrl-C, a crash, a lost connection) never stores a message twice; batches a previous
    run finished are skipped (progress kept under PRECIS_STATE_DIR, default ~/.local/state/precis).

    With one argument, EXPORT is what `precis export` wrote of a workspace: it is uploaded and imported into the
    workspace (-w), which must hold no peer or session yet, with every id, timestamp and metadata kept; the
    command waits for the service's import job and shows its progress.
    """
    if file is None:
        _import_workspace(client, Path(session))
        return
    data = file.read_bytes()
    mapping = transfer.parse_peer_map(peer_map)
    batches = transfer.make_batches(transfer.read_messages(data, mapping), max_count=batch_size)
    import_key = transfer.import_id(data, mapping, batch_size)
    state = transfer.ImportState.load(client.url, client.workspace, session, import_key)
    client.ensure_workspace()
    start = _verified_start(client, session, batches, state)
    before = client.last_seq(session)  # a batch answered with seqs at or below this was stored by an earlier run
    total = sum(map(len, batches))
    skipped = sum(map(len, batches[:start]))
    imported = already = posted = 0
    try:
        with click.progressbar(length=total, label="importing", file=sys.stderr, show_pos=True) as bar:
            bar.update(skipped)
            for index in range(start, len(batches)):
                if max_batches is not None and posted >= max_batches:
                    break
                answer = client.post_messages(session, batches[index], transfer.batch_key(import_key, index))
                if answer and answer[0].get("seq", before + 1) <= before:
                    already += len(answer)
                else:
                    imported += len(answer)
                    posted += 1
                state.save(index + 1, answer[-1]["id"])
                bar.update(len(batches[index]))
    except KeyboardInterrupt:
        raise Failure(
            f"interrupted: imported {imported} messages in {posted} batches, "
            f"{skipped + already} already there; run the same command again to resume",
            130,
        ) from None
    line = f"imported {imported} messages in {posted} batches, {skipped + already} already there"
    if state.done < len(batches):
        line += f"; {total - sum(map(len, batches[: state.done]))} to go (run the same command again to continue)"
    click.echo(line)


def _verified_start(client: Precis, session: str, batches: list[list[dict]], state: transfer.ImportState) -> int:
    """How many batches a previous run stored, as its state says and the service confirms (the last message it
    stored is there, with the same content); 0 when anything disagrees (the keys still prevent doubles)."""
    if not state.done or state.done > len(batches) or not state.last_message_id:
        return 0
    expected = batches[state.done - 1][-1]
    try:
        stored = client.message(session, state.last_message_id)
    except ServiceError as exc:
        if exc.status != 404:
            raise
        stored = None
    if stored and stored.get("content") == expected["content"] and stored.get("peer_id") == expected["peer_id"]:
        return state.done
    click.echo(
        "the session no longer holds what this import's last run stored: posting every batch again "
        "(batches the service still remembers are not stored twice)",
        err=True,
    )
    state.forget()
    return 0


@main.command(context_settings=CONTEXT_SETTINGS)
@click.argument("session", required=False)
@click.option(
    "-o",
    "--output",
    "--out",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Write to this file (default: stdout).",
)
@target_options
def export(client: Precis, session: str | None, output: Path | None) -> None:
    """Write a session's messages as JSONL; without SESSION, the whole workspace.

    A session: oldest first, one message per line as the API returns it (paged through `messages/list`); `precis
    import SESSION FILE` reads it back. The workspace: the service's export job (its peers, sessions with their
    members and summaries, messages, conclusions and cards as JSON Lines), waited for with its progress shown,
    then downloaded; `precis import FILE -w NEW` makes a new workspace of it."""
    if session is None:
        _export_workspace(client, output)
        return
    out = output.open("w", encoding="utf-8") if output else sys.stdout
    count = 0
    try:
        for message in _all_messages(client, session):
            out.write(transfer.export_line(message) + "\n")
            count += 1
    except BrokenPipeError:  # `precis export s1 | head`: the reader has had enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the interpreter's last flush is quiet
        return
    finally:
        if output:
            out.close()
    if output:
        click.echo(f"exported {count} messages to {output}", err=True)


def _all_messages(client: Precis, session: str, size: int = 100):
    """Every message, page by page (`POST …/messages/list`, a page being a seq range); a page too large for one
    answer (413, naming a size that fits) is read by seq in smaller pages before the next."""
    page_no, pages = 1, None
    while pages is None or page_no <= pages:
        try:
            answer = client.messages_page(session, page_no, size)
        except ServiceError as exc:
            if exc.status != 413:
                raise
            if pages is None:
                pages = -(-client.last_seq(session) // size)
            yield from _seq_range(client, session, (page_no - 1) * size + 1, page_no * size, _smaller(exc, size))
        else:
            pages = answer["pages"]
            yield from answer["items"]
        page_no += 1


def _seq_range(client: Precis, session: str, first: int, end: int, size: int):
    """The messages first..end, in pages each small enough for one answer."""
    while first <= end:
        try:
            answer = client.messages_page(session, 1, size, {"seq": {"gte": first, "lte": end}})
        except ServiceError as exc:
            if exc.status != 413 or size == 1:
                raise
            size = _smaller(exc, size)
            continue
        if not answer["items"]:
            return
        yield from answer["items"]
        first = answer["items"][-1]["seq"] + 1


def _smaller(exc: ServiceError, size: int) -> int:
    """The size a 413 names ("ask for size at most N"), else half: always smaller, at least 1."""
    named = exc.detail.rsplit(" ", 1)[-1]
    return max(1, min(int(named) if named.isdigit() else size // 2, size - 1))


# ---------------------------------------------------------------- a whole workspace (the export and import jobs)
POLL_S = 1.0


def _wait(client: Precis, kind: str, job: dict[str, Any], label: str) -> dict[str, Any]:
    """Poll an export or import job until it stops running (`_follow`)."""
    return _follow(lambda: client.job(kind, job["id"]), job, label)


def _follow(poll: Callable[[], dict[str, Any]], job: dict[str, Any], label: str) -> dict[str, Any]:
    """Poll a job until it stops running, its counts shown on stderr; its last status (Failure when it failed)."""
    shown = ""
    while job["status"] == "running":
        time.sleep(POLL_S)
        job = poll()
        counts = ", ".join(f"{n} {k}s" for k, n in sorted(job["counts"].items()))
        line = f"{label}: {counts or 'starting'}"
        if line != shown:
            click.echo(line, err=True)
            shown = line
    if job["status"] != "done":
        raise Failure(f"{label} {job['id']} {job['status']}: {job.get('error', 'no reason given')}")
    return job


def _export_workspace(client: Precis, output: Path | None) -> None:
    job = _wait(client, "exports", client.start_export(), "exporting")
    out = output.open("wb") if output else sys.stdout.buffer
    try:
        for url in job["urls"]:  # the parts in order: their concatenation is the file `precis import` takes
            out.write(client.transfer("GET", url))
    finally:
        if output:
            out.close()
    counts = ", ".join(f"{n} {k}s" for k, n in sorted(job["counts"].items()))
    click.echo(f"exported workspace {client.workspace} ({counts}){f' to {output}' if output else ''}", err=True)


def _import_workspace(client: Precis, path: Path) -> None:
    if not path.is_file():
        raise transfer.ImportFileError(f"{path}: no such file (a workspace export, from `precis export`)")
    with path.open("rb") as head:
        first = head.readline()
    try:
        header = json.loads(first)
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("kind") != "precis_export":
        raise transfer.ImportFileError(
            f"{path}: not a workspace export (its first line is not the precis_export header); a conversation "
            "file goes into a session: precis import SESSION FILE"
        )
    client.ensure_workspace()
    upload_id = client.upload_import(path.read_bytes())
    job = _wait(client, "imports", client.start_import(upload_id), "importing")
    counts = ", ".join(f"{n} {k}s" for k, n in sorted(job["counts"].items()))
    click.echo(f"imported {counts} into workspace {client.workspace}")
