#!/usr/bin/env python3
"""Runs the linked driver image under speakeasy-emulator 1.5.11, with this script playing
NDIS and the kernel (docs/BUILD.md, "Emulated run").

Usage: run.py IMAGE.sys [--placeholder]

The harness records what DriverEntry registers, calls the handlers the way NDIS does and
asserts every status, header and count. Structure layouts come from the NDIS documentation
(Learn, x64: pointers 8 bytes, natural alignment), never from the Rust sources under test.

--placeholder: the image carries the contract's placeholder `ndis::miniport` (every
operation NDIS_STATUS_NOT_SUPPORTED), so MiniportInitializeEx must fail cleanly after
setting only its registration attributes. Without it the harness expects the real core.

Limits (speakeasy): one thread, no IRQL; DPCs run only when the harness runs them.
"""
import argparse
import struct
import sys

import pefile
import speakeasy

NDIS_STATUS_SUCCESS = 0
NDIS_STATUS_NOT_SUPPORTED = 0xC00000BB
DRIVER_HANDLE = 0xD0D0_0000_0001
ADAPTER_HANDLE = 0xADAD_0000_0001
DMA_HANDLE = 0xDADA_0000_0001
INTERRUPT_HANDLE = 0x1A1A_0000_0001

# NDIS_MINIPORT_DRIVER_CHARACTERISTICS (ndis.h, Learn ns-ndis-_ndis_miniport_driver_
# characteristics): header, four UCHAR versions, ULONG Flags, then the handler pointers in
# this order. REVISION_2 ends after CancelDirectOidRequestHandler.
MINIPORT_HANDLERS = [
    "SetOptionsHandler", "InitializeHandlerEx", "HaltHandlerEx", "UnloadHandler",
    "PauseHandler", "RestartHandler", "OidRequestHandler", "SendNetBufferListsHandler",
    "ReturnNetBufferListsHandler", "CancelSendHandler", "CheckForHangHandlerEx",
    "ResetHandlerEx", "DevicePnPEventNotifyHandler", "ShutdownHandlerEx",
    "CancelOidRequestHandler", "DirectOidRequestHandler", "CancelDirectOidRequestHandler",
]
# Optional per Learn, and left NULL by this driver (NDIS 6.30: NdisMResetMiniport instead).
MINIPORT_NULL_HANDLERS = {"CheckForHangHandlerEx", "ResetHandlerEx"}
HANDLERS_OFFSET = 0x10
CHARACTERISTICS_REVISION_2_SIZE = HANDLERS_OFFSET + 8 * len(MINIPORT_HANDLERS)  # 0x98

STATUS_SUCCESS = 0
STATUS_PENDING = 0x103
STATUS_BUFFER_TOO_SMALL = 0xC0000023
NDIS_STATUS_BAD_VERSION = 0xC0010004
NDIS_STATUS_BUFFER_TOO_SHORT = 0xC0010016
NDIS_STATUS_INVALID_DEVICE_REQUEST = 0xC0000010
OID_NDK_SET_STATE = 0xFC040201
OID_NDK_STATISTICS = 0xFC040202

# The device (docs/reference/pvrdma.md): BAR1 registers, the DSR's slot addresses and caps.
BAR1_PHYS, BAR2_PHYS = 0xFEB1_0000, 0xFEB2_0000
REG_VERSION, REG_DSRLOW, REG_DSRHIGH, REG_CTL, REG_REQUEST, REG_ERR = 0x00, 0x04, 0x08, 0x0C, 0x10, 0x14
DEVICE_VERSION = 20
DSR_CMD_SLOT, DSR_RESP_SLOT, DSR_CAPS = 16, 24, 72
CMD_REQ_MAX, RESP_BIT = 184, 0x8000_0000


def caps_block():
    """The 208-byte caps with the model defaults of pvrdma.md (offsets relative to caps)."""
    b = bytearray(208)
    struct.pack_into("<QQQQQ", b, 0, 1 << 32, 0, 0, 1 << 30, 0x1000)
    u32 = {64: 0x15AD, 68: 0x0820, 72: 1, 76: 1024, 80: 4096, 88: 16, 92: 16, 96: 1024,
           100: 65536, 104: 16384, 108: 1024, 112: 16, 120: 16384, 124: 16, 164: 1024,
           176: 1024, 180: 4096, 184: 16, 188: 16, 192: 16}
    for off, v in u32.items():
        struct.pack_into("<I", b, off, v)
    struct.pack_into("<HBBBBBBI", b, 196, 1, 15, 1, 0, 0, 7, 2, 512)
    return bytes(b)


failures = []
log_lines = []


def asm_call(fn, args):
    """mov rcx/rdx/r8/r9, imm64 (None = leave); mov rax, fn; call rax."""
    code = b""
    for prefix, a in zip([b"\x48\xB9", b"\x48\xBA", b"\x49\xB8", b"\x49\xB9"], args):
        if a is not None:
            code += prefix + struct.pack("<Q", a)
    return code + b"\x48\xB8" + struct.pack("<Q", fn) + b"\xFF\xD0"


