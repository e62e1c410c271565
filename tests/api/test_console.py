"""The console (GET /console): its files and headers over HTTP, and the page itself in a real browser (Playwright
driving the system's Chromium, tests/browser.py) against the local stack, checked against the API's own answers."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import httpx
import pytest

from local.template import LAYER_DIR, ROOT
from precis.api import console
from precis.auth import ROUTES, Access, mint_key
from tests.handlers import http_event, invoke
from tests.stack import Stack, request, wait_for

WS = "console"
SECRET = "console-test-secret-0123456789abcdef"
HOSTILE = """<script>window.__pwned = "script"</script> I like <img src=x onerror="window.__pwned = 'img'"> a lot"""
SETTLE_S = 600
# A hang guard, not a speed limit: the first browser test also pays for seeding the stack (summaries, conclusions),
# which on a busy machine takes longer than the suite's default timeout.
pytestmark = pytest.mark.timeout(1200)
BUDGETS = (300, 1000, 2000)  # messages only and skipping; no summary (40% < its size); the summary and messages


# ---------------------------------------------------------------- the files, over HTTP


def _get(path: str, headers: dict[str, str] | None = None) -> dict:
    function, event = http_event("GET", path, headers=headers)
    assert function == "ContextFunction"
    return invoke(function, event)


def _headers(answer: dict) -> dict[str, str]:
    return {k.lower(): v for k, v in (answer.get("headers") or {}).items()}


@pytest.mark.parametrize(
    ("path", "name", "content_type"),
    [
        ("/console", "index.html", "text/html; charset=utf-8"),
        ("/console/console.js", "console.js", "text/javascript; charset=utf-8"),
        ("/console/console.css", "console.css", "text/css; charset=utf-8"),
        ("/console/favicon.svg", "favicon.svg", "image/svg+xml"),
    ],
)
def test_console_files_are_served_with_their_type_and_a_strict_csp(path, name, content_type):
    answer = _get(path)
    headers = _headers(answer)
    assert answer["statusCode"] == 200
    assert headers["content-type"] == content_type
    assert answer["body"] == (LAYER_DIR / "precis" / "api" / "console" / name).read_text(encoding="utf-8")
    policy = dict(part.strip().split(" ", 1) for part in headers["content-security-policy"].split(";"))
    assert policy["default-src"] == "'none'" and policy["script-src"] == "'self'"
    assert policy["style-src"] == "'self'" and policy["connect-src"] == "'self'"
    assert policy["frame-ancestors"] == "'none'" and policy["form-action"] == "'none'"
    assert "unsafe" not in headers["content-security-policy"]  # no inline script or style, no eval
    assert headers["x-content-type-options"] == "nosniff"


def test_the_page_loads_nothing_from_elsewhere_and_nothing_inline():
    page = (LAYER_DIR / "precis" / "api" / "console" / "index.html").read_text()
    assert "<style" not in page and not re.search(r"\sstyle\s*=", page)
    assert not re.search(r"\son[a-z]+\s*=", page)  # no inline event handler
    assert not re.search(r"(https?:)?//", page)  # no URL of another origin, no protocol-relative one
    assert re.findall(r'(?:src|href)="([^"#]+)"', page) == [
        "/console/favicon.svg",
        "/console/console.css",
        "/console/console.js",
    ]
    script = (LAYER_DIR / "precis" / "api" / "console" / "console.js").read_text()
    assert "innerHTML" not in script and "insertAdjacentHTML" not in script and "eval(" not in script
    assert "outerHTML" not in script and "document.write" not in script


@pytest.mark.parametrize(
    "name",
    [
        "nope.js",
        "__init__.py",
        "..",
        "...",
        "index.htm",
        "console.js.map",
        "CONSOLE.JS",
        "%2e%2e",
        "..%2f__init__.py",
        "console.js%00",
    ],
)
def test_any_other_console_name_is_404(name):
    answer = _get(f"/console/{name}")
    assert answer["statusCode"] == 404
    assert _headers(answer)["content-type"] == "application/json"
    assert "no such console file" in json.loads(answer["body"])["detail"]


@pytest.mark.stack
def test_make_dev_prints_the_console_url_beside_the_api_s(stack):
    log = stack.log.read_text()
    assert f"Precis local stack: {stack.url}\nconsole: {stack.url}/console " in log
    status, headers, body = request(stack.port, "GET", "/console")
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8" and b"<title>Precis console" in body


@pytest.mark.stack
def test_no_path_through_the_gateway_reaches_another_file(stack):
    for path in (
        "/console/../functions/context/app.py",
        "/console/..%2F__init__.py",
        "/console/%2e%2e%2fauth.py",
        "/console/..%2f..%2f..%2ftemplate.yaml",
        "/console//etc/passwd",
        "/console/console.js/..%2f..%2fauth.py",
        "/console/%2e%2e",
        "/console/..%5c__init__.py",
        "/console/",
    ):
        status, headers, body = request(stack.port, "GET", path)
        assert status == 404, (path, status, body[:200])
        assert b"import" not in body and b"Resources:" not in body and b"root:" not in body, path


def test_the_console_needs_no_key_and_every_v3_route_still_does(aws, monkeypatch):
    from precis.settings import get_settings

    monkeypatch.setenv("PRECIS_AUTH", "true")
    monkeypatch.setenv("PRECIS_JWT_SECRET", SECRET)
    get_settings.cache_clear()
    assert {route for route, access in ROUTES.items() if access is Access.PUBLIC} == {
        "GET /health",
        "GET /openapi.json",
        "GET /docs",
        "GET /docs/{name}",
        "GET /console",
        "GET /console/{name}",
    }
    for path in ("/console", "/console/console.js", "/console/console.css"):
        assert _get(path)["statusCode"] == 200
    assert _get("/console/nope.js")["statusCode"] == 404
    for path in (
        f"/v3/workspaces/{WS}/sessions/s1/context",
        f"/v3/workspaces/{WS}/sessions/s1/summaries",
        f"/v3/workspaces/{WS}/peers/alice/card",
        f"/v3/workspaces/{WS}/queue/status",
    ):
        assert _get(path)["statusCode"] == 401
        assert _get(path, {"authorization": f"Bearer {mint_key('not-' + SECRET, admin=True)}"})["statusCode"] == 401


def test_the_context_function_reads_the_console_files_only_when_asked():
    """Its cold start imports no console module and reads no console file; the first request reads one file."""
    code = (
        "import importlib.util, sys; "
        "spec = importlib.util.spec_from_file_location('app', 'functions/context/app.py');"
        "app = importlib.util.module_from_spec(spec); spec.loader.exec_module(app);"
        "assert 'precis.api.console' not in sys.modules, 'imported at cold start'"
    )
    env = {**os.environ, "PYTHONPATH": str(LAYER_DIR), "POWERTOOLS_METRICS_NAMESPACE": "Precis"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    console._read.cache_clear()
    _get("/console/console.css")
    assert console._read.cache_info().currsize == 1


# ---------------------------------------------------------------- the page, in a browser


class Console:
    """One browser tab on the console, collecting the page's errors: console 'error' messages and uncaught
    exceptions. A test names the errors it causes on purpose (a refused key is logged by Chromium as a failed load)."""

    def __init__(self, chrome, base: str, viewport: dict[str, int]):
        self.context = chrome.new_context(viewport=viewport)
        self.page = self.context.new_page()
        self.base = base
        self.errors: list[str] = []
        self.expected: tuple[str, ...] = ()
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(f"console: {m.text}"))
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))

    def open(self, fragment: str = "") -> None:
        self.page.goto(f"{self.base}/console{fragment}")

    def session(self, session_id: str) -> None:
        self.open(f"#/w/{WS}/s/{session_id}")
        self.page.wait_for_selector("#bar[data-budget]")

    def drawn(self, params: dict[str, str]) -> None:
        """Wait until the bar answers exactly these context parameters."""
        want = json.dumps(dict(sorted(params.items())), separators=(",", ":"))
        self.page.wait_for_function("want => document.getElementById('bar').dataset.params === want", arg=want)

    def unexpected_errors(self) -> list[str]:
        return [e for e in self.errors if not any(part in e for part in self.expected)]

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def tab(chromium, stack, seeded):
    opened = Console(chromium, stack.url, {"width": 1280, "height": 800})
    yield opened
    errors = opened.unexpected_errors()
    opened.close()
    assert not errors, errors


def _api(url: str, key: str | None = None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=url, timeout=30, headers=headers)


@pytest.fixture(scope="module")
def seeded(stack):
    """Workspace `console`: s1 (58 messages in runs of two, alice then bot, its short summary through #40, alice's
    conclusions and card), `hostile` (HTML in a message), `live`, and p-01…p-24 (for paging)."""
    api = _api(stack.url)
    api.post("/v3/workspaces", json={"id": WS}).raise_for_status()
    s = f"/v3/workspaces/{WS}/sessions"
    api.post(s, json={"id": "s1", "peers": {"alice": {}, "bot": {"observe_others": True}}}).raise_for_status()
    messages = [
        {
            "peer_id": "alice",
            "run_id": f"turn-{(i + 1) // 2}",
            "content": f"I live in Lisbon and I walk my dog Rex, day {i}. I like hiking on weekends.",
        }
        if i % 2
        else {
            "peer_id": "bot",
            "run_id": f"turn-{(i + 1) // 2}",
            "content": f"Noted, reply {i}: Lisbon is lovely in spring.",
        }
        for i in range(1, 46)
    ]
    api.post(f"{s}/s1/messages", json={"messages": messages}).raise_for_status()
    api.post(s, json={"id": "hostile", "peers": {"alice": {}}}).raise_for_status()
    api.post(
        f"{s}/hostile/messages",
        json={
            "messages": [{"peer_id": "alice", "content": HOSTILE}]
            + [{"peer_id": "alice", "content": f"Plain message {i}."} for i in range(21)]
        },
    ).raise_for_status()
    api.post(f"{s}/live/messages", json={"messages": [{"peer_id": "alice", "content": "first"}]}).raise_for_status()
    for i in range(1, 25):
        api.post(s, json={"id": f"p-{i:02d}"}).raise_for_status()

    def settled(session_id: str, covers: int | None = None) -> bool:
        summaries = api.get(f"{s}/{session_id}/summaries")
        queue = api.get(f"/v3/workspaces/{WS}/queue/status", params={"session_id": session_id})
        if summaries.status_code >= 500 or queue.status_code >= 500:
            return False  # a read past the function's timeout on a busy machine (the local stack answers 500): again
        summaries.raise_for_status()
        queue.raise_for_status()
        summary, queue = summaries.json()["short_summary"], queue.json()
        if summary is None or queue["pending_work_units"] or queue["in_progress_work_units"]:
            return False
        return covers is None or api.get(f"{s}/{session_id}/messages/{summary['message_id']}").json()["seq"] == covers

    # The stack's background work, waited on: the bounds only keep a broken build from hanging (a busy machine is slow).
    wait_for(lambda: settled("s1", 40) and settled("hostile"), timeout=SETTLE_S)
    # Then messages the summary does not cover: the window holds the summary and these (no summary is due yet).
    api.post(
        f"{s}/s1/messages",
        json={
            "messages": [
                {
                    "peer_id": "alice" if i % 2 else "bot",
                    "run_id": f"turn-{(i + 1) // 2}",
                    "content": f"Later message {i}: the weather in Lisbon stays mild.",
                }
                for i in range(46, 59)
            ]
        },
    ).raise_for_status()
    wait_for(lambda: settled("s1", 40), timeout=SETTLE_S)
    wait_for(lambda: api.get(f"/v3/workspaces/{WS}/peers/alice/card").json()["peer_card"], timeout=SETTLE_S)
    return api


def _context(api: httpx.Client, session_id: str, params: dict[str, str]) -> dict:
    answer = api.get(f"/v3/workspaces/{WS}/sessions/{session_id}/context", params=params)
    answer.raise_for_status()
    return answer.json()


def _segments(tab: Console) -> tuple[float, dict[str, tuple[int, float]]]:
    """The bar's width and each segment's (tokens, width in px), as the browser laid them out."""
    width, segments = tab.page.evaluate("""() => {
        const bar = document.getElementById('bar');
        return [bar.getBoundingClientRect().width, [...bar.querySelectorAll('.seg')].map(
            s => [s.dataset.part, Number(s.dataset.tokens), s.getBoundingClientRect().width])];
    }""")
    return width, {part: (tokens, px) for part, tokens, px in segments}


def _set_budget(tab: Console, budget: int) -> None:
    tab.page.fill("#budget", str(budget))


@pytest.mark.stack
def test_the_page_lists_the_workspace_and_a_seeded_session_and_opens_it(tab):
    tab.open()
    tab.page.get_by_role("button", name=WS, exact=True).click()
    tab.page.wait_for_selector("#session-list button")
    tab.page.fill("#session-filter", "s1")  # 27 sessions: s1, by id, is on the second page
    tab.page.get_by_role("button", name="s1", exact=True).click()
    tab.page.wait_for_selector("#bar[data-budget='2000']")
    assert tab.page.url.endswith(f"/console#/w/{WS}/s/s1")
    assert tab.page.locator("#session-title").text_content() == f"Session s1 · workspace {WS}"
    assert tab.page.locator("#timeline .msg").count() == 58
    assert tab.page.locator("#problem").is_hidden()


@pytest.mark.stack
def test_sessions_are_paged_and_filtered_by_id(tab, seeded):
    everything = [
        s["id"]
        for s in seeded.post(f"/v3/workspaces/{WS}/sessions/list", params={"size": 100}, json={}).json()["items"]
    ]
    assert 20 < len(everything) <= 40
    tab.open(f"#/w/{WS}")
    picks = tab.page.locator("#session-list button")
    tab.page.wait_for_selector("#sessions-pager:not([hidden])")
    assert picks.count() == 20 and tab.page.locator("#sessions-page").text_content() == "Page 1 of 2"
    first_page = picks.all_text_contents()
    tab.page.click("#sessions-next")
    tab.page.wait_for_function("() => document.getElementById('sessions-page').textContent === 'Page 2 of 2'")
    assert picks.count() == len(everything) - 20 and not set(picks.all_text_contents()) & set(first_page)
    assert sorted(first_page + picks.all_text_contents()) == sorted(everything)
    tab.page.fill("#session-filter", "P-1")
    tab.page.wait_for_function("() => document.getElementById('session-list').children.length === 10")
    assert picks.all_text_contents() == [f"p-{i}" for i in range(10, 20)]
    assert tab.page.locator("#sessions-pager").is_hidden()


@pytest.mark.stack
def test_the_bar_is_drawn_to_scale_from_the_api_token_counts(tab, seeded):
    tab.session("s1")
    seen_summary = False
    for budget in BUDGETS:
        _set_budget(tab, budget)
        tab.drawn({"tokens": str(budget)})
        context = _context(seeded, "s1", {"tokens": budget})
        width, segments = _segments(tab)
        summary = context["summary"]["token_count"] if context["summary"] else 0
        messages = sum(m["token_count"] for m in context["messages"])
        expected = {
            "summary": summary,
            "messages": messages,
            "representation": 0,
            "card": 0,
            "unused": budget - context["token_count"],
        }
        assert {part: tokens for part, (tokens, _) in segments.items()} == expected, budget
        for part, (tokens, px) in segments.items():
            assert abs(px - width * tokens / budget) <= 1.0, (budget, part, px, width * tokens / budget)
        caption = tab.page.locator("#bar-caption").text_content()
        assert caption.startswith(f"{context['token_count']:,} of {budget:,} tokens")
        seen_summary |= summary > 0
    assert seen_summary  # one of the budgets draws the summary

    # With a peer target the representation and the card share what the API counts beyond summary and messages.
    tab.page.select_option("#ctx-peer-target", "alice")
    _set_budget(tab, 1500)
    tab.drawn({"tokens": "1500", "peer_target": "alice"})
    context = _context(seeded, "s1", {"tokens": 1500, "peer_target": "alice"})
    width, segments = _segments(tab)
    summary = context["summary"]["token_count"] if context["summary"] else 0
    messages = sum(m["token_count"] for m in context["messages"])
    assert context["peer_card"] and segments["card"][0] > 0
    assert segments["summary"][0] == summary and segments["messages"][0] == messages
    assert segments["card"][0] == context["card_token_count"] > 0  # exact: the API says what the card takes
    assert segments["representation"][0] == context["token_count"] - summary - messages - context["card_token_count"]
    assert segments["unused"][0] == 1500 - context["token_count"]
    for part, (tokens, px) in segments.items():
        assert abs(px - width * tokens / 1500) <= 1.0, (part, px)
    legend = tab.page.locator("#bar-legend").text_content()
    assert "Card" in legend and f"{len(context['peer_card'])} entries" in legend


@pytest.mark.stack
@pytest.mark.parametrize(
    ("params", "controls"),
    [
        ({"tokens": "300", "whole_runs": "true"}, {"#ctx-whole-runs": "true"}),
        ({"tokens": "2000"}, {}),
        ({"tokens": "2000", "summary": "false"}, {"#ctx-summary": False}),
    ],
    ids=["300-whole-runs", "2000", "2000-no-summary"],
)
def test_the_messages_marked_in_the_window_are_exactly_the_api_s(tab, seeded, params, controls):
    tab.session("s1")
    for selector, value in controls.items():
        if isinstance(value, bool):
            tab.page.set_checked(selector, value)
        else:
            tab.page.select_option(selector, value)
    _set_budget(tab, int(params["tokens"]))
    tab.drawn(params)
    context = _context(seeded, "s1", params)
    marked = tab.page.eval_on_selector_all(".msg.in-window", "ms => ms.map(m => m.dataset.id)")
    assert marked and marked == [m["id"] for m in context["messages"]]
    # The window's start is marked just before its first message, with the count of skipped messages.
    order = tab.page.eval_on_selector_all(
        ".boundary, .msg",
        "ns => ns.map(n => n.dataset.boundary ? ['b:' + n.dataset.boundary, n.textContent] : ['m', n.dataset.id])",
    )
    start = next(i for i, (kind, _) in enumerate(order) if kind == "b:window-start")
    assert order[start + 1] == ["m", context["messages"][0]["id"]]
    skipped = context["messages_skipped"]
    assert (f"{skipped} older message" in order[start][1]) == (skipped > 0), order[start][1]
    # The short summary's end is marked after #40, the last message it covers (the last run end at or before #40).
    end = next(i for i, (kind, _) in enumerate(order) if kind == "b:summary-end")
    assert order[end - 1][0] == "m" and tab.page.get_attribute(f"#m-{order[end - 1][1]}", "data-seq") == "40"


@pytest.mark.stack
def test_summaries_card_conclusions_search_and_queue_are_shown(tab, seeded):
    tab.session("s1")
    summaries = seeded.get(f"/v3/workspaces/{WS}/sessions/s1/summaries").json()
    short = tab.page.locator("#summaries article[data-type='honcho_chat_summary_short']")
    assert short.locator(".text").text_content() == summaries["short_summary"]["content"]
    meta = short.locator(".meta").text_content()
    assert "covers messages through #40" in meta and f"{summaries['short_summary']['token_count']} tokens" in meta
    assert "written 20" in meta

    tab.page.select_option("#peer-select", "alice")
    tab.page.wait_for_selector("#peer-memory .conclusions li")
    card = seeded.get(f"/v3/workspaces/{WS}/peers/alice/card").json()["peer_card"]
    assert tab.page.locator("#peer-memory .card-list li").all_text_contents() == card
    conclusions = seeded.post(
        f"/v3/workspaces/{WS}/conclusions/list", params={"size": 20}, json={"filters": {"observed_id": "alice"}}
    ).json()["items"]
    shown = tab.page.locator("#peer-memory .conclusions li")
    assert shown.evaluate_all("ls => ls.map(l => l.dataset.id)") == [c["id"] for c in conclusions]  # newest first
    first = shown.first.locator(".meta").text_content()
    # Which session's conclusion is newest depends on when the deriver reached each seeded session: ask the API.
    assert f"derived {conclusions[0]['times_derived']} time" in first
    assert f"session {conclusions[0]['session_id']}" in first

    tab.page.fill("#search-query", "dog Rex")
    tab.page.press("#search-query", "Enter")
    tab.page.wait_for_selector("#search-results li")
    found = seeded.post(f"/v3/workspaces/{WS}/sessions/s1/search", json={"query": "dog Rex", "limit": 20}).json()
    assert tab.page.locator("#search-results li").evaluate_all("ls => ls.map(l => l.dataset.id)") == [
        m["id"] for m in found
    ]
    tab.page.locator("#search-results li button").first.click()
    assert tab.page.evaluate("document.activeElement.dataset.id") == found[0]["id"]

    queue = seeded.get(f"/v3/workspaces/{WS}/queue/status", params={"session_id": "s1"}).json()
    counts = tab.page.locator("#queue dd").all_text_contents()
    assert counts == [
        str(queue[k])
        for k in ("pending_work_units", "in_progress_work_units", "completed_work_units", "total_work_units")
    ]


@pytest.mark.stack
def test_html_in_a_message_is_shown_as_text_and_runs_nothing(tab, seeded):
    tab.session("hostile")
    view = tab.page.locator("#session-view")
    assert tab.page.locator("#timeline .msg .text").first.text_content() == HOSTILE
    tab.page.select_option("#peer-select", "alice")
    tab.page.check("#conclusions-this-session")
    tab.page.wait_for_selector("#peer-memory .conclusions li .text:has-text('<img src=x')")
    tab.page.fill("#search-query", "like a lot")
    tab.page.press("#search-query", "Enter")
    tab.page.wait_for_selector("#search-results li")
    tab.page.select_option("#ctx-peer-target", "alice")
    tab.drawn({"tokens": "2000", "peer_target": "alice"})
    tab.page.click("#context-detail summary")
    # Timeline, search results, conclusions (and the summary, card and representation when they quote it) hold the
    # markup as text: no element was made of it, nothing ran, nothing was fetched.
    assert view.get_by_text('<img src=x onerror="window.__pwned', exact=False).count() >= 2
    assert view.locator("img, script, iframe, object, embed").count() == 0
    assert tab.page.evaluate("typeof window.__pwned") == "undefined"
    conclusions = tab.page.locator("#peer-memory .conclusions .text").all_text_contents()
    assert any("<img src=x" in text for text in conclusions), conclusions


# The page's own log of its context reads, in its own clock (performance.now): the browser's fetch, wrapped before the
# console's script loads; the console runs unchanged.
CONTEXT_READS = """(() => {
  const fetch = window.fetch;
  window.__contextReads = [];
  window.fetch = function (input, init) {
    if (String(input && input.url || input).includes("/sessions/live/context")) {
      window.__contextReads.push(performance.now());
    }
    return fetch.call(this, input, init);
  };
})();"""


@pytest.mark.stack
def test_live_refresh_shows_a_new_message_polling_at_most_every_2_s(tab, seeded):
    """The page's clock is Playwright's, paused: its timers fire only when the test moves its time, so the polling
    interval is the page's own, whatever the machine's load."""
    page = tab.page
    page.add_init_script(CONTEXT_READS)
    page.clock.install(time=1_767_225_600_000)
    page.clock.pause_at(1_767_225_601_000)
    tab.session("live")
    page.wait_for_selector("#timeline .msg[data-seq='1']")
    reads = lambda: page.evaluate("window.__contextReads")  # noqa: E731
    first = reads()
    assert len(first) == 1, first  # the round that drew the session
    seeded.post(
        f"/v3/workspaces/{WS}/sessions/live/messages",
        json={"messages": [{"peer_id": "alice", "content": "second, posted while the page is open"}]},
    )
    page.clock.run_for(1999)
    assert reads() == first  # no round sooner than 2 s after the last one began
    page.clock.run_for(1)
    page.wait_for_selector("#timeline .msg[data-seq='2'].in-window")  # the round at 2 s shows the new message
    both = reads()
    assert len(both) == 2 and both[1] - both[0] == 2000, both
    page.uncheck("#live")
    page.clock.run_for(60_000)
    assert reads() == both  # live refresh off: no more reads


@pytest.mark.stack
def test_a_long_session_shows_its_newest_100_messages_and_loads_older_ones_on_demand(tab, seeded):
    path = f"/v3/workspaces/{WS}/sessions/long/messages"
    for start in (1, 101):
        seeded.post(
            path,
            json={
                "messages": [{"peer_id": "bot", "content": f"Line {i}."} for i in range(start, min(start + 100, 131))]
            },
        ).raise_for_status()
    tab.session("long")
    seqs = lambda: tab.page.eval_on_selector_all("#timeline .msg", "ms => ms.map(m => Number(m.dataset.seq))")  # noqa: E731
    assert seqs() == list(range(31, 131))
    assert tab.page.locator("#older-note").text_content().startswith("30 older messages not loaded.")
    tab.page.click("#load-older")
    tab.page.wait_for_function("() => document.querySelectorAll('#timeline .msg').length === 130")
    assert seqs() == list(range(1, 131)) and tab.page.locator("#older").is_hidden()


@pytest.mark.stack
def test_keyboard_alone_reaches_a_session_and_every_control_has_a_label(tab):
    tab.open()
    tab.page.wait_for_selector(f"#workspace-list button:text-is('{WS}')")

    def tab_to(text: str = "", id: str = "") -> None:
        for _ in range(60):
            tab.page.keyboard.press("Tab")
            focused = tab.page.evaluate("[document.activeElement.textContent.trim(), document.activeElement.id]")
            if focused == [text, id]:
                return
        raise AssertionError(f"Tab never reached {text or id!r}")

    tab_to(WS)
    tab.page.keyboard.press("Enter")
    tab.page.wait_for_selector("#session-list button")
    assert tab.page.evaluate("document.activeElement.textContent") == WS  # the pressed button keeps the focus
    tab_to(id="session-filter")
    tab.page.keyboard.type("s1")
    tab.page.wait_for_selector("#session-list button:text-is('s1')")
    tab_to("s1")
    tab.page.keyboard.press("Enter")
    tab.page.wait_for_selector("#bar[data-budget]")
    assert tab.page.evaluate("document.activeElement.id") == "session"  # focus follows to the session
    unlabelled = tab.page.evaluate("""() => [...document.querySelectorAll('input, select, textarea, button')]
        .filter(c => c.tagName === 'BUTTON' ? !(c.textContent.trim() || c.getAttribute('aria-label'))
                                            : !(c.labels.length || c.getAttribute('aria-label')))
        .map(c => c.outerHTML)""")
    assert unlabelled == []
    tab.page.focus("#budget")
    tab.page.keyboard.press("ArrowUp")  # a number field steps by keyboard; the window follows
    tab.drawn({"tokens": "2001"})


@pytest.mark.stack
@pytest.mark.parametrize(
    "viewport", [{"width": 1280, "height": 800}, {"width": 390, "height": 800}], ids=["1280x800", "narrow"]
)
def test_readable_wide_and_narrow_without_sideways_scrolling(chromium, stack, seeded, tmp_path, viewport):
    tab = Console(chromium, stack.url, viewport)
    try:
        tab.session("s1")
        tab.page.select_option("#ctx-peer-target", "alice")
        _set_budget(tab, 3000)  # every part of the bar: representation, card, summary, messages, unused
        tab.drawn({"tokens": "3000", "peer_target": "alice"})
        tab.page.wait_for_selector("#timeline .msg.in-window")
        assert tab.page.evaluate("document.documentElement.scrollWidth") <= viewport["width"]
        bar = tab.page.locator("#bar").bounding_box()
        assert bar["width"] >= viewport["width"] * 0.6 and bar["x"] >= 0
        assert tab.page.evaluate("parseFloat(getComputedStyle(document.querySelector('.msg .text')).fontSize)") >= 13
        # The timeline opens scrolled to where the window starts.
        assert tab.page.evaluate("""() => {
            const box = document.getElementById('timeline').getBoundingClientRect();
            const start = document.querySelector('.boundary.window-start').getBoundingClientRect();
            return start.top >= box.top && start.bottom <= box.bottom;
        }""")
        tab.page.locator("#budget").blur()
        shot = tmp_path / "console.png"
        tab.page.screenshot(path=str(shot))
        assert shot.stat().st_size > 10_000
        target = os.environ.get("PRECIS_CONSOLE_SCREENSHOT")  # the README's picture: docs/console.png
        if target and viewport["width"] == 1280:
            tab.page.screenshot(path=str(ROOT / target), full_page=True)
        assert not tab.unexpected_errors(), tab.errors
    finally:
        tab.close()


@pytest.mark.stack
def test_a_missing_session_and_a_stopped_stack_get_a_clear_message(tab):
    tab.expected = ("the server responded with a status of 404", "net::ERR_FAILED")
    tab.open(f"#/w/{WS}/s/nope")
    problem = tab.page.locator("#problem")
    problem.wait_for()
    assert problem.text_content() == f"Not found (404): session 'nope' not found in workspace '{WS}'"
    tab.page.route("**/v3/**", lambda route: route.abort())  # as if the stack had stopped
    tab.open(f"#/w/{WS}/s/s1")
    tab.page.wait_for_function("() => document.getElementById('problem').textContent.startsWith('Cannot reach')")
    assert "the stack may be stopped (start it with make dev)" in problem.text_content()
    tab.page.unroute("**/v3/**")
    problem.wait_for(state="hidden", timeout=15000)  # live refresh notices the stack is back


@pytest.fixture(scope="module")
def auth_stack(tmp_path_factory):
    running = Stack(
        tmp_path_factory.mktemp("auth-stack"),
        env={
            "PRECIS_AUTH": "true",
            "PRECIS_JWT_SECRET": SECRET,
            "PRECIS_LOCAL_CHAOS": "",
            "PRECIS_LOCAL_CONCURRENCY": "1",
        },
    )
    try:
        running.wait_healthy()
        _api(running.url, mint_key(SECRET, admin=True)).post("/v3/workspaces", json={"id": "secure"}).raise_for_status()
        yield running
    finally:
        running.stop()


@pytest.mark.stack
def test_a_wrong_key_gets_a_clear_message_and_a_right_one_works(chromium, auth_stack):
    tab = Console(chromium, auth_stack.url, {"width": 1280, "height": 800})
    tab.expected = ("the server responded with a status of 401", "the server responded with a status of 403")
    problem = tab.page.locator("#problem")
    try:
        tab.open()
        problem.wait_for()
        assert problem.text_content().startswith("This Precis checks keys (401 Unauthorized): missing Authorization")

        forged = mint_key("not-" + SECRET, admin=True)
        tab.page.fill("#key", forged)
        tab.page.click("#key-form button[type=submit]")
        tab.page.wait_for_function("() => document.getElementById('problem').textContent.includes('refused this key')")
        assert problem.text_content() == (
            "The API refused this key (401 Unauthorized): invalid key: bad signature. Paste a valid key above."
        )
        assert tab.page.input_value("#key") == "" and forged not in tab.page.url
        assert tab.page.evaluate("sessionStorage.getItem('precis.console.key')") == forged

        tab.page.fill("#key", mint_key(SECRET, admin=True))
        tab.page.press("#key", "Enter")
        tab.page.wait_for_selector("#workspace-list button:text-is('secure')")
        assert problem.is_hidden()

        # A workspace key cannot list workspaces (403): said beside the list, and the workspace opens by id.
        tab.page.fill("#key", mint_key(SECRET, workspace="secure"))
        tab.page.press("#key", "Enter")
        tab.page.wait_for_function(
            "() => document.getElementById('workspaces-note').textContent.includes('cannot list workspaces')"
        )
        tab.page.fill("#workspace-id", "secure")
        tab.page.press("#workspace-id", "Enter")
        tab.page.wait_for_selector("#sessions-note:text('No sessions in this workspace yet.')")
        assert problem.is_hidden()
        assert not tab.unexpected_errors(), tab.errors
    finally:
        tab.close()


@pytest.mark.stack
def test_the_workspace_s_usage_shows_by_role_and_model_with_its_budget(tab, stack, seeded):
    """Usage items in the stack's table, written as an invocation's end writes them (precis.store.usage), shown as
    the API sums them; a spent budget says derivation is paused."""
    from datetime import UTC, datetime

    import boto3

    from precis.llm.meter import Key, Spend
    from precis.store import usage
    from precis.store.db import Db

    seeded.post("/v3/workspaces", json={"id": "metered", "configuration": {"usage": {"monthly_token_budget": 1000}}})
    today = datetime.now(UTC).date().isoformat()
    endpoint = json.loads(stack.dev_json.read_text())["moto_endpoint"]
    db = Db(
        boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1"), None, os.environ["TABLE_NAME"], ""
    )  # type: ignore[arg-type]
    for spend in (Spend(2, 600, 128, 40), Spend(1, 300, 0, 20)):  # two flushes: the console shows their sum
        usage.write(db, {Key("metered", today, "derive", "gpt-4o-mini"): spend})
    usage.write(db, {Key("metered", today, "embed", "text-embedding-3-small"): Spend(4, 90, 0, 0)})
    tab.open("#/w/metered")
    tab.page.wait_for_selector("#usage table.usage")
    rows = tab.page.evaluate(
        "() => [...document.querySelectorAll('#usage tbody tr')].map(r => [...r.cells].map(c => c.textContent))"
    )
    assert rows == [
        ["derive", "gpt-4o-mini", "3", "900", "128", "60"],
        ["embed", "text-embedding-3-small", "4", "90", "0", "0"],
    ]
    assert tab.page.locator("#usage-budget").text_content() == (f"1,050 of 1,000 tokens of {today[:7]}'s budget spent.")
    assert "Derivation is paused" in tab.page.locator("#usage-paused").text_content()
    tab.open(f"#/w/{WS}")  # another workspace: its own usage (none), never the last one's
    tab.page.wait_for_selector("#usage #usage-budget")
    assert tab.page.locator("#usage table").count() == 0
    assert tab.page.locator("#usage .note").first.text_content() == "No model calls this month."


# ---------------------------------------------------------------- retention


@pytest.mark.stack
def test_retention_is_shown_set_and_cleared_for_a_workspace_and_its_session(tab, seeded):
    """configuration.retention.days set and cleared in the console, the configuration's other sections kept; the
    session's own value wins, its 0 keeps whatever the workspace says; a bad value shows the service's 422."""
    tab.expected = ("the server responded with a status of 422",)
    summarizer = {"summarizer": {"keep_runs": 4}}
    seeded.post("/v3/workspaces", json={"id": "kept", "configuration": summarizer}).raise_for_status()
    seeded.post("/v3/workspaces/kept/sessions", json={"id": "s1"}).raise_for_status()

    def stored(path: str = "/v3/workspaces/list", session: str | None = None) -> dict:
        listed = seeded.post(path, json={"filters": {"id": session or "kept"}}).json()["items"]
        return listed[0]["configuration"]

    def session_stored() -> dict:
        return stored("/v3/workspaces/kept/sessions/list", "s1")

    page = tab.page
    tab.open("#/w/kept")
    page.wait_for_selector("#ws-retention:text('Not set: new messages are kept for ever')")
    page.fill("#ws-retention-days", "30")
    page.click("#ws-retention-form button[type=submit]")
    page.wait_for_selector("#ws-retention[data-own='30']")
    assert page.locator("#ws-retention").text_content() == (
        "Set to 30: new messages expire 30 days after they are stored, unless a session sets its own."
    )
    assert stored() == {**summarizer, "retention": {"days": 30}}

    page.fill("#ws-retention-days", "-1")
    page.click("#ws-retention-form button[type=submit]")
    page.wait_for_selector("#ws-retention-note:text('Not saved')")
    said = page.locator("#ws-retention-note").text_content()
    assert "configuration.retention.days: must be an integer from 0" in said
    assert stored() == {**summarizer, "retention": {"days": 30}}

    tab.open("#/w/kept/s/s1")
    retention = page.locator("#session-retention")
    page.wait_for_selector("#session-retention[data-effective='30']")
    assert retention.text_content() == (
        "Not set here: the workspace's setting applies. This session's new messages expire 30 days after they are "
        "stored."
    )
    page.fill("#session-retention-days", "0")
    page.click("#session-retention-form button[type=submit]")
    page.wait_for_selector("#session-retention[data-own='0']")
    assert retention.get_attribute("data-effective") == ""
    assert retention.text_content() == "Set here to 0. This session's new messages are kept for ever."
    assert session_stored() == {"retention": {"days": 0}}
    page.fill("#session-retention-days", "7")
    page.press("#session-retention-days", "Enter")
    page.wait_for_selector("#session-retention[data-effective='7']")
    assert session_stored() == {"retention": {"days": 7}}

    page.click("#session-retention-clear")
    page.wait_for_selector("#session-retention[data-own=''][data-effective='30']")
    assert "retention" not in session_stored()
    page.click("#ws-retention-clear")
    page.wait_for_selector("#session-retention[data-own=''][data-effective='']")  # the session's view reads both
    assert page.locator("#ws-retention").get_attribute("data-own") == ""
    assert stored() == summarizer


# ---------------------------------------------------------------- webhooks


def test_the_event_types_offered_are_the_ones_precis_sends():
    from precis.webhooks.event_types import EVENT_TYPES

    page = (LAYER_DIR / "precis" / "api" / "console" / "index.html").read_text()
    offered = re.search(r'<select id="webhook-events"[^>]*>(.*?)</select>', page, re.S)
    assert offered and re.findall(r"<option>([^<]+)</option>", offered.group(1)) == list(EVENT_TYPES)


def test_webhooks_are_added_rotated_read_and_deleted_in_the_console(tab, stack, seeded):
    """An endpoint added in the console with two event types; the secret it shows signs what a real receiver gets;
    the delivery log shows the delivery; a rotation shows a new secret; a delete empties the list."""
    from local.moto_backend import client
    from precis.webhooks import delivery
    from tests.webhooks.receiver import Receiver

    seeded.post("/v3/workspaces", json={"id": "hooked"}).raise_for_status()
    rx = Receiver()
    try:
        tab.open("#/w/hooked")
        page = tab.page
        page.wait_for_selector("#webhooks-note:text('No endpoints yet.')")
        page.fill("#webhook-url", rx.url)
        page.select_option("#webhook-events", ["queue.empty", "summary.created"])
        page.click("#webhook-form button[type=submit]")
        secret = page.locator("#webhook-secret code").text_content()
        assert secret and secret.startswith("whsec_")
        item = page.locator("#webhook-list li")
        item.locator(".hook-state").wait_for()
        endpoint_id = item.get_attribute("data-id")
        assert item.locator(".hook-url").text_content() == rx.url
        assert item.locator(".hook-state").text_content() == (f"enabled · queue.empty, summary.created · {endpoint_id}")

        rx.secrets = [secret]
        sqs = client("sqs", json.loads(stack.dev_json.read_text())["moto_endpoint"])
        msg = delivery.message("hooked", endpoint_id, "queue.empty", {"workspace_id": "hooked"}, event_id="c1", now=0)
        queue = sqs.get_queue_url(QueueName="precis-webhook-local")["QueueUrl"]
        sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(msg))
        wait_for(lambda: rx.accepted, 30)
        item.locator("button:text('Deliveries')").click()
        row = page.locator(f"#webhook-deliveries li[data-id='{msg['id']}'][data-status='delivered']")
        row.wait_for()  # the live refresh reads the log again until it shows the delivery
        assert row.locator(".delivery-head").text_content() == "queue.empty · delivered · 1 attempt · HTTP 204"
        assert row.locator(".delivery-error").count() == 0

        item.locator("button:text('Rotate secret')").click()
        page.wait_for_function("s => document.querySelector('#webhook-secret code')?.textContent !== s", arg=secret)
        assert "keeps signing until" in page.locator("#webhook-secret").text_content()

        page.once("dialog", lambda dialog: dialog.accept())
        item.locator("button:text('Delete')").click()
        page.wait_for_selector("#webhooks-note:text('No endpoints yet.')")
        assert page.locator("#webhook-list li").count() == 0 and page.locator("#webhook-deliveries *").count() == 0
    finally:
        rx.close()
