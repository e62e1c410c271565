"""Bring a deployed table's stored messages and conclusions into the exact search index, once, after `sam deploy`.

The exact BM25 index (`precis.lexical`, `precis.store.text_index`) holds each message as its post stores it (a text
item, and its unit's fresh item, merged into segments by the deriver), and each conclusion's text item (`L#`). What
earlier releases stored is not in it: search does not find it. `python -m deploy.reindex --table precis-<stage>` walks
every workspace (or `--workspace`), and in each:

- every session (`search.reindex_session`, sessions in order): each message without a text (stored before
  the exact index) is indexed, whole units at a time (a batch, or for a message stored without one the aligned block
  of 100 seqs it is in) through the deriver's own repair path, so the repair and this backfill never count a unit
  twice or in part; each message whose text the release before segments wrote, and which the index does not hold
  (`search.Holdings`: its fresh shard and its segments' doc tables), is indexed from its text, 100 a unit;
- every collection: each conclusion without a text item gets one (`conclusions.write_missing_texts`);
- the earlier releases' hashed term statistics (`keys.message_terms`, each `keys.collection_terms`) are deleted, and
  so are the release before segments' postings (a partition per term) and counters (`search.delete_old_index`);
  with `--strip` the BM25 vectors (`tvec`, `tsig`, `tlen`) are removed from the message and conclusion vector
  items: the vector indexes `ByMessageTerms` and `ByConclusionTerms` then hold nothing, and a later release deletes
  them (one per deployment: DynamoDB runs one index operation per table at a time).

It prints a line per workspace and one every few seconds while a workspace takes long. Stopped at any moment (Ctrl-C,
an expired credential, `--max-units`), it is run again from the start: what the index holds, a conclusion with its
item, the old items deleted, are skipped (their state is the progress), and nothing is counted twice. It exits 0 once
nothing is left, 1 when something is (a run stopped early, a batch whose request may still be indexing it, a clone
still copying its parent's messages): run it again a minute later.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from typing import Any

from deploy.template import LAYER_DIR

if str(LAYER_DIR) not in sys.path:
    sys.path.insert(0, str(LAYER_DIR))  # this checkout's layer: the code the stack runs with this template

from botocore.exceptions import ClientError  # noqa: E402

from precis.store import conclusions, keys, search  # noqa: E402
from precis.store.db import Db, batch_get, error_code, query_all, to_item  # noqa: E402
from precis.store.records import delete_keys  # noqa: E402
from precis.store.resources import partition_items, require_workspace, workspace_ids  # noqa: E402

_WALKED = ("messages", "indexed", "units", "rebuilt", "in_flight", "copying")  # what a session's walk counts
OLD_LEXICAL = ("tvec", "tsig", "tlen")  # the earlier releases' BM25 vector and term signature on vector items
PROGRESS_S = 10.0  # at most this long without a line while a workspace is walked


@dataclass
class Totals:
    """What a run did (with `--dry-run`, would do)."""

    workspaces: int = 0
    sessions: int = 0
    messages: int = 0  # stored messages read
    indexed: int = 0  # messages indexed: texts written, or `rebuilt` (a unit's members with a text go in uncounted)
    units: int = 0  # units indexed
    rebuilt: int = 0  # of `indexed`, those whose text the release before segments wrote, indexed from it
    in_flight: int = 0  # messages of a batch whose request may still be indexing it: the next run sees
    copying: int = 0  # a clone's messages while its copy of its parent's runs: the next run sees
    conclusions: int = 0  # conclusions read
    conclusion_texts: int = 0  # their text items written
    statistics: int = 0  # the earlier releases' statistics items deleted
    old_counters: int = 0  # the release before segments' counters deleted (dry: found)
    old_postings: int = 0  # the postings of their terms deleted (dry: not counted)
    stripped: int = 0  # vector items whose old BM25 attributes were removed
    stopped: str | None = None  # why the run stopped before the end

    def add(self, other: Totals) -> None:
        for f in fields(self):
            if isinstance(getattr(self, f.name), int):
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    @property
    def left(self) -> bool:
        """Whether a later run has something to do."""
        return bool(self.stopped or self.in_flight or self.copying)

    @property
    def pending(self) -> bool:
        """Whether a dry run found anything to do."""
        return bool(
            self.left or self.indexed or self.conclusion_texts or self.statistics or self.old_counters or self.stripped
        )


class UnitLimit(Exception):
    """`--max-units` reached: the run stops between two units."""


# ---------------------------------------------------------------- one workspace


def _sessions(db: Db, ws: str) -> list[str]:
    """The workspace's live sessions, in order (a deleted one's purge takes its index away)."""
    return sorted(i["id"] for i in partition_items(db, f"WS#{ws}", "SESSION#") if "deleted_at" not in i and "id" in i)


def _peers(db: Db, ws: str) -> list[str]:
    return [i["SK"].removeprefix("PEER#") for i in partition_items(db, f"WS#{ws}", "PEER#")]


def _collections(db: Db, ws: str) -> list[tuple[str, str]]:
    """(observer, observed) of each collection registered in the workspace."""
    return [(i["observer_id"], i["observed_id"]) for i in partition_items(db, f"WS#{ws}", "COLL#")]


def _delete_statistics(db: Db, ws: str, collections: list[tuple[str, str]], dry_run: bool) -> int:
    """Delete the earlier releases' hashed term statistics of the workspace and its collections; how many there were."""
    found = batch_get(
        db, [keys.message_terms(ws), *(keys.collection_terms(ws, o, d) for o, d in collections)], ("PK", "SK")
    )
    if not dry_run:
        delete_keys(db, found)
    return len(found)


