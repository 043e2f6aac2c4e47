#!/usr/bin/env python3
"""Checks a linked driver image (docs/BUILD.md, "PE checks").

Usage: pecheck.py IMAGE.sys [--map IMAGE.map] [--allow tools/imports.allow] [--all-guarded]

AMD64; subsystem NATIVE; DYNAMIC_BASE, NX_COMPAT and GUARD_CF, the last backed by a real
load-config table whose CFG function table lists every NDIS handler (from the link map) and
every code address the image stores in its data (dispatch tables); a valid checksum; base
relocations; no section both writable and executable; exactly one export, DriverEntry, which
is the entry point; imports only from ntoskrnl.exe, HAL.dll, ndis.sys and netio.sys (the IP
helper routines of the address-resolution seam live there, as for any NDIS provider that
resolves neighbours, the Windows NDK sample drivers among them), each on the allowlist. With --all-guarded (the LTO release image), no indirect call may bypass the CFG
dispatch pointer: without LTO the prebuilt sysroot (core, alloc), which is not compiled with
CFG, keeps plain `call reg` instructions, reported as info. Prints one line per check and
exits 1 if any failed.
"""
import argparse
import re
import struct
import sys

import capstone
import pefile

ALLOWED_DLLS = {"ntoskrnl.exe", "hal.dll", "ndis.sys", "netio.sys"}
# The handlers ndis::entry hands to NDIS (characteristics, NDK provider, SG DMA).
NDIS_HANDLERS = [
    "set_options", "initialize", "halt", "unload", "pause", "restart", "oid_request",
    "send_net_buffer_lists", "return_net_buffer_lists", "cancel", "device_pnp_event",
    "shutdown", "open_ndk_adapter", "close_ndk_adapter", "process_sg_list",
    "line_isr", "line_dpc", "line_control", "message_isr", "message_dpc", "message_control",
    "pnp_work_item", "reset",
]
# The vmxnet3 adapter's routines ndis::ethernet::entry hands to NDIS (SG DMA, interrupts, the
# reset work item).
ETH_HANDLERS = [
    "eth_process_sg_list", "eth_line_isr", "eth_line_dpc", "eth_line_control",
    "eth_message_isr", "eth_message_dpc", "eth_message_control", "eth_reset_work_item",
]
# The routines the OS layer hands to the kernel, by module path (the resolver's work item and
# address-change callback).
OS_CALLBACKS = [("2os7windows3net", "resolve_work_item"), ("2os7windows3net", "address_changed")]
SCN_MEM_EXECUTE = 0x20000000
SCN_MEM_WRITE = 0x80000000
IMAGE_GUARD_CF_INSTRUMENTED = 0x100
IMAGE_GUARD_CF_FUNCTION_TABLE_PRESENT = 0x400

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)
    return ok


def cfg_targets(pe, lc):
    """The RVAs of GuardCFFunctionTable (each entry: RVA + (GuardFlags >> 28) extra bytes)."""
    base = pe.OPTIONAL_HEADER.ImageBase
    count = lc.GuardCFFunctionCount
    stride = 4 + ((lc.GuardFlags >> 28) & 0xF)
    table_rva = lc.GuardCFFunctionTable - base
    data = pe.get_data(table_rva, count * stride) if count else b""
    return {struct.unpack_from("<I", data, i * stride)[0] for i in range(count)}


def map_symbols(path, base):
    """Symbol name -> RVA from an lld-link /MAP file."""
    syms = {}
    pat = re.compile(r"^\s*[0-9a-fA-F]{4}:[0-9a-fA-F]{8}\s+(\S+)\s+([0-9a-fA-F]{16})\s")
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = pat.match(line)
            if m:
                syms[m.group(1)] = int(m.group(2), 16) - base
    return syms


def code_pointers_in_data(pe, skip):
    """(slot, code RVA) for every relocated 64-bit pointer into code that the image's data
    sections store, except the slots in `skip` (the guard pointers, which the kernel
    replaces and which point at the guard stubs)."""
    base = pe.OPTIONAL_HEADER.ImageBase
    text = [s for s in pe.sections if s.Characteristics & SCN_MEM_EXECUTE]
    found = set()
    for block in getattr(pe, "DIRECTORY_ENTRY_BASERELOC", []):
        for entry in block.entries:
            if entry.type != pefile.RELOCATION_TYPE["IMAGE_REL_BASED_DIR64"]:
                continue
            sec = pe.get_section_by_rva(entry.rva)
            if sec is None or sec.Characteristics & SCN_MEM_EXECUTE:
                continue
            if entry.rva in skip:
                continue
            target = pe.get_qword_at_rva(entry.rva) - base
            if any(s.VirtualAddress <= target < s.VirtualAddress + s.Misc_VirtualSize for s in text):
                found.add((entry.rva, target))
    return found


