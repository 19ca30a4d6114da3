"""The on-disk compile cache: a second process's compile of a program is a file read and a link.

A cold CPU compile runs the L1/L2 passes, lowers to LLVM, runs LLVM's O3 and
codegen; in a fresh process the passes and LLVM together cost a few tenths of
a second per program (docs/cache.md has the measurements).  Caching object
code alone would still leave the passes and the lowering to run (they are
what yields the L1 and L2 programs the runtime binds calls with), so an
entry holds the whole compiled result: the L1 program after the last
index-level pass, the optimised :class:`~tcc.backends.llvm.LLVMModule`
(its L2 program, kernel symbols and IR text) pickled -- the IR is immutable
and hash-consed again on unpickling -- and the object file MCJIT made from
it (:func:`tcc.backends.cpu.jit_with_object`), which a hit links into a fresh
engine (:func:`tcc.backends.cpu.load_object`) without optimising or
generating code.

**Where**: ``TCC_CACHE_DIR``; unset, the platform's user cache directory
(``$XDG_CACHE_HOME/tcc`` or ``~/.cache/tcc`` on Linux, ``~/Library/Caches/tcc``
on macOS, ``%LOCALAPPDATA%\\tcc`` on Windows); set but empty, the cache is off.

**Key**: a SHA-256 of everything that changes the code: the printed program,
the full pipeline spec, dtype, target, the host's triple, CPU name and
features, the tcc version and a digest of tcc's own source files (an
editable install that changes a pass must not be served code the old pass
made), the llvmlite and Python versions and :data:`FORMAT_VERSION`.  Only
the built-in ``cpu`` target with built-in passes is cached: a plug-in's code
is not in the key, and the ``cuda`` target's PTX is JIT-compiled by the
driver for the GPU at hand (``cuda-sim`` is a test target).

**Safety**: an entry is written to a temporary file in the same directory and
renamed into place (``os.replace``), so readers see a whole old entry or a
whole new one, never a partial one, and concurrent writers of one key
simply race to the same contents.  A header carries a magic string, the
format version, the key, the payload length and its SHA-256; an entry whose
header, length or checksum does not match, or that fails to unpickle or
link, is ignored (a miss), deleted, and replaced by the recompiled result.
The cache trusts its directory as Python trusts its ``__pycache__``: entries
are pickles, so the directory must be writable only by its user (it is
created with mode 0700).

**Size**: at most ``TCC_CACHE_SIZE`` bytes (default :data:`DEFAULT_SIZE`, 256 MB;
a number of bytes with an optional K, M or G suffix).  A hit touches the
entry's modification time; after a store, the least recently used entries
are deleted until the rest fit.

Failures to create, read or write the directory (a read-only home on CI) are
never errors: the compile goes on uncached.  :data:`STATS` counts hits,
misses and stores in this process.
"""
from __future__ import annotations

import functools
import hashlib
import logging
import os
import pickle
import re
import struct
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from tcc.ir.diagnostics import TccError

__all__ = [
    "DEFAULT_SIZE", "FORMAT_VERSION", "STATS", "DiskCache", "Entry", "cache_dir", "cache_size", "clear",
    "entry_key", "open_cache",
]

logger = logging.getLogger("tcc.disk_cache")
logger.addHandler(logging.NullHandler())

#: bumped whenever what an entry holds, or how it is written, changes
FORMAT_VERSION = 1
#: the size bound without ``TCC_CACHE_SIZE``
DEFAULT_SIZE = 256 * 2**20
#: an entry's file name is its key plus this suffix; temporary files start with ``.tmp-``
SUFFIX = ".tccache"
_MAGIC = b"TCCCACHE"
# magic, format version, key (64 hex digits), payload length, SHA-256 of the payload
_HEADER = struct.Struct("<8sI64sQ32s")
# a temporary file this old was left by a writer that died; eviction removes it
_STALE_TEMP_S = 3600.0

#: this process's counts: ``hits``, ``misses`` (no valid entry), ``stores``, ``rejected`` (invalid entries dropped)
STATS: dict[str, int] = {"hits": 0, "misses": 0, "stores": 0, "rejected": 0}


