"""Exact values that kill the mutants of the accounting core and the switching rule (``benchmarks/mutation.py``)."""

from __future__ import annotations

from tests.test_accounting_exact import toy_gpu


def test_a_table_backend_is_deterministic() -> None:
    """Pins ``GpuBackend.deterministic``: a backend over fixed tables is registered deterministic."""
    assert toy_gpu(0.0).deterministic is True
