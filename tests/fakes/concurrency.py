"""Requests from several threads at once, for the thread-safety tests of ClockControl."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any


def hammer(request: Callable[[Any], object], items: Sequence[Any], threads: int = 5, rounds: int = 4) -> None:
    """Call ``request`` from ``threads`` threads at once, each ``rounds`` times over ``items`` from its own offset;
    raise the first error any thread met."""
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            for j in range(rounds):
                request(items[(k + j) % len(items)])
        except Exception as exc:  # re-raised below, in the test's thread
            errors.append(exc)

    running = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in running:
        t.start()
    for t in running:
        t.join()
    if errors:
        raise errors[0]
