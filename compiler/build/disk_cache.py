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

**Safety** (docs/cache.md, "Threat model"): an entry is authenticated
with an HMAC-SHA256 under a per-user secret (:data:`KEY_FILE`, 32 random
bytes, mode 0600, kept in a directory only the user can write: the cache
directory when it is private, else the user's default cache directory), and
the HMAC is checked before anything is decompressed or unpickled, so an
entry that someone else wrote never runs.  The cache directory must be owned
by the user and not writable by group or others unless it has the sticky bit
(as ssh insists on for ``~/.ssh``); any other directory turns the cache off
for the compile (debug-logged).  Entries are opened by name relative to the
opened directory, without following symbolic links, and read only if they
are regular files no larger than :data:`MAX_ENTRY_SIZE` (and the bound): a
FIFO, a device, a link to ``/dev/zero`` or a huge file is a miss, not a hang
or a ``MemoryError``.  The object code is checked for structure before it is
linked (:func:`tcc.backends.objcheck.check_object`).  An entry is written to
a new temporary file (``O_EXCL``, never through a link) and renamed into
place, so readers see a whole old entry or a whole new one; eviction and
removal only ever unlink names inside the directory, of regular files the
user owns.  An unusable entry is a miss; it is removed only if the user owns
it, and replaced by the recompiled result.

**Size**: at most ``TCC_CACHE_SIZE`` bytes (default :data:`DEFAULT_SIZE`, 256 MB;
a number of bytes with an optional K, M or G suffix) of the user's entries.  A hit touches the
entry's modification time; after a store, the least recently used entries
are deleted until the rest fit.

The cache needs POSIX (directory file descriptors, ``O_NOFOLLOW``, user ids)
and an ELF host that :mod:`tcc.backends.objcheck` validates objects for
(x86-64 or AArch64 Linux and BSDs); elsewhere it is off.

Failures to create, read or write the directory (a read-only home on CI) are
never errors: the compile goes on uncached.  :data:`STATS` counts hits,
misses and stores in this process.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import logging
import os
import pickle
import re
import secrets
import stat
import struct
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from tcc.ir.diagnostics import TccError

__all__ = [
    "DEFAULT_SIZE", "FORMAT_VERSION", "KEY_FILE", "MAX_ENTRY_SIZE", "STATS", "DiskCache", "Entry", "cache_dir",
    "cache_size", "clear", "entry_key", "open_cache",
]

logger = logging.getLogger("tcc.build.disk_cache")
logger.addHandler(logging.NullHandler())

#: bumped whenever what an entry holds, or how it is written, changes
FORMAT_VERSION = 2
#: the size bound without ``TCC_CACHE_SIZE``
DEFAULT_SIZE = 256 * 2**20
#: no entry larger than this is written or read, whatever the bound (typical entries are 10-100 kB)
MAX_ENTRY_SIZE = 256 * 2**20
#: an entry's file name is its key plus this suffix; temporary files start with ``.tmp-``
SUFFIX = ".tccache"
#: the per-user HMAC secret's file name (in the cache directory when it is private, else the default one)
KEY_FILE = ".hmac-key"
_KEY_SIZE = 32
_MAGIC = b"TCCCACHE"
# magic, format version, key (64 hex digits), payload length: what the HMAC covers with the payload
_PREFIX = struct.Struct("<8sI64sQ")
# the prefix and the HMAC-SHA256 of prefix + payload under the user's secret
_HEADER = struct.Struct("<8sI64sQ32s")
# a temporary file this old was left by a writer that died; eviction removes it
_STALE_TEMP_S = 3600.0
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_READ_FLAGS = os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC
#: what the safety rules need: names relative to an open directory, ``O_NOFOLLOW``, user ids
_POSIX = (os.name == "posix" and bool(_O_NOFOLLOW and _O_DIRECTORY) and hasattr(os, "geteuid")
          and {os.open, os.stat, os.unlink, os.utime} <= os.supports_dir_fd and os.scandir in os.supports_fd)

#: this process's counts: ``hits``, ``misses`` (no valid entry), ``stores``, ``rejected`` (unusable entries found)
STATS: dict[str, int] = {"hits": 0, "misses": 0, "stores": 0, "rejected": 0}


class _Unusable(Exception):
    """An entry, key file or directory the cache must not use; the message says why (debug-logged)."""


def _default_dir() -> Path | None:
    """The platform's user cache directory for tcc (what ``TCC_CACHE_DIR`` overrides), or None without a home."""
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


def cache_dir() -> Path | None:
    """The cache directory (``TCC_CACHE_DIR``, else the platform's user cache dir), or None when off."""
    configured = os.environ.get("TCC_CACHE_DIR")
    if configured is not None:
        return Path(configured).expanduser() if configured.strip() else None
    return _default_dir()


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
    from tcc.registry import is_builtin_pass

    return type(target) is CpuTarget and all(is_builtin_pass(p) for p in pipeline)


@dataclass(frozen=True)
class Entry:
    """A cached compile: the L1 program, the optimised LLVM module, and the executable linked from its object code."""

    l1: Any
    llvm_module: Any
    executable: Any


class DiskCache:
    """One cache directory with a size bound (see the module docstring and docs/cache.md's threat model)."""

    def __init__(self, root: Path, bound: int) -> None:
        self.root = root
        self.bound = bound

    def path(self, key: str) -> Path:
        return self.root / f"{key}{SUFFIX}"

    def _limit(self) -> int:
        return min(self.bound, MAX_ENTRY_SIZE)

    def load(self, key: str) -> Entry | None:
        """The entry for ``key``, linked and ready to run; None otherwise (an unusable file of ours deleted)."""
        name = f"{key}{SUFFIX}"
        with _opened_dir(self.root, create=False) as opened:
            if opened is None:
                STATS["misses"] += 1
                return None
            dfd, dir_stat = opened
            identity: tuple[int, int] | None = None
            try:
                data, identity = _read_regular(dfd, name, self._limit())
                if data is None:
                    STATS["misses"] += 1
                    return None
                try:
                    secret = _secret(dfd, dir_stat)
                except _Unusable as exc:  # nothing can be authenticated: the cache is off, the entry left alone
                    logger.debug("not using the cache in %s: %s", self.root, exc)
                    STATS["misses"] += 1
                    return None
                entry = self._decode(key, data, secret)
            except Exception as exc:  # noqa: BLE001 - whatever is wrong with an entry, it is not trusted
                logger.debug("ignoring unusable cache entry %s: %s", self.root / name, exc)
                STATS["rejected"] += 1
                STATS["misses"] += 1
                _remove_if_ours(dfd, name, identity)
                return None
            try:
                os.utime(name, dir_fd=dfd, follow_symlinks=False)  # least recently used eviction reads mtimes
            except OSError:
                pass
        STATS["hits"] += 1
        return entry

    @staticmethod
    def _decode(key: str, data: bytes, secret: bytes) -> Entry:
        """The entry in ``data``: header checked, HMAC verified BEFORE anything is decompressed or unpickled."""
        from tcc.backends.cpu import load_object

        if len(data) < _HEADER.size:
            raise _Unusable("shorter than the header")
        magic, version, stored_key, length, mac = _HEADER.unpack_from(data)
        if magic != _MAGIC or version != FORMAT_VERSION or stored_key != key.encode("ascii"):
            raise _Unusable("header does not match (magic, format version or key)")
        view = memoryview(data)
        payload = view[_HEADER.size:]
        if len(payload) != length:
            raise _Unusable("payload length does not match")
        if not hmac.compare_digest(mac, _mac(secret, view[:_PREFIX.size], payload)):
            raise _Unusable("not authenticated: the HMAC does not match (written by someone else, or damaged)")
        l1, llvm_module, object_code = pickle.loads(zlib.decompress(payload))
        if not isinstance(object_code, bytes):
            raise _Unusable("the entry holds no object code")
        return Entry(l1, llvm_module, load_object(llvm_module, object_code))  # validates the object first

    def store(self, key: str, l1: Any, llvm_module: Any, object_code: bytes) -> bool:
        """Write the entry (temporary file, then rename) and evict down to the bound; False if it could not."""
        from tcc.backends.objcheck import ObjectFileError, check_object

        try:
            check_object(object_code)  # what a later load would refuse is not worth writing
        except ObjectFileError as exc:
            logger.debug("not caching %s: its object code would not be linked again: %s", key, exc)
            return False
        try:
            payload = zlib.compress(pickle.dumps((l1, llvm_module, object_code), pickle.HIGHEST_PROTOCOL), 1)
        except Exception as exc:  # noqa: BLE001 - e.g. RecursionError on a very deep expression: just uncached
            logger.debug("not caching %s: cannot pickle the compiled program: %s", key, exc)
            return False
        if _HEADER.size + len(payload) > self._limit():
            return False
        prefix = _PREFIX.pack(_MAGIC, FORMAT_VERSION, key.encode("ascii"), len(payload))
        name = f"{key}{SUFFIX}"
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:  # a read-only or missing home: compiling goes on uncached
            logger.debug("cannot create the cache directory %s: %s", self.root, exc)
            return False
        with _opened_dir(self.root, create=True) as opened:
            if opened is None:
                return False
            dfd, dir_stat = opened
            try:
                mac = _mac(_secret(dfd, dir_stat), prefix, payload)
                temp = f".tmp-{secrets.token_hex(8)}{SUFFIX}"
                fd = os.open(temp, _CREATE_FLAGS, 0o600, dir_fd=dfd)  # O_EXCL: never through a planted link
                try:
                    with os.fdopen(fd, "wb") as fh:
                        fh.write(prefix)
                        fh.write(mac)
                        fh.write(payload)
                    os.replace(temp, name, src_dir_fd=dfd, dst_dir_fd=dfd)  # replaces a name, follows no link
                except BaseException:
                    _unlink_at(dfd, temp)
                    raise
            except (OSError, _Unusable) as exc:
                logger.debug("cannot write the cache entry %s in %s: %s", key, self.root, exc)
                return False
            STATS["stores"] += 1
            _evict(dfd, self.bound)
        return True

    def evict(self) -> None:
        """Delete least recently used entries (oldest modification time) until the rest fit the bound."""
        with _opened_dir(self.root, create=False) as opened:
            if opened is not None:
                _evict(opened[0], self.bound)

    def entries(self) -> list[Path]:
        """The entry files now in the directory (by name)."""
        try:
            return sorted(p for p in self.root.iterdir() if p.name.endswith(SUFFIX) and not p.name.startswith("."))
        except OSError:
            return []


def _mac(secret: bytes, prefix: bytes | memoryview, payload: bytes | memoryview) -> bytes:
    digest = hmac.new(secret, prefix, hashlib.sha256)
    digest.update(payload)
    return digest.digest()


def _directory_problem(st: os.stat_result) -> str | None:
    """Why a cache directory is refused, or None: it must be the user's, and if group or others may write it,
    sticky (so that they cannot rename or delete the user's files in it)."""
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    if st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})"
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        return f"writable by group or others without the sticky bit (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _private(st: os.stat_result) -> bool:
    """Only this user can create, rename or delete names in the directory."""
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


