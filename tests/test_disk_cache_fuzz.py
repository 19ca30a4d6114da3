"""Fuzzing the on-disk compile cache's directory (tcc.build.disk_cache, docs/cache.md "Threat model").

Whatever is in the cache directory -- corrupt, truncated or bit-flipped
entries, planted entries in the valid format whose MAC is a checksum, zeros
or an HMAC under another key and whose pickle would create a marker file if
it were ever unpickled, authenticated entries whose object file is damaged,
another program's entry under this key, entries owned by another user
(chowned to 65534 when the suite runs as root, as on CI; without root that
ownership cannot be simulated and those cases are planted entries of our
own), a FIFO, a link to ``/dev/zero`` or to another entry, a directory or a
huge sparse file in place of an entry -- every compile must return exactly
what a fresh, uncached compile returns, the marker must never appear, and
nothing may hang (subprocess timeouts) or crash (the cases run in a child
process, so a segfault fails the test and names the case instead of
killing pytest).  Two more tests run processes concurrently on shared and
private programs, once with room for every entry and once with a tiny
``TCC_CACHE_SIZE`` so that every store evicts.

Bounded by default (CI): a fixed seed, 40 directory cases and a few
concurrent rounds, a few seconds each.  ``TCC_FUZZ_LONG=1`` raises the
counts (1000 cases, 4 processes of 40 rounds) and takes a fresh seed unless
``TCC_FUZZ_SEED`` gives one; the seed is printed in every failure message,
and ``TCC_FUZZ_SEED=N`` replays it.

The child is this file run as a script (``python tests/test_disk_cache_fuzz.py
fuzz DIR SEED COUNT``); it prints each case before running it.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import pickle
import random
import shutil
import stat
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

LONG = os.environ.get("TCC_FUZZ_LONG", "") not in ("", "0")
SEED = int(os.environ["TCC_FUZZ_SEED"]) if os.environ.get("TCC_FUZZ_SEED") else (
    random.SystemRandom().randrange(2**32) if LONG else 20240601)
CASES = 1000 if LONG else 40
ROUNDS, PROCESSES = (40, 4) if LONG else (6, 2)
FOREIGN_UID = 65534
HEADER = struct.Struct("<8sI64sQ32s")  # the documented entry layout (docs/cache.md)
PREFIX_SIZE = 84  # what the HMAC covers besides the payload: the header before the MAC

PROGRAMS = [
    "input x[n]\ny[i] = x[i] * 3 + sin(x[i])\n",
    "input x[n]\ny[i] = exp(x[i]) - x[i] * x[i]\n",
    "input x[n]\ns = sum[i](x[i] * cos(x[i]))\ny[i] = x[i] * s\n",
]
KINDS = ["truncate", "bitflip", "garbage", "zeros", "planted-checksum", "planted-zero-mac", "planted-other-key",
         "foreign-planted", "foreign-valid", "malformed-object", "other-program", "fifo", "dev-zero",
         "link-to-entry", "directory", "huge-sparse", "empty"]


# ---------------------------------------------------------------------------
# the child: one process runs every case, printing each before it runs it
# ---------------------------------------------------------------------------
class Plant:
    """Unpickling this calls ``open(marker, "w")``: if a planted entry were unpickled, the marker would exist."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204
        return open, (self.marker, "w")


def seal(key: str, version: int, payload: bytes, mac: bytes) -> bytes:
    return HEADER.pack(b"TCCCACHE", version, key.encode(), len(payload), mac) + payload


def authenticate(key: str, version: int, payload: bytes, secret: bytes) -> bytes:
    prefix = seal(key, version, payload, b"\0" * 32)[:PREFIX_SIZE]
    return seal(key, version, payload, hmac.new(secret, prefix + payload, hashlib.sha256).digest())


def damage_object(obj: bytes, rng: random.Random) -> bytes:
    """A truncated or garbled object file, or one with bytes of its ELF header or section headers changed."""
    choice = rng.randrange(4)
    if choice == 0:
        return obj[: rng.randrange(len(obj))]
    if choice == 1:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 2 * len(obj))))
    damaged = bytearray(obj)
    shoff = struct.unpack_from("<Q", obj, 40)[0]
    region = (0, 64) if choice == 2 or shoff >= len(obj) else (shoff, len(obj))
    for _ in range(rng.randrange(1, 6)):
        damaged[rng.randrange(*region)] = rng.choice([0, 0xFF, 0x7F, 0x80, rng.randrange(256)])
    return bytes(damaged)


