"""Dreams: deductive conclusions with their premises from a collection's explicit ones, and a refreshed card, once
per scheduled dream; armed by a count of new conclusions and an idle collection; visible in the queue status."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from tests.handlers import call, invoke
from tests.stream import message_records, stream_record

W = "/v3/workspaces/ws1"


def post(session: str, *messages: tuple[str, str]) -> None:
    reply = call(
        "POST",
        f"{W}/sessions/{session}/messages",
        {"messages": [{"peer_id": peer, "content": text} for peer, text in messages]},
    )
    assert reply.status == 201, reply.body


def derive(aws, session: str = "s1") -> None:
    assert invoke("DeriveFunction", {"Records": message_records(aws["dynamodb"], session_id=session)}) == {
        "batchItemFailures": []
    }


def dream_item(aws, observer: str = "alice", observed: str = "alice") -> dict | None:
    from precis.store import keys
    from precis.store.db import from_item, to_item

    item = (
        aws["dynamodb"]
        .get_item(TableName="precis-local", Key=to_item(keys.dream("ws1", observer, observed)), ConsistentRead=True)
        .get("Item")
    )
    return from_item(item) if item else None


def wake(aws) -> dict:
    """The stream's delivery of the dream item (as a scheduled dream's MODIFY arrives)."""
    from precis.store.db import to_item

    return invoke("DeriveFunction", {"Records": [stream_record(to_item(dream_item(aws)), "MODIFY")]})


def listed(**filters) -> list[dict]:
    return call(
        "POST", f"{W}/conclusions/list", {"filters": {"observer_id": "alice", "observed_id": "alice", **filters}}
    ).body["items"]


@pytest.fixture
def ws(aws):
    assert call("POST", "/v3/workspaces", {"id": "ws1"}).status == 201
    post(
        "s1",
        ("alice", "I moved to Lisbon last spring."),
        ("alice", "I work as a nurse at the children's hospital."),
        ("alice", "My sister is Ana."),
    )
    derive(aws)
    return aws


def test_an_offline_dream_refreshes_the_card_and_never_touches_a_stated_conclusion(ws):
    explicit = listed()
    assert call("PUT", f"{W}/peers/alice/card", {"peer_card": ["IDENTITY: alice is a pilot"]}).status == 200
    assert (
        call(
            "POST",
            f"{W}/schedule_dream",
            {"observer": "alice", "observed": "alice", "session_id": None, "dream_type": "omni"},
        ).status
        == 204
    )
    assert call("GET", f"{W}/queue/status").body["pending_work_units"] == 1  # visible while pending
    assert wake(ws) == {"batchItemFailures": []}
    assert listed() == explicit  # no deductions offline, and nothing stated is removed
    card = call("GET", f"{W}/peers/alice/card").body["peer_card"]
    assert "IDENTITY: alice is a pilot" not in card and any("Lisbon" in e for e in card)
    status = call("GET", f"{W}/queue/status").body
    assert status["pending_work_units"] == status["in_progress_work_units"] == 0
    assert "due_at" not in dream_item(ws) and dream_item(ws)["dreams"] == 1


@pytest.mark.parametrize(
    "body, status",
    [
        ({"observer": "nobody"}, 404),
        ({"observer": "alice", "observed": "nobody"}, 404),
        ({"observer": "alice", "session_id": "nope"}, 404),
        ({"observer": "alice", "dream_type": "nap"}, 422),
        ({"observed": "alice"}, 422),
        ({"observer": "bad id"}, 422),
        ({"observer": "alice", "extra": 1}, 422),
    ],
)
def test_schedule_dream_bad_inputs(ws, body, status):
    before = dream_item(ws)
    assert call("POST", f"{W}/schedule_dream", body).status == status
    assert dream_item(ws) == before


def test_the_dream_is_armed_by_new_conclusions_and_waits_for_an_idle_collection(ws, monkeypatch):
    """The deriver's clock is injected (derive_session's `now`): conclusions written hours ago, each pushing the dream
    back; the flush's query (dreams_due) at chosen moments; then the scheduled flush itself runs the due dream."""
    from precis.llm.embeddings import configured_embedder
    from precis.memory.deriver import SessionTarget, derive_session
    from precis.memory.dreams import DreamTarget, dreams_due
    from precis.memory.engines import get_deriver_engine
    from precis.settings import get_settings
    from precis.store.db import get_db

    monkeypatch.setenv("PRECIS_DREAM_MIN_CONCLUSIONS", "4")
    monkeypatch.setenv("PRECIS_DREAM_IDLE_S", "3600")
    get_settings.cache_clear()
    settings, db, hour = get_settings(), get_db(), timedelta(hours=1)
    engine = get_deriver_engine("extractive", settings)
    alice = DreamTarget("ws1", "alice", "alice")

    def said_at(moment: datetime, text: str) -> None:
        post("s1", ("alice", text))
        outcome = derive_session(
            db,
            settings,
            SessionTarget("ws1", "s1"),
            senders=["alice"],
            engine_for=lambda _: engine,
            embedder=configured_embedder(),
            now=lambda: moment,
        )
        assert outcome.conclusions == 1, outcome

    assert dream_item(ws)["fresh"] == 3 and "due_at" not in dream_item(ws)
    assert invoke("DeriveFunction", {"precis": "flush"}) == {"flushed": 0, "failed": 0}  # not armed: nothing to run
    first = datetime.now(UTC) - 3 * hour
    said_at(first, "I like green tea.")
    assert dream_item(ws)["fresh"] == 4 and dream_item(ws)["due_at"] == (first + hour).isoformat()
    assert dreams_due(db, "ws1", first + hour - timedelta(seconds=1)) == []  # waits for an idle hour
    assert dreams_due(db, "ws1", first + hour) == [alice]
    second = first + hour / 2
    said_at(second, "I play the cello on Fridays.")
    assert dream_item(ws)["fresh"] == 5 and dream_item(ws)["due_at"] == (second + hour).isoformat()  # pushed back
    assert dreams_due(db, "ws1", first + hour) == []
    assert dreams_due(db, "ws1", second + hour) == [alice]
    assert call("GET", f"{W}/queue/status").body["pending_work_units"] == 1  # due: a client sees it waiting

    assert invoke("DeriveFunction", {"precis": "flush"}) == {"flushed": 1, "failed": 0}  # the schedule runs it
    dreamt = dream_item(ws)
    assert dreamt["fresh"] == 0 and dreamt["dreams"] == 1 and "due_at" not in dreamt
    assert invoke("DeriveFunction", {"precis": "flush"}) == {"flushed": 0, "failed": 0}  # ran once


