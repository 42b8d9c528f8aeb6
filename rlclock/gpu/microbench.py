"""The calibration suite's kernels as real CUDA work: runners for :func:`rlclock.gpu.meter.measure`.

:func:`realise` turns a suite kernel (:func:`rlclock.calibration.sweep.suite` describes its work: FLOPs, DRAM
bytes, launch shape) into a :class:`SuiteRunner` that runs that work on the GPU, and returns the kernel as it
actually runs (sizes rounded to whole tensors, launch shape where rlclock picks it). Matrix products are
cuBLAS (``torch.matmul`` in bf16) and the wide reduction ``torch.sum``; the others — the FMA chain, the DRAM
stream (a copy kernel over the whole GPU; PyTorch's own device copy, the driver's memcpy, moved 1 GiB each way at
2.7 TB/s on an H200 whose peak is 4.8 TB/s) and its variant with thirty-two multiply-adds per element, the
L2-resident multiply-add, the on-chip (shared-memory) reduction loop, the narrow column reduction and the
under-occupied stream — are Triton kernels with the grid given. Each runner repeats its kernel in a CUDA graph,
so one launch keeps the GPU busy for about ``target_batch_s`` with no host gap between the copies.

:class:`IdleRunner` is a window of no work, for the idle power. Nothing here touches clocks.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from rlclock.errors import GpuUnavailableError, MeasurementError
from rlclock.gpu.runners import StreamTiming
from rlclock.workload.trace import Kernel

TRITON_KERNELS: tuple[str, ...] = (
    "fma_bound",
    "dram_stream",
    "simt_stream",
    "l2_stream",
    "smem_bound",
    "reduction_narrow",
    "latency_stream",
)
"""Suite kernels written in Triton (they need the ``triton`` package, which CUDA builds of PyTorch bring)."""
TORCH_KERNELS: tuple[str, ...] = ("gemm_large", "gemm_small", "reduction")
"""Suite kernels run as PyTorch operators (cuBLAS, sum)."""

_kernels: dict[str, Any] = {}


def _triton() -> dict[str, Any]:
    """The Triton kernels, compiled on first use (Triton is imported only here, and only when needed)."""
    if _kernels:
        return _kernels
    try:
        import triton
        import triton.language as tl
    except ImportError as exc:
        raise MeasurementError(
            f"the suite's Triton kernels need the triton package ({exc}).",
            "install a CUDA build of PyTorch (it brings triton), or pip install triton.",
        ) from None

    @triton.jit
    def fma_chain(x_ptr, y_ptr, n, a, b, iters, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        for _ in range(iters):
            for _ in tl.static_range(UNROLL):  # unrolled, so the loop's own instructions do not halve the rate
                x = x * a + b
        tl.store(y_ptr + offs, x, mask=mask)

    @triton.jit
    def fma_once(x_ptr, y_ptr, n, a, b, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * a + b, mask=mask)

    @triton.jit
    def fma_stream(x_ptr, y_ptr, n, a, b, FMAS: tl.constexpr, BLOCK: tl.constexpr):
        # a stream over the whole GPU with FMAS dependent multiply-adds per element between its load and its store
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        for _ in tl.static_range(FMAS):
            x = x * a + b
        tl.store(y_ptr + offs, x, mask=mask)

    @triton.jit
    def onchip_reduce(x_ptr, y_ptr, a, b, iters, TILE: tl.constexpr):
        # a TILE x TILE tile held on chip, reduced across its threads (through shared memory) every iteration
        rows = tl.arange(0, TILE)[:, None]
        cols = tl.arange(0, TILE)[None, :]
        base = tl.program_id(0) * TILE * TILE
        t = tl.load(x_ptr + base + rows * TILE + cols)
        for _ in range(iters):
            t = t * a + tl.sum(t, axis=0)[None, :] * b
        tl.store(y_ptr + base + rows * TILE + cols, t)

    @triton.jit
    def column_sums(x_ptr, out_ptr, n_rows, COLS: tl.constexpr):
        # each program sums a strided share of the rows of an (n_rows, COLS) matrix into its own partial row
        pid = tl.program_id(0)
        nprog = tl.num_programs(0)
        cols = tl.arange(0, COLS)
        acc = tl.zeros((COLS,), dtype=tl.float32)
        for r in range(pid, n_rows, nprog):
            acc += tl.load(x_ptr + r * COLS + cols)
        tl.store(out_ptr + pid * COLS + cols, acc)

    @triton.jit
    def strided_copy(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
        # a grid too small for the GPU walks the whole array: DRAM latency, not bandwidth, sets its time
        pid = tl.program_id(0)
        step = tl.num_programs(0) * BLOCK
        for start in range(pid * BLOCK, n, step):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)

    _kernels.update(
        fma_chain=fma_chain,
        fma_once=fma_once,
        fma_stream=fma_stream,
        onchip_reduce=onchip_reduce,
        column_sums=column_sums,
        strided_copy=strided_copy,
    )
    return _kernels


class SuiteRunner(StreamTiming):
    """One suite kernel, repeated ``copies`` times in a CUDA graph per launch, timed with CUDA events.

    Args:
        name: The suite kernel's name.
        step: Enqueues the kernel once (on the current stream; captured into the graph).
        target_batch_s: GPU time one launch aims at, seconds.
        max_copies: The most copies one graph holds.
        buffers: Tensors the kernel uses (kept alive with the graph).
    """

    def __init__(
        self,
        name: str,
        step: Callable[[], object],
        target_batch_s: float = 0.005,
        max_copies: int = 4000,
        buffers: tuple[Any, ...] = (),
    ) -> None:
        import torch

        self._torch = torch
        self.name = name
        self.buffers = buffers
        self.stream = torch.cuda.Stream()
        with torch.cuda.stream(self.stream):
            for _ in range(2):  # compile (Triton) and warm cuBLAS's heuristics outside the graph
                step()
            self.stream.synchronize()
            a = self.mark()
            step()
            b = self.mark()
            b.synchronize()
        self.single_s = max(self.elapsed_s(a, b), 1e-7)
        """The kernel's time run once, seconds (with its launch gap; the windows give the copies' time)."""
        self.units_per_launch = int(min(max_copies, max(1, math.ceil(target_batch_s / self.single_s))))
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, stream=self.stream):
            for _ in range(self.units_per_launch):
                step()
        self.stream.synchronize()

    def launch(self) -> None:
        """Enqueue one batch of copies."""
        with self._torch.cuda.stream(self.stream):
            self.graph.replay()

    def close(self) -> None:
        """Free the graph and the buffers."""
        self.stream.synchronize()
        self.graph.reset()
        self.buffers = ()


class IdleRunner:
    """No work: each launch waits ``batch_s`` on the host, so the energy windows read the GPU's idle power."""

    units_per_launch = 1

    def __init__(self, batch_s: float = 0.02) -> None:
        self.batch_s = batch_s

    def launch(self) -> None:
        """Wait one batch."""
        time.sleep(self.batch_s)

    def mark(self) -> float:
        """The host clock now."""
        return time.perf_counter()

    def wait(self, mark: Any) -> None:
        """Nothing to wait for."""

    def elapsed_s(self, start: float, end: float) -> float:
        """Host time between two marks, seconds."""
        return end - start

    def close(self) -> None:
        """Nothing to free."""