def fuzz(root: Path, seed: int, count: int) -> dict:
    """Run ``count`` cases of the directory fuzz in this process; returns the counts of kinds and outcomes."""
    import numpy as np

    import tcc
    import tcc.build as build
    from tcc.build import disk_cache

    build.set_cache_size(0)  # every compile reads or writes the disk
    rng = random.Random(seed)
    x = np.linspace(-1.5, 1.5, 23)
    os.environ["TCC_CACHE_DIR"] = ""
    reference = [tcc.compile(p)(x=x) for p in PROGRAMS]
    os.environ["TCC_CACHE_DIR"] = str(root)
    marker = root.parent / "planted-code-ran"
    is_root = os.geteuid() == 0
    outcomes: dict[str, int] = {}

    def compile_and_check(index: int) -> None:
        got = tcc.compile(PROGRAMS[index])(x=x)
        assert got.keys() == reference[index].keys()
        for name, value in got.items():
            assert np.array_equal(value, reference[index][name]), (name, value, reference[index][name])
        assert not marker.exists(), "a planted entry was unpickled"

    paths = []
    for index in range(len(PROGRAMS)):  # a valid entry for every program, to mutate
        compile_and_check(index)
        paths.append(next(p for p in sorted(root.glob(f"*{disk_cache.SUFFIX}")) if p not in paths))
    secret = (root / disk_cache.KEY_FILE).read_bytes()
    for case in range(count):
        index = rng.randrange(len(PROGRAMS))
        kind = rng.choice(KINDS)
        print(f"case {case} seed {seed}: {kind} on program {index}", flush=True)
        path = paths[index]
        key = path.name[: -len(disk_cache.SUFFIX)]
        if not path.is_file() or path.is_symlink():
            _clear(path)
            compile_and_check(index)  # a valid entry again
        good = path.read_bytes()
        before = dict(disk_cache.STATS)
        _mutate(path, key, kind, good, secret, paths[(index + 1) % len(paths)], marker, rng, is_root,
                disk_cache.FORMAT_VERSION)
        compile_and_check(index)
        compile_and_check(index)  # and once more: whatever the first left behind
        after = disk_cache.STATS
        outcome = "hit" if after["hits"] > before["hits"] and after["misses"] == before["misses"] else "miss"
        outcomes[f"{kind}:{outcome}"] = outcomes.get(f"{kind}:{outcome}", 0) + 1
        if path.is_symlink() or not path.is_file():
            _clear(path)  # a special file the compile left in place (a directory) or that is not one of ours
    return {"outcomes": outcomes, "stats": dict(disk_cache.STATS)}


def _clear(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _mutate(path: Path, key: str, kind: str, good: bytes, secret: bytes, other: Path, marker: Path,
            rng: random.Random, is_root: bool, version: int) -> None:
    """Put what ``kind`` names at the entry's path (``good`` is the valid entry now there)."""
    planted = zlib.compress(pickle.dumps(Plant(str(marker))))
    if kind in ("foreign-planted", "foreign-valid") and not is_root:
        kind = "planted-other-key"  # another user's file cannot be made without root
    if kind == "truncate":
        data = good[: rng.randrange(len(good))]
    elif kind == "bitflip":
        data = bytearray(good)
        for _ in range(rng.randrange(1, 9)):
            bit = rng.randrange(8 * len(data))
            data[bit // 8] ^= 1 << (bit % 8)
        data = bytes(data)
    elif kind == "garbage":
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(2 * len(good))))
    elif kind == "zeros":
        data = bytes(len(good))
    elif kind == "empty":
        data = b""
    elif kind == "planted-checksum":
        data = seal(key, version, planted, hashlib.sha256(planted).digest())
    elif kind == "planted-zero-mac":
        data = seal(key, version, planted, b"\0" * 32)
    elif kind in ("planted-other-key", "foreign-planted"):
        data = authenticate(key, version, planted, rng.randbytes(32))
    elif kind == "foreign-valid":
        data = good
    elif kind == "malformed-object":
        l1, llvm_module, obj = pickle.loads(zlib.decompress(good[HEADER.size:]))
        payload = zlib.compress(pickle.dumps((l1, llvm_module, damage_object(obj, rng)), pickle.HIGHEST_PROTOCOL))
        data = authenticate(key, version, payload, secret)
    elif kind == "other-program":
        data = other.read_bytes() if other.is_file() and not other.is_symlink() else good[:10]
    else:
        path.unlink()
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "dev-zero":
            path.symlink_to("/dev/zero")
        elif kind == "link-to-entry":
            path.symlink_to(other)
        elif kind == "directory":
            path.mkdir()
            (path / "inside").write_bytes(good)
        elif kind == "huge-sparse":
            with open(path, "wb") as fh:
                fh.truncate(rng.choice([2**28 + 1, 2**34, 2**40]))
        else:  # pragma: no cover - KINDS and this function go together
            raise AssertionError(kind)
        return
    path.write_bytes(data)
    if kind.startswith("foreign"):
        os.chown(path, FOREIGN_UID, FOREIGN_UID)


