"""`db.each`: pieces of one request's writes run side by side, and a failure answers only once every piece has ended,
so no write of a request outlives its answer (Lambda would run it during a later invocation, racing the retry)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from precis.store.db import each


def test_a_failure_is_raised_only_once_every_other_piece_has_ended():
    failed, ended = threading.Event(), []

    def work(item: int) -> int:
        if item == 0:
            failed.set()
            raise RuntimeError("piece 0 failed")
        failed.wait()  # the others end after the failure: a caller that raised at once would not see them end
        ended.append(item)
        return item

    with ThreadPoolExecutor(max_workers=4) as pool, pytest.raises(RuntimeError, match="piece 0"):
        each(pool, work, range(4))
    assert sorted(ended) == [1, 2, 3]


def test_the_results_come_in_the_order_of_the_items():
    with ThreadPoolExecutor(max_workers=3) as pool:
        assert each(pool, lambda n: n * n, [3, 1, 2]) == [9, 1, 4]
        assert each(pool, lambda n: n, []) == []
