"""A native thread team for parallel kernels: workers that spin briefly, then sleep on a futex.

Why not the runtime's Python pool (:func:`tcc.runtime.compiled.run_parallel`)?  Its
workers block in ``queue.get`` and the caller blocks on a condition: each
hand-off is a futex sleep and wake, and on a virtual machine a vCPU that went
idle takes tens to hundreds of microseconds to wake (the guest halts it; the
wake is an interrupt through the hypervisor).  Measured on this 2-core VM
(docs/runtime.md): a parallel kernel whose half takes 71 us took 310 us split
over the Python pool -- slower than running it whole on one thread (143 us)
-- because the worker started its part late and the caller then waited for
the GIL.  OpenMP runtimes (torch's) avoid this by letting idle workers spin
for a while before they sleep; this module does the same, in native code, so
neither the spin nor the hand-off touches the GIL:

* ``tcc_team_worker(team)`` is the body of each worker thread (a Python
  thread that calls it through ctypes, which releases the GIL, and stays
  there).  It waits for the team's *generation* to change -- spinning with
  ``pause`` for :data:`SPIN_CYCLES` time-stamp-counter cycles after its last
  job, then sleeping in ``futex(FUTEX_WAIT)`` -- and then claims parts of
  the posted job until none is left.
* ``tcc_team_run(team, fn, bufs, sizes, nparts, helpers)`` is called by the program's
  thread through ctypes: it posts the job (under a busy flag; it returns 0
  without running anything when another thread's job holds the team, and the
  caller falls back to the Python pool), claims parts itself, and waits until
  every part has finished -- spinning for :data:`SPIN_CYCLES`, then sleeping
  on a futex on the count of finished parts, which a worker wakes when it
  finishes one (on a loaded machine a worker can be preempted in the middle
  of its part, and spinning for it would take the very core it needs).  Only
  then does it return, so no part can write into a buffer after the call.

A part is claimed by compare-and-swap on a counter tagged with the job's
generation, so a worker that wakes late for an old job never runs a part of
the new one with the old job's function.  Before claiming, a worker takes a
*seat* (a second tagged counter): a job has ``threads - 1`` seats, so a
team grown by an earlier call with more threads runs a later call's parts
on no more threads than it asks for (before, every idle worker joined in:
a call with ``threads=2`` ran on four threads after one with four), and a
post wakes only as many sleepers as there are seats.  Which thread runs a part does not
change what the part computes: results are bit for bit those of the Python
pool and of one thread.

Workers spinning would take a core from BLAS, whose own threads run the
external kernels, so :func:`park` sends them to sleep at once; the runtime
parks them before every ``extern``.  With more threads than cores nobody
spins (a spinning worker would then take time from a working one).

Only on x86-64 Linux (the futex system call number and ``pause``); elsewhere
:func:`team` is None and the Python pool serves.  Workers are stopped and
joined at exit, before the engine holding their code is freed, and a forked
child starts without a team (the workers do not exist there).
"""
from __future__ import annotations

import atexit
import ctypes
import logging
import os
import platform
import sys
import threading

import numpy as np

__all__ = ["HOLD_CYCLES", "JUMP_CYCLES", "SPIN_CYCLES", "Team", "park", "team"]

#: how long an idle worker spins before it sleeps, in time-stamp-counter cycles (0.2 ms at 2.4 GHz):
#: longer than the Python between two kernels of a call, or between two calls in a loop, and short,
#: because a spinning worker slows the caller's own Python here (docs/runtime.md#threads)
SPIN_CYCLES = int(os.environ.get("TCC_SPIN_CYCLES", "500000"))

# the team's words (int64), each on its own 64-byte line where threads write it
_GEN, _FN, _BUFS, _SIZES, _NPARTS, _HELPERS, _CLAIM, _DONE, _STOP, _SLEEPERS, _SPIN, _BUSY, _PARK, _JOIN, \
    _SEATS, _SHARED, _STAMP, _JUMP, _HOLD = (0, 8, 9, 10, 11, 12, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 97, 98)
_WORDS = 104

