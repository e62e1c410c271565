"""What the benchmarks share: a fake-AWS environment, in-process moto with the template's resources, a counter
of DynamoDB requests and response bytes, and plain-text tables."""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
for _path in (ROOT, ROOT / "layers" / "common"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from local.template import ENCODINGS_DIR, create_resources, table_definition, template  # noqa: E402

FAKE_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    # moto 5.2.5 + botocore >= 1.44.4: in-process DynamoDB Streams needs this.
    "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
}


def use_fake_aws() -> None:
    """Point everything at in-process moto: fake credentials, the template's names, the shipped encodings; the AWS
    requests of every client made from here on countable at `bench.front.AWS`."""
    from bench import front

    front.install()
    os.environ.update(
        FAKE_AWS,
        TIKTOKEN_CACHE_DIR=str(ENCODINGS_DIR),
        POWERTOOLS_TRACE_DISABLED="true",
        POWERTOOLS_METRICS_NAMESPACE="Precis",
        POWERTOOLS_SERVICE_NAME="precis-bench",
        POWERTOOLS_LOG_LEVEL="WARNING",
        POWERTOOLS_METRICS_DISABLED="true",
        TABLE_NAME=template().table_name,
        BUCKET_NAME=template().bucket_name,
    )
    for var in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        os.environ.pop(var, None)
    # Powertools warns when a handler emitted no metric; routes that emit none are fine (as in pyproject's pytest).
    warnings.filterwarnings("ignore", message="No application metrics to publish")


@contextmanager
def moto(*, stream: bool = True) -> Iterator[dict[str, Any]]:
    """In-process moto with the template's table (optionally without its stream), bucket and queues; the clients it
    yields are the bench's own (not counted at `bench.front.AWS`)."""
    import boto3
    from moto import mock_aws

    from bench import front
    from local import moto_patches, moto_vectors
    from precis.settings import get_settings

    front.install()

    moto_patches.install()  # the table's vector index (SearchVectors) and DynamoDB's limits, as in the tests
    # The benches measure rankings and costs, not freshness: each write reaches the vector index at once.
    moto_vectors.configure(moto_vectors.Replication(lag_s=0.0))

    get_settings.cache_clear()
    with mock_aws():
        clients = {name: front.own(boto3.client(name)) for name in ("dynamodb", "s3", "sqs")}
        if stream:
            create_resources(template(), clients["dynamodb"], clients["s3"], clients["sqs"])
        else:
            definition = table_definition(template())
            definition.pop("StreamSpecification", None)
            clients["dynamodb"].create_table(**definition)
            clients["s3"].create_bucket(Bucket=template().bucket_name)
            for name in template().queue_names.values():
                clients["sqs"].create_queue(QueueName=name)
        # As deployed, the publishers know the webhook queue: each derived session, summary and request that makes an
        # event pays its workspace's endpoint read (precis.events), endpoints or none.
        hooks = clients["sqs"].get_queue_url(QueueName=template().queue_names["WebhookQueue"])["QueueUrl"]
        before = os.environ.get("PRECIS_WEBHOOK_QUEUE_URL")
        os.environ["PRECIS_WEBHOOK_QUEUE_URL"] = hooks
        get_settings.cache_clear()
        try:
            yield clients
        finally:
            if before is None:
                os.environ.pop("PRECIS_WEBHOOK_QUEUE_URL", None)
            else:
                os.environ["PRECIS_WEBHOOK_QUEUE_URL"] = before
            get_settings.cache_clear()


class Requests:
    """Counts a client's DynamoDB requests (by operation) and the bytes of their responses; `bench.front.AWS` for
    every request of the handlers."""

    def __init__(self, client):
        self.client = client
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.ops: list[str] = []
        self.bytes = 0

    def _before(self, model, **_):
        with self.lock:
            self.ops.append(model.name)

    def _after(self, http_response, **_):
        with self.lock:
            self.bytes += len(http_response.content)

    def __enter__(self) -> Requests:
        self.client.meta.events.register("before-call.dynamodb", self._before)
        self.client.meta.events.register("after-call.dynamodb", self._after)
        return self

    def __exit__(self, *exc) -> None:
        self.client.meta.events.unregister("before-call.dynamodb", self._before)
        self.client.meta.events.unregister("after-call.dynamodb", self._after)

    def by_op(self) -> str:
        counts: dict[str, int] = {}
        for op in self.ops:
            counts[op] = counts.get(op, 0) + 1
        return " ".join(f"{op}×{n}" for op, n in counts.items())


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank q-quantile (0 < q <= 1): a value that was measured, never an interpolation between two."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value != value:
            return "-"
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}" if abs(value) >= 1 else f"{value:.3f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A plain-text table: text columns left-aligned, numbers right-aligned."""
    cells = [[fmt(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    numeric = [
        all(isinstance(row[i], (int, float)) and not isinstance(row[i], bool) for row in rows)
        for i in range(len(headers))
    ]

    def line(values):
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    print(f"\n{title}")
    print(line(headers))
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print(line(row))


def write_json(name: str, data: Any) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    return path
