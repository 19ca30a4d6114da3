"""Structural validation of an object file before MCJIT links it (:func:`tcc.backends.cpu.load_object`).

llvmlite's ``ExecutionEngine.add_object_file`` hands the bytes to LLVM's
object parser and RuntimeDyld, and every problem they find there is fatal:
a truncated or garbled file segfaults the process, a bad section header
aborts it (``LLVM ERROR: section [index 6] has a sh_offset ... greater
than the file size``), an unknown relocation type hits ``report_fatal_error``.
None of that is an exception Python could catch, so an object from outside
this process (the on-disk compile cache, :mod:`tcc.build.disk_cache`) is checked
here first, in Python, against what those parsers rely on:

- an ELF relocatable (``ET_REL``) of the host's class, byte order and
  machine, with no program headers and standard header sizes;
- a section header table inside the file, aligned, of a sane count, with
  section 0 null, every ``sh_link``/``sh_info`` index in range, every
  non-``NOBITS`` section's bytes inside the file, power-of-two alignments,
  no compressed sections, bounded ``NOBITS``/common sizes (RuntimeDyld
  allocates them);
- NUL-terminated string tables, every section and symbol name inside its
  table;
- symbol tables and relocation sections with the standard entry sizes,
  aligned, naming a symbol table / string table of the right type; every
  symbol's section index in range (or undefined, absolute, common) and a
  defined symbol's value inside its section; every relocation's symbol in
  range, its type one RuntimeDyld resolves for the machine, and the bytes
  it patches inside the section it applies to;
- an ``.eh_frame`` section made of whole length-prefixed records (it is
  registered with the unwinder, which walks them).

What passes is structurally something RuntimeDyld links without crashing;
it is not proof that the machine code is the right code (the cache's HMAC is
what authenticates an entry).  Only ELF hosts on x86-64 and AArch64 are
supported: :func:`host_machine` is None elsewhere, and objects for such hosts
are refused (the disk cache is then off).
"""
from __future__ import annotations

import functools
import struct
import sys

__all__ = ["ObjectFileError", "check_object", "host_machine"]

#: RuntimeDyld's allocation for one ``NOBITS`` section or common symbol is bounded by this (bytes)
MAX_ALLOCATION = 1 << 28
MAX_SECTIONS = 1 << 16
MAX_ALIGNMENT = 1 << 16

_EM_X86_64 = 62
_EM_AARCH64 = 183

# relocation type -> bytes it patches, for the types RuntimeDyldELF resolves (non-TLS; GOT/PLT forms it lowers)
_RELOCATIONS: dict[int, dict[int, int]] = {
    _EM_X86_64: {
        0: 0,    # NONE
        1: 8,    # 64
        2: 4,    # PC32
        4: 4,    # PLT32
        9: 4,    # GOTPCREL
        10: 4,   # 32
        11: 4,   # 32S
        12: 2,   # 16
        14: 1,   # 8
        15: 1,   # PC8
        24: 8,   # PC64
        41: 4,   # GOTPCRELX
        42: 4,   # REX_GOTPCRELX
    },
    _EM_AARCH64: {
        0: 0,    # NONE
        257: 8,  # ABS64
        258: 4,  # ABS32
        259: 2,  # ABS16
        260: 8,  # PREL64
        261: 4,  # PREL32
        262: 2,  # PREL16
        264: 4, 266: 4, 268: 4, 269: 4,  # MOVW_UABS_G0_NC, G1_NC, G2_NC, G3
        273: 4,  # LD_PREL_LO19
        274: 4,  # ADR_PREL_LO21
        275: 4,  # ADR_PREL_PG_HI21
        277: 4,  # ADD_ABS_LO12_NC
        278: 4, 284: 4, 285: 4, 286: 4, 299: 4,  # LDST8/16/32/64/128_ABS_LO12_NC
        279: 4,  # TSTBR14
        280: 4,  # CONDBR19
        282: 4,  # JUMP26
        283: 4,  # CALL26
        311: 4,  # ADR_GOT_PAGE
        312: 4,  # LD64_GOT_LO12_NC
        314: 4,  # PLT32
    },
}

_SHT_NULL, _SHT_SYMTAB, _SHT_STRTAB, _SHT_RELA, _SHT_NOBITS, _SHT_REL = 0, 2, 3, 4, 8, 9
_SHT_DYNSYM, _SHT_GROUP, _SHT_SYMTAB_SHNDX = 11, 17, 18
_SHF_COMPRESSED = 0x800
_SHN_UNDEF, _SHN_LORESERVE, _SHN_ABS, _SHN_COMMON = 0, 0xFF00, 0xFFF1, 0xFFF2


class ObjectFileError(ValueError):
    """The bytes are not an object file MCJIT can safely link on this host (the message says why)."""


