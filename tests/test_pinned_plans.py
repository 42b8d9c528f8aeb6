"""Every shipped checkpoint plans exactly as the reference version did (digests in tests/data/pinned_plans.json):
its plans with and without the budget and the search, their runs on the backend, the specs' tables, the exact
optima and a seeded env rollout. A change that moves any of them must say so and re-pin on purpose."""

from __future__ import annotations

import json

from tests.pinned_plans import PINNED, compute


def test_plans_runs_tables_and_optima_are_bit_identical():
    want = json.loads(PINNED.read_text())
    got = compute()
    assert set(got) == set(want)
    differ = sorted(k for k in want if got[k] != want[k])
    assert not differ, f"changed: {differ}"