#: a gap of more than this many cycles between two looks of a spinning thread means it was descheduled: another
#: runnable thread wanted its core (an interrupt takes microseconds; a scheduler slice is 0.75 ms or more)
JUMP_CYCLES = int(os.environ.get("TCC_SPIN_JUMP_CYCLES", str(1 << 17)))
#: after such a gap nobody in the team spins for this many cycles (about 0.4-1 s): the cores are shared
HOLD_CYCLES = int(os.environ.get("TCC_SPIN_HOLD_CYCLES", str(1 << 31)))

_IR = r"""
declare i64 @llvm.readcyclecounter()
declare void @llvm.x86.sse2.pause()
declare i64 @syscall(i64, ...)

define private ptr @word(ptr %t, i64 %k) alwaysinline {
  %p = getelementptr i64, ptr %t, i64 %k
  ret ptr %p
}

; the count part of the generation-tagged counter %w, incremented by CAS: -1 once the counter's tag is
; not %tag (another job's) or the count has reached %limit (parts claimed, seats taken)
define private i64 @take(ptr %w, i64 %tag, i64 %limit) {
entry:
  br label %loop
loop:
  %c = load atomic i64, ptr %w acquire, align 8
  %ctag = and i64 %c, -4294967296
  %k = and i64 %c, 4294967295
  %stale = icmp ne i64 %ctag, %tag
  %over = icmp sge i64 %k, %limit
  %quit = or i1 %stale, %over
  br i1 %quit, label %none, label %try
try:
  %c1 = add i64 %c, 1
  %pair = cmpxchg ptr %w, i64 %c, i64 %c1 acq_rel acquire
  %ok = extractvalue { i64, i1 } %pair, 1
  br i1 %ok, label %got, label %loop
got:
  ret i64 %k
none:
  ret i64 -1
}

; whether %t's threads may spin at time %now: not while the cores are marked shared (SHARED, set from Python),
; nor within HOLD cycles of a spinning thread found descheduled (STAMP: the time it was seen)
define private i1 @may_spin(ptr %t, i64 %now) {
entry:
  %sharedp = call ptr @word(ptr %t, i64 SHARED)
  %shared = load atomic i64, ptr %sharedp monotonic, align 8
  %stampp = call ptr @word(ptr %t, i64 STAMP)
  %stamp = load atomic i64, ptr %stampp monotonic, align 8
  %holdp = call ptr @word(ptr %t, i64 HOLD)
  %hold = load atomic i64, ptr %holdp monotonic, align 8
  %since = sub i64 %now, %stamp
  %held = icmp ult i64 %since, %hold
  %never = icmp eq i64 %stamp, 0
  %r1 = select i1 %never, i1 false, i1 %held
  %isshared = icmp ne i64 %shared, 0
  %no = or i1 %isshared, %r1
  %yes = xor i1 %no, true
  ret i1 %yes
}

; a spinning thread that looked at %prev and again at %now: if the gap is longer than JUMP it was
; descheduled, and STAMP records when (no one spins for HOLD cycles); returns whether it was
define private i1 @jumped(ptr %t, i64 %prev, i64 %now) {
entry:
  %jumpp = call ptr @word(ptr %t, i64 JUMP)
  %jump = load atomic i64, ptr %jumpp monotonic, align 8
  %step = sub i64 %now, %prev
  %big = icmp ugt i64 %step, %jump
  br i1 %big, label %mark, label %no
mark:
  %stampp = call ptr @word(ptr %t, i64 STAMP)
  %now1 = or i64 %now, 1
  store atomic i64 %now1, ptr %stampp monotonic, align 8
  ret i1 true
no:
  ret i1 false
}

; run parts of job %gen until none is left (or the job is no longer the current one)
define private void @run_parts(ptr %t, i64 %gen) {
entry:
  %fnp = call ptr @word(ptr %t, i64 FN)
  %fn = load atomic ptr, ptr %fnp acquire, align 8
  %bp = call ptr @word(ptr %t, i64 BUFS)
  %bufs = load atomic ptr, ptr %bp acquire, align 8
  %sp = call ptr @word(ptr %t, i64 SIZES)
  %sizes = load atomic ptr, ptr %sp acquire, align 8
  %np = call ptr @word(ptr %t, i64 NPARTS)
  %n = load atomic i64, ptr %np acquire, align 8
  %claimp = call ptr @word(ptr %t, i64 CLAIM)
  %donep = call ptr @word(ptr %t, i64 DONE)
  %tag = shl i64 %gen, 32
  br label %loop
loop:
  %part = call i64 @take(ptr %claimp, i64 %tag, i64 %n)
  %none = icmp slt i64 %part, 0
  br i1 %none, label %exit, label %run
run:
  call void %fn(ptr %bufs, ptr %sizes, i64 %part, i64 %n)
  %d = atomicrmw add ptr %donep, i64 1 seq_cst
  %joinp = call ptr @word(ptr %t, i64 JOIN)
  %joiner = load atomic i64, ptr %joinp seq_cst, align 8
  %asleep = icmp ne i64 %joiner, 0
  br i1 %asleep, label %wake, label %loop
wake:
  %w = call i64 (i64, ...) @syscall(i64 202, ptr %donep, i64 129, i64 1)
  br label %loop
exit:
  ret void
}

define void @tcc_team_worker(ptr %t) {
entry:
  %genp = call ptr @word(ptr %t, i64 GEN)
  %stopp = call ptr @word(ptr %t, i64 STOP)
  %parkp = call ptr @word(ptr %t, i64 PARK)
  %spinp = call ptr @word(ptr %t, i64 SPIN)
  %sleepp = call ptr @word(ptr %t, i64 SLEEPERS)
  %seen0 = load atomic i64, ptr %genp acquire, align 8
  br label %wait
wait:
  %seen = phi i64 [ %seen0, %entry ], [ %g, %seatedwork ], [ %g, %work ], [ %seen, %woke ]
  %start = call i64 @llvm.readcyclecounter()
  br label %spin
spin:
  %prev = phi i64 [ %start, %wait ], [ %now, %relax ]
  %g = load atomic i64, ptr %genp acquire, align 8
  %new = icmp ne i64 %g, %seen
  br i1 %new, label %work, label %check
check:
  %stop = load atomic i64, ptr %stopp monotonic, align 8
  %stopping = icmp ne i64 %stop, 0
  br i1 %stopping, label %exit, label %idle
idle:
  %park = load atomic i64, ptr %parkp monotonic, align 8
  %parked = icmp ne i64 %park, 0
  %now = call i64 @llvm.readcyclecounter()
  %spent = sub i64 %now, %start
  %limit = load atomic i64, ptr %spinp monotonic, align 8
  %tired = icmp uge i64 %spent, %limit
  %sleep0 = or i1 %parked, %tired
  %desched = call i1 @jumped(ptr %t, i64 %prev, i64 %now)
  %allowed = call i1 @may_spin(ptr %t, i64 %now)
  %barred = xor i1 %allowed, true
  %sleep1 = or i1 %sleep0, %desched
  %sleep = or i1 %sleep1, %barred
  br i1 %sleep, label %tosleep, label %relax
relax:
  call void @llvm.x86.sse2.pause()
  br label %spin
tosleep:
  %s0 = atomicrmw add ptr %sleepp, i64 1 seq_cst
  %g2 = load atomic i64, ptr %genp seq_cst, align 8
  %stop2 = load atomic i64, ptr %stopp seq_cst, align 8
  %same = icmp eq i64 %g2, %seen
  %live = icmp eq i64 %stop2, 0
  %block = and i1 %same, %live
  br i1 %block, label %futex, label %woke
futex:
  %low = and i64 %seen, 4294967295
  %r = call i64 (i64, ...) @syscall(i64 202, ptr %genp, i64 128, i64 %low, ptr null)
  br label %woke
woke:
  %s1 = atomicrmw sub ptr %sleepp, i64 1 seq_cst
  br label %wait
work:
  ; a seat first: at most HELPERS workers take part in the job (the call's threads, less the caller);
  ; SEATS is tagged with the generation like CLAIM, so a late worker cannot take a seat of a newer job
  %seatsp = call ptr @word(ptr %t, i64 SEATS)
  %helpp = call ptr @word(ptr %t, i64 HELPERS)
  %gtag = shl i64 %g, 32
  %helpers = load atomic i64, ptr %helpp acquire, align 8
  %seat = call i64 @take(ptr %seatsp, i64 %gtag, i64 %helpers)
  %noseat = icmp slt i64 %seat, 0
  br i1 %noseat, label %wait, label %seatedwork
seatedwork:
  call void @run_parts(ptr %t, i64 %g)
  br label %wait
exit:
  ret void
}

; stop(): a new generation and every sleeper woken, under BUSY, so that the bump cannot race a post (two
; generations alike, or a worker seeing a generation before the words of its job)
define void @tcc_team_bump(ptr %t) {
entry:
  %busyp = call ptr @word(ptr %t, i64 BUSY)
  br label %take
take:
  %pair = cmpxchg ptr %busyp, i64 0, i64 1 acquire monotonic
  %got = extractvalue { i64, i1 } %pair, 1
  br i1 %got, label %bump, label %relax
relax:
  call void @llvm.x86.sse2.pause()
  br label %take
bump:
  %genp = call ptr @word(ptr %t, i64 GEN)
  %old = atomicrmw add ptr %genp, i64 1 seq_cst
  %r = call i64 (i64, ...) @syscall(i64 202, ptr %genp, i64 129, i64 2147483647)
  store atomic i64 0, ptr %busyp release, align 8
  ret void
}

; 1: the job ran (every part finished); 0: the team is busy with another thread's job, nothing ran
define i64 @tcc_team_run(ptr %t, ptr %fn, ptr %bufs, ptr %sizes, i64 %n, i64 %helpers) {
entry:
  %busyp = call ptr @word(ptr %t, i64 BUSY)
  %pair = cmpxchg ptr %busyp, i64 0, i64 1 acquire monotonic
  %got = extractvalue { i64, i1 } %pair, 1
  br i1 %got, label %post, label %refused
refused:
  ret i64 0
post:
  %genp = call ptr @word(ptr %t, i64 GEN)
  %old = load atomic i64, ptr %genp monotonic, align 8
  %gen = add i64 %old, 1
  %tag = shl i64 %gen, 32
  %claimp = call ptr @word(ptr %t, i64 CLAIM)
  store atomic i64 %tag, ptr %claimp seq_cst, align 8
  %seatsp = call ptr @word(ptr %t, i64 SEATS)
  store atomic i64 %tag, ptr %seatsp seq_cst, align 8
  %helpp = call ptr @word(ptr %t, i64 HELPERS)
  store atomic i64 %helpers, ptr %helpp release, align 8
  %fnp = call ptr @word(ptr %t, i64 FN)
  store atomic ptr %fn, ptr %fnp release, align 8
  %bp = call ptr @word(ptr %t, i64 BUFS)
  store atomic ptr %bufs, ptr %bp release, align 8
  %sp = call ptr @word(ptr %t, i64 SIZES)
  store atomic ptr %sizes, ptr %sp release, align 8
  %np = call ptr @word(ptr %t, i64 NPARTS)
  store atomic i64 %n, ptr %np release, align 8
  %donep = call ptr @word(ptr %t, i64 DONE)
  store atomic i64 0, ptr %donep release, align 8
  %parkp = call ptr @word(ptr %t, i64 PARK)
  store atomic i64 0, ptr %parkp release, align 8
  store atomic i64 %gen, ptr %genp seq_cst, align 8
  %sleepp = call ptr @word(ptr %t, i64 SLEEPERS)
  %sleepers = load atomic i64, ptr %sleepp seq_cst, align 8
  %asleep = icmp ne i64 %sleepers, 0
  %seats = icmp sgt i64 %helpers, 0
  %any = and i1 %asleep, %seats
  br i1 %any, label %wake, label %mine
wake:
  ; as many sleepers as there are seats (the kernel reads a count of 0 as 1: no wake without seats);
  ; a woken worker that finds no seat goes back to waiting (its spin, then sleep)
  %r = call i64 (i64, ...) @syscall(i64 202, ptr %genp, i64 129, i64 %helpers)
  br label %mine
mine:
  call void @run_parts(ptr %t, i64 %gen)
  %spinp = call ptr @word(ptr %t, i64 SPIN)
  %limit = load atomic i64, ptr %spinp monotonic, align 8
  %start = call i64 @llvm.readcyclecounter()
  br label %join
join:
  %jprev = phi i64 [ %start, %mine ], [ %now, %relax ], [ %start, %awake ]
  %d = load atomic i64, ptr %donep acquire, align 8
  %all = icmp sge i64 %d, %n
  br i1 %all, label %done, label %waiting
waiting:
  %now = call i64 @llvm.readcyclecounter()
  %spent = sub i64 %now, %start
  %tired0 = icmp uge i64 %spent, %limit
  %desched = call i1 @jumped(ptr %t, i64 %jprev, i64 %now)
  %allowed = call i1 @may_spin(ptr %t, i64 %now)
  %barred = xor i1 %allowed, true
  %tired1 = or i1 %tired0, %desched
  %tired = or i1 %tired1, %barred
  br i1 %tired, label %tosleep, label %relax
relax:
  call void @llvm.x86.sse2.pause()
  br label %join
tosleep:
  ; a worker preempted in its part (a loaded machine): sleep on DONE until a part ends, not spin
  %joinp = call ptr @word(ptr %t, i64 JOIN)
  store atomic i64 1, ptr %joinp seq_cst, align 8
  %d2 = load atomic i64, ptr %donep seq_cst, align 8
  %all2 = icmp sge i64 %d2, %n
  br i1 %all2, label %awake, label %futex
futex:
  %low = and i64 %d2, 4294967295
  %r2 = call i64 (i64, ...) @syscall(i64 202, ptr %donep, i64 128, i64 %low, ptr null)
  br label %awake
awake:
  store atomic i64 0, ptr %joinp seq_cst, align 8
  br label %join
done:
  store atomic i64 0, ptr %busyp release, align 8
  ret i64 1
}
"""


