"""The on-disk compile cache (tcc.build.disk_cache, docs/cache.md): across processes, corruption, concurrency, eviction.

Processes are fresh interpreters with ``TCC_CACHE_DIR`` set to the test's own
directory; in-process tests turn the in-memory cache off
(``tcc.build.set_cache_size(0)``) so that every compile goes to the disk.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import pickle
import stat
import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

import tcc
import tcc.build as build
from tcc.build import disk_cache
from tcc.instruments import TimePasses
from tcc.ir.diagnostics import TccError

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

# Compiles the Urban example's gradient and the (BLAS-outlined) matmul, calls
# both on fixed inputs and prints the cache's counts and every result.
CROSS_PROCESS = f"""
import json, sys
import numpy as np, tcc
from tcc.build import disk_cache
rng = np.random.default_rng(7)
urban = tcc.grad(tcc.parse({str(EXAMPLES / "urban.tcc")!r}), of="f", wrt=["a", "d"])
f = tcc.compile(urban)
inputs = {{"a": rng.random((3, 5)), "b": rng.random((4, 5)), "c": rng.random((3, 3)), "d": rng.random(8),
          "df": rng.random((3, 4))}}
out = {{k: v.tolist() for k, v in f(**inputs).items()}}
reference = tcc.run(urban, inputs)
assert all(np.allclose(reference[k], v, rtol=1e-12) for k, v in out.items())
g = tcc.compile(tcc.parse({str(EXAMPLES / "matmul.tcc")!r}))
a, b = rng.random((6, 4)), rng.random((4, 5))
out["matmul"] = g(a=a, b=b)["f"].tolist()
assert np.allclose(out["matmul"], a @ b)
print(json.dumps({{"stats": disk_cache.STATS, "out": out}}))
"""


def run(script: str, cache: Path | str, timeout: float = 120, **env: str) -> dict:
    """Run ``script`` in a fresh interpreter with ``TCC_CACHE_DIR=cache``; its last stdout line as JSON."""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "TCC_CACHE_DIR": str(cache), **env})
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def entries(cache: Path) -> list[Path]:
    return sorted(cache.glob(f"*{disk_cache.SUFFIX}"))


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This test's cache directory, with the in-memory cache off so every compile reads or writes it."""
    root = tmp_path / "cache"
    monkeypatch.setenv("TCC_CACHE_DIR", str(root))
    monkeypatch.delenv("TCC_CACHE_SIZE", raising=False)
    old = build.set_cache_size(0)
    try:
        yield root
    finally:
        build.set_cache_size(old)


def counts() -> dict[str, int]:
    return dict(disk_cache.STATS)


def delta(before: dict[str, int]) -> dict[str, int]:
    return {k: v - before[k] for k, v in disk_cache.STATS.items()}


def scaled(i: int) -> str:
    return f"input x[n]\ny[i] = x[i] * {i + 2} + sin(x[i])\n"


# ---------------------------------------------------------------------------
# across processes
# ---------------------------------------------------------------------------
def test_a_second_process_gets_hits_and_the_same_results(tmp_path: Path) -> None:
    first = run(CROSS_PROCESS, tmp_path)
    assert first["stats"] == {"hits": 0, "misses": 2, "stores": 2, "rejected": 0}
    assert len(entries(tmp_path)) == 2
    second = run(CROSS_PROCESS, tmp_path)
    assert second["stats"] == {"hits": 2, "misses": 0, "stores": 0, "rejected": 0}
    assert second["out"] == first["out"]  # the same machine code: bit for bit