@functools.lru_cache(maxsize=None)
def host_machine() -> int | None:
    """The host's ELF ``e_machine`` when it is an ELF host tcc validates objects for (x86-64, AArch64), else None."""
    from tcc.backends.llvm.machines import host_triple

    arch, _, rest = host_triple().partition("-")
    if any(os_name in rest for os_name in ("darwin", "macos", "ios", "windows", "win32", "mingw", "cygwin")):
        return None  # Mach-O or COFF objects
    if sys.maxsize <= 2**32 or sys.byteorder != "little":
        return None
    return {"x86_64": _EM_X86_64, "amd64": _EM_X86_64, "aarch64": _EM_AARCH64, "arm64": _EM_AARCH64}.get(arch)


def check_object(data: bytes) -> None:
    """Raise :class:`ObjectFileError` unless ``data`` is an ELF relocatable RuntimeDyld can link here (module doc)."""
    machine = host_machine()
    if machine is None:
        raise ObjectFileError("this host's object format is not validated (only ELF on x86-64 and AArch64)")
    _check_elf64le(memoryview(data), machine)


def _fail(reason: str) -> None:
    raise ObjectFileError(reason)


def _check_elf64le(data: memoryview, machine: int) -> None:
    size = len(data)
    if size < 64:
        _fail("shorter than an ELF header")
    ident = bytes(data[:16])
    if ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1 or ident[6] != 1:
        _fail("not a 64-bit little-endian ELF file")
    (e_type, e_machine, e_version, _entry, e_phoff, e_shoff, _flags, e_ehsize, _phentsize, e_phnum,
     e_shentsize, e_shnum, e_shstrndx) = struct.unpack_from("<HHIQQQIHHHHHH", data, 16)
    if e_type != 1 or e_version != 1 or e_ehsize != 64:
        _fail("not an ELF relocatable object (e_type, e_version or e_ehsize)")
    if e_machine != machine:
        _fail(f"ELF machine {e_machine} is not the host's ({machine})")
    if e_phnum != 0:
        _fail("a relocatable object with program headers")
    if e_shentsize != 64 or not 1 <= e_shnum < min(_SHN_LORESERVE, MAX_SECTIONS) or e_shstrndx >= e_shnum:
        _fail("bad section header table (entry size, count or string table index)")
    if e_shoff % 8 or e_shoff < 64 or e_shoff + 64 * e_shnum > size:
        _fail("the section header table lies outside the file or is misaligned")
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, e_shoff + 64 * i) for i in range(e_shnum)]
    # name, type, flags, addr, offset, size, link, info, addralign, entsize
    if headers[0][1] != _SHT_NULL:
        _fail("section 0 is not the null section")
    for index, (_name, sh_type, flags, _addr, offset, sh_size, link, _info, align, _entsize) in enumerate(headers):
        if sh_type in (_SHT_DYNSYM, _SHT_SYMTAB_SHNDX):
            _fail(f"section {index}: type {sh_type} has no place in a relocatable object")
        if flags & _SHF_COMPRESSED:
            _fail(f"section {index} is compressed")
        if link >= e_shnum:
            _fail(f"section {index}: sh_link {link} out of range")
        if align > MAX_ALIGNMENT or (align & (align - 1)):
            _fail(f"section {index}: alignment {align} is not a power of two up to {MAX_ALIGNMENT}")
        if sh_type == _SHT_NOBITS:
            if sh_size > MAX_ALLOCATION:
                _fail(f"section {index}: {sh_size} bytes of NOBITS")
        elif sh_type != _SHT_NULL and offset + sh_size > size:
            _fail(f"section {index}: contents [{offset}, {offset + sh_size}) outside the file ({size} bytes)")
    strings = bytes(_strtab(data, headers, e_shstrndx, "section name"))
    for index, header in enumerate(headers):
        if header[0] >= len(strings):
            _fail(f"section {index}: name offset out of range")
    names = [strings[h[0]:strings.index(b"\0", h[0])] for h in headers]
    symtabs = [i for i, h in enumerate(headers) if h[1] == _SHT_SYMTAB]
    if len(symtabs) > 1:
        _fail("more than one symbol table")
    symbols: list[tuple[int, int]] = []  # (st_shndx, st_type) per symbol
    if symtabs:
        symbols = _check_symbols(data, headers, symtabs[0])
    for index, (_name, sh_type, _flags, _addr, offset, sh_size, link, info, _align, entsize) in enumerate(headers):
        if sh_type in (_SHT_RELA, _SHT_REL):
            width = 24 if sh_type == _SHT_RELA else 16
            if entsize != width or sh_size % width or offset % 8:
                _fail(f"relocation section {index}: entry size, size or alignment")
            if not symtabs or link != symtabs[0]:
                _fail(f"relocation section {index} does not name the symbol table")
            if not 1 <= info < e_shnum or headers[info][1] in (_SHT_NULL, _SHT_NOBITS):
                _fail(f"relocation section {index} applies to a bad section ({info})")
            target_size = headers[info][5]
            widths = _RELOCATIONS[machine]
            for at in range(offset, offset + sh_size, width):
                r_offset, r_info = struct.unpack_from("<QQ", data, at)
                r_sym, r_type = r_info >> 32, r_info & 0xFFFFFFFF
                if r_sym >= max(len(symbols), 1):
                    _fail(f"relocation section {index}: symbol {r_sym} out of range")
                if r_sym and not _relocatable_symbol(*symbols[r_sym]):
                    _fail(f"relocation section {index}: symbol {r_sym} is a file or section-less section symbol")
                patched = widths.get(r_type)
                if patched is None:
                    _fail(f"relocation section {index}: type {r_type} is not one RuntimeDyld resolves")
                if r_offset + patched > target_size:
                    _fail(f"relocation section {index}: offset {r_offset} outside its section")
        elif sh_type == _SHT_GROUP and (entsize != 4 or sh_size % 4):
            _fail(f"group section {index}: entry size or size")
        if names[index] == b".eh_frame" and sh_type != _SHT_NOBITS:
            _check_eh_frame(data[offset:offset + sh_size], index)