def _ir() -> str:
    text = _IR
    for name, word in (("GEN", _GEN), ("FN", _FN), ("BUFS", _BUFS), ("SIZES", _SIZES), ("NPARTS", _NPARTS),
                       ("HELPERS", _HELPERS), ("CLAIM", _CLAIM), ("DONE", _DONE), ("STOP", _STOP),
                       ("SLEEPERS", _SLEEPERS), ("SPIN", _SPIN), ("BUSY", _BUSY), ("PARK", _PARK), ("JOIN", _JOIN),
                       ("SEATS", _SEATS), ("SHARED", _SHARED), ("STAMP", _STAMP), ("JUMP", _JUMP), ("HOLD", _HOLD)):
        text = text.replace(f"i64 {name})", f"i64 {word})")
    return text


class Team:
    """The process's workers and the words they share (a NumPy array: its address is fixed)."""

    def __init__(self) -> None:
        import llvmlite.binding as llvm

        from .llvm.machines import jit_ir

        llvm.add_symbol("syscall", ctypes.cast(ctypes.CDLL(None).syscall, ctypes.c_void_p).value)
        self._engine = jit_ir(_ir())
        self._worker = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(self._engine.get_function_address("tcc_team_worker"))
        self._run = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                     ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(
            self._engine.get_function_address("tcc_team_run"))
        self._bump = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(self._engine.get_function_address("tcc_team_bump"))
        self._cores = _cores()
        self._fresh_words()

    def _fresh_words(self) -> None:
        """New shared words, no workers (also a forked child's start: the code is there, the workers are not)."""
        self.words = np.zeros(_WORDS + 8, dtype=np.int64)
        self._base = self.words.ctypes.data
        self._lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.words[_SPIN] = SPIN_CYCLES
        self.words[_JUMP] = JUMP_CYCLES
        self.words[_HOLD] = HOLD_CYCLES
        self.words[_SHARED] = int(os.environ.get("TCC_CORES_SHARED", "0") not in ("", "0"))

    def ensure(self, workers: int) -> None:
        """At least ``workers`` worker threads (the caller runs parts too); nobody spins with more
        threads than cores."""
        if len(self.threads) >= workers:
            return
        with self._lock:
            while len(self.threads) < workers:
                t = threading.Thread(target=self._worker, args=(self._base,), name=f"tcc-team-{len(self.threads)}",
                                     daemon=True)
                t.start()
                self.threads.append(t)
            self.words[_SPIN] = SPIN_CYCLES if len(self.threads) + 1 <= self._cores else 0

    def run(self, fn_address: int, ptrs: int, sizes: int, nparts: int, threads: int | None = None) -> bool:
        """Run ``fn(ptrs, sizes, part, nparts)`` (addresses: a kernel's, and of its two argument arrays)
        for every part on at most ``threads`` threads (default ``nparts``); False (nothing ran) if another
        thread's job holds the team."""
        helpers = min(nparts, threads or nparts) - 1
        self.ensure(helpers)
        return bool(self._run(self._base, fn_address, ptrs, sizes, nparts, max(helpers, 0)))

    def park(self) -> None:
        """Idle workers stop spinning and sleep until the next job (before BLAS takes the cores)."""
        self.words[_PARK] = 1

    def share_cores(self, shared: bool = True) -> None:
        """Tell the team its cores are (or no longer are) shared with other work: while they are, no worker
        and no caller spins, they sleep at once (the deterministic form of what a descheduled spinner infers)."""
        self.words[_SHARED] = int(shared)

    def contended(self) -> bool:
        """Whether a spinning thread of the team has ever found itself descheduled (STAMP set)."""
        return bool(self.words[_STAMP])

    def sleepers(self) -> int:
        """How many workers are asleep (or about to sleep) on the futex now."""
        return int(self.words[_SLEEPERS])

    def stop(self) -> None:
        """End every worker (they return from native code) and wait for them."""
        self.words[_STOP] = 1
        for t in self.threads:
            while t.is_alive():
                # bump GEN and wake again until the worker is gone (a worker between its last look at STOP
                # and its futex wait sleeps through a wake that comes first); the bump takes BUSY, so it
                # waits for a job another thread is running and never races its post (review finding)
                self._bump(self._base)
                t.join(0.01)
        self.threads.clear()


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


