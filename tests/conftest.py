"""Fixtures: fake AWS credentials, moto (in-process) with the template's table and bucket."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from local import iam
from local.template import ENCODINGS_DIR, template

# Set before anything imports boto3 or the handlers: no real AWS, no network, shipped encodings.
os.environ.update(
    AWS_ACCESS_KEY_ID="testing",
    AWS_SECRET_ACCESS_KEY="testing",
    AWS_SESSION_TOKEN="testing",
    AWS_DEFAULT_REGION="us-east-1",
    AWS_REGION="us-east-1",
    # moto 5.2.5 + botocore >= 1.44.4: in-process DynamoDB Streams needs this.
    AWS_ACCOUNT_ID_ENDPOINT_MODE="disabled",
    TIKTOKEN_CACHE_DIR=str(ENCODINGS_DIR),
    POWERTOOLS_TRACE_DISABLED="true",
    POWERTOOLS_METRICS_NAMESPACE="Precis",
    POWERTOOLS_SERVICE_NAME="precis-tests",
    TABLE_NAME=template().table_name,
    BUCKET_NAME=template().bucket_name,
)
for var in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
    os.environ.pop(var, None)
# Every botocore session made from here on can check a function's role (tests.handlers.invoke turns it on for the
# duration of a handler's call); the tests' own calls run with no role, as an administrator's would.
iam.enforce(None)


# The tests' own boto3 clients, made once: a client costs ~50 ms of CPU to make (its endpoint rules), and the `aws`
# fixture runs for some thousand tests. moto's mock answers a client whenever it was made; each test's moto is fresh.
_AWS_CLIENTS: dict = {}


# hypothesis's default 200 ms deadline per example is a wall-clock threshold: on two busy cores (other work, or `make
# test`'s second worker) a pure example can take longer. The examples and their number stay hypothesis's defaults.
settings.register_profile("precis", deadline=None)
settings.load_profile("precis")


@pytest.fixture
def aws():
    """In-process moto with the template's table, bucket and queues; yields the boto3 clients."""
    import boto3
    from moto import mock_aws

    from local import moto_patches
    from local.template import create_resources

    moto_patches.install()  # DynamoDB's limits and stream semantics in-process too, whatever the test order
    with mock_aws():
        if not _AWS_CLIENTS:
            _AWS_CLIENTS.update(
                {name: iam.exempt(boto3.client(name)) for name in ("dynamodb", "s3", "sqs", "dynamodbstreams")}
            )
        clients = dict(_AWS_CLIENTS)
        create_resources(template(), clients["dynamodb"], clients["s3"], clients["sqs"])
        yield clients


@pytest.fixture(autouse=True)
def _fresh_settings():
    """Settings are read once per cold start; each test is a cold start."""
    from precis.settings import get_settings

    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.fixture
def moto_server():
    """A fresh moto server (requests serialized, like DynamoDB's conflict handling) for tests with real threads."""
    from local.moto_backend import client, start_moto

    backend = start_moto(template())
    yield backend.endpoint, {n: client(n, backend.endpoint) for n in ("dynamodb", "s3", "sqs")}
    backend.stop()


@pytest.fixture(scope="module")
def stack(request, tmp_path_factory):
    """The local stack (`make dev`) running for the tests of one module, on a free port, with the chaos of
    `tests.stack.DEFAULT_CHAOS` (every stream batch twice, partitions in either order). A module changes its
    environment with STACK_ENV, e.g. STACK_ENV = {"PRECIS_LOCAL_CHAOS": ""} to opt out."""
    from tests.stack import Stack

    running = Stack(tmp_path_factory.mktemp("stack"), env=getattr(request.module, "STACK_ENV", None))
    try:
        running.wait_healthy()
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def chromium():
    """The system's Chromium under Playwright (tests/browser.py), for one module's browser tests; they skip, and the
    run's summary says why, when there is none."""
    from tests import browser

    reason = browser.skip_reason()
    if reason:
        browser.outcome["line"] = reason
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    path = browser.chromium()
    browser.outcome["line"] = f"browser tests: ran in {browser.version(path)} ({path})"
    with sync_playwright() as playwright:
        chrome = playwright.chromium.launch(executable_path=path)
        try:
            yield chrome
        finally:
            chrome.close()


def pytest_collection_modifyitems(items):
    """Files that start a local stack (marked `stack`) run first, each file's tests in their order: under
    pytest-xdist's --dist loadfile (`make test`) the long files then start early instead of trailing the run."""
    stack_files = {item.path for item in items if item.get_closest_marker("stack")}
    items.sort(key=lambda item: item.path not in stack_files)


def pytest_sessionfinish(session):
    """Under pytest-xdist (`make test`) the browser tests run in a worker: it hands its line to the controller."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        from tests.browser import summary_line

        workeroutput["browser_line"] = summary_line()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """The controller's side of pytest_sessionfinish: keep the line of the worker that ran the browser tests."""
    from tests import browser

    line = getattr(node, "workeroutput", {}).get("browser_line")
    if line:
        browser.outcome["line"] = line


def pytest_terminal_summary(terminalreporter):
    """Say in one line whether the console's browser tests ran, and in which browser, or why they were skipped."""
    from tests.browser import summary_line

    line = summary_line()
    if line:
        terminalreporter.write_line(line, bold=True)


@pytest.fixture
def llm_server():
    """A running fake OpenAI-compatible server (local.models.llm_server) for one test."""
    from local.models.llm_server import LLMServer

    with LLMServer() as server:
        yield server


@pytest.fixture
def bedrock_server():
    """A running fake Bedrock Runtime server (local.models.bedrock_server) for one test."""
    from local.models.bedrock_server import BedrockServer

    with BedrockServer() as server:
        yield server