def _strip(db: Db, pk: str, prefix: str, dry_run: bool) -> int:
    """Remove OLD_LEXICAL from the items of partition `pk` under `prefix` that carry any; how many carried some.
    Conditioned on the item being there: an item deleted meanwhile is not made again by the update."""
    names = {f"#o{i}": name for i, name in enumerate(OLD_LEXICAL)}
    found = query_all(
        db,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :p)",
        ProjectionExpression="PK, SK",
        FilterExpression=" OR ".join(f"attribute_exists({n})" for n in names),
        ExpressionAttributeNames=names,
        ExpressionAttributeValues=to_item({":pk": pk, ":p": prefix}),
    )
    if dry_run or not found:
        return len(found)

    def strip(item: dict[str, Any]) -> None:
        try:
            db.client.update_item(
                TableName=db.table,
                Key=to_item({"PK": item["PK"], "SK": item["SK"]}),
                UpdateExpression="REMOVE " + ", ".join(names),
                ExpressionAttributeNames=names,
                ConditionExpression="attribute_exists(PK)",
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise

    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="strip") as pool:
        list(pool.map(strip, found))
    return len(found)


def reindex_workspace(
    db: Db,
    ws: str,
    done: Totals,
    *,
    dry_run: bool = False,
    strip: bool = False,
    on_unit: Callable[[str, int], None] | None = None,
    say: Callable[[str], None] = print,
    clock: Callable[[], float] = time.monotonic,
) -> Totals:
    """Backfill one workspace: its sessions' messages, its collections' conclusions, its old statistics and index;
    counted into `done` as it goes (a run stopped midway still says what it did)."""
    started = shown = clock()
    sessions, holdings = _sessions(db, ws), search.Holdings(db, ws)
    number, walked = 0, search.Reindexed()

    def tick() -> None:
        """A line every PROGRESS_S, between units and between sessions: a long session says how it goes too."""
        nonlocal shown
        if clock() - shown >= PROGRESS_S:
            shown = clock()
            now = Totals(**{**vars(done), **{n: getattr(done, n) + getattr(walked, n) for n in _WALKED}})
            say(f"  {ws}: session {number}/{len(sessions)}, {_indexed(now, dry_run)}, {shown - started:.1f} s")

    def unit_done(unit: str, written: int) -> None:
        if on_unit is not None:
            on_unit(unit, written)
        tick()

    for number, session_id in enumerate(sessions, 1):  # noqa: B007 - tick() reports `number`
        walked = search.Reindexed()
        try:
            search.reindex_session(
                db, ws, session_id, dry_run=dry_run, on_unit=unit_done, progress=walked, holdings=holdings
            )
        finally:
            done.sessions += 1
            for name in _WALKED:
                setattr(done, name, getattr(done, name) + getattr(walked, name))
        if walked.in_flight:
            say(
                f"  {ws}/{session_id}: {walked.in_flight} messages of a batch still being stored (its request may "
                "still index it): left for the next run"
            )
        if walked.copying:
            say(
                f"  {ws}/{session_id}: {walked.copying} messages of a clone still copying its parent's: left for "
                "the next run"
            )
        if strip:
            done.stripped += _strip(db, keys.message_vectors_pk(ws, session_id), "MV#", dry_run)
        walked = search.Reindexed()
        tick()
    collections = _collections(db, ws)
    for observer, observed in collections:
        read, written = conclusions.write_missing_texts(db, ws, observer, observed, dry_run=dry_run)
        done.conclusions += read
        done.conclusion_texts += written
        if strip:
            done.stripped += _strip(db, keys.collection_pk(ws, observer, observed), "V#", dry_run)
    done.statistics += _delete_statistics(db, ws, collections, dry_run)
    old_index = (done.old_counters, done.old_postings)

    def deleting(counters: int, postings: int) -> None:
        nonlocal shown
        done.old_counters, done.old_postings = old_index[0] + counters, old_index[1] + postings
        if clock() - shown >= PROGRESS_S:
            shown = clock()
            say(f"  {ws}: old index: {counters} counters and {postings} postings deleted, {shown - started:.1f} s")

    counters, postings = search.delete_old_index(db, ws, _peers(db, ws), dry_run=dry_run, on_page=deleting)
    done.old_counters, done.old_postings = old_index[0] + counters, old_index[1] + postings
    say(f"{ws}: {_summary(done, dry_run)}, {clock() - started:.1f} s")
    return done


