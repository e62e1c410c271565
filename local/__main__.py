"""`make dev`: moto, the HTTP gateway, a poller per stream consumer and per SQS trigger and the schedules in one
process, until Ctrl-C or SIGTERM.

PRECIS_PORT picks the port (8000); PRECIS_LOCAL_CONCURRENCY the workers per function (4); PRECIS_LOCAL_SCHEDULE_S
the period of every schedule (the template's: the deriver's flush runs every five minutes);
PRECIS_DEV_JSON where the running stack is announced (.precis/dev.json), for `make invoke`;
PRECIS_LOCAL_CHAOS (with _THROTTLE and _SEED) how much harsher than moto it is (local/chaos.py);
PRECIS_LOCAL_THROUGHPUT_SCALE holds the functions to DynamoDB's throughput limits divided by it (local/moto_meter.py);
PRECIS_LOCAL_SQS_DELAY_SCALE shortens SQS's visibility timeouts and delays to that fraction (local/moto_sqs.py);
PRECIS_LOCAL_TTL_S the period of the local TTL service's sweeps (600 s; local/ttl.py).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

from local import moto_sqs
from local.chaos import Chaos, ChaosError
from local.gateway import Gateway
from local.moto_backend import client, dev_json_path, start_moto
from local.moto_meter import ThroughputError, ThroughputMeter, scale_from_env
from local.poller import StreamPoller
from local.scheduler import Scheduler
from local.sqs_poller import QueuePoller
from local.template import LAYER_DIR, template
from local.ttl import TtlPeriodError, TtlService, period_from_env
from local.worker import start_pools

# Stopping takes a second or two; past this something is stuck, and a developer must never have to kill -9.
STOP_DEADLINE_S = 8.0


def admin_key(secret: str) -> str:
    """An admin key signed with `secret`, minted by the project's own auth module."""
    if str(LAYER_DIR) not in sys.path:
        sys.path.append(str(LAYER_DIR))  # the layer is on the workers' path; the stack itself needs only this
    from precis.auth import mint_key

    return mint_key(secret, admin=True)


def _remove_if_ours(path: Path) -> None:
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass  # gone already, or another stack's


class _StopSignal:
    """Waits for Ctrl-C or SIGTERM; a second Ctrl-C while stopping exits at once.

    Not `threading.Event().wait()`: a signal sent to the process group is delivered to whichever thread the kernel
    picks, and unless that is the main thread, a main thread asleep on a lock is never woken to run the handler
    (the stack then ignored SIGTERM until killed). The C-level handler writes every signal to a wakeup pipe,
    whatever thread took it; the main thread sleeps on that pipe instead.
    """

    _STOP = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self._read, write = os.pipe()
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write)
        self.received = 0
        for sig in self._STOP:
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, _frame: object) -> None:
        self.received += 1
        # Only an impatient human repeats Ctrl-C; a SIGTERM often comes twice (to the group, then forwarded by
        # `make`), and the stop is bounded anyway (STOP_DEADLINE_S).
        if self.received > 1 and signum == signal.SIGINT:
            os._exit(128 + signum)

    def wait(self) -> None:
        while not self.received:
            if any(sig in self._STOP for sig in os.read(self._read, 64)):  # the pipe carries the signal numbers
                return


