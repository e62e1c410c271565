"""The AWS stand-in of the local stack: an in-process moto server holding the template's resources."""

from __future__ import annotations

import logging
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import boto3
from botocore.config import Config

from local import iam, moto_vectors
from local.chaos import Chaos
from local.moto_meter import ThroughputMeter
from local.moto_server import SerializedMotoServer
from local.template import ROOT, Template, create_resources

REGION = "us-east-1"
# What every client of the local stack uses: fake credentials, one region, account id from the credentials.
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
    "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
}


def client(service: str, endpoint: str, config: Config | None = None):
    """A boto3 client for `service` talking to the moto server at `endpoint` (botocore `config`, e.g. its retries)."""
    return boto3.session.Session().client(
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=AWS_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=AWS_ENV["AWS_SECRET_ACCESS_KEY"],
        aws_session_token=AWS_ENV["AWS_SESSION_TOKEN"],
        config=config,
    )


@dataclass
class MotoBackend:
    server: SerializedMotoServer
    endpoint: str  # moto itself: the stack's own clients (poller, `make invoke`, tests)
    functions_endpoint: str  # what the API functions are pointed at: throttled with `throttle` chaos, else `endpoint`
    background_endpoint: str  # what the stream consumers are pointed at: served after any waiting API request

    def stop(self) -> None:
        self.server.stop()


def start_moto(
    tpl: Template,
    chaos: Chaos | None = None,
    freeze_heap: bool = False,
    meter: ThroughputMeter | None = None,
) -> MotoBackend:
    """Start an empty moto on 127.0.0.1 (a free port) and create the template's table, bucket and queues.

    `freeze_heap` for a process that is moto's (the stack's): what survives a full garbage collection is frozen
    (local/moto_server.py, `HeapFreezer`).

    With `throttle` chaos the functions get a port of their own that refuses some of their DynamoDB calls; the stream
    consumers always get one of their own, served after the API (local/moto_server.py). Writes reach the vector
    indexes `chaos.index_lag_s` late on the wall clock, and `approximate` chaos leaves neighbours out. With a `meter`
    (PRECIS_LOCAL_THROUGHPUT_SCALE) the functions' and the stream consumers' DynamoDB calls are held to DynamoDB's
    throughput limits (local/moto_meter.py).
    """
    chaos = chaos or Chaos()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one access line per moto call drowns the stack's logs
    throttle = (chaos.throttle_rate, chaos.seed) if chaos.throttle else None
    server = SerializedMotoServer(
        ip_address="127.0.0.1", port=0, verbose=False, throttle=throttle, freeze_heap=freeze_heap, meter=meter
    )
    # After the server's install() (moto_patches: the tests' standing clock): the stack's index runs on the wall clock.
    moto_vectors.configure(
        moto_vectors.Replication(
            lag_s=chaos.index_lag_s,
            clock=time.monotonic,
            seed=chaos.seed,
            approximate=chaos.approximate_share if "approximate" in chaos.modes else 0.0,
        )
    )
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    functions_host, functions_port = server.functions_address
    background_host, background_port = server.background_address
    # moto's state belongs to the process, shared by every server in it: start from a clean slate.
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")).close()
    create_resources(
        tpl,
        client("dynamodb", endpoint),
        client("s3", endpoint),
        client("sqs", endpoint),
        client("events", endpoint),
        # the developer's knobs are the deployment's parameters (PRECIS_EVENT_BUS_NAME: a bus of that name)
        iam.deployment_parameters(tpl.raw, os.environ),
    )
    return MotoBackend(
        server, endpoint, f"http://{functions_host}:{functions_port}", f"http://{background_host}:{background_port}"
    )


def dev_json_path() -> Path:
    """Where a running `make dev` announces its URL and moto endpoint (PRECIS_DEV_JSON overrides)."""
    return Path(os.environ.get("PRECIS_DEV_JSON") or ROOT / ".precis" / "dev.json")


def endpoint_alive(endpoint: str, timeout: float = 1.0) -> bool:
    """Whether a moto server answers at `endpoint`."""
    try:
        with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=timeout):
            return True
    except urllib.error.HTTPError:
        return True  # it answered
    except (OSError, ValueError):
        return False