def last_write_from_iat(insns, i, reg, in_iat, window=400):
    """Whether the register's last write in a linear scan back (following register copies)
    is a load from the import address table: a heuristic across branches."""
    for prev in reversed(insns[max(0, i - window):i]):
        _, written = prev.regs_access()
        if reg not in written:
            continue
        src = prev.operands[1] if prev.mnemonic == "mov" and len(prev.operands) == 2 else None
        if src is not None and src.type == capstone.x86.X86_OP_REG:
            reg = src.reg  # a copy: follow the source register
            continue
        return (src is not None and src.type == capstone.x86.X86_OP_MEM
                and src.mem.base == capstone.x86.X86_REG_RIP
                and in_iat(prev.address + prev.size + src.mem.disp))
    return False


def loaded_from_iat(insns, i, reg, in_iat, window=400):
    """Whether `reg` holds a value loaded from the import address table when `insns[i]`
    runs, on every path into it within `window` instructions: a backward walk over the
    instruction before each one (unless that one is an unconditional jump or a return) and
    every direct jump in the window that targets it, following register copies. A path that
    leaves the window, or a write from anything else, answers no."""
    lo = max(0, i - window)
    index = {insns[k].address: k for k in range(lo, i + 1)}
    jumps_to = {}
    for k in range(lo, i):
        ins = insns[k]
        if ins.group(capstone.CS_GRP_JUMP) and ins.operands and ins.operands[0].type == capstone.x86.X86_OP_IMM:
            jumps_to.setdefault(ins.operands[0].imm, []).append(k)
    seen = set()
    todo = [(i, reg)]
    while todo:
        k, r = todo.pop()
        if (k, r) in seen:
            continue
        seen.add((k, r))
        preds = list(jumps_to.get(insns[k].address, []))
        if k - 1 >= lo:
            prev = insns[k - 1]
            if not (prev.mnemonic in ("jmp", "ret") or prev.group(capstone.CS_GRP_RET)):
                preds.append(k - 1)
        if not preds:
            # Alignment padding after an unconditional jump is never executed; any other
            # instruction without a predecessor (a function's entry) leaves `r` unknown.
            if insns[k].mnemonic in ("nop", "int3") and k - 1 >= lo:
                continue
            return False
        for q in preds:
            prev = insns[q]
            _, written = prev.regs_access()
            if r not in written:
                todo.append((q, r))
                continue
            src = prev.operands[1] if prev.mnemonic == "mov" and len(prev.operands) == 2 else None
            if src is not None and src.type == capstone.x86.X86_OP_REG:
                todo.append((q, src.reg))  # a copy: follow the source register
                continue
            if (src is not None and src.type == capstone.x86.X86_OP_MEM
                    and src.mem.base == capstone.x86.X86_REG_RIP
                    and in_iat(prev.address + prev.size + src.mem.disp)):
                continue
            return False
    return True