def check(ok, what):
    line = ("ok   " if ok else "FAIL ") + what
    print(line)
    if not ok:
        failures.append(what)
    return ok


def header(data, off=0):
    return struct.unpack_from("<BBH", data, off)


class Harness:
    def __init__(self, image):
        self.pe = pefile.PE(image)
        self.base_pref = self.pe.OPTIONAL_HEADER.ImageBase
        self.se = speakeasy.Speakeasy()
        self.module = self.se.load_module(image)
        self.base = self.module.base
        self.cfg = self._cfg_targets()
        self.pool = {}
        self.shared = {}
        self.maps = {}
        self.dpcs = {}
        self.pending_dpcs = []
        self.clock = 1_000_000
        self.calls = []
        self.attributes = []
        self.chars = None
        self.ndk_chars = None
        self.optional_handle = None
        self.deregistered = []
        self.cfg_violations = []
        self.indirect_calls = 0
        self.bar1 = None
        self.dsr = 0
        self.dsr_low = 0
        self.requests = []
        self.sends_completed = []
        self.pending_vectors = []
        self.interrupt_chars = None
        self.delay_slot = self._iat_slot("KeDelayExecutionThread")
        self.scratch = self.alloc(0x1000, "harness_scratch")
        self._hooks()

    # ---- image facts ----
    def _cfg_targets(self):
        lc = self.pe.DIRECTORY_ENTRY_LOAD_CONFIG.struct
        count = lc.GuardCFFunctionCount
        stride = 4 + ((lc.GuardFlags >> 28) & 0xF)
        data = self.pe.get_data(lc.GuardCFFunctionTable - self.base_pref, count * stride)
        self.guard_dispatch_slot = lc.GuardCFDispatchFunctionPointer - self.base_pref
        return {struct.unpack_from("<I", data, i * stride)[0] for i in range(count)}

    def is_cfg_target(self, va):
        return (va - self.base) in self.cfg

    def in_image(self, va):
        return self.base <= va < self.base + self.pe.OPTIONAL_HEADER.SizeOfImage

    def _iat_slot(self, name):
        for dll in self.pe.DIRECTORY_ENTRY_IMPORT:
            for imp in dll.imports:
                if imp.name and imp.name.decode() == name:
                    return imp.address - self.base_pref + self.base
        return None

    # ---- memory helpers ----
    def read(self, addr, n):
        return bytes(self.se.mem_read(addr, n))

    def q(self, addr):
        return struct.unpack("<Q", self.read(addr, 8))[0]

    def alloc(self, size, tag):
        return self.se.mem_alloc(size, tag=tag)

    # ---- the kernel and NDIS ----
    def _hook(self, module, name, argc, fn):
        def cb(emu, api, orig, argv):
            self.calls.append(name)
            return fn(argv)
        self.se.add_api_hook(cb, module, name, argc=argc)

    def _hooks(self):
        h = self._hook
        h("ndis", "NdisMRegisterMiniportDriver", 5, self.register_miniport)
        h("ndis", "NdisMDeregisterMiniportDriver", 1, lambda a: self.deregistered.append(a[0]) or 0)
        h("ndis", "NdisSetOptionalHandlers", 2, self.set_optional_handlers)
        h("ndis", "NdisMSetMiniportAttributes", 2, self.set_attributes)
        h("ndis", "NdisMRegisterScatterGatherDma", 3, self.register_dma)
        h("ndis", "NdisMDeregisterScatterGatherDma", 1, lambda a: self.maps.pop("dma", None) and 0)
        h("ndis", "NdisMMapIoSpace", 4, self.map_io)
        h("ndis", "NdisMUnmapIoSpace", 3, self.unmap_io)
        h("ndis", "NdisMRegisterInterruptEx", 4, self.register_interrupt)
        h("ndis", "NdisMDeregisterInterruptEx", 1, lambda a: self.maps.pop("interrupt", None) and 0)
        h("ndis", "NdisMAllocateSharedMemory", 5, self.alloc_shared)
        h("ndis", "NdisMFreeSharedMemory", 5, self.free_shared)
        h("ndis", "NdisMSendNetBufferListsComplete", 3, lambda a: self.sends_completed.append(tuple(a)) or 0)
        h("ntoskrnl", "ExAllocatePool2", 3, self.pool_alloc)
        h("ntoskrnl", "ExFreePoolWithTag", 2, self.pool_free)
        h("ntoskrnl", "KeBugCheckEx", 5, self.bugcheck)
        h("ntoskrnl", "KeInitializeDpc", 3, self.init_dpc)
        h("ntoskrnl", "KeInsertQueueDpc", 3, self.queue_dpc)
        h("ntoskrnl", "KeRemoveQueueDpc", 1, self.remove_dpc)
        h("ntoskrnl", "KeFlushQueuedDpcs", 0, lambda a: 0)
        h("ntoskrnl", "KeSetTargetProcessorDpcEx", 2, lambda a: 0)
        h("ntoskrnl", "KeGetProcessorNumberFromIndex", 2, self.processor_number)
        h("ntoskrnl", "KeQueryActiveProcessorCountEx", 1, lambda a: 1)
        h("ntoskrnl", "KeGetCurrentProcessorNumberEx", 1, lambda a: 0)
        h("ntoskrnl", "KeInitializeTimer", 1, lambda a: 0)
        h("ntoskrnl", "KeSetTimer", 3, lambda a: 0)
        h("ntoskrnl", "KeCancelTimer", 1, lambda a: 0)
        h("ntoskrnl", "KeQueryInterruptTimePrecise", 1, self.interrupt_time)
        h("ntoskrnl", "KeDelayExecutionThread", 3, self.delay)
        h("ntoskrnl", "KeAcquireSpinLockRaiseToDpc", 1, lambda a: 0)
        h("ntoskrnl", "KeReleaseSpinLock", 2, lambda a: 0)
        h("ntoskrnl", "DbgPrintEx", 3, self.dbg_print)
        h("ntoskrnl", "memcmp", 3, self.memcmp)
        # speakeasy's own memset converts the whole 64-bit register to a byte and fails when
        # the upper bits of the `int` argument are not zero (they need not be).
        h("ntoskrnl", "memset", 3, self.memset)
        h("ntoskrnl", "strlen", 1, lambda a: len(self.se.read_mem_string(a[0])))
        # __chkstk takes the frame size in rax and the caller subtracts rax after it returns:
        # give rax back unchanged (the emulator's stack is committed).
        self.se.add_api_hook(lambda emu, api, orig, argv: emu.reg_read("rax"), "ntoskrnl", "__chkstk", argc=0)

    def register_miniport(self, a):
        _drv, _reg, _ctx, chars, phandle = a
        self.chars = self.read(chars, CHARACTERISTICS_REVISION_2_SIZE)
        self.se.mem_write(phandle, struct.pack("<Q", DRIVER_HANDLE))
        return NDIS_STATUS_SUCCESS

    def set_optional_handlers(self, a):
        self.optional_handle = a[0]
        self.ndk_chars = self.read(a[1], 0x18)
        return NDIS_STATUS_SUCCESS

    def set_attributes(self, a):
        handle, attrs = a
        t, rev, size = header(self.read(attrs, 4))
        data = self.read(attrs, size)
        extra = None
        if t == 0xB3 and size >= 0x10:  # NDK attributes: the capabilities they point to
            extra = self.read(struct.unpack_from("<Q", data, 8)[0], 0x38)
        self.attributes.append((handle, t, rev, size, data, extra))
        return NDIS_STATUS_SUCCESS

    def register_dma(self, a):
        handle, desc, phandle = a
        self.dma_desc = self.read(desc, 0x28)
        self.maps["dma"] = handle
        self.se.mem_write(phandle, struct.pack("<Q", DMA_HANDLE))
        return NDIS_STATUS_SUCCESS

    def map_io(self, a):
        pva, handle, phys, length = a
        va = self.alloc(length, "bar_%x" % phys)
        self.maps[va] = (phys, length)
        if phys == BAR1_PHYS:
            self.bar1 = va
            self.se.mem_write(va + REG_VERSION, struct.pack("<I", DEVICE_VERSION))
            self.se.add_mem_write_hook(self.bar1_write, begin=va, end=va + length - 1)
        self.se.mem_write(pva, struct.pack("<Q", va))
        return NDIS_STATUS_SUCCESS

    def unmap_io(self, a):
        self.maps.pop(a[1], None)
        return 0

    def register_interrupt(self, a):
        handle, ctx, chars, phandle = a
        self.interrupt_chars = self.read(chars, 0x60)
        self.interrupt_context = ctx
        self.maps["interrupt"] = handle
        self.se.mem_write(phandle, struct.pack("<Q", INTERRUPT_HANDLE))
        return NDIS_STATUS_SUCCESS

    def alloc_shared(self, a):
        handle, length, cached, pva, ppa = a
        va = self.alloc((length + 0xFFF) & ~0xFFF, "shared")
        self.shared[va] = length
        self.se.mem_write(pva, struct.pack("<Q", va))
        # Identity bus addresses: the harness's device reads DMA memory at its CPU address.
        self.se.mem_write(ppa, struct.pack("<Q", va))
        return 0

    def free_shared(self, a):
        _h, length, _c, va, _pa = a
        check(self.shared.pop(va, None) == length, f"NdisMFreeSharedMemory(0x{va:x}, {length}) frees a live block")
        return 0

    def pool_alloc(self, a):
        flags, size, tag = a
        va = self.alloc(max(size, 1), "pool")
        self.se.mem_write(va, b"\0" * max(size, 1))
        self.pool[va] = (size, tag, flags)
        return va

    def pool_free(self, a):
        va, tag = a
        block = self.pool.pop(va, None)
        check(block is not None and block[1] == tag, f"ExFreePoolWithTag(0x{va:x}) frees a live block with its tag")
        return 0

    def bugcheck(self, a):
        failures.append("KeBugCheckEx(0x%x, %s)" % (a[0], [hex(x) for x in a[1:]]))
        print("FAIL KeBugCheckEx 0x%x line %d" % (a[0], a[1]))
        self.se.stop()
        return 0

    def init_dpc(self, a):
        self.dpcs[a[0]] = (a[1], a[2])
        return 0

    def queue_dpc(self, a):
        if a[0] in self.pending_dpcs:
            return 0
        self.pending_dpcs.append(a[0])
        return 1

    def remove_dpc(self, a):
        if a[0] in self.pending_dpcs:
            self.pending_dpcs.remove(a[0])
            return 1
        return 0

    def processor_number(self, a):
        self.se.mem_write(a[1], struct.pack("<HBB", 0, a[0] & 0xFF, 0))
        return 0

    def interrupt_time(self, a):
        self.clock += 10
        return self.clock

    def delay(self, a):
        interval = struct.unpack("<q", self.read(a[2], 8))[0]
        self.clock += -interval if interval < 0 else 10
        self.deliver()
        return 0

    def deliver(self):
        """Runs what is pending (device interrupts, then queued DPCs) before the wait
        returns, as the kernel would while the thread sleeps: a stub calls each routine, then
        KeDelayExecutionThread again (which delivers what those queued), then jumps back to
        the waiting code. Only from a KeDelayExecutionThread hook."""
        calls = b""
        if self.pending_vectors and self.interrupt_chars is not None:
            isr = struct.unpack_from("<Q", self.interrupt_chars, 0x30)[0]
            out = self.scratch + 0x100
            for v in self.pending_vectors:
                calls += asm_call(isr, [self.interrupt_context, v, out, out + 8])
            self.pending_vectors = []
        elif self.pending_dpcs:
            for kdpc in self.pending_dpcs:
                routine, ctx = self.dpcs[kdpc]
                calls += asm_call(routine, [kdpc, ctx, 0, 0])
            self.pending_dpcs = []
        if not calls:
            return
        zero = self.scratch
        emu = self.se
        rsp = emu.reg_read("rsp")
        ret = self.q(rsp)
        code = b"\x48\x83\xEC\x40" + calls  # sub rsp, 0x40 (rsp is 16-aligned here)
        code += b"\x31\xC9\x31\xD2\x49\xB8" + struct.pack("<Q", zero)  # KernelMode, FALSE, &0
        code += b"\x48\xB8" + struct.pack("<Q", self.delay_slot) + b"\x48\x8B\x00\xFF\xD0"
        code += b"\x48\x83\xC4\x40\x31\xC0"  # add rsp, 0x40; STATUS_SUCCESS
        code += b"\x48\xB9" + struct.pack("<Q", ret) + b"\xFF\xE1"  # jmp to the waiter
        stub = self.alloc(0x1000, "harness_deliver")
        emu.mem_write(stub, code)
        # Return from the hooked call into the stub (the emulator then skips its own return).
        emu.reg_write("rsp", rsp + 8)
        emu.set_pc(stub)

    # ---- the device's BAR1 ----
    def bar1_write(self, emu, access, addr, size, value, ctx):
        off = addr - self.bar1
        if off == REG_DSRLOW:
            self.dsr_low = value
        elif off == REG_DSRHIGH:
            self.dsr = (value << 32) | self.dsr_low
            self.se.mem_write(self.dsr + DSR_CAPS, caps_block())
        elif off == REG_CTL:
            if value == 2:  # reset
                self.dsr = 0
            self.se.mem_write(self.bar1 + REG_ERR, struct.pack("<I", 0))
        elif off == REG_REQUEST:
            slot = self.q(self.dsr + DSR_CMD_SLOT)
            req = self.read(slot, CMD_REQ_MAX)
            code = struct.unpack_from("<I", req, 8)[0]
            self.requests.append(code)
            resp = bytearray(176)
            resp[0:8] = req[0:8]
            struct.pack_into("<I", resp, 8, code | RESP_BIT)
            # Handles: distinct per command kind, so no create names a live handle.
            struct.pack_into("<I", resp, 16, len(self.requests))
            self.se.mem_write(self.q(self.dsr + DSR_RESP_SLOT), bytes(resp))
            self.se.mem_write(self.bar1 + REG_ERR, struct.pack("<I", 0))
            self.pending_vectors.append(0)
        return True

    def dbg_print(self, a):
        log_lines.append(self.se.read_mem_string(a[2]))
        return 0

    def memset(self, a):
        if a[2]:
            self.se.mem_write(a[0], bytes([a[1] & 0xFF]) * a[2])
        return a[0]

    def memcmp(self, a):
        x, y = self.read(a[0], a[2]), self.read(a[1], a[2])
        return 0 if x == y else (1 if x > y else 0xFFFFFFFF)

    # ---- running ----
    def pump(self):
        """Delivers pending device interrupts and queued DPCs between top-level calls."""
        while self.pending_vectors or self.pending_dpcs:
            if self.pending_vectors and self.interrupt_chars is not None:
                isr = struct.unpack_from("<Q", self.interrupt_chars, 0x30)[0]
                vectors, self.pending_vectors = self.pending_vectors, []
                for v in vectors:
                    self.call(isr, [self.interrupt_context, v, self.scratch + 0x100, self.scratch + 0x108], f"MSI-X ISR {v}")
            elif self.pending_dpcs:
                kdpc = self.pending_dpcs.pop(0)
                routine, ctx = self.dpcs[kdpc]
                self.call(routine, [kdpc, ctx, 0, 0], "DPC")
            else:
                self.pending_vectors = []
    def guard_cfg(self):
        """Emulated kernel CFG: the image's dispatch pointer names its `jmp rax` stub; every
        indirect call goes through it, so a code hook there sees each target in rax."""
        stub = self.q(self.base + self.guard_dispatch_slot)

        def on_dispatch(emu, addr, size, ctx):
            target = emu.reg_read("rax")
            self.indirect_calls += 1
            # Targets outside the image are the consumer's (harness stubs here).
            if self.in_image(target) and not self.is_cfg_target(target):
                self.cfg_violations.append(target)
        self.se.add_code_hook(on_dispatch, begin=stub, end=stub + 1)

    def call(self, addr, args, what):
        before = len(self.se.emu.runs)
        self.se.call(addr, args)
        runs = self.se.emu.runs[before:]
        run = runs[-1] if runs else None
        ok = run is not None and not run.error
        check(ok, f"{what} ran to completion" + ("" if ok else f" ({run.error if run else 'no run'})"))
        return (run.ret_val if run else None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("image")
    ap.add_argument("--placeholder", action="store_true")
    args = ap.parse_args()
    hz = Harness(args.image)
    hz.guard_cfg()

    # DriverEntry
    hz.se.run_module(hz.module, all_entrypoints=False)
    entry = hz.se.emu.runs[0]
    check(not entry.error, f"DriverEntry ran to completion {entry.error or ''}")
    check(entry.ret_val == 0, f"DriverEntry returned STATUS_SUCCESS ({entry.ret_val})")
    check(hz.calls.count("NdisMRegisterMiniportDriver") == 1, "DriverEntry called NdisMRegisterMiniportDriver once")
    if hz.chars is None:
        return finish(hz)
    c = hz.chars
    check(header(c) == (0x8A, 2, CHARACTERISTICS_REVISION_2_SIZE),
          f"characteristics header {header(c)} = (NDIS_OBJECT_TYPE_MINIPORT_DRIVER_CHARACTERISTICS, REVISION_2, 0x98)")
    check(c[4:6] == bytes([6, 30]), f"NDIS version {c[4]}.{c[5]} = 6.30")
    handlers = {n: struct.unpack_from("<Q", c, HANDLERS_OFFSET + 8 * i)[0] for i, n in enumerate(MINIPORT_HANDLERS)}
    for n, va in handlers.items():
        if n in MINIPORT_NULL_HANDLERS:
            check(va == 0, f"{n} is NULL")
        else:
            check(va != 0 and hz.is_cfg_target(va), f"{n} 0x{va:x} set and a CFG target")

    # MiniportSetOptions
    st = hz.call(handlers["SetOptionsHandler"], [DRIVER_HANDLE, 0], "MiniportSetOptions")
    check(st == NDIS_STATUS_SUCCESS, f"MiniportSetOptions returned NDIS_STATUS_SUCCESS ({st})")
    check(hz.optional_handle == DRIVER_HANDLE, "NdisSetOptionalHandlers got the driver handle")
    n = hz.ndk_chars
    if check(n is not None, "NdisSetOptionalHandlers was called"):
        check(header(n) == (0xB2, 1, 0x18), f"NDK provider characteristics header {header(n)} = (0xB2, 1, 0x18)")
        check(struct.unpack_from("<I", n, 4)[0] == 0, "NDK provider Flags 0")
        open_ndk, close_ndk = struct.unpack_from("<QQ", n, 8)
        check(hz.is_cfg_target(open_ndk) and hz.is_cfg_target(close_ndk), "open/close NDK adapter handlers are CFG targets")

    # MiniportInitializeEx: BAR0 (MSI-X table), BAR1 (registers), BAR2 (UAR), three MSI-X
    # messages (CM_PARTIAL_RESOURCE_LIST, wdm.h pack(4): descriptors of 0x14 bytes at 8).
    bars = [(0xFEB0_0000, 0x2000), (BAR1_PHYS, 0x2000), (BAR2_PHYS, 0x10_0000)]
    descs = b""
    for phys, length in bars:
        descs += struct.pack("<BBHqII", 3, 1, 0, phys, length, 0)  # CmResourceTypeMemory
    for vector in range(3):
        # CmResourceTypeInterrupt, CM_RESOURCE_INTERRUPT_MESSAGE | LATCHED; Translated
        # {Level, Vector, Affinity}.
        descs += struct.pack("<BBHIIQ", 2, 1, 0x3, 0, 0x60 + vector, 1)
    count = len(bars) + 3
    rlist = hz.alloc(8 + len(descs), "resources")
    hz.se.mem_write(rlist, struct.pack("<HHI", 1, 1, count) + descs)
    params = hz.alloc(0x40, "init_params")
    hz.se.mem_write(params, struct.pack("<BBHIQ", 0x81, 1, 0x40, 0, rlist) + b"\0" * 0x30)
    pool_before = len(hz.pool)
    st = hz.call(handlers["InitializeHandlerEx"], [ADAPTER_HANDLE, 0, params], "MiniportInitializeEx")
    reg = [a for a in hz.attributes if a[1] == 0x9E]
    if check(len(reg) == 1 and hz.attributes[0] is reg[0], "registration attributes set once, first"):
        _h, t, rev, size, data, _ = reg[0]
        check(_h == ADAPTER_HANDLE and (t, rev, size) == (0x9E, 2, 0x1C),
              f"registration attributes header ({t:#x}, {rev}, {size:#x}) = (0x9E, 2, 0x1C)")
        ctx, flags, hang, iface = struct.unpack_from("<QIIi", data, 8)
        check(ctx != 0, "MiniportAdapterContext set")
        check(flags == 0x9, f"AttributeFlags HARDWARE_DEVICE | BUS_MASTER ({flags:#x})")
        check((hang, iface) == (0, 5), f"CheckForHangTimeInSeconds 0, InterfaceType NdisInterfacePci ({hang}, {iface})")
    if args.placeholder:
        check(st == NDIS_STATUS_NOT_SUPPORTED, f"InitializeEx returned NDIS_STATUS_NOT_SUPPORTED from the placeholder ({st:#x})")
        check(len(hz.attributes) == 1, "no attributes after the failed resource parse")
        check(len(hz.pool) == pool_before, f"the failed InitializeEx freed its pool ({len(hz.pool) - pool_before} left)")
        check(not hz.maps, f"the failed InitializeEx unmapped and deregistered everything ({hz.maps})")
    elif check(st == NDIS_STATUS_SUCCESS, f"InitializeEx returned NDIS_STATUS_SUCCESS ({st:#x})"):
        types = [a[1] for a in hz.attributes]
        check(types == [0x9E, 0x9F, 0xB3], f"attributes registration, general, NDK in order ({[hex(t) for t in types]})")
        for _h, t, rev, size, data, extra in hz.attributes:
            if t == 0x9F:
                check((rev, size) == (2, 0xE0), f"general attributes REVISION_2, size 0xE0 ({rev}, {size:#x})")
            if t == 0xB3:
                check((rev, size) == (1, 0x10), f"NDK attributes REVISION_1, size 0x10 ({rev}, {size:#x})")
                check(data[4] == 1, "NDK Enabled")
                check(header(extra) == (0x80, 1, 0x38), f"NDK capabilities header {header(extra)} = (0x80, 1, 0x38)")
        full_run(hz, handlers, reg[0][4] if reg else b"")


    # MiniportDriverUnload
    hz.call(handlers["UnloadHandler"], [0], "MiniportDriverUnload")
    check(hz.deregistered == [DRIVER_HANDLE], "Unload deregistered the driver handle once")
    return finish(hz)


def u32(hz, addr):
    return struct.unpack("<I", hz.read(addr, 4))[0]


def full_run(hz, handlers, registration):
    """The real core: OIDs, the NDK adapter for each version, a few NDK calls, Halt."""
    ctx = struct.unpack_from("<Q", registration, 8)[0]
    check(hz.dsr != 0, "bring-up handed the device its DSR")
    # NDIS_SG_DMA_DESCRIPTION: header, Flags, MaximumPhysicalMapping, ProcessSGListHandler @0x10.
    d = hz.dma_desc
    check(header(d) == (0x83, 1, 0x24), f"SG DMA description header {header(d)} = (0x83, 1, 0x24)")
    check(struct.unpack_from("<I", d, 4)[0] & 1, "NDIS_SG_DMA_64_BIT_ADDRESS")
    check(hz.is_cfg_target(struct.unpack_from("<Q", d, 0x10)[0]), "ProcessSGListHandler is a CFG target")
    # NDIS_MINIPORT_INTERRUPT_CHARACTERISTICS: four line handlers @8, MsiSupported @0x28,
    # four message handlers @0x30.
    ic = hz.interrupt_chars
    check(header(ic) == (0x84, 1, 0x60), f"interrupt characteristics header {header(ic)} = (0x84, 1, 0x60)")
    check(ic[0x28] == 1, "MsiSupported")
    handlers_ic = struct.unpack_from("<4Q", ic, 8) + struct.unpack_from("<4Q", ic, 0x30)
    check(all(hz.is_cfg_target(f) for f in handlers_ic), "all eight interrupt handlers set and CFG targets")

    def oid(handler, rtype, oid_value, payload, length):
        buf = hz.alloc(max(length, 1), "oid_buffer")
        hz.se.mem_write(buf, payload.ljust(length, b"\0")[:length])
        req = hz.alloc(0x100, "oid_request")
        hz.se.mem_write(req, struct.pack("<BBHiII", 0x96, 1, 0xF0, rtype, 0, 0) + b"\0" * 0xF0)
        hz.se.mem_write(req + 0x20, struct.pack("<IIQII", oid_value, 0, buf, length, 0))
        st = hz.call(handlers[handler], [ctx, req], f"{handler}({oid_value:#x})")
        done, needed = struct.unpack("<II", hz.read(req + 0x34, 8))
        return st, done, needed, hz.read(buf, max(length, 1))

    st, done, _, _ = oid("OidRequestHandler", 1, OID_NDK_SET_STATE, b"\x01", 1)
    check((st, done) == (NDIS_STATUS_SUCCESS, 1), f"OID_NDK_SET_STATE(TRUE): SUCCESS, BytesRead 1 ({st:#x}, {done})")
    stats_header = struct.pack("<BBH", 0x80, 1, 0xF8)
    st, done, _, out = oid("DirectOidRequestHandler", 0, OID_NDK_STATISTICS, stats_header, 0xF8)
    check((st, done) == (NDIS_STATUS_SUCCESS, 0xF8), f"OID_NDK_STATISTICS: SUCCESS, BytesWritten 0xF8 ({st:#x}, {done:#x})")
    st, _, needed, _ = oid("DirectOidRequestHandler", 0, OID_NDK_STATISTICS, stats_header, 0x10)
    check((st, needed) == (NDIS_STATUS_BUFFER_TOO_SHORT, 0xF8),
          f"OID_NDK_STATISTICS short: BUFFER_TOO_SHORT, BytesNeeded 0xF8 ({st:#x}, {needed:#x})")
    st, _, _, _ = oid("DirectOidRequestHandler", 0, OID_NDK_STATISTICS, struct.pack("<BBH", 0x80, 2, 0xF8), 0xF8)
    check(st == NDIS_STATUS_INVALID_DEVICE_REQUEST, f"OID_NDK_STATISTICS bad revision: INVALID_DEVICE_REQUEST ({st:#x})")

    open_ndk, close_ndk = struct.unpack_from("<QQ", hz.ndk_chars, 8)
    adapters = []
    for major, minor in [(1, 0), (1, 2), (2, 0), (2, 1), (3, 0)]:
        params = hz.alloc(12, "open_params")
        hz.se.mem_write(params, struct.pack("<HHII", major, minor, 0, 0))
        out = hz.scratch + 0x200
        hz.se.mem_write(out, b"\0" * 8)
        st = hz.call(open_ndk, [ctx, params, out], f"OpenNDKAdapter({major}.{minor})")
        if (major, minor) == (3, 0):
            check(st == NDIS_STATUS_BAD_VERSION, f"OpenNDKAdapter(3.0): NDIS_STATUS_BAD_VERSION ({st:#x})")
            continue
        adapter = hz.q(out)
        if not check(st == NDIS_STATUS_SUCCESS and adapter, f"OpenNDKAdapter({major}.{minor}): SUCCESS ({st:#x})"):
            continue
        adapters.append(adapter)
        check(u32(hz, adapter + 4) == 1, "the adapter's ObjectType is NdkObjectTypeAdapter")
        dispatch = hz.q(adapter + 0x28)
        slots = [hz.q(dispatch + 8 * i) for i in range(9)]
        check(all(not f or hz.is_cfg_target(f) for f in slots), "every NDK_ADAPTER_DISPATCH slot is a CFG target")

    if adapters:
        a = adapters[-1]
        dispatch = hz.q(a + 0x28)
        query_info, create_pd = hz.q(dispatch + 0x08), hz.q(dispatch + 0x18)
        info, size = hz.alloc(0x68, "adapter_info"), hz.scratch + 0x208
        hz.se.mem_write(size, struct.pack("<I", 4))
        st = hz.call(query_info, [a, info, size], "NdkQueryAdapterInfo(4 bytes)")
        check((st, u32(hz, size)) == (STATUS_BUFFER_TOO_SMALL, 0x68),
              f"NdkQueryAdapterInfo(4): STATUS_BUFFER_TOO_SMALL, size 0x68 ({st:#x}, {u32(hz, size):#x})")
        hz.se.mem_write(size, struct.pack("<I", 0x68))
        st = hz.call(query_info, [a, info, size], "NdkQueryAdapterInfo")
        check((st, u32(hz, size)) == (STATUS_SUCCESS, 0x68), f"NdkQueryAdapterInfo: SUCCESS, 0x68 bytes ({st:#x})")
        print(f"info adapter info: Version {struct.unpack('<HH', hz.read(info, 4))}, VendorId {u32(hz, info + 4):#x}")

        rec = hz.scratch + 0x400
        hz.se.mem_write(rec, b"\0" * 0x30)
        create_cb = hz.alloc(0x100, "consumer_create_cb")
        hz.se.mem_write(create_cb, b"\x48\xB8" + struct.pack("<Q", rec)
                        + b"\x48\x89\x08\x48\x89\x50\x08\x4C\x89\x40\x10\x48\xFF\x40\x18\xC3")
        close_cb = hz.alloc(0x100, "consumer_close_cb")
        hz.se.mem_write(close_cb, b"\x48\xB8" + struct.pack("<Q", rec) + b"\x48\x89\x48\x20\x48\xFF\x40\x28\xC3")
        pd_out = hz.scratch + 0x210
        st = hz.call(create_pd, [a, create_cb, 0xC0FFEE, pd_out], "NdkCreatePd")
        check(st in (STATUS_PENDING, STATUS_SUCCESS), f"NdkCreatePd: STATUS_PENDING or SUCCESS ({st:#x})")
        hz.pump()
        context, status, pd, calls = struct.unpack("<QQQQ", hz.read(rec, 32))
        if st == STATUS_PENDING:
            check((calls, context, status & 0xFFFFFFFF) == (1, 0xC0FFEE, 0) and pd,
                  f"the create completion ran once with SUCCESS and the PD ({calls}, {status:#x})")
        else:
            pd = hz.q(pd_out)
        if pd:
            close_pd = hz.q(hz.q(pd + 0x28))
            check(hz.is_cfg_target(close_pd), "NdkClosePd is a CFG target")
            st = hz.call(close_pd, [pd, close_cb, 0xC105E], "NdkClosePd")
            check(st in (STATUS_PENDING, STATUS_SUCCESS), f"NdkClosePd: PENDING or SUCCESS ({st:#x})")
            hz.pump()
            if st == STATUS_PENDING:
                ccontext, ccalls = struct.unpack("<QQ", hz.read(rec + 0x20, 16))
                check((ccalls, ccontext) == (1, 0xC105E), f"the close completion ran once ({ccalls})")

    for a in adapters:
        hz.call(close_ndk, [ctx, a], "CloseNDKAdapter")
    hz.pump()

    # NET_BUFFER_LIST (ndis.h): Next @0, ..., Status @0x84. An NDK-only adapter fails every
    # send at once with NDIS_STATUS_REQUEST_ABORTED.
    first, second = hz.alloc(0x100, "nbl"), hz.alloc(0x100, "nbl")
    hz.se.mem_write(first, struct.pack("<Q", second) + b"\0" * 0xF8)
    hz.se.mem_write(second, b"\0" * 0x100)
    hz.call(handlers["SendNetBufferListsHandler"], [ctx, first, 0, 1], "MiniportSendNetBufferLists")
    statuses = [u32(hz, n + 0x84) for n in (first, second)]
    check(statuses == [0xC0000240] * 2, f"both NBLs completed with NDIS_STATUS_REQUEST_ABORTED ({[hex(x) for x in statuses]})")
    check(hz.sends_completed == [(ADAPTER_HANDLE, first, 1)],
          f"NdisMSendNetBufferListsComplete(adapter, chain, DISPATCH_LEVEL) once ({hz.sends_completed})")

    st = hz.call(handlers["PauseHandler"], [ctx, 0], "MiniportPause")
    check(st == NDIS_STATUS_SUCCESS, f"MiniportPause: NDIS_STATUS_SUCCESS ({st:#x})")
    st = hz.call(handlers["RestartHandler"], [ctx, 0], "MiniportRestart")
    check(st == NDIS_STATUS_SUCCESS, f"MiniportRestart: NDIS_STATUS_SUCCESS ({st:#x})")
    hz.call(handlers["HaltHandlerEx"], [ctx, 0], "MiniportHaltEx")
    check(not hz.maps, f"Halt unmapped the BARs and deregistered DMA and interrupts ({list(hz.maps)})")
    print("info device commands: " + ", ".join(hex(c) for c in hz.requests))
    # The CFG emulation is only worth something if it saw the provider's indirect calls.
    check(hz.indirect_calls > 0, f"the guard dispatch hook saw the indirect calls ({hz.indirect_calls})")


def finish(hz):
    check(not hz.pool, f"no pool block left ({len(hz.pool)})")
    check(not hz.shared, f"no shared-memory block left ({len(hz.shared)})")
    check(not hz.cfg_violations, f"{hz.indirect_calls} indirect calls, all to CFG targets"
          + (f" (violations {[hex(v) for v in hz.cfg_violations]})" if hz.cfg_violations else ""))
    unsupported = [r.error for r in hz.se.emu.runs if r.error and r.error.get("type") == "unsupported_api"]
    check(not unsupported, f"no unsupported API reached {unsupported}")
    print("info APIs called: " + ", ".join(sorted(set(hz.calls))))
    for line in log_lines:
        print("info DbgPrintEx: " + line.rstrip())
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("emulated run passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