def concurrent(root: Path, me: int, rounds: int, seed: int) -> dict:
    """Compile two shared programs and one of this process's own, ``rounds`` times in a random order."""
    import numpy as np

    import tcc
    import tcc.build as build
    from tcc.build import disk_cache

    build.set_cache_size(0)
    rng = random.Random(seed * 1000 + me)
    x = np.linspace(0.0, 2.0, 17)
    programs = [PROGRAMS[0], PROGRAMS[1], f"input x[n]\ny[i] = cos(x[i]) * {me + 2} + x[i]\n"]
    for _ in range(rounds):
        text = rng.choice(programs)
        got = tcc.compile(text)(x=x)["y"]
        os.environ["TCC_CACHE_DIR"] = ""
        expected = tcc.compile(text)(x=x)["y"]
        os.environ["TCC_CACHE_DIR"] = str(root)
        assert np.array_equal(got, expected), text
    return dict(disk_cache.STATS)


# ---------------------------------------------------------------------------
# the tests
# ---------------------------------------------------------------------------
def child(*args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **env})


def finish(proc: subprocess.Popen, timeout: float) -> dict:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"hung (seed {SEED}); last case: {out.strip().splitlines()[-1:]}")
    assert proc.returncode == 0, f"exit {proc.returncode} (seed {SEED}) at {out.strip().splitlines()[-1:]}\n{err}"
    return json.loads(out.strip().splitlines()[-1])


def test_fuzzed_cache_entries_never_run_hang_or_crash(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    result = finish(child("fuzz", str(root), str(SEED), str(CASES), TCC_CACHE_DIR=str(root)),
                    timeout=300 if not LONG else 3600)
    kinds = {k.split(":")[0] for k in result["outcomes"]}
    assert len(kinds) >= (10 if not LONG else len(KINDS)), result  # the seed covers most kinds
    # only an entry that is ours and untouched may be a hit; everything planted or damaged is a miss
    assert all(k.split(":")[0] in ("foreign-valid", "bitflip", "malformed-object") or k.endswith(":miss")
               for k in result["outcomes"]), result
    assert not (tmp_path / "planted-code-ran").exists()


@pytest.mark.parametrize("tiny", [False, True], ids=["room", "tiny-bound"])
def test_concurrent_processes_share_the_cache_and_evict_safely(tmp_path: Path, tiny: bool) -> None:
    root = tmp_path / "cache"
    env = {"TCC_CACHE_DIR": str(root)}
    if tiny:
        env["TCC_CACHE_SIZE"] = "8K"  # one or two 3-6 kB entries: nearly every store evicts another's entry
    procs = [child("concurrent", str(root), str(me), str(ROUNDS), str(SEED), **env)
             for me in range(PROCESSES)]
    stats = [finish(proc, timeout=300 if not LONG else 3600) for proc in procs]
    assert all(s["rejected"] == 0 and s["hits"] + s["misses"] == ROUNDS for s in stats), stats
    names = sorted(p.name for p in root.iterdir())
    assert ".hmac-key" in names and not any(n.startswith(".tmp-") for n in names), names
    for name in names:
        st = os.lstat(root / name)
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600, (name, oct(st.st_mode))
    if tiny:  # every store is followed by its eviction, so the last one left the bound kept
        assert sum(os.lstat(root / n).st_size for n in names if n.endswith(".tccache")) <= 8 * 2**10, names


if __name__ == "__main__":
    command, directory, *rest = sys.argv[1:]
    if command == "fuzz":
        print(json.dumps(fuzz(Path(directory), int(rest[0]), int(rest[1]))))
    else:
        print(json.dumps(concurrent(Path(directory), int(rest[0]), int(rest[1]), int(rest[2]))))