def _indexed(totals: Totals, dry_run: bool) -> str:
    verb = "to index" if dry_run else "indexed"
    return (
        f"{totals.messages} messages read, {totals.indexed} {verb} in {totals.units} units "
        f"({totals.rebuilt} from their texts)"
    )


def _summary(totals: Totals, dry_run: bool) -> str:
    if dry_run:
        parts = [
            f"{totals.conclusions} conclusions ({totals.conclusion_texts} without a text item)",
            f"{totals.statistics} old statistics items to delete",
            f"{totals.old_counters} old counters to delete (and their terms' postings)",
            f"{totals.stripped} vector items to strip",
        ]
    else:
        parts = [
            f"{totals.conclusions} conclusions ({totals.conclusion_texts} text items written)",
            f"{totals.statistics} old statistics items deleted",
            f"{totals.old_counters} old counters and {totals.old_postings} postings deleted",
            f"{totals.stripped} vector items stripped",
        ]
    return ", ".join([f"{totals.sessions} sessions", _indexed(totals, dry_run), *parts])


# ---------------------------------------------------------------- the run


def run(
    db: Db,
    *,
    workspace: str | None = None,
    dry_run: bool = False,
    strip: bool = False,
    max_units: int | None = None,
    on_unit: Callable[[str, int], None] | None = None,
    say: Callable[[str], None] = print,
    clock: Callable[[], float] = time.monotonic,
) -> Totals:
    """Backfill every workspace (or `workspace`); stops between two units after `max_units`, or when `on_unit(unit,
    written)`, called after each unit, raises (what is done stays done: a later run skips it)."""
    totals, started = Totals(), clock()
    if workspace is not None:
        require_workspace(db, workspace)  # NotFound names it
    names = [workspace] if workspace is not None else sorted(workspace_ids(db))
    units = 0

    def counted(unit: str, written: int) -> None:
        nonlocal units
        units += 1
        if on_unit is not None:
            on_unit(unit, written)
        if max_units is not None and units >= max_units:
            raise UnitLimit(f"stopped after {units} units (--max-units)")

    say(f"{'dry run: ' if dry_run else ''}{len(names)} workspaces{' (--strip)' if strip else ''}")
    try:
        for ws in names:
            done = Totals(workspaces=1)
            try:
                reindex_workspace(db, ws, done, dry_run=dry_run, strip=strip, on_unit=counted, say=say, clock=clock)
            finally:
                totals.add(done)
    except UnitLimit as stop:
        totals.stopped = str(stop)
    except BaseException as exc:  # (an error, Ctrl-C: said with what was done, then raised)
        totals.stopped = f"stopped by {type(exc).__name__}: {exc}"
        raise
    finally:
        if totals.stopped:
            say(f"{totals.stopped}; run again to go on")
        outcome = "dry run: " if dry_run else "left for the next run: " if totals.left else "done: "
        say(f"{outcome}{totals.workspaces} workspaces, {_summary(totals, dry_run)}, {clock() - started:.1f} s")
    return totals