def test_an_empty_cache_dir_turns_the_cache_off(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {"HOME": str(home), "XDG_CACHE_HOME": str(home / "xdg"), "LOCALAPPDATA": str(home / "local")}
    for _ in range(2):
        assert run(CROSS_PROCESS, "", **env)["stats"] == {"hits": 0, "misses": 0, "stores": 0, "rejected": 0}
    assert not home.exists()


def test_concurrent_writers_all_succeed_and_leave_a_valid_cache(tmp_path: Path) -> None:
    """Six processes at once compile two shared programs (in opposite orders) and one program of their own."""
    script = """
import json, sys
import numpy as np, tcc
from tcc.build import disk_cache
me = int(sys.argv[1])
programs = [f"input x[n]\\ny[i] = exp(x[i]) * {k}\\n" for k in (2, 3)]
if me % 2:
    programs.reverse()
programs.append(f"input x[n]\\ny[i] = cos(x[i]) + {me}\\n")
x = np.linspace(0.0, 1.0, 33)
for text in programs:
    got = tcc.compile(text)(x=x)["y"]
    assert np.allclose(got, tcc.run(text, {"x": x})["y"], rtol=1e-13), text
print(json.dumps(disk_cache.STATS))
"""
    env = {**os.environ, "TCC_CACHE_DIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", script, str(k)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for k in range(6)]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        stats = json.loads(out)
        assert stats["rejected"] == 0 and stats["hits"] + stats["misses"] == 3
    names = sorted(p.name for p in tmp_path.iterdir() if p.name != disk_cache.KEY_FILE)
    assert len(names) == 8 and all(n.endswith(disk_cache.SUFFIX) and not n.startswith(".") for n in names)
    check = disk_cache.DiskCache(tmp_path, disk_cache.DEFAULT_SIZE)
    assert all(check.load(n[: -len(disk_cache.SUFFIX)]) is not None for n in names)  # every one whole and valid
    proc = subprocess.run([sys.executable, "-c", script, "0"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"hits": 3, "misses": 0, "stores": 0, "rejected": 0}


# ---------------------------------------------------------------------------
# corrupted entries are ignored and replaced
# ---------------------------------------------------------------------------
def truncate(data: bytes) -> bytes:
    return data[: len(data) // 2]


def flip_payload(data: bytes) -> bytes:
    return data[:-10] + bytes([data[-10] ^ 0x40]) + data[-9:]


def flip_header_key(data: bytes) -> bytes:
    return data[:20] + bytes([data[20] ^ 0x01]) + data[21:]


def wrong_version(data: bytes) -> bytes:
    return data[:8] + (disk_cache.FORMAT_VERSION + 1).to_bytes(4, "little") + data[12:]


@pytest.mark.parametrize("corrupt", [truncate, flip_payload, flip_header_key, wrong_version,
                                     lambda data: b"", lambda data: b"\0" * len(data)],
                         ids=["truncated", "payload-bit", "header-key", "format-version", "empty", "zeros"])
def test_a_corrupted_entry_is_ignored_and_replaced(cache: Path, corrupt) -> None:  # noqa: ANN001
    x = np.linspace(-1.0, 1.0, 17)
    expected = tcc.compile(scaled(0))(x=x)["y"]
    [path] = entries(cache)
    good = path.read_bytes()
    path.write_bytes(corrupt(good))
    before = counts()
    f = tcc.compile(scaled(0))
    assert delta(before) == {"hits": 0, "misses": 1, "stores": 1, "rejected": 1}
    np.testing.assert_array_equal(f(x=x)["y"], expected)
    assert entries(cache) == [path] and len(path.read_bytes()) == len(good)  # replaced by a whole entry
    before = counts()
    np.testing.assert_array_equal(tcc.compile(scaled(0))(x=x)["y"], expected)
    assert delta(before) == {"hits": 1, "misses": 0, "stores": 0, "rejected": 0}


def test_an_entry_under_another_key_is_not_trusted(cache: Path) -> None:
    """A file copied to another program's name: its header names the other key."""
    tcc.compile(scaled(0))
    [path] = entries(cache)
    tcc.compile(scaled(1))
    [other] = [p for p in entries(cache) if p != path]
    other.write_bytes(path.read_bytes())
    before = counts()
    x = np.linspace(0.0, 1.0, 5)
    np.testing.assert_allclose(tcc.compile(scaled(1))(x=x)["y"], x * 3 + np.sin(x), rtol=1e-15)
    assert delta(before)["rejected"] == 1


# ---------------------------------------------------------------------------
# the size bound
# ---------------------------------------------------------------------------
def test_least_recently_used_entries_are_evicted_beyond_the_bound(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tcc.compile(scaled(0))
    [first] = entries(cache)
    size = first.stat().st_size
    monkeypatch.setenv("TCC_CACHE_SIZE", str(3 * size + size // 2))  # room for three entries, not four
    paths = [first]
    for i in (1, 2):
        tcc.compile(scaled(i))
        paths.append(next(p for p in entries(cache) if p not in paths))
    for age, path in zip((300, 200, 100), paths):  # scaled(0) oldest, then 1, then 2
        os.utime(path, (path.stat().st_atime, path.stat().st_mtime - age))
    before = counts()
    tcc.compile(scaled(0))  # a hit makes scaled(0) the most recently used
    assert delta(before)["hits"] == 1
    tcc.compile(scaled(3))  # a fourth entry: the least recently used one, scaled(1), goes
    remaining = entries(cache)
    assert len(remaining) == 3 and paths[1] not in remaining and paths[0] in remaining and paths[2] in remaining
    assert sum(p.stat().st_size for p in remaining) <= 3 * size + size // 2
    before = counts()
    tcc.compile(scaled(1))
    assert delta(before) == {"hits": 0, "misses": 1, "stores": 1, "rejected": 0}


def test_a_bound_of_zero_stores_nothing(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TCC_CACHE_SIZE", "0")
    x = np.arange(4.0)
    np.testing.assert_allclose(tcc.compile(scaled(5))(x=x)["y"], x * 7 + np.sin(x), rtol=1e-15)
    assert entries(cache) == []


@pytest.mark.parametrize("text, size", [("1000", 1000), ("64K", 64 * 2**10), ("512m", 512 * 2**20), ("2G", 2 * 2**30),
                                        (" 300MB ", 300 * 2**20)])
def test_the_bound_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch, text: str, size: int) -> None:
    monkeypatch.setenv("TCC_CACHE_SIZE", text)
    assert disk_cache.cache_size() == size


def test_a_malformed_bound_is_an_error(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TCC_CACHE_SIZE", "lots")
    with pytest.raises(TccError, match=r"^error: TCC_CACHE_SIZE must be a number of bytes with an optional K, M or G "
                                       r"suffix, got 'lots'$"):
        tcc.compile(scaled(6))


# ---------------------------------------------------------------------------
# the key, and what is not cached
# ---------------------------------------------------------------------------
def test_the_key_changes_with_program_pipeline_dtype_and_target() -> None:
    base = ("input x[n]\ny[i] = x[i]\n", "infer-ranges,lower-loops", "float64", "cpu")
    key = disk_cache.entry_key(*base)
    assert disk_cache.entry_key(*base) == key and len(key) == 64
    variants = [
        ("input x[n]\ny[i] = x[i] * 2\n", *base[1:]),
        (base[0], "infer-ranges,lower-loops,parallel", *base[2:]),
        (*base[:2], "float32", base[3]),
        (*base[:3], "cuda-sim"),
        # the parts are length-prefixed: moving text from one to the next is another key
        (base[0] + "i", base[1][1:], *base[2:]),
    ]
    assert len({key, *(disk_cache.entry_key(*v) for v in variants)}) == 1 + len(variants)


def test_dtype_and_pipeline_get_entries_of_their_own(cache: Path) -> None:
    x64 = np.linspace(0.0, 1.0, 9)
    tcc.compile(scaled(0))
    tcc.compile(scaled(0), dtype="float32")
    tcc.compile(scaled(0), passes="infer-ranges,lower-loops")
    assert len(entries(cache)) == 3
    before = counts()
    f32 = tcc.compile(scaled(0), dtype="float32")
    f = tcc.compile(scaled(0), passes="infer-ranges,lower-loops")
    assert delta(before)["hits"] == 2
    assert f32(x=x64.astype(np.float32))["y"].dtype == np.float32
    np.testing.assert_allclose(f(x=x64)["y"], x64 * 2 + np.sin(x64), rtol=1e-15)


def test_runs_with_instruments_neither_read_nor_write_the_cache(cache: Path) -> None:
    before = counts()
    tcc.compile(scaled(0), instruments=[TimePasses()])
    assert entries(cache) == [] and delta(before) == {"hits": 0, "misses": 0, "stores": 0, "rejected": 0}
    tcc.compile(scaled(0))
    timer = TimePasses()
    tcc.compile(scaled(0), instruments=[timer])
    assert "llvm-opt" in {name for name, _ in timer.timings}  # the passes ran: not served from the cache
    assert delta(before)["hits"] == 0


def test_the_cuda_simulator_is_not_cached(cache: Path) -> None:
    before = counts()
    x = np.linspace(0.0, 1.0, 40)
    np.testing.assert_allclose(tcc.compile(scaled(0), target="cuda-sim")(x=x)["y"], x * 2 + np.sin(x), rtol=1e-14)
    assert entries(cache) == [] and delta(before) == {"hits": 0, "misses": 0, "stores": 0, "rejected": 0}


def test_an_unwritable_cache_dir_compiles_uncached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TCC_CACHE_DIR", str(blocker / "cache"))
    old = build.set_cache_size(0)
    try:
        before = counts()
        x = np.arange(3.0)
        np.testing.assert_allclose(tcc.compile(scaled(0))(x=x)["y"], x * 2 + np.sin(x), rtol=1e-15)
        assert delta(before) == {"hits": 0, "misses": 1, "stores": 0, "rejected": 0}
    finally:
        build.set_cache_size(old)


def test_the_default_directory_is_the_platform_user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TCC_CACHE_DIR")
    for var, sub in (("HOME", "home"), ("USERPROFILE", "home"), ("XDG_CACHE_HOME", "xdg"), ("LOCALAPPDATA", "local")):
        monkeypatch.setenv(var, str(tmp_path / sub))
    expected = {"win32": tmp_path / "local" / "tcc", "darwin": tmp_path / "home" / "Library" / "Caches" / "tcc"}
    assert disk_cache.cache_dir() == expected.get(sys.platform, tmp_path / "xdg" / "tcc")
    if sys.platform not in expected:
        monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")  # the XDG spec: a relative path is invalid
        assert disk_cache.cache_dir() == tmp_path / "home" / ".cache" / "tcc"


def test_the_test_session_never_uses_the_user_cache() -> None:
    """tests/conftest.py points TCC_CACHE_DIR at a temporary directory for the whole session."""
    configured = Path(os.environ["TCC_CACHE_DIR"])
    assert configured.name.startswith("tcc-test-cache-") and configured.is_dir()


def test_a_hit_reports_errors_with_the_callers_file(cache: Path, tmp_path: Path) -> None:
    text = "input x[n]\ny[i] = x[i] + 1\n"
    for name in ("first.tcc", "second.tcc"):
        (tmp_path / name).write_text(text)
    tcc.compile(tcc.parse(tmp_path / "first.tcc"))
    before = counts()
    f = tcc.compile(tcc.parse(tmp_path / "second.tcc"))
    assert delta(before)["hits"] == 1
    assert f.program.source.filename == str(tmp_path / "second.tcc")
    clear = disk_cache.clear()
    assert clear == 1 and entries(cache) == []


def test_the_cached_call_time_order_variants_still_compile(cache: Path) -> None:
    """A hit keeps contract-order's call-time re-decision: the chain runs in the order the sizes want."""
    chain = "input A[n, p], B[p, q], C[q, r]\nD[i, l] = sum[j, k](A[i, j] * B[j, k] * C[k, l])\n"
    tcc.compile(chain)
    f = tcc.compile(chain)
    rng = np.random.default_rng(3)
    a, b, c = rng.random((40, 3)), rng.random((3, 40)), rng.random((40, 3))
    np.testing.assert_allclose(f(A=a, B=b, C=c)["D"], a @ b @ c, rtol=1e-12)
    np.testing.assert_allclose(f(A=a.T.copy(), B=b.T.copy(), C=c.T.copy())["D"], a.T @ b.T @ c.T, rtol=1e-12)
    assert f._reorder is not None


def test_a_program_too_deep_to_pickle_compiles_uncached(cache: Path) -> None:
    """An expression nested beyond Python's recursion limit cannot be pickled: the compile goes on, unstored."""
    body = " + ".join(f"x[i] * {k}" for k in range(3000))
    before = counts()
    f = tcc.compile(f"input x[4]\ny[i] = {body}\n")
    np.testing.assert_allclose(f(x=np.arange(4.0))["y"], np.arange(4.0) * (3000 * 2999 / 2), rtol=1e-12)
    assert delta(before) == {"hits": 0, "misses": 1, "stores": 0, "rejected": 0} and entries(cache) == []


@pytest.mark.parametrize("change", ["cpu", "llvmlite", "tcc"])
def test_the_key_changes_with_the_host_cpu_and_the_versions(monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    import llvmlite
    import llvmlite.binding as llvm

    args = ("input x[n]\ny[i] = x[i]\n", "infer-ranges,lower-loops", "float64", "cpu")
    key = disk_cache.entry_key(*args)
    if change == "cpu":
        monkeypatch.setattr(llvm, "get_host_cpu_name", lambda: "some-other-cpu")
    elif change == "llvmlite":
        monkeypatch.setattr(llvmlite, "__version__", "0.0.1")
    else:
        monkeypatch.setattr(tcc, "__version__", "0.0.1")
    disk_cache._environment.cache_clear()
    try:
        assert disk_cache.entry_key(*args) != key
    finally:
        monkeypatch.undo()
        disk_cache._environment.cache_clear()
    assert disk_cache.entry_key(*args) == key


# ---------------------------------------------------------------------------
# entries someone else wrote never run (docs/cache.md, "Threat model")
# ---------------------------------------------------------------------------
FOREIGN_UID = 65534  # "nobody": a file chowned to it stands for another local user's
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


class _Plant:
    """Unpickling this calls ``open(marker, "w")``: a planted entry that is unpickled leaves the marker."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204
        return open, (str(self.marker), "w")


def sealed(key: str, payload: bytes, mac: bytes) -> bytes:
    """An entry in the documented layout: magic, format version, key, payload length, a 32-byte MAC, payload."""
    return struct.pack("<8sI64sQ32s", b"TCCCACHE", disk_cache.FORMAT_VERSION, key.encode(), len(payload), mac) + payload


def authenticated(key: str, payload: bytes, secret: bytes) -> bytes:
    """An entry whose MAC is the HMAC-SHA256 under ``secret`` of the header before the MAC and the payload."""
    prefix = sealed(key, payload, b"\0" * 32)[:84]
    return sealed(key, payload, hmac.new(secret, prefix + payload, hashlib.sha256).digest())


def planted_payload(marker: Path) -> bytes:
    return zlib.compress(pickle.dumps(_Plant(marker)))


def key_of(path: Path) -> str:
    return path.name[: -len(disk_cache.SUFFIX)]


@pytest.mark.parametrize("mac", ["checksum", "other-key", "zeros"])
def test_a_planted_entry_never_runs(cache: Path, tmp_path: Path, mac: str) -> None:
    """A well-formed entry under the program's key whose MAC is not ours: a miss; nothing is unpickled."""
    x = np.linspace(-1.0, 1.0, 9)
    expected = tcc.compile(scaled(0))(x=x)["y"]
    [path] = entries(cache)
    marker = tmp_path / "planted-code-ran"
    payload = planted_payload(marker)
    forged = {"checksum": sealed(key_of(path), payload, hashlib.sha256(payload).digest()),
              "other-key": authenticated(key_of(path), payload, b"an attacker's own secret key 32b"),
              "zeros": sealed(key_of(path), payload, b"\0" * 32)}[mac]
    path.write_bytes(forged)
    before = counts()
    np.testing.assert_array_equal(tcc.compile(scaled(0))(x=x)["y"], expected)
    assert not marker.exists()
    assert delta(before) == {"hits": 0, "misses": 1, "stores": 1, "rejected": 1}
    before = counts()
    tcc.compile(scaled(0))  # replaced by our own entry
    assert delta(before)["hits"] == 1 and not marker.exists()


def test_entries_are_authenticated_with_the_users_secret(cache: Path) -> None:
    """The secret is 32 bytes in a 0600 file of ours; every entry's MAC is its HMAC, checked before unpickling."""
    tcc.compile(scaled(0))
    [path] = entries(cache)
    key_file = cache / disk_cache.KEY_FILE
    st = key_file.lstat()
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and st.st_size == 32
    data = path.read_bytes()
    assert data == authenticated(key_of(path), data[116:], key_file.read_bytes())


@pytest.mark.skipif(not IS_ROOT, reason="making a file another user's needs root (chown)")
def test_an_unusable_entry_is_removed_only_when_it_is_ours(cache: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    tcc.compile(scaled(0))
    tcc.compile(scaled(1))
    ours, theirs = entries(cache)
    marker = tmp_path / "planted-code-ran"
    for path in (ours, theirs):
        path.write_bytes(sealed(key_of(path), planted_payload(marker), b"\0" * 32))
    os.chown(theirs, FOREIGN_UID, FOREIGN_UID)
    monkeypatch.setattr(disk_cache.DiskCache, "store", lambda *args: False)  # look at what a load leaves
    before = counts()
    tcc.compile(scaled(0))
    tcc.compile(scaled(1))
    assert delta(before) == {"hits": 0, "misses": 2, "stores": 0, "rejected": 2} and not marker.exists()
    assert not ours.exists() and theirs.exists() and theirs.stat().st_uid == FOREIGN_UID


def test_a_directory_writable_by_others_without_the_sticky_bit_is_refused(cache: Path) -> None:
    cache.mkdir()
    for mode in (0o777, 0o770, 0o722):
        cache.chmod(mode)
        before = counts()
        x = np.arange(3.0)
        np.testing.assert_allclose(tcc.compile(scaled(0))(x=x)["y"], x * 2 + np.sin(x), rtol=1e-15)
        assert delta(before) == {"hits": 0, "misses": 1, "stores": 0, "rejected": 0}
        assert list(cache.iterdir()) == []  # neither an entry nor a key written


@pytest.mark.skipif(not IS_ROOT, reason="making a directory another user's needs root (chown)")
def test_a_directory_owned_by_someone_else_is_refused(cache: Path) -> None:
    cache.mkdir(mode=0o700)
    os.chown(cache, FOREIGN_UID, FOREIGN_UID)
    before = counts()
    tcc.compile(scaled(0))
    tcc.compile(scaled(0))
    assert delta(before) == {"hits": 0, "misses": 2, "stores": 0, "rejected": 0} and list(cache.iterdir()) == []


def test_a_shared_sticky_directory_keeps_the_key_in_the_users_own_directory(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A team directory (mode 1777, ours): entries go there, the secret into the private default directory."""
    home = tmp_path / "home"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "xdg"))
    monkeypatch.setenv("HOME", str(home))
    cache.mkdir()
    cache.chmod(0o1777)
    tcc.compile(scaled(0))
    before = counts()
    tcc.compile(scaled(0))
    assert delta(before)["hits"] == 1
    assert [p.name for p in cache.iterdir()] == [p.name for p in entries(cache)]  # no key in the shared directory
    private = home / "xdg" / "tcc"
    assert stat.S_IMODE(private.stat().st_mode) == 0o700
    assert stat.S_IMODE((private / disk_cache.KEY_FILE).stat().st_mode) == 0o600


def _bad_key_file(cache: Path, kind: str) -> None:
    key_file = cache / disk_cache.KEY_FILE
    if kind == "readable":
        key_file.chmod(0o644)
    elif kind == "short":
        key_file.write_bytes(b"12345")
    elif kind == "symlink":
        target = cache.parent / "elsewhere"
        target.write_bytes(key_file.read_bytes())
        target.chmod(0o600)
        key_file.unlink()
        key_file.symlink_to(target)
    else:
        os.chown(key_file, FOREIGN_UID, FOREIGN_UID)


@pytest.mark.parametrize("kind", ["readable", "short", "symlink", "foreign"])
def test_a_key_file_that_is_not_private_turns_the_cache_off(cache: Path, kind: str) -> None:
    if kind == "foreign" and not IS_ROOT:
        pytest.skip("making a file another user's needs root (chown)")
    tcc.compile(scaled(0))
    [path] = entries(cache)
    _bad_key_file(cache, kind)
    before = counts()
    x = np.arange(3.0)
    np.testing.assert_allclose(tcc.compile(scaled(0))(x=x)["y"], x * 2 + np.sin(x), rtol=1e-15)
    tcc.compile(scaled(1))
    assert delta(before) == {"hits": 0, "misses": 2, "stores": 0, "rejected": 0}
    assert entries(cache) == [path]  # nothing written or read under a key that others may know


# ---------------------------------------------------------------------------
# an authenticated entry with a malformed object file is a miss, not a crash
# ---------------------------------------------------------------------------
COMPILE_ONE = f"""
import json, resource
import numpy as np, tcc
from tcc.build import disk_cache
resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))  # a runaway read fails fast, not the machine
x = np.linspace(-1.0, 1.0, 9)
y = tcc.compile({scaled(0)!r})(x=x)["y"]
assert np.array_equal(y, x * 2 + np.sin(x)), y
print(json.dumps(disk_cache.STATS))
"""


def _elf_header_flip(obj: bytes) -> bytes:
    shoff = struct.unpack_from("<Q", obj, 40)[0]
    # the last section header's sh_offset, far past the end of the file
    at = shoff + 64 * (struct.unpack_from("<H", obj, 60)[0] - 1) + 24
    return obj[:at] + struct.pack("<Q", struct.unpack_from("<Q", obj, at)[0] | 1 << 40) + obj[at + 8:]


@pytest.mark.parametrize("damage", [lambda obj: obj[: len(obj) // 2], lambda obj: obj[:40],
                                    lambda obj: bytes(len(obj)), lambda obj: b"", _elf_header_flip,
                                    lambda obj: bytes(np.random.default_rng(5).integers(0, 256, len(obj), np.uint8))],
                         ids=["truncated", "header-only", "zeros", "empty", "section-offset", "garbage"])
def test_an_authenticated_entry_with_a_malformed_object_is_a_miss(tmp_path: Path, damage) -> None:  # noqa: ANN001
    """The header, length and HMAC are right, the object file is not: the linker must never see it."""
    run(COMPILE_ONE, tmp_path)
    [path] = entries(tmp_path)
    data = path.read_bytes()
    l1, llvm_module, obj = pickle.loads(zlib.decompress(data[116:]))
    payload = zlib.compress(pickle.dumps((l1, llvm_module, damage(obj)), pickle.HIGHEST_PROTOCOL), 1)
    path.write_bytes(authenticated(key_of(path), payload, (tmp_path / disk_cache.KEY_FILE).read_bytes()))
    assert run(COMPILE_ONE, tmp_path, timeout=60) == {"hits": 0, "misses": 1, "stores": 1, "rejected": 1}
    assert run(COMPILE_ONE, tmp_path, timeout=60)["hits"] == 1


# ---------------------------------------------------------------------------
# special files in place of entries: a miss, never a hang or MemoryError
# ---------------------------------------------------------------------------
def _special(path: Path, kind: str) -> None:
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "huge-sparse":
        with open(path, "wb") as fh:
            fh.truncate(64 * 2**30)  # 64 GiB, no blocks
    else:
        path.mkdir()


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "huge-sparse", "directory"])
def test_a_special_file_in_place_of_an_entry_is_a_miss(tmp_path: Path, kind: str) -> None:
    run(COMPILE_ONE, tmp_path)
    [path] = entries(tmp_path)
    _special(path, kind)
    stats = run(COMPILE_ONE, tmp_path, timeout=60)
    assert stats["hits"] == 0 and stats["misses"] == 1 and stats["rejected"] == 1
    if kind == "directory":  # not ours to remove, and no entry can be renamed over it
        assert path.is_dir() and stats["stores"] == 0
    else:  # ours: removed (a link itself, never its target) and replaced
        assert stats["stores"] == 1 and path.is_file() and not path.is_symlink()
        assert run(COMPILE_ONE, tmp_path, timeout=60)["hits"] == 1
    assert Path("/dev/zero").exists()


def test_eviction_never_follows_a_planted_link(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A link named like an entry to a big file elsewhere neither counts against the bound nor loses its target."""
    tcc.compile(scaled(0))
    [first] = entries(cache)
    monkeypatch.setenv("TCC_CACHE_SIZE", str(4 * first.stat().st_size))
    outside = tmp_path / "someone-elses-file"
    with open(outside, "wb") as fh:
        fh.truncate(2**30)
    (cache / f"{'0' * 64}{disk_cache.SUFFIX}").symlink_to(outside)
    tcc.compile(scaled(1))
    assert first.exists() and len(entries(cache)) == 3 and outside.stat().st_size == 2**30
    before = counts()
    tcc.compile(scaled(0))
    tcc.compile(scaled(1))
    assert delta(before)["hits"] == 2