@contextlib.contextmanager
def _opened_dir(root: Path, create: bool) -> Iterator[tuple[int, os.stat_result] | None]:
    """The directory, opened, with its status, when the cache may use it; None (debug-logged why) otherwise.

    Everything afterwards is done relative to this descriptor, so renaming or
    replacing the path meanwhile cannot redirect a read, write or unlink.
    """
    if not _POSIX:
        yield None
        return
    try:
        dfd = os.open(root, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    except OSError as exc:
        if create or not isinstance(exc, FileNotFoundError):
            logger.debug("cannot open the cache directory %s: %s", root, exc)
        yield None
        return
    try:
        st = os.fstat(dfd)
        problem = _directory_problem(st)
        if problem is not None:
            logger.debug("not using the cache directory %s: %s", root, problem)
            yield None
        else:
            yield dfd, st
    finally:
        os.close(dfd)


def _read_regular(dfd: int, name: str, limit: int) -> tuple[bytes | None, tuple[int, int] | None]:
    """The bytes of regular file ``name`` in the directory, with its (device, inode); (None, None) if absent.

    A link is never followed, a FIFO or device never opened (a FIFO would
    block, ``/dev/zero`` never end), a file over ``limit`` never read;
    those raise :class:`_Unusable`.
    """
    try:
        before = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return None, None
    if not stat.S_ISREG(before.st_mode):
        raise _Unusable(f"not a regular file (mode {before.st_mode:o})")
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dfd)
    except FileNotFoundError:  # deleted meanwhile by another process
        return None, None
    try:
        st = os.fstat(fd)
        identity = (st.st_dev, st.st_ino)
        if not stat.S_ISREG(st.st_mode) or identity != (before.st_dev, before.st_ino):
            raise _Unusable("replaced while being opened by something that is not a regular file")
        if st.st_size > limit:
            raise _Unusable(f"{st.st_size} bytes, over the {limit}-byte limit on an entry")
        data = bytearray(st.st_size)
        view, got = memoryview(data), 0
        while got < st.st_size:
            n = os.readv(fd, [view[got:]])
            if n == 0:
                raise _Unusable("shorter than its size")
            got += n
        return bytes(data), identity
    finally:
        os.close(fd)