def _elements(nbytes: float, itemsize: int = 4) -> int:
    return max(1024, int(nbytes // itemsize) // 1024 * 1024)


def realise(kernel: Kernel, threads_per_sm: int = 2048, target_batch_s: float = 0.005) -> tuple[SuiteRunner, Kernel]:
    """A runner for suite kernel ``kernel`` and the kernel as it runs (its FLOPs, bytes and launch as realised).

    Args:
        kernel: A kernel of :func:`rlclock.calibration.sweep.suite` (by name).
        threads_per_sm: The GPU's resident threads per SM (sizes the FMA chain to fill the GPU once).
        target_batch_s: GPU time one launch aims at, seconds.

    Raises:
        GpuUnavailableError: No CUDA device.
        MeasurementError: The kernel is not one of the suite's, or Triton is missing for a Triton kernel.
    """
    import torch

    if not torch.cuda.is_available():
        raise GpuUnavailableError(
            "the calibration sweep runs CUDA kernels, and this machine has no CUDA device.",
            "run it on the GPU to calibrate, or fit a table measured there (--table).",
        )
    name = kernel.name
    if name not in TRITON_KERNELS + TORCH_KERNELS:
        raise MeasurementError(
            f"{name!r} is not a kernel of the calibration suite.", f"use one of {list(TRITON_KERNELS + TORCH_KERNELS)}."
        )
    dev = torch.device("cuda")
    a_coef, b_coef = 0.999, 1e-3
    if name in ("gemm_large", "gemm_small"):
        _, m, n, k = kernel.gemm_bmnk or (1, 4096, 4096, 4096)
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        w = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        out = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
        done = replace(
            kernel,
            flops=2.0 * m * n * k,
            dram_read_bytes=2.0 * (m * k + k * n),
            dram_write_bytes=2.0 * m * n,
            dtype="bf16",
            gemm_bmnk=(1, m, n, k),
        )
        return SuiteRunner(name, lambda: torch.matmul(x, w, out=out), target_batch_s, buffers=(x, w, out)), done
    if name == "reduction":
        src = torch.rand(_elements(kernel.dram_read_bytes), device=dev)
        out = torch.empty((), device=dev)
        done = replace(
            kernel,
            flops=float(src.numel()),
            dram_read_bytes=4.0 * src.numel(),
            dram_write_bytes=4.0,
            dtype="fp32",
            access="reduce",
        )
        return SuiteRunner(name, lambda: torch.sum(src, dim=0, out=out), target_batch_s, buffers=(src, out)), done
    tk = _triton()
    if name == "fma_bound":
        block, unroll = 128, 16  # one element, one dependent chain, per thread
        n = _elements(kernel.dram_read_bytes)
        iters = max(1, round(kernel.flops / (2.0 * n * unroll)))
        x, y = torch.rand(n, device=dev), torch.empty(n, device=dev)
        grid = (triton_cdiv(n, block),)
        done = replace(
            kernel,
            flops=2.0 * n * iters * unroll,
            dram_read_bytes=4.0 * n,
            dram_write_bytes=4.0 * n,
            dtype="fp32",
            launch_grid=(grid[0], 1, 1),
            launch_block=(block, 1, 1),
        )

        def fma_step() -> None:
            tk["fma_chain"][grid](x, y, n, a_coef, b_coef, iters, BLOCK=block, UNROLL=unroll, num_warps=4)

        return SuiteRunner(name, fma_step, target_batch_s, buffers=(x, y)), done
    if name == "dram_stream":  # a copy kernel over the whole GPU, as framework elementwise kernels run
        block = 4096
        n = _elements(kernel.dram_read_bytes)
        src, dst = torch.rand(n, device=dev), torch.empty(n, device=dev)
        grid = (triton_cdiv(n, block),)
        done = replace(
            kernel,
            flops=0.0,
            dram_read_bytes=4.0 * n,
            dram_write_bytes=4.0 * n,
            dtype="fp32",
            launch_grid=None,
            launch_block=None,
        )

        def dram_step() -> None:
            tk["strided_copy"][grid](src, dst, n, BLOCK=block, num_warps=8)

        return SuiteRunner(name, dram_step, target_batch_s, buffers=(src, dst)), done
    if name == "simt_stream":  # DRAM-sized, with known multiply-adds per element
        block = 1024
        n = _elements(kernel.dram_read_bytes)
        fmas = max(1, round(kernel.flops / (2.0 * n)))
        x, y = torch.rand(n, device=dev), torch.empty(n, device=dev)
        grid = (triton_cdiv(n, block),)
        done = replace(kernel, flops=2.0 * n * fmas, dram_read_bytes=4.0 * n, dram_write_bytes=4.0 * n, dtype="fp32")

        def simt_stream_step() -> None:
            tk["fma_stream"][grid](x, y, n, a_coef, b_coef, FMAS=fmas, BLOCK=block, num_warps=4)

        return SuiteRunner(name, simt_stream_step, target_batch_s, buffers=(x, y)), done
    if name == "l2_stream":
        block = 1024
        n = _elements(kernel.dram_read_bytes)
        x, y = torch.rand(n, device=dev), torch.empty(n, device=dev)
        grid = (triton_cdiv(n, block),)
        done = replace(kernel, flops=2.0 * n, dram_read_bytes=4.0 * n, dram_write_bytes=4.0 * n, dtype="fp32")

        def l2_step() -> None:
            tk["fma_once"][grid](x, y, n, a_coef, b_coef, BLOCK=block, num_warps=4)

        return SuiteRunner(name, l2_step, target_batch_s, buffers=(x, y)), done
    if name == "smem_bound":
        tile = 32
        tiles = max(1, _elements(kernel.dram_read_bytes) // (tile * tile))
        n = tiles * tile * tile
        # per element and iteration: a multiply-add, its share of the column sum, and a multiply
        iters = max(1, round(kernel.flops / (4.0 * n)))
        x, y = torch.rand(n, device=dev), torch.empty(n, device=dev)
        done = replace(
            kernel,
            flops=4.0 * n * iters,
            dram_read_bytes=4.0 * n,
            dram_write_bytes=4.0 * n,
            dtype="fp32",
            launch_grid=(tiles, 1, 1),
            launch_block=(128, 1, 1),
            onchip_bytes=8.0 * n * iters,
        )  # each element through shared memory once each way, per iteration

        def smem_step() -> None:
            tk["onchip_reduce"][(tiles,)](x, y, a_coef, b_coef, iters, TILE=tile, num_warps=4)

        return SuiteRunner(name, smem_step, target_batch_s, buffers=(x, y)), done
    blocks = int(kernel.launch_grid[0]) if kernel.launch_grid else 32
    threads = int(kernel.launch_block[0]) if kernel.launch_block else min(1024, threads_per_sm // 2)
    warps = 2 ** int(math.log2(max(1, min(32, threads // 32))))  # Triton takes a power of two
    if name == "reduction_narrow":
        cols = 1024
        rows = max(1, _elements(kernel.dram_read_bytes) // cols)
        x = torch.rand(rows, cols, device=dev)
        out = torch.empty(blocks, cols, device=dev)
        done = replace(
            kernel,
            flops=float(rows * cols),
            dram_read_bytes=4.0 * rows * cols,
            dram_write_bytes=4.0 * blocks * cols,
            dtype="fp32",
            access="reduce",
            launch_grid=(blocks, 1, 1),
            launch_block=(32 * warps, 1, 1),
        )

        def narrow_step() -> None:
            tk["column_sums"][(blocks,)](x, out, rows, COLS=cols, num_warps=warps)

        return SuiteRunner(name, narrow_step, target_batch_s, buffers=(x, out)), done
    # latency_stream
    block = 4 * 32 * warps  # four fp32 (one 16-byte vector) per thread per iteration
    n = _elements(kernel.dram_read_bytes)
    src, dst = torch.rand(n, device=dev), torch.empty(n, device=dev)
    done = replace(
        kernel,
        flops=0.0,
        dram_read_bytes=4.0 * n,
        dram_write_bytes=4.0 * n,
        dtype="fp32",
        launch_grid=(blocks, 1, 1),
        launch_block=(32 * warps, 1, 1),
    )

    def latency_step() -> None:
        tk["strided_copy"][(blocks,)](src, dst, n, BLOCK=block, num_warps=warps)

    return SuiteRunner(name, latency_step, target_batch_s, buffers=(src, dst)), done


def triton_cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for positive integers (Triton's grid arithmetic)."""
    return -(-a // b)