def unguarded_indirect_calls(pe):
    """Addresses of `call reg` / `call [reg...]` in executable sections: indirect calls that
    do not go through `__guard_dispatch_icall_fptr` (a RIP-relative memory operand). A call
    through a register that was last loaded from the import address table is an import call
    (CFG does not check those; LLVM hoists the IAT load out of loops): the register's last
    write in a linear scan back, or else every path into the call within the window
    (`loaded_from_iat`: the linear scan misreads a load on another branch)."""
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    md.detail = True
    iat = pe.OPTIONAL_HEADER.DATA_DIRECTORY[pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_IAT"]]
    in_iat = lambda rva: iat.VirtualAddress <= rva < iat.VirtualAddress + iat.Size  # noqa: E731
    found = []
    for sec in pe.sections:
        if not sec.Characteristics & SCN_MEM_EXECUTE:
            continue
        code = sec.get_data()[: sec.Misc_VirtualSize]
        insns = list(md.disasm(code, sec.VirtualAddress))
        for i, insn in enumerate(insns):
            if insn.mnemonic != "call" or not insn.operands:
                continue
            op = insn.operands[0]
            if op.type == capstone.x86.X86_OP_IMM:
                continue
            if op.type == capstone.x86.X86_OP_MEM and op.mem.base in (0, capstone.x86.X86_REG_RIP):
                continue
            if op.type == capstone.x86.X86_OP_REG and (
                    last_write_from_iat(insns, i, op.reg, in_iat)
                    or loaded_from_iat(insns, i, op.reg, in_iat)):
                continue
            found.append(insn.address)
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("image")
    ap.add_argument("--map")
    ap.add_argument("--allow", default="tools/imports.allow")
    ap.add_argument("--all-guarded", action="store_true")
    args = ap.parse_args()

    pe = pefile.PE(args.image)
    fh, oh = pe.FILE_HEADER, pe.OPTIONAL_HEADER
    base = oh.ImageBase
    check(fh.Machine == 0x8664, f"machine AMD64 (0x{fh.Machine:x})")
    check(oh.Subsystem == 1, f"subsystem NATIVE ({oh.Subsystem})")
    dc = oh.DllCharacteristics
    for name, bit in [("DYNAMIC_BASE", 0x40), ("NX_COMPAT", 0x100), ("GUARD_CF", 0x4000),
                      ("HIGH_ENTROPY_VA", 0x20), ("FORCE_INTEGRITY", 0x80)]:
        check(dc & bit, f"DllCharacteristics {name}")
    check(oh.CheckSum != 0 and oh.CheckSum == pe.generate_checksum(),
          f"checksum valid (0x{oh.CheckSum:x})")
    relocs = sum(len(b.entries) for b in getattr(pe, "DIRECTORY_ENTRY_BASERELOC", []))
    check(relocs > 0, f"base relocations ({relocs} entries)")
    for s in pe.sections:
        wx = (s.Characteristics & SCN_MEM_WRITE) and (s.Characteristics & SCN_MEM_EXECUTE)
        sname = s.Name.rstrip(b"\0").decode()
        check(not wx, f"section {sname} not W+X")

    exports = [e for e in getattr(pe, "DIRECTORY_ENTRY_EXPORT", None).symbols] \
        if hasattr(pe, "DIRECTORY_ENTRY_EXPORT") else []
    names = [e.name.decode() if e.name else f"#{e.ordinal}" for e in exports]
    check(names == ["DriverEntry"], f"exactly one export, DriverEntry ({names})")
    if exports:
        check(exports[0].address == oh.AddressOfEntryPoint,
              f"DriverEntry 0x{exports[0].address:x} is the entry point 0x{oh.AddressOfEntryPoint:x}")

    allowed = set()
    with open(args.allow, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].split()
            if len(line) == 2:
                allowed.add((line[0].lower(), line[1]))
    imports = []
    for dll in getattr(pe, "DIRECTORY_ENTRY_IMPORT", []):
        d = dll.dll.decode()
        check(d.lower() in ALLOWED_DLLS, f"import DLL {d} allowed")
        for imp in dll.imports:
            n = imp.name.decode() if imp.name else f"#{imp.ordinal}"
            imports.append(f"{d}!{n}")
            check((d.lower(), n) in allowed, f"import {d}!{n} on the allowlist")
    print(f"info imports: {len(imports)}")

    lc = getattr(pe, "DIRECTORY_ENTRY_LOAD_CONFIG", None)
    if check(lc is not None, "load-config table present"):
        lc = lc.struct
        check(lc.Size >= 0x94, f"load config Size 0x{lc.Size:x} covers the CFG fields")
        check(lc.GuardFlags & IMAGE_GUARD_CF_INSTRUMENTED, f"GuardFlags CF_INSTRUMENTED (0x{lc.GuardFlags:x})")
        check(lc.GuardFlags & IMAGE_GUARD_CF_FUNCTION_TABLE_PRESENT, "GuardFlags CF_FUNCTION_TABLE_PRESENT")
        check(lc.GuardCFFunctionCount > 0, f"GuardCFFunctionCount {lc.GuardCFFunctionCount}")
        for field in ("GuardCFCheckFunctionPointer", "GuardCFDispatchFunctionPointer"):
            rva = getattr(lc, field) - base
            check(pe.get_section_by_rva(rva) is not None, f"{field} inside the image")
        targets = cfg_targets(pe, lc)
        check(oh.AddressOfEntryPoint in targets, "DriverEntry is a CFG target")
        guard_slots = {lc.GuardCFCheckFunctionPointer - base, lc.GuardCFDispatchFunctionPointer - base}
        stored = code_pointers_in_data(pe, guard_slots)
        missing = sorted(t for _, t in stored if t not in targets)
        check(not missing, f"{len(stored)} code pointers in data are all CFG targets"
              + (f" (missing {[hex(m) for m in missing]})" if missing else ""))
        if args.map:
            syms = map_symbols(args.map, base)
            named = ([("4ndis5entry", h) for h in NDIS_HANDLERS]
                     + [("4ndis8ethernet5entry", h) for h in ETH_HANDLERS] + OS_CALLBACKS)
            for path, h in named:
                pat = re.compile(rf"^_ZN10pvrdma_ndk{path}{len(h)}{h}17h[0-9a-f]{{16}}E$")
                hits = [rva for s, rva in syms.items() if pat.match(s)]
                if not hits:
                    # LTO merged it into an identical handler (the one NDIS receives), or
                    # nothing hands it out (the resolver's work item while nothing resolves).
                    print(f"info handler {h} not in the map (merged into an identical one, or unreferenced)")
                    continue
                check(all(r in targets for r in hits), f"handler {h} is a CFG target")

    unguarded = unguarded_indirect_calls(pe)
    if args.all_guarded:
        check(not unguarded, f"every indirect call goes through the CFG dispatch pointer"
              + (f" (unguarded at {[hex(a) for a in unguarded[:8]]})" if unguarded else ""))
    else:
        print(f"info {len(unguarded)} indirect calls bypass CFG (uninstrumented sysroot code)")

    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
