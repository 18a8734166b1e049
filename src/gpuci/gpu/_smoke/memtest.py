"""The ``memory`` check: fill a share of free device memory with patterns and read each back.

Two phases: allocate the chunks (as many as fit, when something else holds memory), then one
write-all, read-all pass per pattern, stopped early (and said so) at the budget's deadline.
"""

from __future__ import annotations

import time
from typing import Any

from gpuci.gpu._smoke.backends import Device
from gpuci.gpu._smoke.checks import CheckError, Context
from gpuci.gpu._smoke.load import GiB, Rates, Sizes, Target

PATTERNS = (0x00, 0xAA, 0x55, 0xFF)
# Per pattern each tested byte is written once (the fill) and read ``Device.pattern_reads``
# times (once with torch's fused min/max). Counting a write and two reads for every backend
# reported more than an H200's peak (docs/gpu-smoke.md, "First run on a real GPU").


def memory_seconds(nbytes: float, rates: Rates, pattern_reads: int = 1) -> float:
    """Estimated seconds to test ``nbytes`` at the model's memory bandwidth, allocation included."""
    return (1 + pattern_reads) * len(PATTERNS) * nbytes / (rates.mem_bw_gbs * 1e9) + 0.5


def memory_estimate(target: Target, sizes: Sizes, fraction: float) -> float:
    dev = target.device
    if dev is None:
        return memory_seconds(0, target.rates)
    return memory_seconds(dev.mem_info()[0] * fraction, target.rates, dev.pattern_reads)


def memory(target: Target, ctx: Context, sizes: Sizes, fraction: float) -> dict[str, Any]:
    """Fill ``fraction`` of free memory with 0x00, 0xAA, 0x55, 0xFF in chunks; read each back.

    Every chunk holds one pattern at a time and all chunks are written before any is read, so a
    cell that cannot hold its value for the length of a pass is caught. Stops early (and says
    so) if the budget's deadline arrives mid-test.
    """
    dev = target.need_device()
    free, _ = dev.mem_info()
    goal = int(free * fraction)
    chunk = max(8, min(sizes.memory_chunk, goal) // 8 * 8)
    start = time.perf_counter()
    chunks, alloc_note = _allocate(dev, chunk, goal)
    tested = len(chunks) * chunk
    failures, done, partial = _patterns(dev, ctx, chunks)
    seconds = max(time.perf_counter() - start, 1e-9)
    chunks.clear()  # drop every reference before the allocator gives memory back
    dev.release()
    figures: dict[str, Any] = {
        "tested_gib": round(tested / GiB, 3),
        "tested_bytes": tested,
        "fraction_of_free": round(tested / free, 3) if free else None,
        "chunks": tested // chunk,
        "patterns": done,
        "pass_gbs": round((1 + dev.pattern_reads) * done * tested / seconds / 1e9, 1),
    }
    if failures:
        raise CheckError("memory pattern mismatch: " + "; ".join(failures), figures)
    notes = [n for n in (alloc_note, partial) if n]
    if notes:
        figures["note"] = "; ".join(notes)
    return figures


def _allocate(dev: Device, chunk: int, goal: int) -> tuple[list[Any], str]:
    """Chunks of ``chunk`` bytes up to ``goal``, and why fewer if allocation stopped early."""
    chunks: list[Any] = []
    alloc_note = ""
    try:
        while (len(chunks) + 1) * chunk <= goal:
            chunks.append(dev.empty(chunk))
    except Exception as exc:  # out of memory: something else holds memory; test what we got
        alloc_note = f"allocation stopped early ({type(exc).__name__})"
        dev.release()
    if not chunks:
        raise CheckError(
            f"could not allocate even one {chunk} byte chunk of {goal} bytes asked for"
            + (f": {alloc_note}" if alloc_note else "")
        )
    return chunks, alloc_note


def _patterns(dev: Device, ctx: Context, chunks: list[Any]) -> tuple[list[str], int, str]:
    """Each pattern written to every chunk, then read back: the mismatches, the patterns
    complete, and how far the last one got when the budget ran out."""
    failures: list[str] = []
    done = 0
    partial = ""
    for pattern in PATTERNS:
        filled = []
        for buf in chunks:
            if ctx.time_left() <= 0:
                break
            dev.fill(buf, pattern)
            filled.append(buf)
        dev.synchronize()
        wrong = [(i, n) for i, buf in enumerate(filled) if (n := dev.pattern_errors(buf, pattern))]
        if wrong:
            count = sum(n for _, n in wrong)
            where = ",".join(str(i) for i, _ in wrong[:5])
            failures.append(f"0x{pattern:02X}: {count} byte(s) wrong in chunk(s) {where}")
        if len(filled) < len(chunks):
            partial = (
                f"budget reached: pattern 0x{pattern:02X} covered {len(filled)} of "
                f"{len(chunks)} chunks, {done} of {len(PATTERNS)} patterns complete"
            )
            break
        done += 1
    return failures, done, partial
