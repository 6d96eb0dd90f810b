"""Resource usage read straight from a cubin (an ELF file); no binary tools needed.

For kernel ``k``: static shared memory is the size of section ``.nv.shared.k``;
registers are the EIATTR_REGCOUNT record of section ``.nv.info`` whose symbol is the
one ``.text.k`` belongs to (its ``sh_info``).
"""

from __future__ import annotations

import hashlib
import struct

__all__ = ["kernel_resources", "elf_header", "section_names", "code_digest", "EM_CUDA"]

#: e_machine of a CUDA cubin
EM_CUDA = 190


_EIATTR_REGCOUNT = 0x2F
_EIFMT_SVAL, _EIFMT_HVAL, _EIFMT_BVAL, _EIFMT_NVAL = 4, 3, 2, 1


def elf_header(blob: bytes) -> dict[str, int]:
    """``{"machine", "abi_version", "flags"}`` of an ELF64 little-endian file.

    Raises ValueError for anything else (too short, wrong magic, 32-bit, big-endian).
    """
    if len(blob) < 64 or blob[:4] != b"\x7fELF":
        raise ValueError("not an ELF file")
    if blob[4] != 2 or blob[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    machine, = struct.unpack_from("<H", blob, 0x12)
    flags, = struct.unpack_from("<I", blob, 0x30)
    return {"machine": machine, "abi_version": blob[8], "flags": flags}


def _sections(blob: bytes) -> dict[str, tuple[int, int, int]]:
    """name -> (sh_size, sh_info, sh_offset) for every section of an ELF64 file.

    The bytes may come from anywhere (a damaged cache entry, a bundle): any
    inconsistency is a ValueError, never an IndexError or struct.error.
    """
    elf_header(blob)
    try:
        shoff, = struct.unpack_from("<Q", blob, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", blob, 0x3A)
        if shentsize < 64 or shstrndx >= shnum:
            raise ValueError("bad section header table")
        headers = [struct.unpack_from("<IIQQQQIIQQ", blob, shoff + i * shentsize)
                   for i in range(shnum)]
        strtab_off, strtab_size = headers[shstrndx][4], headers[shstrndx][5]
        strtab = blob[strtab_off:strtab_off + strtab_size]
        out = {}
        for h in headers:
            end = strtab.index(b"\x00", h[0])
            out[strtab[h[0]:end].decode()] = (h[5], h[7], h[4])
        return out
    except (struct.error, IndexError, ValueError, UnicodeDecodeError, OverflowError) as exc:
        raise ValueError(f"malformed ELF section table ({exc})") from None


def section_names(blob: bytes) -> set[str]:
    """The section names of an ELF64 file (ValueError when it is not a sound one)."""
    return set(_sections(blob))


def code_digest(blob: bytes) -> str:
    """A SHA-256 of the machine code of every kernel in the cubin (the ``.text.*``
    sections, by name): equal digests mean the same instructions, whatever else in the
    file (symbol tables, constant banks, debug frames) differs."""
    h = hashlib.sha256()
    sec = _sections(blob)
    for name in sorted(n for n in sec if n.startswith(".text.")):
        size, _, offset = sec[name]
        if offset + size > len(blob):
            raise ValueError(f"section {name} runs past the end of the file")
        h.update(name.encode() + b"\0" + struct.pack("<Q", size) + blob[offset:offset + size])
    return h.hexdigest()


def _regcounts(blob: bytes, info: tuple[int, int, int]) -> dict[int, int]:
    """symbol index -> registers, from the records of a ``.nv.info`` section."""
    size, _, offset = info
    data, i, out = blob[offset:offset + size], 0, {}
    while i + 2 <= len(data):
        fmt, attr = data[i], data[i + 1]
        i += 2
        if fmt == _EIFMT_SVAL:
            (n,) = struct.unpack_from("<H", data, i)
            if attr == _EIATTR_REGCOUNT and n == 8:
                sym, regs = struct.unpack_from("<II", data, i + 2)
                out[sym] = regs
            i += 2 + n
        elif fmt == _EIFMT_HVAL:
            i += 2
        elif fmt == _EIFMT_BVAL:
            i += 1
        elif fmt != _EIFMT_NVAL:
            break
    return out


def kernel_resources(cubin: bytes, kernel: str) -> dict[str, int]:
    """``{"registers": R, "static_smem_bytes": S}`` of ``kernel`` in ``cubin``."""
    sec = _sections(cubin)
    if f".text.{kernel}" not in sec:
        raise KeyError(f"kernel {kernel!r} not found in cubin")
    sym = sec[f".text.{kernel}"][1] & 0xFFFFFF  # the top byte holds flags before sm_90
    regs = _regcounts(cubin, sec[".nv.info"]).get(sym, 0) if ".nv.info" in sec else 0
    smem = sec.get(f".nv.shared.{kernel}", (0, 0, 0))[0]
    return {"registers": int(regs), "static_smem_bytes": int(smem)}
