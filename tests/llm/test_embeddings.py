"""Embedders: the offline hashed one is deterministic, normalised and lexical; the openai one talks to a real
OpenAI-compatible endpoint (a loopback server here) with the real client, retrying what is worth retrying."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from precis.llm import EngineError
from precis.llm.embeddings import HashedEmbedder, OpenAIEmbedder, get_embedder, stem
from precis.settings import Settings
from precis.store.vectors import cosine_distance


def _norm(vector: list[float]) -> float:
    return math.sqrt(sum(x * x for x in vector))


# ---------------------------------------------------------------- hashed


def test_hashed_embeddings_are_the_same_in_every_process():
    code = (
        "import json; from precis.llm.embeddings import HashedEmbedder; "
        "print(json.dumps(HashedEmbedder(64).embed(['alice moved to Lisbon'])[0]))"
    )
    runs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PYTHONPATH": ":".join(sys.path)},
        ).stdout
        for seed in ("1", "2")
    }
    assert len(runs) == 1
    assert json.loads(runs.pop()) == HashedEmbedder(64).embed(["alice moved to Lisbon"])[0]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300), st.sampled_from([8, 64, 256, 1024]))
def test_hashed_vectors_are_unit_length_whatever_the_text(text, dimensions):
    (vector,) = HashedEmbedder(dimensions).embed([text])
    assert len(vector) == dimensions
    assert _norm(vector) == pytest.approx(1.0)


def test_a_text_without_words_gets_a_fixed_unit_vector():
    empty, punctuation, words = HashedEmbedder(32).embed(["", " ?! ", "alice"])
    assert empty == punctuation
    assert _norm(empty) == pytest.approx(1.0)
    assert empty != words


def test_stemmer_gives_inflections_one_feature():
    assert {stem(w) for w in ("move", "moved", "moves", "moving")} == {"mov"}
    assert {stem(w) for w in ("like", "likes", "liked")} == {"lik"}
    assert stem("stopped") == stem("stop")
    assert stem("class") == "class"


def test_the_conclusion_that_answers_a_question_is_nearest():
    embedder = HashedEmbedder(256)
    conclusions = [
        "alice's sister is Ana",
        "alice likes green tea",
        "alice moved to Lisbon last spring",
        "bob works as a nurse",
        "alice has a dog named Rover",
    ]
    query, *vectors = embedder.embed(["where did alice move?", *conclusions])
    ranked = sorted(zip((cosine_distance(query, v) for v in vectors), conclusions))
    assert ranked[0][1] == "alice moved to Lisbon last spring"
    assert ranked[-1][1] == "bob works as a nurse"


def test_stopwords_do_not_make_texts_near():
    query, shared_stopwords, shared_word = HashedEmbedder(256).embed(
        ["where did bob go", "where did the train stop", "bob went home"]
    )
    assert cosine_distance(query, shared_word) < cosine_distance(query, shared_stopwords)


def test_cosine_distance():
    assert cosine_distance([1.0, 0.0], [2.0, 0.0]) == pytest.approx(0.0)
    assert cosine_distance([1.0, 0.0], [0.0, 3.0]) == pytest.approx(1.0)
    assert cosine_distance([1.0, 0.0], [-1.0, 0.0]) == pytest.approx(2.0)
    assert cosine_distance([0.0, 0.0], [1.0, 0.0]) == 1.0


def test_get_embedder_follows_the_settings_and_is_reused():
    hashed = get_embedder(Settings(embed_dimensions=64))
    assert isinstance(hashed, HashedEmbedder) and hashed.dimensions == 64
    assert get_embedder(Settings(embed_dimensions=64)) is hashed
    remote = get_embedder(
        Settings(
            embedder="openai",
            embed_model="m",
            embed_dimensions=32,
            llm_base_url="http://127.0.0.1:9/v1",
            llm_timeout=3,
            llm_max_attempts=2,
        )
    )
    assert isinstance(remote, OpenAIEmbedder)
    assert (remote.model, remote.dimensions, remote.timeout, remote.max_attempts) == ("m", 32, 3, 2)
    with pytest.raises(EngineError) as refused:
        get_embedder(Settings(embedder="openai"))
    assert not refused.value.retryable


# ---------------------------------------------------------------- openai, against a loopback endpoint


class EmbeddingsServer:
    """An OpenAI-compatible /v1/embeddings on 127.0.0.1: answers scripted modes (ok, 400, 429, 500, garbage,
    wrongdims), then `ok`; an ok answer holds the hashed embedding of each input, scaled by 3, in reverse order."""

    def __init__(self) -> None:
        self.modes: deque[str] = deque()
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                mode = server.modes.popleft() if server.modes else "ok"
                if mode in ("400", "429", "500"):
                    return self._send(
                        int(mode), json.dumps({"error": {"message": f"scripted {mode}"}}), {"retry-after": "0"}
                    )
                if mode == "garbage":
                    return self._send(200, "<html>not json")
                dimensions = body["dimensions"] + (1 if mode == "wrongdims" else 0)
                vectors = HashedEmbedder(dimensions).embed(body["input"])
                data = [
                    {"object": "embedding", "index": i, "embedding": [3 * x for x in v]} for i, v in enumerate(vectors)
                ]
                self._send(
                    200,
                    json.dumps(
                        {
                            "object": "list",
                            "data": data[::-1],
                            "model": body["model"],
                            "usage": {"prompt_tokens": 1, "total_tokens": 1},
                        }
                    ),
                )

            def _send(self, status: int, text: str, headers: dict | None = None) -> None:
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def endpoint():
    server = EmbeddingsServer()
    yield server
    server.close()


def _embedder(endpoint: EmbeddingsServer, **options) -> OpenAIEmbedder:
    return OpenAIEmbedder(
        model="text-embedding-3-small", dimensions=16, base_url=endpoint.url, timeout=5, sleep=lambda s: None, **options
    )


def test_openai_embeddings_ask_for_the_dimensions_and_come_back_normalised_in_order(endpoint):
    texts = ["alice moved to Lisbon", "bob works as a nurse"]
    vectors = _embedder(endpoint).embed(texts)
    assert endpoint.requests == [
        {"model": "text-embedding-3-small", "input": texts, "dimensions": 16, "encoding_format": "float"}
    ]
    assert vectors == [pytest.approx(v) for v in HashedEmbedder(16).embed(texts)]
    assert all(_norm(v) == pytest.approx(1.0) for v in vectors)


def test_openai_embedder_sends_no_empty_text(endpoint):
    vectors = _embedder(endpoint).embed(["", "alice", "   "])
    assert [r["input"] for r in endpoint.requests] == [["alice"]]
    assert vectors[0] == vectors[2] == HashedEmbedder(16).embed([""])[0]
    assert _embedder(endpoint).embed([]) == []


@pytest.mark.parametrize("failures", [["500"], ["429", "garbage"]])
def test_openai_embedder_retries_what_may_pass(endpoint, failures):
    endpoint.modes.extend(failures)
    assert _embedder(endpoint).embed(["alice"]) == [pytest.approx(HashedEmbedder(16).embed(["alice"])[0])]
    assert len(endpoint.requests) == len(failures) + 1


def test_openai_embedder_gives_up_retryable_after_max_attempts(endpoint):
    endpoint.modes.extend(["500"] * 3)
    with pytest.raises(EngineError, match="gave up after 3 attempts") as failed:
        _embedder(endpoint, max_attempts=3).embed(["alice"])
    assert failed.value.retryable
    assert len(endpoint.requests) == 3


@pytest.mark.parametrize("mode, words", [("400", "HTTP 400"), ("wrongdims", "17 dimensions, not 16")])
def test_openai_embedder_does_not_retry_what_cannot_pass(endpoint, mode, words):
    endpoint.modes.append(mode)
    with pytest.raises(EngineError, match=words) as failed:
        _embedder(endpoint).embed(["alice"])
    assert not failed.value.retryable
    assert len(endpoint.requests) == 1


def test_importing_embed_does_not_import_openai():
    code = "import sys, precis.llm.embeddings; print('openai' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONPATH": ":".join(sys.path)}
    ).stdout
    assert out.strip() == "False"
