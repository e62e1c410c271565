"""Runs and the deployment's summary defaults through the honcho-ai SDK (unchanged) and the local stack, which reads
the defaults from template.yaml and takes `make dev`'s PRECIS_SUMMARY_* overrides (README, "Deploying")."""

from __future__ import annotations

import httpx
import pytest
from honcho import Honcho
from honcho.http.exceptions import UnprocessableEntityError

from tests.stack import wait_for

pytestmark = pytest.mark.stack
# What an operator sets for every SDK user (the SDK itself cannot send `summarizer` settings or `whole_runs`).
STACK_ENV = {
    "PRECIS_SUMMARY_STRATEGY": "rolling",
    "PRECIS_SUMMARY_TOKEN_THRESHOLD": "600",
    "PRECIS_SUMMARY_KEEP_RECENT_RUNS": "2",
    "PRECIS_SUMMARY_WHOLE_RUNS": "true",
}


def post_runs(session, user, agent, runs: range) -> None:
    """Agent executions (the user's question, a tool call and the answer, sharing a run in metadata), in one batch:
    the summarizer sees them all at once, so where its fold ends does not depend on how fast it runs."""
    batch = []
    for r in runs:
        run = {"run_id": f"turn-{r}"}
        batch.extend(
            [
                user.message(
                    f"Question {r}: what did the supplier quote for batch {r}, and does it fit the budget?",
                    metadata=run,
                ),
                agent.message(
                    f'{{"tool": "quotes.lookup", "batch": {r}, "result": "{r * 120} euros, delivery in '
                    f'{r + 3} days, valid until Friday"}}',
                    metadata=run,
                ),
                agent.message(
                    f"Batch {r} costs {r * 120} euros; that fits the remaining budget, so I approved it.", metadata=run
                ),
            ]
        )
    session.add_messages(batch)


def starts_a_run(history: list, first_id: str) -> bool:
    index = [m.id for m in history].index(first_id)
    return index == 0 or history[index - 1].metadata.get("run_id") != history[index].metadata.get("run_id")


def test_runs_sent_in_metadata_get_a_rolling_summary_and_whole_runs_by_default(stack):
    client = Honcho(base_url=stack.url, api_key="local", workspace_id="sdk-runs")
    user, agent = client.peer("user"), client.peer("agent")
    session = client.session("chat")
    post_runs(session, user, agent, range(10))  # ~700 tokens: over the deployment's threshold of 600
    rolling = wait_for(lambda: (s := session.summaries().long_summary) and s.summary_type == "rolling" and s, 60)
    history = list(session.messages())
    assert all(m.metadata["run_id"] == f"turn-{i // 3}" for i, m in enumerate(history))
    # The fold ends at a run end, keeps the newest two complete runs (7, 8) and the open one (9) verbatim.
    covered = [m.id for m in history].index(rolling.message_id)
    assert covered == 20 and history[covered].metadata["run_id"] == "turn-6"
    # The cap: 600 / 16, at least 64; and a quarter of the threshold at most.
    assert 0 < rolling.token_count <= 64 <= 600 // 4

    raw = httpx.Client(base_url=stack.url)
    split_somewhere = False
    for tokens in range(20, 800, 15):
        context = session.context(tokens=tokens)
        if context.messages:
            assert starts_a_run(history, context.messages[0].id), tokens  # never part of a run
        half = raw.get(
            "/v3/workspaces/sdk-runs/sessions/chat/context", params={"tokens": tokens, "whole_runs": "false"}
        ).json()  # the parameter still wins over the default
        if half["messages"] and not starts_a_run(history, half["messages"][0]["id"]):
            split_somewhere = True
    assert split_somewhere, "no budget would have split a run: the test proves nothing"


def test_a_bad_run_in_metadata_is_refused_by_name(stack):
    client = Honcho(base_url=stack.url, api_key="local", workspace_id="sdk-bad-runs", max_retries=0)
    session = client.session("chat")
    with pytest.raises(UnprocessableEntityError, match=r"messages\[0\]\.metadata\.run_id"):
        session.add_messages([client.peer("user").message("hi", metadata={"run_id": "not a run"})])
    assert list(session.messages()) == []