# ---------------------------------------------------------------- the llm engine


def deduce(body: dict):
    """The local model's answers: deductions from the explicit ids it is given, a card, else nothing."""
    text = json.dumps(body.get("response_format") or {})
    prompt = body["messages"][-1]["content"]
    if "deductive_conclusions" in text or "<explicit>" in prompt:
        ids = [line[1 : line.index("]")] for line in prompt.splitlines() if line.startswith("[")]
        return json.dumps(
            {
                "deductive": [
                    {"content": "alice works in healthcare in Lisbon", "premises": ids[:2]},
                    {"content": "alice has at least one sibling", "premises": [ids[2], "made-up-id"]},
                    {"content": "alice is an astronaut", "premises": ["made-up-id"]},
                ]
            }
        )
    if "peer_card" in text:
        return json.dumps({"peer_card": ["IDENTITY: alice is a nurse in Lisbon"]})
    return json.dumps({"explicit": []})


@pytest.fixture
def llm(ws, llm_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", llm_server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("PRECIS_LLM_MAX_ATTEMPTS", "2")
    from precis.settings import get_settings

    get_settings.cache_clear()  # the memory was derived offline (ws); the dream asks the model
    llm_server.answer = deduce
    return llm_server


def test_a_scheduled_dream_writes_deductions_with_their_premises_once(llm, ws):
    explicit = {c["id"]: c for c in listed(level="explicit")}
    from precis.store.db import to_item

    assert call("POST", f"{W}/schedule_dream", {"observer": "alice"}).status == 204
    scheduled = stream_record(to_item(dream_item(ws)), "MODIFY")
    assert invoke("DeriveFunction", {"Records": [scheduled]}) == {"batchItemFailures": []}
    # The same record redelivered, twice at once: the dream already ran, nothing more is written or asked.
    assert invoke("DeriveFunction", {"Records": [scheduled, scheduled]}) == {"batchItemFailures": []}
    deductive = listed(level="deductive")
    assert sorted(c["content"] for c in deductive) == [
        "alice has at least one sibling",
        "alice works in healthcare in Lisbon",
    ]
    assert all(set(c["source_ids"]) <= set(explicit) and c["source_ids"] for c in deductive)
    assert {c["id"]: c for c in listed(level="explicit")} == explicit  # stated conclusions untouched
    dreams = [r for r in llm.requests if "<explicit>" in r.body["messages"][-1]["content"]]
    assert len(dreams) == 1  # the model is asked once per dream
    assert call("GET", f"{W}/peers/alice/card").body["peer_card"] == ["IDENTITY: alice is a nurse in Lisbon"]
    premise = deductive[0]["source_ids"][0]
    found = call("POST", f"{W}/conclusions/list", {"filters": {"source_ids": {"contains": premise}}})
    assert deductive[0]["id"] in {c["id"] for c in found.body["items"]}


def test_a_failing_model_leaves_the_dream_due_for_the_schedule(llm, ws):
    llm.mode = "500"
    assert call("POST", f"{W}/schedule_dream", {"observer": "alice"}).status == 204
    assert wake(ws)["batchItemFailures"]  # the record fails: the stream retries it
    assert listed(level="deductive") == [] and "due_at" in dream_item(ws) and "job" not in dream_item(ws)
    llm.mode = "ok"
    assert invoke("DeriveFunction", {"precis": "flush"})["failed"] == 0
    assert len(listed(level="deductive")) == 2


def test_a_dream_tells_the_model_only_the_newest_deductions_it_knows(llm, ws):
    """Each dream adds deductive conclusions and every later dream was told all of them: the prompt grew with the
    collection until the model refused it. It names the newest MAX_KNOWN only (a repeat is deduplicated on write)."""
    from precis.llm.embeddings import configured_embedder
    from precis.memory.dreams import MAX_KNOWN
    from precis.store import conclusions
    from precis.store.db import get_db

    known = [conclusions.Derived(f"alice deduction number {i}", level="deductive") for i in range(MAX_KNOWN + 20)]
    conclusions.write(get_db(), "ws1", "alice", "alice", known, embedder=configured_embedder())
    assert call("POST", f"{W}/schedule_dream", {"observer": "alice"}).status == 204
    assert wake(ws) == {"batchItemFailures": []}
    prompt = next(
        r.body["messages"][-1]["content"] for r in llm.requests if "<explicit>" in r.body["messages"][-1]["content"]
    )
    told = prompt.split("<known>\n")[1].split("\n</known>")[0].splitlines()
    assert len(told) == MAX_KNOWN and told[-1] == f"alice deduction number {MAX_KNOWN + 19}"