def cache_dir() -> Path | None:
    """The cache directory (``TCC_CACHE_DIR``, else the platform's user cache dir), or None when off."""
    configured = os.environ.get("TCC_CACHE_DIR")
    if configured is not None:
        return Path(configured).expanduser() if configured.strip() else None
    try:
        if sys.platform == "win32":
            base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        elif sys.platform == "darwin":
            base = str(Path.home() / "Library" / "Caches")
        else:
            xdg = os.environ.get("XDG_CACHE_HOME", "")
            base = xdg if os.path.isabs(xdg) else str(Path.home() / ".cache")
    except RuntimeError:  # no home directory to be found: no cache
        return None
    return Path(base) / "tcc"


def cache_size() -> int:
    """The size bound in bytes: ``TCC_CACHE_SIZE`` (``268435456``, ``512M``, ``2G``), else :data:`DEFAULT_SIZE`."""
    text = os.environ.get("TCC_CACHE_SIZE", "").strip()
    if not text:
        return DEFAULT_SIZE
    match = re.fullmatch(r"(\d+)\s*([kKmMgG]?)[bB]?", text)
    if match is None:
        raise TccError(f"TCC_CACHE_SIZE must be a number of bytes with an optional K, M or G suffix, got '{text}'")
    scale = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}[match.group(2).lower()]
    return int(match.group(1)) * scale


@functools.lru_cache(maxsize=None)
def _source_digest() -> str:
    """SHA-256 of tcc's own source files (every package directory), read once per process (a few ms)."""
    import tcc
    import tcc.backends
    import tcc.ir
    import tcc.passes

    digest = hashlib.sha256()
    roots = sorted({Path(p) for pkg in (tcc, tcc.ir, tcc.passes, tcc.backends) for p in pkg.__path__})
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


@functools.lru_cache(maxsize=None)
def _environment() -> tuple[str, ...]:
    """What the code depends on besides the program: host, versions, tcc's sources."""
    import llvmlite
    import llvmlite.binding as llvm

    import tcc
    from tcc.backends.llvm.machines import host_triple

    try:
        features = llvm.get_host_cpu_features().flatten()
    except RuntimeError:  # LLVM cannot list them here: the CPU name (and triple) must do, as for MCJIT
        features = "?"
    return (
        f"format={FORMAT_VERSION}", f"tcc={tcc.__version__}", f"sources={_source_digest()}",
        f"llvmlite={llvmlite.__version__}", f"python={sys.implementation.name}-{sys.version_info[:3]}",
        f"triple={host_triple()}", f"cpu={llvm.get_host_cpu_name()}", f"features={features}",
    )


def entry_key(program_text: str, pipeline: str, dtype: str, target: str) -> str:
    """The entry's key: SHA-256 (hex) of the program, pipeline spec, dtype, target and :func:`_environment`."""
    digest = hashlib.sha256()
    for part in (program_text, pipeline, dtype, target, *_environment()):
        data = part.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "little") + data)  # length-prefixed: no two splits hash alike
    return digest.hexdigest()


def cacheable(target: Any, pipeline: Sequence[Any]) -> bool:
    """Whether compiles for this target object and pipeline may be cached: built-in ``cpu``, built-in passes."""
    from tcc.backends.builtin_targets import CpuTarget

    return type(target) is CpuTarget and all(type(p).__module__.startswith("tcc.") for p in pipeline)


@dataclass(frozen=True)
class Entry:
    """A cached compile: the L1 program, the optimised LLVM module, and the executable linked from its object code."""

    l1: Any
    llvm_module: Any
    executable: Any


