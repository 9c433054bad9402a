"""Measuring honestly on a shared machine: one measurement at a time, median times, peak memory.

Many students share one server process, so every timed measurement takes turns in one fair queue
(``measurement_turn``, ``exclusive_measurement``) and every use of ``torch.profiler`` goes through ``exclusive_profiler``
(two profilers at once crash the process). Times are medians over interleaved repeats
(``median_times``) and a speed-up is the median of per-round ratios (``paired_ratio``), so a burst of
load hits every contender alike. The Efficiency page's lesson (``mlm_core.lessons.efficiency``) and
the benchmarks in ``benchmarks/`` use these; what the numbers should be, by arithmetic, is
``mlm_core.costs``. No timing is ever asserted in a test.

>>> human_bytes(1536), paired_ratio([2.0, 4.0, 9.0], [1.0, 2.0, 3.0])
('1.5 KiB', 2.0)
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from mlm_core import seeds
from mlm_core.costs import Gemm
from mlm_core.errors import MLMLabError

# --------------------------------------------------------------------------------------------
# One measurement at a time: many students share one server process
# --------------------------------------------------------------------------------------------


class MeasurementBusyError(MLMLabError):
    """Another session is measuring right now; the message says to try again."""


# torch.profiler is process-wide: two profilers running at once in one process crash the
# interpreter (torch 2.13: a segmentation fault, exit 139, every time). Every use in MLM Lab goes
# through ``exclusive_profiler``.
_PROFILER_LOCK = threading.Lock()
# Heavy clicks share the CPU: two timed measurements at once would slow each other and both report nonsense,
# and eight students' heavy clicks at once starved every other page (a light page's load took 20 s at p95,
# issue 42). Every heavy click (a measurement, a sweep, a corpus, a vocabulary) takes its turn in one queue
# (``measurement_turn``), first come first served, one place per client.
PROFILER_WAIT_S = 120.0  # a profiled call waits this long for another one to end
MEASURE_WAIT_S = 300.0  # how long a measurement waits for its turn before it says "busy"
MEASURE_QUEUE = 8  # measurements that may wait at once behind the one running
BUSY_MESSAGE = ("Another heavy computation is running on this server (perhaps another student pressed a button "
                "like this one): they take turns, so that every page stays quick and measured times stay honest. "
                "Try again in a few seconds.")
QUEUE_FULL_MESSAGE = ("{waiting} heavy computations are already waiting for their turn on this server: try again "
                      "in a minute.")
ALREADY_WAITING_MESSAGE = ("You already have a heavy computation (a measurement, a sweep, a training of a vocabulary) "
                           "running or waiting, perhaps in another tab: one at a time per person, so that everyone "
                           "gets a turn.")


class _Ticket:
    __slots__ = ("client", "thread")

    def __init__(self, client: str | None, thread: int):
        self.client, self.thread = client, thread


class MeasurementQueue:
    """One timed measurement at a time, taken in turns: first come, first served, one place per client.

    A client (an IP address; ``None``: anonymous, a script or a test) that is already measuring or
    waiting is refused a second place, so several tabs do not buy several turns, and one who presses
    again goes to the back, behind everyone who waited. ``on_wait(ahead)`` is told how many are
    ahead whenever that changes (the page shows it). The thread holding the turn may enter again
    (a lesson function inside a page's turn). Thread-safe.
    """

    def __init__(self, max_waiting: int = MEASURE_QUEUE):
        self.max_waiting = max_waiting
        self._cond = threading.Condition()
        self._line: list[_Ticket] = []  # the first holds the turn

    def waiting(self) -> int:
        with self._cond:
            return max(0, len(self._line) - 1)

    @contextlib.contextmanager
    def turn(self, client: str | None = None, *, wait_s: float = MEASURE_WAIT_S,
             on_wait: Callable[[int], Any] | None = None) -> Iterator[None]:
        me = threading.get_ident()
        with self._cond:
            if self._line and self._line[0].thread == me:  # already this thread's turn
                reentered = True
            else:
                reentered = False
                if client is not None and any(t.client == client for t in self._line):
                    raise MeasurementBusyError(ALREADY_WAITING_MESSAGE)
                if len(self._line) > self.max_waiting:
                    raise MeasurementBusyError(QUEUE_FULL_MESSAGE.format(waiting=len(self._line) - 1))
                ticket = _Ticket(client, me)
                self._line.append(ticket)
        if reentered:
            yield
            return
        try:
            deadline, told = time.monotonic() + wait_s, None
            while True:
                with self._cond:
                    ahead = self._line.index(ticket)
                    if ahead == 0:
                        break
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise MeasurementBusyError(BUSY_MESSAGE)
                    if ahead == told or on_wait is None:
                        self._cond.wait(min(left, 1.0))
                        continue
                told = ahead
                on_wait(ahead)  # outside the lock: a page may take its time to draw
            yield
        finally:
            with self._cond:
                if ticket in self._line:
                    self._line.remove(ticket)
                self._cond.notify_all()


_MEASUREMENTS = MeasurementQueue()


def measurement_turn(client: str | None = None, *, wait_s: float = MEASURE_WAIT_S,
                     on_wait: Callable[[int], Any] | None = None):
    """This process's measurement queue (``MeasurementQueue.turn``): a page takes its turn around a whole
    measurement, naming its client and showing ``on_wait(ahead)`` while it waits."""
    return _MEASUREMENTS.turn(client, wait_s=wait_s, on_wait=on_wait)


@contextlib.contextmanager
def exclusive_profiler(wait_s: float = PROFILER_WAIT_S) -> Iterator[None]:
    """Hold the process-wide profiler lock; raise ``MeasurementBusyError`` after ``wait_s`` seconds.

    Also refuses when a profiler that did not take this lock is already running (someone's own
    ``torch.profiler.profile`` around the server), rather than start a second one and crash.
    """
    if not _PROFILER_LOCK.acquire(timeout=wait_s):
        raise MeasurementBusyError(BUSY_MESSAGE)
    try:
        if torch.autograd.profiler._is_profiler_enabled:
            raise MeasurementBusyError("A profiler is already running in this server process: memory cannot be "
                                       "measured until it stops.")
        with large_blocks_mapped():  # the profiler's own records must not grow the heap
            yield
    finally:
        _PROFILER_LOCK.release()


def exclusive_measurement(wait_s: float = MEASURE_WAIT_S):
    """One timed measurement at a time in this process: inside the caller's turn (``measurement_turn``),
    or in a turn of its own, queued anonymously; "busy" after ``wait_s`` seconds in line."""
    return _MEASUREMENTS.turn(None, wait_s=wait_s)


# --------------------------------------------------------------------------------------------
# Measuring: median time over interleaved repeats, and peak memory
# --------------------------------------------------------------------------------------------


def _sync(device: torch.device | None) -> None:
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def median(values: Sequence[float]) -> float:
    """The middle value (the mean of the two middle ones for an even count); NaN for none."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return float("nan")
    return ordered[n // 2] if n % 2 else 0.5 * (ordered[n // 2 - 1] + ordered[n // 2])


def paired_ratio(slow: Sequence[float], fast: Sequence[float]) -> float:
    """Median of the per-round ratios slow[i] / fast[i]: rounds ran back to back, so they shared the load.

    >>> paired_ratio([2.0, 4.0, 9.0], [1.0, 2.0, 3.0])
    2.0
    """
    return median([a / b for a, b in zip(slow, fast) if b > 0])


def median_times(fns: Mapping[str, Callable[[], Any]], *, warmup: int = 1, repeats: int = 3,
                 device: torch.device | None = None,
                 before: Mapping[str, Callable[[], Any]] | None = None,
                 cpu_times: dict[str, list[float]] | None = None) -> dict[str, list[float]]:
    """Seconds per call of each function, ``repeats`` times, run round-robin after ``warmup`` rounds.

    Round-robin (A, B, A, B, ...) rather than A, A, ..., B, B, ...: on a shared, noisy machine a
    burst of load then hits every contender alike, so their ratio stays meaningful. ``before[name]``,
    when given, runs before each call of ``fns[name]``, outside the clock (to reset its state).
    ``cpu_times``, when given, is filled with the process's CPU seconds per call as well: with one
    torch thread, CPU time hardly depends on what else the machine runs (wall time does).
    """
    before = before or {}
    for _ in range(max(0, warmup)):
        for name, fn in fns.items():
            if name in before:
                before[name]()
            fn()
            _sync(device)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(max(1, repeats)):
        for name, fn in fns.items():
            if name in before:
                before[name]()
            _sync(device)
            cpu, start = time.process_time(), time.perf_counter()
            fn()
            _sync(device)
            times[name].append(time.perf_counter() - start)
            if cpu_times is not None:
                cpu_times.setdefault(name, []).append(time.process_time() - cpu)
    return times


# --------------------------------------------------------------------------------------------
# Memory: one click's budget, and keeping the profiler from growing the heap
# --------------------------------------------------------------------------------------------

DEFAULT_CLICK_MB = 1024  # one click may use this much beyond the loaded model: a laptop serving a class has 8-16 GB


def click_budget_bytes() -> int:
    """``MLMLAB_CLICK_MB`` (default 1024) in bytes: the most one click (one measurement, one page view) may
    hold at once beyond the model it runs on. Lessons refuse settings whose estimate is larger."""
    raw = os.environ.get("MLMLAB_CLICK_MB", "").strip()
    return (int(raw) if raw.isdigit() and int(raw) > 0 else DEFAULT_CLICK_MB) * 2**20


def _mallopt():
    """glibc's ``mallopt`` (Linux), or None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
_MAPPED_WHILE_PROFILING = 1 << 20  # blocks of 1 MiB and more get their own mapping while the profiler runs
_MMAP_THRESHOLD_AFTER = 32 << 20  # glibc's own ceiling for its moving threshold (DEFAULT_MMAP_THRESHOLD_MAX)


@contextlib.contextmanager
def large_blocks_mapped() -> Iterator[None]:
    """While inside, every allocation of 1 MiB or more gets its own memory mapping, given back when freed.

    Why: the profiler that measures CPU peak memory records every operator in small allocations.
    Between the large tensors of a step they pin the heap: a freed 18 MB gradient leaves a hole the
    next one no longer fits, so the heap grows by one tensor per row (the per-position loop's 149
    rows of (M, V) zeros grew the server by 2.4 GB, though no more than 307 MB were ever alive at
    once). Mapped blocks leave no holes. Afterwards the threshold stays fixed at glibc's own ceiling
    (where its moving threshold ends up in a warm server), because mapping every block costs page
    faults (a training step took 1.5x as long). glibc only; elsewhere a no-op.
    """
    mallopt = _mallopt()
    if mallopt is None:
        yield
        return
    mallopt(_M_MMAP_THRESHOLD, _MAPPED_WHILE_PROFILING)
    try:
        yield
    finally:
        mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_AFTER)
        mallopt(_M_TRIM_THRESHOLD, 2 * _MMAP_THRESHOLD_AFTER)


def return_free_memory() -> None:
    """Collect garbage, then give the heap's free pages back to the system (glibc's ``malloc_trim``): a heavy
    click's or a run's freed tensors otherwise stay in the server's resident memory (the first training step
    five ways left 0.6 GB behind; four Tokenizer uploads 630 MB after every tab had closed, issue 42).
    Elsewhere only the collection."""
    gc.collect()
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None).malloc_trim(0)
        except (OSError, AttributeError):
            pass


BACKGROUND_NICE = 10  # heavy clicks and runs: the scheduler gives a page's thread at nice 0 about 10x their share


@contextlib.contextmanager
def background_priority(nice: int = BACKGROUND_NICE) -> Iterator[None]:
    """Run the calling thread at a lower scheduling priority while inside (Linux: a thread's own nice value),
    so that the pages of a class stay quick while a heavy click or a training run takes the CPU. Lowering a
    thread's priority needs no privilege; raising it back does, so a thread that could not is left as it is
    and the next lowering counts from there. Elsewhere a no-op.

    >>> with background_priority():
    ...     pass
    """
    if not sys.platform.startswith("linux"):
        yield
        return
    tid = threading.get_native_id()
    try:
        before = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, before + nice))
    except OSError:
        yield
        return
    try:
        yield
    finally:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, before)
        except OSError:  # not allowed to raise it back (no CAP_SYS_NICE): a later click starts from here
            pass


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as handle:
            found = re.search(rf"^{field}:\s+(\d+) kB", handle.read(), re.M)
    except OSError:
        return None
    return int(found.group(1)) if found else None


def peak_rss_above(fn: Callable[[], Any]) -> tuple[Any, int | None]:
    """``(fn(), bytes)``: how far this process's resident memory rose above where it stood when ``fn`` began.

    Linux only (None elsewhere): the kernel's high-water mark (VmHWM) is reset through
    ``/proc/self/clear_refs`` first. It counts everything the process holds (tensors, Python objects,
    the allocator's holes), across all its threads: run it in a process of its own to measure one call.
    """
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
    except OSError:
        return fn(), None
    before = _status_kib("VmRSS")
    result = fn()
    peak = _status_kib("VmHWM")
    return result, None if before is None or peak is None else max(0, peak - before) * 1024


def peak_memory_bytes(fn: Callable[[], Any], device: torch.device | str | None = None) -> int:
    """The most memory ``fn`` holds at once beyond what was allocated before it started, in bytes.

    CUDA: ``torch.cuda.max_memory_allocated`` after resetting the peak. CPU: the allocator has no
    peak counter, so ``fn`` runs under ``torch.profiler`` with ``profile_memory=True``, which
    records every allocation (+bytes) and free (−bytes) as an event; the peak is the largest
    running sum of those events in time order (with ``large_blocks_mapped``, so that the profiler's
    own records do not grow the heap). Tensors that existed before (the weights) do not
    count; what ``fn`` returns counts while it is alive. The profiler runs under
    ``exclusive_profiler``: a second thread waits for the first (two at once would crash the process).
    """
    device = torch.device(device) if device is not None else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        result = fn()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - before
        del result
        return int(peak)
    with exclusive_profiler():
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=False) as prof:
            result = fn()
            del result
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"
              and e.device_type() == torch.autograd.DeviceType.CPU]
    events.sort(key=lambda e: e.start_ns())
    running = peak = 0
    for event in events:
        running += int(event.nbytes())
        peak = max(peak, running)
    return int(peak)


def human_bytes(n: float) -> str:
    """1536 → '1.5 KiB' (binary units, as memory is counted)."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


# --------------------------------------------------------------------------------------------
# How fast this machine runs a step's matrix multiplies alone (the MFU denominator)
# --------------------------------------------------------------------------------------------


def gemm_timer(gemms: Sequence[Gemm], dtype: torch.dtype = torch.float32, *,
               device: torch.device | str | None = None) -> Callable[[], tuple[float, float]]:
    """A function that runs each product once and returns the seconds they take per step (× count):
    (wall-clock seconds, process CPU seconds).

    Each product's operands are made just before it, untimed (random, from a fixed seed), and dropped after
    it: one product's operands live at a time (all of a step's at once, for four timers, took the Efficiency
    page's widest click past its memory budget, issue 42). Each call times only the products, one after
    another, as the step runs them. Total FLOPs over that time is this machine's matmul speed on exactly this
    step's shapes and dtype: the denominator of a step's MFU.
    """
    device = torch.device(device) if device is not None else torch.device("cpu")

    def operand(gen: torch.Generator, rows: int, cols: int, batch: int, transposed: bool) -> torch.Tensor:
        shape = (batch, cols, rows) if transposed else (batch, rows, cols)
        t = torch.randn(shape, generator=gen).to(device=device, dtype=dtype)
        t = t.transpose(1, 2) if transposed else t
        return t[0] if batch == 1 else t

    def run() -> tuple[float, float]:
        wall = cpu = 0.0
        gen = seeds.generator(0, "matmul_operands")
        for x in gemms:
            a, b = operand(gen, x.m, x.k, x.batch, x.a_transposed), operand(gen, x.k, x.n, x.batch, x.b_transposed)
            _sync(device)
            cpu_start, start = time.process_time(), time.perf_counter()
            torch.matmul(a, b)
            _sync(device)
            wall += (time.perf_counter() - start) * x.count
            cpu += (time.process_time() - cpu_start) * x.count
        return wall, cpu

    return run
