"""`make dev`: moto, the HTTP gateway and the stream poller in one process, until Ctrl-C or SIGTERM.

PRECIS_PORT picks the port (8000); PRECIS_LOCAL_CONCURRENCY the workers per function (4);
PRECIS_DEV_JSON where the running stack is announced (.precis/dev.json), for `make invoke`.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from local.gateway import Gateway
from local.moto_backend import dev_json_path, start_moto
from local.poller import StreamPoller
from local.template import LAYER_DIR, template
from local.worker import start_pools


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


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    port = int(os.environ.get("PRECIS_PORT") or 8000)
    tpl = template()
    try:
        gateway = Gateway(("127.0.0.1", port), tpl.routes, {})
    except OSError as exc:
        logging.error("cannot listen on 127.0.0.1:%s: %s (set PRECIS_PORT)", port, exc)
        return 1
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())

    moto = start_moto(tpl)
    pools = start_pools(tpl, moto.endpoint)
    gateway.invokers = {name: pool.invoke for name, pool in pools.items()}
    poller = StreamPoller.from_template(tpl, moto.endpoint, pools[tpl.stream_function().logical_id].invoke)
    poller.start()
    serving = threading.Thread(target=gateway.serve_forever, name="gateway", daemon=True)
    serving.start()

    url = f"http://127.0.0.1:{gateway.server_address[1]}"
    dev_json = dev_json_path()
    dev_json.parent.mkdir(parents=True, exist_ok=True)
    dev_json.write_text(json.dumps({"url": url, "moto_endpoint": moto.endpoint, "pid": os.getpid()}))
    print(f"Precis local stack: {url}", flush=True)
    if os.environ.get("PRECIS_AUTH", "").strip().lower() in {"1", "true", "yes", "on"}:
        secret = os.environ.get("PRECIS_JWT_SECRET")
        if secret:
            print(f"admin key: {admin_key(secret)}", flush=True)
        else:
            logging.warning("PRECIS_AUTH is on but PRECIS_JWT_SECRET is not set: no key can be verified")
    stopping.wait()

    logging.info("stopping")
    gateway.shutdown()
    gateway.server_close()
    poller.stop()
    for pool in pools.values():
        pool.close()  # cuts short whatever is in flight, so the poller ends promptly
    poller.join()
    moto.stop()
    _remove_if_ours(dev_json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