_TEAM: Team | None = None
_TEAM_LOCK = threading.Lock()
_SUPPORTED = sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64") and \
    os.environ.get("TCC_THREAD_TEAM", "1") != "0"


def team() -> Team | None:
    """The process's team (made on first use), or None where there is none (see the module docstring):
    also where it cannot be compiled, which is logged once and leaves parallel kernels to the Python pool."""
    global _TEAM, _SUPPORTED
    if not _SUPPORTED:
        return None
    if _TEAM is None:
        with _TEAM_LOCK:
            if _TEAM is None and _SUPPORTED:
                try:
                    _TEAM = Team()
                except (RuntimeError, OSError, AttributeError, ValueError) as exc:  # pragma: no cover - LLVM/libc
                    logging.getLogger(__name__).warning("no native thread team (%s): the Python pool runs "
                                                        "parallel kernels", exc)
                    _SUPPORTED = False
    return _TEAM


def park() -> None:
    """Send the team's idle workers to sleep, if there is a team (none is made)."""
    if _TEAM is not None:
        _TEAM.park()


def _stop_at_exit() -> None:
    if _TEAM is not None:
        _TEAM.stop()


def _forget_after_fork() -> None:
    """A forked child has none of the parent's workers: it keeps the compiled code (no LLVM call, no
    engine freed here: another parent thread may have held llvmlite's lock at the fork) with fresh words."""
    global _TEAM_LOCK
    _TEAM_LOCK = threading.Lock()
    if _TEAM is not None:
        _TEAM._fresh_words()


atexit.register(_stop_at_exit)
if hasattr(os, "register_at_fork"):  # pragma: no branch - POSIX
    os.register_at_fork(after_in_child=_forget_after_fork)
