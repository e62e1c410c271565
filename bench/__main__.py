"""`python -m bench [name ...]`: run the benchmarks (all, or the named ones) and print their tables."""

from __future__ import annotations

import importlib
import sys
import time

from bench.common import use_fake_aws

BENCHMARKS = (
    "coldstart",
    "ingest",
    "context",
    "summarize",
    "derive",
    "conversation",
    "search",
    "chat",
    "clone",
    "cost",
    "local",
    "webhooks",
    "retrieval",
)
BY_NAME = ("retrieval_scale", "transfer", "erase")  # run alone only when named (retrieval runs retrieval_scale)


def main(argv: list[str]) -> int:
    names = argv or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS + BY_NAME]
    if unknown:
        print(
            f"unknown benchmark(s): {', '.join(unknown)}; choose from {', '.join(BENCHMARKS + BY_NAME)}",
            file=sys.stderr,
        )
        return 2
    use_fake_aws()
    for name in names:
        started = time.perf_counter()
        print(f"\n=== {name} ===", flush=True)
        importlib.import_module(f"bench.{name}").run()
        print(f"({name}: {time.perf_counter() - started:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