class _Watchdog:
    """Names the step the stop is in; exits with status 1 if the stop outlasts STOP_DEADLINE_S."""

    def __init__(self) -> None:
        self.step = "starting to stop"
        self._started = time.monotonic()
        threading.Thread(target=self._watch, name="stop-watchdog", daemon=True).start()

    def _watch(self) -> None:
        time.sleep(STOP_DEADLINE_S)
        logging.error("still stopping after %.0f s (%s): exiting anyway", time.monotonic() - self._started, self.step)
        os._exit(1)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        chaos = Chaos.from_env(os.environ)
        scale = scale_from_env(os.environ)
        moto_sqs.configure(moto_sqs.scale_from_env(os.environ))
        ttl_period_s = period_from_env(os.environ)
    except (ChaosError, ThroughputError, moto_sqs.DelayScaleError, TtlPeriodError) as exc:
        logging.error("%s", exc)
        return 2
    port = int(os.environ.get("PRECIS_PORT") or 8000)
    tpl = template()
    try:
        gateway = Gateway(("127.0.0.1", port), tpl.routes, {})
    except OSError as exc:
        logging.error("cannot listen on 127.0.0.1:%s: %s (set PRECIS_PORT)", port, exc)
        return 1
    stop_signal = _StopSignal()

    meter = ThroughputMeter(scale) if scale is not None else None
    moto = start_moto(tpl, chaos, freeze_heap=True, meter=meter)
    try:
        pools = start_pools(tpl, moto.functions_endpoint, background_endpoint=moto.background_endpoint)
    except ValueError as exc:  # a role that cannot run its event source: on AWS the deploy would fail
        logging.error("%s", exc)
        moto.stop()
        return 1
    gateway.invokers = {name: pool.invoke for name, pool in pools.items()}
    # PRECIS_LOCAL_IDLE names stream consumers left without their trigger (a test of bulk ingest on a small machine).
    idle = set(filter(None, os.environ.get("PRECIS_LOCAL_IDLE", "").split(",")))
    # DynamoDB's TTL service: moto never expires an item. On the background port: its table scans wait for the API.
    ttl = TtlService(client("dynamodb", moto.background_endpoint), tpl.table_name, every_s=ttl_period_s)
    pollers = [
        StreamPoller.from_template(
            tpl, moto.endpoint, pools[fn.logical_id].invoke, function=fn.logical_id, chaos=chaos, stamp=ttl.stamp
        )
        for fn in tpl.stream_functions()
        if fn.logical_id not in idle
    ]
    pollers += QueuePoller.from_template(
        tpl, moto.endpoint, {n: p.invoke for n, p in pools.items() if n not in idle}, chaos=chaos
    )  # the SQS triggers (the deriver's quiet wake-ups)
    for poller in pollers:
        poller.start()
    scheduler = Scheduler.from_template(
        tpl,
        {name: pool.invoke for name, pool in pools.items()},
        every_s=float(os.environ.get("PRECIS_LOCAL_SCHEDULE_S") or 0) or None,
    )
    scheduler.start()
    ttl.start()
    serving = threading.Thread(target=gateway.serve_forever, name="gateway", daemon=True)
    serving.start()

    url = f"http://127.0.0.1:{gateway.server_address[1]}"
    dev_json = dev_json_path()
    dev_json.parent.mkdir(parents=True, exist_ok=True)
    # Whole or not at all: a reader polling for the file (make invoke, a benchmark) never sees it half written.
    partial = dev_json.with_name(f".{dev_json.name}.{os.getpid()}")
    partial.write_text(json.dumps({"url": url, "moto_endpoint": moto.endpoint, "pid": os.getpid()}))
    partial.replace(dev_json)
    if chaos.modes:
        logging.info("%s", chaos.describe())
    if meter is not None:
        logging.info("%s", meter.describe())
    print(f"Precis local stack: {url}", flush=True)
    print(f"console: {url}/console (what the memory holds and what the model gets)", flush=True)
    print(f"API docs: {url}/docs (every route, and Try it out)", flush=True)
    print(
        f"precis command: .venv/bin/precis --help (it finds this stack; from elsewhere: export PRECIS_URL={url}"
        " and, with auth, PRECIS_KEY=<key>)",
        flush=True,
    )
    if os.environ.get("PRECIS_AUTH", "").strip().lower() in {"1", "true", "yes", "on"}:
        secret = os.environ.get("PRECIS_JWT_SECRET")
        if secret:
            print(f"admin key: {admin_key(secret)}", flush=True)
        else:
            logging.warning("PRECIS_AUTH is on but PRECIS_JWT_SECRET is not set: no key can be verified")
    stop_signal.wait()

    logging.info("stopping")
    watchdog = _Watchdog()
    scheduler.stop()
    ttl.stop()
    for poller in pollers:
        poller.stop()  # first, so that an invocation cut short below is not retried
    watchdog.step = "closing the gateway"
    gateway.shutdown()
    gateway.server_close()  # its connection threads are daemons: idle keep-alive clients do not hold the stop
    watchdog.step = "stopping the workers"
    for pool in pools.values():
        pool.close()  # cuts short whatever is in flight (starting workers too), so the poller ends promptly
    watchdog.step = "waiting for the stream pollers"
    if not all([poller.join(timeout=3) for poller in pollers]):
        logging.warning("a stream poller is still delivering; leaving it behind")
    scheduler.join(timeout=1)
    ttl.join(timeout=1)
    watchdog.step = "stopping moto"
    moto.stop()
    if meter is not None:
        logging.info("throughput: %d DynamoDB calls refused for capacity", meter.refused)
    _remove_if_ours(dev_json)
    return 0


if __name__ == "__main__":
    code = main()
    # Everything is stopped and flushed: leave without the interpreter's teardown, which frees the in-process moto
    # state object by object (13 s and more after a few minutes of traffic, with no thread left to watch it).
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
