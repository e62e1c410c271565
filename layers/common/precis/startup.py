"""A cold start without garbage-collection passes over what the imports build.

A handler imports this module first and calls `done()` after its own imports: in between no collection runs (the
import builds thousands of long-lived objects: pydantic models, Powertools' resolver, boto3's service models), and
`done()` freezes them, so later collections (the first request builds the boto3 clients) skip them. Measured on the
context function: ready 343 → 300 ms, about 40 ms of it collections scanning the imported heap.
"""

import gc

gc.disable()


def done() -> None:
    gc.enable()
    gc.freeze()