def connect(table: str, bucket: str | None) -> Db:
    """Clients for `table` and its stack's bucket (large message bodies live there): `bucket`, else the BucketName
    output of the CloudFormation stack that holds the table."""
    import boto3
    from botocore.config import Config

    config = Config(retries={"mode": "adaptive", "max_attempts": 10}, max_pool_connections=32)
    dynamodb = boto3.client("dynamodb", config=config)
    try:
        dynamodb.describe_table(TableName=table)
    except ClientError as exc:
        raise SystemExit(f"table {table!r}: {error_code(exc)} ({exc}); pass the stack's TableName output") from None
    return Db(client=dynamodb, s3=boto3.client("s3", config=config), table=table, bucket=bucket or _bucket_of(table))


def _bucket_of(table: str) -> str:
    import boto3

    cloudformation = boto3.client("cloudformation")
    try:
        resources = cloudformation.describe_stack_resources(PhysicalResourceId=table)["StackResources"]
        stack = cloudformation.describe_stacks(StackName=resources[0]["StackId"])["Stacks"][0]
        return next(o["OutputValue"] for o in stack.get("Outputs", []) if o["OutputKey"] == "BucketName")
    except (ClientError, IndexError, StopIteration) as exc:
        raise SystemExit(
            f"table {table!r}: its stack's BucketName output was not found ({exc}); pass --bucket "
            "<the stack's BucketName output>"
        ) from None


def main(argv: list[str] | None = None, *, db: Db | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.reindex", description=__doc__.split("\n")[0])
    parser.add_argument("--table", required=True, help="the deployed table (the stack's TableName output)")
    parser.add_argument(
        "--bucket",
        help="the stack's BucketName output (large bodies); by default found from the table's CloudFormation stack",
    )
    parser.add_argument("--workspace", help="only this workspace")
    parser.add_argument("--dry-run", action="store_true", help="count what is left, write nothing")
    parser.add_argument(
        "--strip", action="store_true", help="also remove tvec, tsig, tlen from the earlier releases' vector items"
    )
    parser.add_argument("--max-units", type=int, help="stop after indexing this many units (run again to go on)")
    args = parser.parse_args(argv)
    if args.max_units is not None and args.max_units < 1:
        parser.error(f"--max-units {args.max_units}: at least 1")
    db = db or connect(args.table, args.bucket)
    totals = run(db, workspace=args.workspace, dry_run=args.dry_run, strip=args.strip, max_units=args.max_units)
    return 1 if (totals.pending if args.dry_run else totals.left) else 0


if __name__ == "__main__":
    sys.exit(main())