def _relocatable_symbol(shndx: int, sym_type: int) -> bool:
    """Whether RuntimeDyld resolves a relocation against it (its switch is unreachable for ``STT_FILE``, and
    a section symbol must name a real section)."""
    if sym_type == 4:  # STT_FILE
        return False
    return sym_type != 3 or _SHN_UNDEF < shndx < _SHN_LORESERVE  # STT_SECTION


def _strtab(data: memoryview, headers: list[tuple[int, ...]], index: int, what: str) -> memoryview:
    _name, sh_type, _flags, _addr, offset, sh_size, *_ = headers[index]
    if sh_type != _SHT_STRTAB or sh_size == 0 or data[offset + sh_size - 1] != 0:
        _fail(f"the {what} table (section {index}) is not a NUL-terminated string table")
    return data[offset:offset + sh_size]


def _check_symbols(data: memoryview, headers: list[tuple[int, ...]], index: int) -> list[tuple[int, int]]:
    _name, _type, _flags, _addr, offset, sh_size, link, info, _align, entsize = headers[index]
    if entsize != 24 or sh_size % 24 or sh_size == 0 or offset % 8:
        _fail(f"symbol table {index}: entry size, size or alignment")
    count = sh_size // 24
    if info > count:
        _fail(f"symbol table {index}: first global symbol {info} beyond its {count} symbols")
    names = _strtab(data, headers, link, "symbol name")
    symbols = []
    for at in range(offset, offset + sh_size, 24):
        st_name, st_info, _other, st_shndx, st_value, st_size = struct.unpack_from("<IBBHQQ", data, at)
        if st_name >= len(names):
            _fail(f"symbol table {index}: a name offset out of range")
        if (st_info & 0xF) > 4:  # NOTYPE, OBJECT, FUNC, SECTION, FILE; no TLS, no IFUNC
            _fail(f"symbol table {index}: symbol type {st_info & 0xF}")
        if st_shndx == _SHN_COMMON:
            if st_size > MAX_ALLOCATION or st_value > MAX_ALIGNMENT or (st_value & (st_value - 1)):
                _fail(f"symbol table {index}: a common symbol's size or alignment")
        elif st_shndx not in (_SHN_UNDEF, _SHN_ABS):
            if st_shndx >= len(headers):
                _fail(f"symbol table {index}: section index {st_shndx} out of range")
            if headers[st_shndx][1] == _SHT_NULL or st_value > headers[st_shndx][5]:
                _fail(f"symbol table {index}: a symbol's value lies outside its section")
        symbols.append((st_shndx, st_info & 0xF))
    return symbols


def _check_eh_frame(frame: memoryview, index: int) -> None:
    at = 0
    while at < len(frame):
        if at + 4 > len(frame):
            _fail(f".eh_frame (section {index}): a truncated record length")
        (length,) = struct.unpack_from("<I", frame, at)
        at += 4
        if length == 0:  # the terminator
            continue
        if length == 0xFFFFFFFF:
            if at + 8 > len(frame):
                _fail(f".eh_frame (section {index}): a truncated extended length")
            (length,) = struct.unpack_from("<Q", frame, at)
            at += 8
        if length < 4 or at + length > len(frame):
            _fail(f".eh_frame (section {index}): a record runs past the section")
        at += length