def _remove_if_ours(dfd: int, name: str, identity: tuple[int, int] | None) -> None:
    """Unlink an unusable entry's name if this user owns what is there now (a file, a link: never a directory),
    and, when it was read, if it is still that file; another user's file is left alone."""
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except OSError:
        return
    if st.st_uid != os.geteuid() or stat.S_ISDIR(st.st_mode):
        return
    if identity is not None and (st.st_dev, st.st_ino) != identity:
        return  # replaced meanwhile (by a store of ours): not the file that was found unusable
    _unlink_at(dfd, name)


def _unlink_at(dfd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dfd)
    except OSError:  # gone already (another process), or not ours to delete
        pass


def _secret(dfd: int, dir_stat: os.stat_result) -> bytes:
    """The user's HMAC secret: in the cache directory when it is private, else in the default user cache
    directory (created 0700), which must be private then; created on first use.  :class:`_Unusable` if none."""
    if _private(dir_stat):
        return _key_in(dfd)
    default = _default_dir()
    if default is None:
        raise _Unusable("the cache directory is shared and there is no home for the secret key")
    try:
        default.mkdir(mode=0o700, parents=True, exist_ok=True)
        kfd = os.open(default, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    except OSError as exc:
        raise _Unusable(f"the cache directory is shared and the key's directory {default} cannot be opened: {exc}")
    try:
        if not _private(os.fstat(kfd)):
            raise _Unusable(f"the cache directory is shared and so is {default}: no private place for the key")
        return _key_in(kfd)
    finally:
        os.close(kfd)


def _key_in(dfd: int) -> bytes:
    """The secret in :data:`KEY_FILE` of the (private) directory, made if there is none.

    The file must be a regular file of this user's, readable and writable by
    nobody else, of exactly the secret's size (else :class:`_Unusable`: the
    cache is off until it is fixed or removed).  A new key is written to a
    temporary file and hard-linked into place, so concurrent first uses
    agree on one key and nobody reads a partial one.
    """
    for _ in range(3):
        try:
            fd = os.open(KEY_FILE, _READ_FLAGS, dir_fd=dfd)
        except FileNotFoundError:
            _make_key(dfd)
            continue
        except OSError as exc:
            raise _Unusable(f"cannot open the key file {KEY_FILE}: {exc}")
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
                raise _Unusable(f"the key file {KEY_FILE} is not a regular file of this user's with mode 0600")
            secret = os.read(fd, _KEY_SIZE + 1)
        finally:
            os.close(fd)
        if len(secret) != _KEY_SIZE:
            raise _Unusable(f"the key file {KEY_FILE} does not hold {_KEY_SIZE} bytes")
        return secret
    raise _Unusable(f"the key file {KEY_FILE} keeps disappearing")


def _make_key(dfd: int) -> None:
    temp = f"{KEY_FILE}.tmp-{secrets.token_hex(8)}"
    try:
        fd = os.open(temp, _CREATE_FLAGS, 0o600, dir_fd=dfd)
    except OSError as exc:
        raise _Unusable(f"cannot create the key file: {exc}")
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o600)
            fh.write(secrets.token_bytes(_KEY_SIZE))
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(temp, KEY_FILE, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
        except FileExistsError:
            pass  # another process made one first: everybody uses that one
        except OSError:  # no hard links here: a rename, which at worst replaces a racing process's new key
            os.replace(temp, KEY_FILE, src_dir_fd=dfd, dst_dir_fd=dfd)
    finally:
        _unlink_at(dfd, temp)


def _evict(dfd: int, bound: int) -> None:
    """Delete this user's least recently used entries (oldest mtime) until the rest fit ``bound``.

    Only regular files the user owns count and are deleted, by name in the
    directory: a link is never followed (nor its target deleted), another
    user's file neither counts against the bound nor is touched.
    """
    entries = []
    now = time.time()
    uid = os.geteuid()
    try:
        with os.scandir(dfd) as it:
            listing = list(it)
    except OSError:
        return
    for item in listing:
        try:
            st = item.stat(follow_symlinks=False)
        except OSError:  # deleted meanwhile by another process
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
            continue
        if item.name.startswith(".tmp-") or item.name.startswith(f"{KEY_FILE}.tmp-"):
            if now - st.st_mtime > _STALE_TEMP_S:
                _unlink_at(dfd, item.name)
        elif item.name.endswith(SUFFIX) and not item.name.startswith("."):
            entries.append((st.st_mtime, item.name, st.st_size))
    total = sum(size for _, _, size in entries)
    for _, name, size in sorted(entries):
        if total <= bound:
            break
        _unlink_at(dfd, name)
        total -= size


def open_cache() -> DiskCache | None:
    """The cache the environment configures (read at each compile), or None when ``TCC_CACHE_DIR`` is empty
    or this host is not one the cache supports (module docstring)."""
    root = cache_dir()
    if root is None or not _POSIX:
        return None
    from tcc.backends.objcheck import host_machine

    if host_machine() is None:
        return None
    return DiskCache(root, cache_size())


def clear() -> int:
    """Delete every entry of this user's in the configured cache; returns how many were deleted."""
    cache = open_cache()
    if cache is None:
        return 0
    deleted = 0
    with _opened_dir(cache.root, create=False) as opened:
        if opened is None:
            return 0
        dfd = opened[0]
        for path in cache.entries():
            try:
                st = os.stat(path.name, dir_fd=dfd, follow_symlinks=False)
            except OSError:
                continue
            if st.st_uid == os.geteuid() and not stat.S_ISDIR(st.st_mode):
                _unlink_at(dfd, path.name)
                deleted += 1
    return deleted
