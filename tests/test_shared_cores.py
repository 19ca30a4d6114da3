"""The thread team on a shared machine (issue 35 item 3): no spinning once the cores are known to be shared.

Spinning idle workers (and a caller spinning for its parts) take a core from
whatever else runs: with one competing CPU-bound process on 2 cores that was
the difference between milliseconds and most of a second per call.  These
tests drive the two ways the team learns the cores are shared through
deterministic hooks -- ``Team.share_cores`` (and ``TCC_CORES_SHARED``), and a
descheduling threshold of 0 cycles, under which every gap between two looks of
a spinner reads as "descheduled" -- with a spin so long (10^13 cycles, hours)
that a worker that spun would never be seen asleep; no timing is asserted.
"""
from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

import tcc
import tcc.backends.thread_team as thread_team

pytestmark = pytest.mark.skipif(thread_team.team() is None, reason="the native team is x86-64 Linux only")

CONV = "input x[n], w[m]\ny[i] = sum[k](sin(x[i + k]) * w[k])\n"
FOREVER = 10 ** 13  # cycles of spin: hours


def _all_asleep(team: thread_team.Team, within: float = 20.0) -> bool:
    deadline = time.monotonic() + within
    while team.sleepers() < len(team.threads) and time.monotonic() < deadline:
        time.sleep(0.001)
    return team.sleepers() == len(team.threads)


def _call(threads: int = 2) -> np.ndarray:
    f = tcc.compile(CONV, threads=threads)
    return f(x=np.random.default_rng(5).random(50_000), w=np.ones(9))["y"]


@pytest.fixture
def long_spin():
    team = thread_team.team()
    assert team is not None
    saved = {k: int(team.words[k]) for k in (thread_team._SPIN, thread_team._JUMP, thread_team._SHARED,
                                             thread_team._STAMP)}
    team.words[thread_team._SPIN] = FOREVER
    team.words[thread_team._STAMP] = 0
    try:
        yield team
    finally:
        for k, v in saved.items():
            team.words[k] = v
        team.park()


def test_told_the_cores_are_shared_the_team_sleeps_at_once(long_spin: thread_team.Team, monkeypatch) -> None:
    team = long_spin
    monkeypatch.setenv("TCC_PARALLEL_GRAIN", "0")
    team.words[thread_team._JUMP] = FOREVER  # no descheduling inferred: only the hook speaks
    team.share_cores(True)
    _call()
    assert len(team.threads) >= 1
    assert _all_asleep(team)


def test_a_spinner_that_finds_itself_descheduled_stops_spinning(long_spin: thread_team.Team) -> None:
    team = long_spin
    team.share_cores(False)
    team.words[thread_team._JUMP] = 0  # every gap between two looks reads as "descheduled"
    _call()
    assert _all_asleep(team)
    assert team.contended()


def test_without_either_signal_the_workers_do_spin(long_spin: thread_team.Team) -> None:
    """The control: the two tests above would pass vacuously if workers slept anyway."""
    team = long_spin
    team.share_cores(False)
    team.words[thread_team._JUMP] = FOREVER
    _call()
    time.sleep(0.3)
    assert team.sleepers() < len(team.threads)


def test_the_environment_marks_the_cores_shared() -> None:
    script = ("import numpy as np, tcc, tcc.backends.thread_team as tt\n"
              f"f = tcc.compile({CONV!r}, threads=3)\n"
              "f(x=np.random.default_rng(5).random(50_000), w=np.ones(9))\n"
              "print(int(tt.team().words[tt._SHARED]))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={"TCC_CORES_SHARED": "1", "TCC_PARALLEL_GRAIN": "0", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"


def test_same_bits_beside_a_competing_process() -> None:
    """Results do not depend on the thread count while another CPU-bound process takes a core."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        x = np.random.default_rng(7).random(80_000)
        w = np.random.default_rng(8).random(11)
        want = tcc.run(tcc.parse(CONV), {"x": x, "w": w})["y"]
        outs = [tcc.compile(CONV, threads=t)(x=x, w=w)["y"] for t in (1, 2, 3, 4)]
    finally:
        hog.kill()
        hog.wait()
    for got in outs:
        assert np.array_equal(got, outs[0])
    np.testing.assert_allclose(outs[0], want, rtol=1e-12)