class DiskCache:
    """One cache directory with a size bound (see the module docstring)."""

    def __init__(self, root: Path, bound: int) -> None:
        self.root = root
        self.bound = bound

    def path(self, key: str) -> Path:
        return self.root / f"{key}{SUFFIX}"

    def load(self, key: str) -> Entry | None:
        """The entry for ``key``, linked and ready to run; None (and an invalid file deleted) otherwise."""
        path = self.path(key)
        try:
            data = path.read_bytes()
        except OSError:
            STATS["misses"] += 1
            return None
        try:
            entry = self._decode(key, data)
        except Exception as exc:  # noqa: BLE001 - whatever is wrong with an entry, it is not trusted
            logger.debug("ignoring invalid cache entry %s: %s", path, exc)
            STATS["rejected"] += 1
            STATS["misses"] += 1
            _unlink(path)
            return None
        try:
            os.utime(path)  # least recently used eviction reads modification times
        except OSError:
            pass
        STATS["hits"] += 1
        return entry

    @staticmethod
    def _decode(key: str, data: bytes) -> Entry:
        from tcc.backends.cpu import load_object

        if len(data) < _HEADER.size:
            raise ValueError("shorter than the header")
        magic, version, stored_key, length, checksum = _HEADER.unpack_from(data)
        if magic != _MAGIC or version != FORMAT_VERSION or stored_key != key.encode("ascii"):
            raise ValueError("header does not match (magic, format version or key)")
        payload = data[_HEADER.size:]
        if len(payload) != length or hashlib.sha256(payload).digest() != checksum:
            raise ValueError("payload length or checksum does not match")
        l1, llvm_module, object_code = pickle.loads(zlib.decompress(payload))
        return Entry(l1, llvm_module, load_object(llvm_module, object_code))

    def store(self, key: str, l1: Any, llvm_module: Any, object_code: bytes) -> bool:
        """Write the entry (temporary file, then rename) and evict down to the bound; False if it could not."""
        try:
            payload = zlib.compress(pickle.dumps((l1, llvm_module, object_code), pickle.HIGHEST_PROTOCOL), 1)
        except Exception as exc:  # noqa: BLE001 - e.g. RecursionError on a very deep expression: just uncached
            logger.debug("not caching %s: cannot pickle the compiled program: %s", key, exc)
            return False
        header = _HEADER.pack(_MAGIC, FORMAT_VERSION, key.encode("ascii"), len(payload),
                              hashlib.sha256(payload).digest())
        if _HEADER.size + len(payload) > self.bound:
            return False
        import tempfile  # only when storing: a hit's process need not import it

        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX, dir=self.root)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(header)
                    fh.write(payload)
                os.replace(temp, self.path(key))
            except BaseException:
                _unlink(Path(temp))
                raise
        except OSError as exc:  # a read-only or missing home: compiling goes on uncached
            logger.debug("cannot write the cache entry %s in %s: %s", key, self.root, exc)
            return False
        STATS["stores"] += 1
        self.evict()
        return True

    def evict(self) -> None:
        """Delete least recently used entries (oldest modification time) until the rest fit the bound."""
        entries = []
        now = time.time()
        try:
            listing = list(os.scandir(self.root))
        except OSError:
            return
        for item in listing:
            try:
                st = item.stat()
            except OSError:  # deleted meanwhile by another process
                continue
            if item.name.startswith(".tmp-"):
                if now - st.st_mtime > _STALE_TEMP_S:
                    _unlink(Path(item.path))
            elif item.name.endswith(SUFFIX):
                entries.append((st.st_mtime, item.name, st.st_size))
        total = sum(size for _, _, size in entries)
        for _, name, size in sorted(entries):
            if total <= self.bound:
                break
            _unlink(self.root / name)
            total -= size

    def entries(self) -> list[Path]:
        """The entry files now in the directory (by name)."""
        try:
            return sorted(p for p in self.root.iterdir() if p.name.endswith(SUFFIX) and not p.name.startswith("."))
        except OSError:
            return []


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:  # gone already (another process), or not ours to delete
        pass


def open_cache() -> DiskCache | None:
    """The cache the environment configures (read at each compile), or None when ``TCC_CACHE_DIR`` is empty."""
    root = cache_dir()
    return None if root is None else DiskCache(root, cache_size())


def clear() -> int:
    """Delete every entry of the configured cache; returns how many were deleted."""
    cache = open_cache()
    if cache is None:
        return 0
    entries = cache.entries()
    for path in entries:
        _unlink(path)
    return len(entries)
