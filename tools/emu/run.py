#!/usr/bin/env python3
"""Runs the linked driver image under speakeasy-emulator 1.5.11, with this script playing
NDIS and the kernel (docs/BUILD.md, "Emulated run").

Usage: run.py IMAGE.sys [--device scripted|model]

--device scripted (the default) answers BAR1 with the harness's own hand-written command
responses (no doorbells, no data path); --device model puts the device model (pvrdma-sim,
through the extension built from tools/emu/simbridge) behind the BARs, the shared memory and
the interrupts, and adds the MR, QP, receive, arm and flush scenario only a real device
answers.

The harness records what DriverEntry registers, calls the handlers the way NDIS does and
asserts every status, header and count. Structure layouts come from the NDIS documentation
(Learn, x64: pointers 8 bytes, natural alignment), never from the Rust sources under test.

Limits (speakeasy): one thread, no IRQL; DPCs and NDIS I/O work items run only when the
harness runs them (work items only between top-level calls, never inside an OID handler).
"""
import argparse
import ipaddress
import json
import os
import random
import struct
import sys

import pefile
import speakeasy
import speakeasy.binemu

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
    "SynchronousOidRequestHandler",
]
# Optional per Learn, and left NULL by this driver (NDIS 6.30: NdisMResetMiniport instead of
# check-for-hang; the synchronous OID path is for RSSv2 only). ResetHandlerEx is set since
# issue 24: the vmxnet3 adapter resets its device there (the PVRDMA one succeeds at once).
MINIPORT_NULL_HANDLERS = {"CheckForHangHandlerEx", "SynchronousOidRequestHandler"}
# PCI vendor and device IDs (config space offset 0, NdisMGetBusData): the PVRDMA function
# and the vmxnet3 function of the same slot.
PVRDMA_PCI_IDS = (0x15AD, 0x0820)
VMXNET3_PCI_IDS = (0x15AD, 0x07B0)
HANDLERS_OFFSET = 0x10
# REVISION_3 (NDIS 6.80+; required of an NDIS 6.85 driver, Learn "Introduction to NDIS
# 6.85") ends after SynchronousOidRequestHandler.
CHARACTERISTICS_REVISION_3_SIZE = HANDLERS_OFFSET + 8 * len(MINIPORT_HANDLERS)  # 0xA0

NDIS_STATUS_FAILURE = 0xC0000001
# NET_BUFFER_LIST.Status (nbl.h, x64: the reserved arrays are 16-aligned).
NBL_STATUS = 0x8C
# The adapter's registry (NdisOpenConfigurationEx / NdisReadConfiguration), and what the
# driver writes to the event log (NdisWriteErrorLogEntry; netevent.h).
CONFIG_HANDLE = 0xC0F1_0000_0001
NDIS_ERROR_CODE_UNSUPPORTED_CONFIGURATION = 0xC0001391
# The four NDK keywords, then `Paired` (set by the INF on the PVRDMA function of a paired
# installation: no NDK of its own; tools/emu/paired.py).
KEYWORDS = ["*NetworkDirect", "*NetworkDirectTechnology", "*NetworkDirectRoCEFrameSize", "*JumboPacket", "Paired"]
# NdisMIndicateStatusEx (ndis.h NDIS_STATUS_INDICATION, x64 0x70 bytes; ntddndis.h
# NDIS_LINK_STATE, 0x28 bytes).
NDIS_STATUS_LINK_STATE = 0x40010017
LINK_25G = 25_000_000_000  # QUERY_PORT width 1X (1), speed EDR (32): 25 Gb/s
NDIS_LINK_SPEED_UNKNOWN = 0xFFFF_FFFF_FFFF_FFFF
# The driver's private OID for the operational RoCE MTU (src/ndis/oid.rs).
OID_PVRDMA_ROCE_MTU = 0xFF505601
STATUS_SUCCESS = 0
STATUS_PENDING = 0x103
STATUS_BUFFER_TOO_SMALL = 0xC0000023
NDIS_STATUS_BAD_VERSION = 0xC0010004
NDIS_STATUS_BUFFER_TOO_SHORT = 0xC0010016
NDIS_STATUS_ADAPTER_NOT_READY = 0xC0010011
NDIS_STATUS_INVALID_LENGTH = 0xC0010014
NDIS_STATUS_INVALID_DATA = 0xC0010015
NDIS_STATUS_INVALID_PARAMETER = 0xC000000D  # = STATUS_INVALID_PARAMETER
# ntddndis.h
OID_GEN_SUPPORTED_LIST = 0x00010101
OID_GEN_HARDWARE_STATUS = 0x00010102
OID_GEN_MAXIMUM_FRAME_SIZE = 0x00010106
OID_GEN_VENDOR_ID = 0x0001010C
OID_GEN_CURRENT_PACKET_FILTER = 0x0001010E
OID_802_3_MULTICAST_LIST = 0x01010103
NDIS_PACKET_TYPE_DIRECTED = 0x1
OID_NDK_SET_STATE = 0xFC040201
OID_NDK_STATISTICS = 0xFC040202
OID_NDK_CONNECTIONS = 0xFC040203
OID_NDK_LOCAL_ENDPOINTS = 0xFC040204
WORK_ITEM_HANDLE = 0x3030_0000_0001
# The PDO NdisMGetDeviceProperty returns, and the two DEVICE_REGISTRY_PROPERTY values
# IoGetDeviceProperty answers (wdm.h): where the adapter's PCI function is (issue 25's
# pairing: function 0 and 1 of one bus and device number).
PDO_BASE = 0x9D00_0000_0001
DEVICE_PROPERTY_BUS_NUMBER, DEVICE_PROPERTY_ADDRESS = 14, 16
PCI_BUS = 3
# The interface NDIS names in NDIS_MINIPORT_INIT_PARAMETERS (IfIndex @0x20, NetLuid @0x28):
# NET_LUID {Reserved:24, NetLuidIndex:24, IfType:16}, IfType 6 = IF_TYPE_ETHERNET_CSMACD.
IF_INDEX = 7
NET_LUID = (6 << 48) | (3 << 24)
OTHER_LUID = (6 << 48) | (4 << 24)
NOTIFY_HANDLE = 0x4E4E_0000_0001
AF_UNSPEC, AF_INET, AF_INET6 = 0, 2, 23
MIB_ADD_INSTANCE, MIB_DELETE_INSTANCE, MIB_INITIAL_NOTIFICATION = 1, 2, 3
# The harness's IP stack: (LUID, address) rows of the unicast table and a neighbour table.
UNICAST_ROWS = [(NET_LUID, "192.0.2.10"), (OTHER_LUID, "198.51.100.7"), (NET_LUID, "fe80::1")]
NEIGHBOURS = {"192.0.2.20": bytes.fromhex("02000000aa14")}
# MIB_UNICASTIPADDRESS_ROW (netioapi.h, x64): SOCKADDR_INET @0 (28 bytes), InterfaceLuid @32,
# InterfaceIndex @40; 80 bytes. MIB_UNICASTIPADDRESS_TABLE: NumEntries, rows @8.
UNICAST_ROW_SIZE = 80
# NET_PNP_EVENT_CODE (ndkpi.md §6.5).
NET_EVENT_NDK_ENABLE, NET_EVENT_NDK_DISABLE = 13, 14

# The device (docs/reference/pvrdma.md): BAR1 registers, the DSR's slot addresses and caps.
BAR1_PHYS, BAR2_PHYS = 0xFEB1_0000, 0xFEB2_0000
REG_VERSION, REG_DSRLOW, REG_DSRHIGH, REG_CTL, REG_REQUEST, REG_ERR = 0x00, 0x04, 0x08, 0x0C, 0x10, 0x14
DEVICE_VERSION = 20
DSR_CMD_SLOT, DSR_RESP_SLOT, DSR_CAPS = 16, 24, 72
CMD_REQ_MAX, RESP_BIT = 184, 0x8000_0000
CMD_QUERY_PORT, CMD_CREATE_MR, CMD_CREATE_CQ, CMD_CREATE_QP, CMD_DESTROY_QP = 0, 4, 6, 9, 12
CMD_CREATE_BIND = 15
CMD_NAMES = {0: "QUERY_PORT", 1: "QUERY_PKEY", 2: "CREATE_PD", 3: "DESTROY_PD", 4: "CREATE_MR",
             5: "DESTROY_MR", 6: "CREATE_CQ", 7: "RESIZE_CQ", 8: "DESTROY_CQ", 9: "CREATE_QP",
             10: "MODIFY_QP", 11: "QUERY_QP", 12: "DESTROY_QP", 15: "CREATE_BIND", 16: "DESTROY_BIND"}


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
passed = 0
log_lines = []
# False: only failed checks are printed (tools/emu/instr.py).
verbose = True


def asm_call(fn, args):
    """mov rcx/rdx/r8/r9, imm64 (None = leave); mov rax, fn; call rax."""
    code = b""
    for prefix, a in zip([b"\x48\xB9", b"\x48\xBA", b"\x49\xB8", b"\x49\xB9"], args):
        if a is not None:
            code += prefix + struct.pack("<Q", a)
    return code + b"\x48\xB8" + struct.pack("<Q", fn) + b"\xFF\xD0"


def check(ok, what):
    global passed
    passed += 1 if ok else 0
    line = ("ok   " if ok else "FAIL ") + what
    if verbose or not ok:
        print(line)
    if not ok:
        failures.append(what)
    return ok


def header(data, off=0):
    return struct.unpack_from("<BBH", data, off)


# The PVRDMA function's memory BARs as the harness's resource list names them: BAR0 (the
# MSI-X table), BAR1 (registers), BAR2 (UAR); three MSI-X messages.
PVRDMA_BARS = [(0xFEB0_0000, 0x2000), (BAR1_PHYS, 0x2000), (BAR2_PHYS, 0x10_0000)]


class ScriptedDevice:
    """The harness's own BAR1: VERSION, the caps, every command answered with its response
    code and a fresh handle, then vector 0. No UAR, no DMA of its own: shared memory is plain
    emulator memory at identity bus addresses."""

    pci_ids = PVRDMA_PCI_IDS
    bars = PVRDMA_BARS
    messages = 3

    def __init__(self, hz):
        self.hz = hz

    def map_bar(self, phys, va, length):
        hz = self.hz
        if phys == BAR1_PHYS:
            hz.bar1 = va
            hz.se.mem_write(va + REG_VERSION, struct.pack("<I", DEVICE_VERSION))
            hz.se.add_mem_write_hook(hz.bar1_write, begin=va, end=va + length - 1)

    def alloc_shared(self, length):
        va = self.hz.alloc((length + 0xFFF) & ~0xFFF, "shared")
        return va, va

    def location(self):
        return PCI_BUS, 0, 0

    def free_shared(self, va):
        pass

    def consumer_buffer(self, size):
        va = self.hz.alloc(size, "consumer_buffer")
        return va, va

    def free_consumer_buffer(self, va):
        pass

    def run(self):
        pass

    def leaks(self):
        return []


class SimDevice:
    """A PCI function of node `node` of a pvrdma_simbridge.World behind the harness: its
    shared memory is the extension's host memory mapped into the emulator with mem_map_ptr
    (the model DMAs into the very pages the driver uses), its registers are memory hooks on
    the ranges NdisMMapIoSpace returned, and the vectors it raises are queued for the
    harness's ISR delivery. Subclasses name the function (`device_id`), its BARs and how
    they reach the model; the device ID must be one of the node's functions (what
    NdisMGetBusData answers)."""

    device_id = None
    bars = []
    messages = 3

    def __init__(self, hz, world, node=0):
        import unicorn
        self.hz, self.world, self.node = hz, world, node
        self.uc = hz.se.emu.emu_eng.emu
        self.prot = unicorn.UC_PROT_READ | unicorn.UC_PROT_WRITE
        self.blocks = {}  # guest VA -> (bus, size), the driver's shared memory
        self.consumer = {}  # the same for the consumer's buffers
        functions = {(vendor, device): f for f, vendor, device in world.functions(node)}
        self.pci_ids = (0x15AD, self.device_id)
        if self.pci_ids not in functions:
            raise ValueError(f"node {node} ({world.kind(node)}) has no function {self.device_id:#06x}")
        self.function = functions[self.pci_ids]

    def location(self):
        """(bus, device, function): node i's slot is device i of bus PCI_BUS."""
        return PCI_BUS, self.node, self.function

    def register_hooks(self, va, length, read, write):
        """Memory hooks on a mapped register range: `read(offset)` answers each 32-bit load
        (stored just before the load executes: a read-to-clear register is one model read per
        load), `write(offset, value, size)` takes each store. Unaligned or non-32-bit
        accesses are recorded in `bad_accesses` (and still handed over: the model counts
        them)."""
        hz = self.hz

        def on_read(emu, access, addr, size, value, ctx):
            off = addr - va
            word = off & ~3
            hz.se.mem_write(va + word, struct.pack("<I", read(word) & 0xFFFF_FFFF))
            if size != 4 or off & 3:
                hz.bad_accesses.append((f"read {va:#x}", off, size))
            return True

        def on_write(emu, access, addr, size, value, ctx):
            off = addr - va
            if size != 4 or off & 3:
                hz.bad_accesses.append((f"write {va:#x}", off, size))
            write(off, value & 0xFFFF_FFFF, size)
            return True
        if read is not None:
            hz.se.add_mem_read_hook(on_read, begin=va, end=va + length - 1)
        hz.se.add_mem_write_hook(on_write, begin=va, end=va + length - 1)

    def alloc_shared(self, length):
        host, bus = self.world.alloc_dma(self.node, length)
        size = (max(length, 1) + 0xFFF) & ~0xFFF
        va, _ = self.hz.se.emu.get_valid_ranges(size)
        self.uc.mem_map_ptr(va, size, self.prot, host)
        self.blocks[va] = (bus, size)
        return va, bus

    def free_shared(self, va):
        bus, size = self.blocks.pop(va)
        self.uc.mem_unmap(va, size)
        self.world.free_dma(self.node, bus)

    def bus_of(self, va):
        """The bus address of guest address `va` in shared memory or a consumer buffer (None
        outside both)."""
        for blocks in (self.blocks, self.consumer):
            for start, (bus, size) in blocks.items():
                if start <= va < start + size:
                    return bus + (va - start)
        return None

    def consumer_buffer(self, size):
        """A consumer's locked buffer the device can reach: (guest VA, bus address of its
        first page; the pages are bus-contiguous)."""
        va, bus = self.alloc_shared(size)
        self.consumer[va] = self.blocks.pop(va)
        return va, bus

    def free_consumer_buffer(self, va):
        self.blocks[va] = self.consumer.pop(va)
        self.free_shared(va)

    def take_vectors(self):
        return []

    def run(self):
        """The model's doorbell work and interrupts until idle; the vectors it raised join
        the harness's pending ones."""
        self.world.run_devices()
        self.hz.pending_vectors += self.take_vectors()

    def leaks(self):
        blocks, regions = self.world.dma_blocks(self.node)
        return [what for what, bad in [
            (f"{len(self.blocks)} mapped DMA blocks", self.blocks),
            (f"{len(self.consumer)} consumer buffers", self.consumer),
            (f"{blocks} DMA blocks, {regions} DMA regions in the model", blocks or regions)] if bad]


class ModelDevice(SimDevice):
    """The PVRDMA function (15AD:0820) of node `node`: BAR1 reads and writes and UAR stores go
    to the model's register file and doorbells."""

    device_id = PVRDMA_PCI_IDS[1]
    bars = PVRDMA_BARS

    def __init__(self, hz, world, node=0):
        super().__init__(hz, world, node)
        self.bar2 = None

    def map_bar(self, phys, va, length):
        hz = self.hz
        if phys == BAR1_PHYS:
            hz.bar1 = va
            self.register_hooks(va, length, lambda off: self.world.bar1_read(self.node, off), self.bar1_write)
        elif phys == BAR2_PHYS:
            self.bar2 = va
            self.register_hooks(va, length, None, self.uar_write)

    def bar1_write(self, off, value, size):
        hz = self.hz
        if off == REG_DSRLOW:
            hz.dsr_low = value
        elif off == REG_DSRHIGH:
            hz.dsr = (value << 32) | hz.dsr_low
        elif off == REG_REQUEST and hz.dsr:
            slot = self.world.dma_read(self.node, hz.dsr + DSR_CMD_SLOT, 8)
            req = slot and self.world.dma_read(self.node, struct.unpack("<Q", slot)[0] + 8, 4)
            if req:
                hz.requests.append(struct.unpack("<I", req)[0])
        self.world.bar1_write(self.node, off, value, size)

    def uar_write(self, off, value, size):
        self.hz.doorbells.append((off, value))
        self.world.uar_write(self.node, off, value, size)

    def take_vectors(self):
        return self.world.take_vectors(self.node)

    def leaks(self):
        objects = self.world.object_counts(self.node)
        return super().leaks() + ([f"model objects {objects}"] if any(objects) else [])


# The x64 kernel stack (KERNEL_STACK_SIZE, 24 KiB) every call runs on: speakeasy would size
# the emulated stack from the image's SizeOfStackCommit, which Windows ignores for a driver.
KERNEL_STACK_SIZE = 0x6000
kernel_stack = KERNEL_STACK_SIZE


def _kernel_stack(alloc_stack):
    def alloc(emu, _size):
        return alloc_stack(emu, kernel_stack)
    return alloc


speakeasy.binemu.BinaryEmulator.alloc_stack = _kernel_stack(speakeasy.binemu.BinaryEmulator.alloc_stack)


class Harness:
    def __init__(self, image, device="model", world=None, node=0, unicast_rows=None, neighbours=None):
        """`device`: "model" (the PVRDMA function of node `node` of `world`, a fresh one-node
        World if None), "scripted", or a SimDevice subclass (another function of the node,
        tools/emu/vmx.py's vmxnet3). `unicast_rows` / `neighbours`: this host's IP stack
        (UNICAST_ROWS and NEIGHBOURS by default), so two hosts on one World can have their own
        addresses."""
        self.unicast_rows = UNICAST_ROWS if unicast_rows is None else unicast_rows
        self.neighbours = NEIGHBOURS if neighbours is None else neighbours
        self.pe = pefile.PE(image)
        self.base_pref = self.pe.OPTIONAL_HEADER.ImageBase
        self.se = speakeasy.Speakeasy(config=emulator_config())
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
        self.work_items = set()
        self.pending_work = []
        self.pnp_events = []
        self.in_oid = False
        self.in_work_item = False
        # What the emulator is running, outermost first (`call`'s `what`), and whether DPC
        # routines a wait's stub calls are running (`deliver`): `at_dispatch` tells an import
        # whether its caller runs at DISPATCH_LEVEL (a DPC) or not.
        self.call_stack = []
        self.stub_dpcs = False
        self.notifications = {}
        self.notify_log = []
        self.mib_tables = set()
        self.address_listings = 0
        self.delay_slot = self._iat_slot("KeDelayExecutionThread")
        self.scratch = self.alloc(0x1000, "harness_scratch")
        self.doorbells = []
        self.bad_accesses = []
        self.isr_log = []
        self.stack_marks = {}
        # The adapter's registry: keyword -> the integer NdisReadConfiguration returns (a
        # keyword left out is absent).
        self.registry = {}
        self.config_open = set()
        self.config_reads = []
        self.error_log = []
        self.status_indications = []
        # (name, address, bytes as NDIS got them): what InitializeEx handed NDIS pointers to.
        self.kept = []
        # The scripted device's QUERY_PORT active MTU (IB code; pvrdma.md M41) and the MTU
        # each CREATE_BIND carried.
        self.port_mtu = 3
        self.bind_mtus = []
        # (PDO, property) of each IoGetDeviceProperty.
        self.device_properties = []
        if device == "scripted":
            self.world = None
            self.device = ScriptedDevice(self)
        else:
            if world is None:
                import pvrdma_simbridge
                # A port carrying 4096 (M41's configurable maximum): the RoCE MTU is then
                # bounded by the keywords alone.
                world = pvrdma_simbridge.World(1, port_mtu=5)
            self.world = world
            self.device = (ModelDevice if device == "model" else device)(self, world, node)
        # What NdisMGetBusData reads at configuration space offset 0: the function's IDs.
        self.pci_ids = self.device.pci_ids
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
        h("ndis", "NdisMGetBusData", 5, self.get_bus_data)
        h("ndis", "NdisMRegisterScatterGatherDma", 3, self.register_dma)
        h("ndis", "NdisMDeregisterScatterGatherDma", 1, self.deregister_dma)
        h("ndis", "NdisMMapIoSpace", 4, self.map_io)
        h("ndis", "NdisMUnmapIoSpace", 3, self.unmap_io)
        h("ndis", "NdisMRegisterInterruptEx", 4, self.register_interrupt)
        h("ndis", "NdisMDeregisterInterruptEx", 1, self.deregister_interrupt)
        h("ndis", "NdisMGetDeviceProperty", 6, self.get_device_property)
        h("ntoskrnl", "IoGetDeviceProperty", 5, self.io_device_property)
        h("ndis", "NdisMAllocateSharedMemory", 5, self.alloc_shared)
        h("ndis", "NdisMFreeSharedMemory", 5, self.free_shared)
        h("ndis", "NdisAllocateIoWorkItem", 1, self.alloc_work_item)
        h("ndis", "NdisQueueIoWorkItem", 3, self.queue_work_item)
        h("ndis", "NdisFreeIoWorkItem", 1, self.free_work_item)
        h("ndis", "NdisMNetPnPEvent", 2, self.net_pnp_event)
        h("ndis", "NdisMSendNetBufferListsComplete", 3, self.send_complete)
        h("ndis", "NdisOpenConfigurationEx", 2, self.open_config)
        h("ndis", "NdisReadConfiguration", 5, self.read_config)
        h("ndis", "NdisCloseConfiguration", 1, self.close_config)
        # Variadic: the handle, the code, the count, then up to three ULONGs.
        h("ndis", "NdisWriteErrorLogEntry", 6, self.error_log_entry)
        h("ndis", "NdisMIndicateStatusEx", 2, self.indicate_status)
        h("netio", "NotifyUnicastIpAddressChange", 5, self.notify_address_change)
        h("netio", "CancelMibChangeNotify2", 1, self.cancel_notify)
        h("netio", "GetUnicastIpAddressTable", 2, self.unicast_table)
        h("netio", "FreeMibTable", 1, self.free_mib_table)
        h("netio", "GetIpNetEntry2", 1, self.ipnet_entry)
        h("netio", "ResolveIpNetEntry2", 2, self.ipnet_entry)
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

    def send_complete(self, a):
        """NdisMSendNetBufferListsComplete, recorded (tools/emu/vmx.py checks each NBL)."""
        self.sends_completed.append(tuple(a))
        return 0

    def get_bus_data(self, a):
        """NdisMGetBusData(handle, WhichSpace, Offset, Buffer, Length): the function's
        configuration space holds its vendor and device ID at offset 0 (the rest reads 0)."""
        _handle, space, off, buf, length = a
        # ULONGs: the upper half of a register or stack slot is undefined (the debug image
        # leaves whatever the slot held there).
        space, off, length = space & 0xFFFF_FFFF, off & 0xFFFF_FFFF, length & 0xFFFF_FFFF
        if space != 0 or off + length > 256:
            return 0
        cfg = bytearray(256)
        struct.pack_into("<HH", cfg, 0, *self.pci_ids)
        self.se.mem_write(buf, bytes(cfg[off:off + length]))
        return length

    def adapter_pdo(self, handle):
        """The PDO NdisMGetDeviceProperty names for adapter `handle` and where its PCI
        function is, (bus, device, function); None for a handle that is no adapter's."""
        if handle != ADAPTER_HANDLE:
            return None
        return PDO_BASE, self.device.location()

    def get_device_property(self, a):
        """NdisMGetDeviceProperty(handle, &Pdo, &Fdo, &Next, &Resources, &Translated): the
        PDO of the adapter's PCI function (the other out-parameters, when asked, get
        distinct dummy objects)."""
        handle, ppdo, *others = a
        got = self.adapter_pdo(handle)
        check(got is not None and self.call_stack and "MiniportInitializeEx" in self.call_stack[-1],
              f"NdisMGetDeviceProperty({handle:#x}) for an adapter, in its InitializeEx")
        if ppdo:
            self.se.mem_write(ppdo, struct.pack("<Q", got[0] if got else 0))
        for i, p in enumerate(others):
            if p:
                self.se.mem_write(p, struct.pack("<Q", 0xD0B0_0000_0000 + i))
        return 0

    def io_device_property(self, a):
        """IoGetDeviceProperty(Pdo, Property, Length, Buffer, &ResultLength) for
        DevicePropertyBusNumber (14) and DevicePropertyAddress (16, PCI: device << 16 |
        function); any other property or object is refused."""
        pdo, prop, length, buf, plen = a
        prop, length = prop & 0xFFFF_FFFF, length & 0xFFFF_FFFF
        self.device_properties.append((pdo, prop))
        loc = next((got[1] for got in map(self.adapter_pdo, self.adapter_handles()) if got and got[0] == pdo), None)
        if loc is None or prop not in (DEVICE_PROPERTY_BUS_NUMBER, DEVICE_PROPERTY_ADDRESS):
            return NDIS_STATUS_INVALID_PARAMETER
        if plen:
            self.se.mem_write(plen, struct.pack("<I", 4))
        if length < 4:
            return STATUS_BUFFER_TOO_SMALL
        bus, device, function = loc
        value = bus if prop == DEVICE_PROPERTY_BUS_NUMBER else (device << 16) | function
        self.se.mem_write(buf, struct.pack("<I", value))
        return STATUS_SUCCESS

    def adapter_handles(self):
        return [ADAPTER_HANDLE]

    def deregister_dma(self, a):
        self.maps.pop("dma", None)
        return 0

    def deregister_interrupt(self, a):
        self.maps.pop("interrupt", None)
        return 0

    def register_miniport(self, a):
        _drv, _reg, _ctx, chars, phandle = a
        self.chars = self.read(chars, CHARACTERISTICS_REVISION_3_SIZE)
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
            caps = struct.unpack_from("<Q", data, 8)[0]
            extra = self.read(caps, 0x38)
            info = struct.unpack_from("<Q", extra, 0x30)[0]
            self.kept += [("NDIS_NDK_CAPABILITIES", caps, extra),
                          ("NDK_ADAPTER_INFO", info, self.read(info, 0x68))]
        if t == 0x9F and size >= 0xE0:  # general attributes: PowerManagementCapabilitiesEx
            pm = struct.unpack_from("<Q", data, 0xD8)[0]
            if pm:
                extra = self.read(pm, 0x3C)
                self.kept.append(("NDIS_PM_CAPABILITIES", pm, extra))
        self.attributes.append((handle, t, rev, size, data, extra))
        return NDIS_STATUS_SUCCESS

    # ---- the registry, the event log, status indications ----
    def open_config(self, a):
        obj, phandle = a
        t, rev, size = header(self.read(obj, 4))
        ndis_handle, flags = struct.unpack("<QI", self.read(obj + 8, 12))
        check((t, rev, size) == (0xA9, 1, 0x18) and ndis_handle == ADAPTER_HANDLE and flags == 0,
              f"NdisOpenConfigurationEx: NDIS_CONFIGURATION_OBJECT (0xA9, 1, 0x18) for the adapter handle "
              f"({t:#x}, {rev}, {size:#x}, {ndis_handle:#x}, {flags})")
        self.config_open.add(CONFIG_HANDLE)
        self.se.mem_write(phandle, struct.pack("<Q", CONFIG_HANDLE))
        return NDIS_STATUS_SUCCESS

    def read_config(self, a):
        pstatus, pparam, handle, keyword, ptype = a
        ptype &= 0xFFFFFFFF  # an enum (int): the upper half of its stack slot is undefined
        length, _maxlen, buf = struct.unpack("<HH4xQ", self.read(keyword, 16))
        name = self.read(buf, length).decode("utf-16-le")
        self.config_reads.append(name)
        check(handle in self.config_open and ptype == 0,
              f"NdisReadConfiguration({name}) on the open handle, NdisParameterInteger ({handle:#x}, {ptype})")
        if name in self.registry:
            # NDIS_CONFIGURATION_PARAMETER: ParameterType @0, the union (IntegerData) @8.
            param = self.alloc(0x18, "config_parameter")
            self.se.mem_write(param, struct.pack("<iIIIQ", 0, 0, self.registry[name] & 0xFFFFFFFF, 0, 0))
            self.se.mem_write(pparam, struct.pack("<Q", param))
            self.se.mem_write(pstatus, struct.pack("<I", NDIS_STATUS_SUCCESS))
        else:
            self.se.mem_write(pstatus, struct.pack("<I", NDIS_STATUS_FAILURE))
        return 0

    def close_config(self, a):
        check(a[0] in self.config_open, f"NdisCloseConfiguration of the open handle ({a[0]:#x})")
        self.config_open.discard(a[0])
        return 0

    def error_log_entry(self, a):
        handle, code, n, *values = a
        self.error_log.append((handle, code & 0xFFFFFFFF, [v & 0xFFFFFFFF for v in values[:n]]))
        return 0

    def indicate_status(self, a):
        handle, ind = a
        data = self.read(ind, 0x70)
        source, port, code, flags = struct.unpack_from("<QIII", data, 8)
        buf, size = struct.unpack_from("<QI", data, 0x30)
        self.status_indications.append({"handle": handle, "header": header(data), "source": source, "port": port,
                                        "code": code, "flags": flags, "buffer": self.read(buf, size) if buf else b""})
        return 0

    def link_indications(self):
        """(connected, xmit speed, rcv speed) of each NDIS_STATUS_LINK_STATE indicated, after
        checking each indication's and link state's header."""
        out = []
        for i in self.status_indications:
            check(i["header"] == (0x98, 1, 0x70) and i["handle"] == ADAPTER_HANDLE and i["source"] == ADAPTER_HANDLE
                  and i["code"] == NDIS_STATUS_LINK_STATE and len(i["buffer"]) == 0x28,
                  f"NdisMIndicateStatusEx: NDIS_STATUS_INDICATION (0x98, 1, 0x70) from the adapter, "
                  f"NDIS_STATUS_LINK_STATE, a 0x28-byte NDIS_LINK_STATE ({i['header']}, {i['code']:#x}, {len(i['buffer'])})")
            b = i["buffer"].ljust(0x28, b"\0")
            t, rev, size = header(b)
            state, duplex, xmit, rcv = struct.unpack_from("<II4xQQ", b, 4)
            check((t, rev, size, duplex) == (0x80, 1, 0x28, 2),
                  f"NDIS_LINK_STATE header (0x80, 1, 0x28), full duplex ({t:#x}, {rev}, {size:#x}, {duplex})")
            out.append((state, xmit, rcv))
        self.status_indications = []
        return out

    def bound_mtus(self):
        """The MTU of each CREATE_BIND: as the scripted device recorded them, or as the model's
        GID table holds them now."""
        if self.world is None:
            return list(self.bind_mtus)
        return [mtu for _i, _gid, _ty, mtu in self.world.gids(self.device.node)]

    def poison_stack(self):
        """Overwrites the stack every call ran on below its entry (speakeasy starts each call 40
        bytes below the stack base): what a routine left on its stack is gone, as it is on
        Windows once the frame is reused."""
        base = self.se.emu.stack_base
        lo = base - kernel_stack
        self.se.mem_write(lo, b"\xDB" * (base - 0x30 - lo))
        return lo, base

    def check_kept(self, what):
        """Every structure InitializeEx handed NDIS a pointer to is off the stack and reads
        as it did when NDIS got it."""
        lo, base = self.poison_stack()
        for name, addr, data in self.kept:
            check(not lo <= addr < base, f"{what}: {name} at {addr:#x} is not on the kernel stack")
            check(self.read(addr, len(data)) == data, f"{what}: {name} reads as NDIS got it after the stack was poisoned")

    def alloc_work_item(self, a):
        check(a[0] == ADAPTER_HANDLE, f"NdisAllocateIoWorkItem for the adapter handle ({a[0]:#x})")
        handle = WORK_ITEM_HANDLE + len(self.work_items)
        self.work_items.add(handle)
        return handle

    def queue_work_item(self, a):
        handle, routine, ctx = a
        check(handle in self.work_items, f"NdisQueueIoWorkItem({handle:#x}) queues an allocated item")
        check(all(w[0] != handle for w in self.pending_work), "the work item is not queued twice")
        check(self.is_cfg_target(routine), "the work item routine is a CFG target")
        self.pending_work.append((handle, routine, ctx))
        return 0

    def free_work_item(self, a):
        check(a[0] in self.work_items and all(w[0] != a[0] for w in self.pending_work),
              f"NdisFreeIoWorkItem({a[0]:#x}) frees an allocated, unqueued item")
        self.work_items.discard(a[0])
        return 0

    def net_pnp_event(self, a):
        # NET_PNP_EVENT_NOTIFICATION REVISION_2 (NDIS 6.50+; ndkpi.md §6.5, x64): Header,
        # PortNumber @4, NET_PNP_EVENT @8 {NetEvent, Buffer @0x10, BufferLength @0x18},
        # Flags @0xA0, SwitchId @0xA4, VPortId @0xA8; 0xAC.
        handle, n = a
        d = self.read(n, 0xAC)
        event = struct.unpack_from("<i", d, 8)[0]
        check(handle == ADAPTER_HANDLE, "NdisMNetPnPEvent for the adapter handle")
        check(header(d) == (0x80, 2, 0xAC), f"NET_PNP_EVENT_NOTIFICATION header {header(d)} = (0x80, 2, 0xAC)")
        port, buf, buflen, flags = (struct.unpack_from("<I", d, 4)[0], struct.unpack_from("<Q", d, 0x10)[0],
                                    struct.unpack_from("<I", d, 0x18)[0], struct.unpack_from("<I", d, 0xA0)[0])
        check((port, buf, buflen, flags) == (0, 0, 0, 0), f"PortNumber, Buffer, BufferLength, Flags all 0 ({port}, {buf:#x}, {buflen}, {flags:#x})")
        switch, vport = struct.unpack_from("<II", d, 0xA4)
        check((switch, vport) == (0, 0), f"the default switch and vPort ({switch}, {vport})")
        check(not self.in_oid and self.in_work_item, f"NdisMNetPnPEvent({event}) from the work item, not from an OID handler")
        self.pnp_events.append(event)
        return NDIS_STATUS_SUCCESS

    def run_work_items(self):
        """Runs queued I/O work items (PASSIVE_LEVEL, a worker thread), with device traffic."""
        while self.pending_work:
            handle, routine, ctx = self.pending_work.pop(0)
            self.in_work_item = True
            self.call(routine, [ctx, handle], "NDIS_IO_WORKITEM_ROUTINE")
            self.in_work_item = False
            self.pump()

    # ---- netio.sys: the harness's IP stack ----
    def notify_address_change(self, a):
        family, callback, ctx, initial, phandle = a
        check(family == AF_UNSPEC, f"NotifyUnicastIpAddressChange(AF_UNSPEC) ({family})")
        check(self.is_cfg_target(callback), "the address-change callback is a CFG target")
        check(initial & 0xFF == 0, "no initial notification requested (the addresses are listed)")
        check(not self.notifications, "one address-change registration at a time")
        self.notifications[NOTIFY_HANDLE] = (callback, ctx)
        self.notify_log.append("register")
        self.se.mem_write(phandle, struct.pack("<Q", NOTIFY_HANDLE))
        return STATUS_SUCCESS

    def cancel_notify(self, a):
        check(a[0] in self.notifications, f"CancelMibChangeNotify2({a[0]:#x}) cancels a registration")
        self.notifications.pop(a[0], None)
        self.notify_log.append("cancel")
        return STATUS_SUCCESS

    @staticmethod
    def sockaddr_inet(text):
        ip = ipaddress.ip_address(text)
        if ip.version == 4:
            return struct.pack("<HH", AF_INET, 0) + ip.packed + b"\0" * 20
        return struct.pack("<HHI", AF_INET6, 0, 0) + ip.packed + b"\0" * 4

    def unicast_row(self, luid, text):
        row = self.sockaddr_inet(text).ljust(32, b"\0") + struct.pack("<QI", luid, IF_INDEX if luid == NET_LUID else 9)
        return row.ljust(UNICAST_ROW_SIZE, b"\0")

    def unicast_table(self, a):
        family, ptable = a
        check(family == AF_UNSPEC, f"GetUnicastIpAddressTable(AF_UNSPEC) ({family})")
        rows = b"".join(self.unicast_row(luid, ip) for luid, ip in self.unicast_rows)
        table = self.alloc(8 + len(rows), "mib_table")
        self.se.mem_write(table, struct.pack("<II", len(self.unicast_rows), 0) + rows)
        self.mib_tables.add(table)
        self.address_listings += 1
        self.se.mem_write(ptable, struct.pack("<Q", table))
        return STATUS_SUCCESS

    def free_mib_table(self, a):
        check(a[0] in self.mib_tables, f"FreeMibTable({a[0]:#x}) frees a table netio returned")
        self.mib_tables.discard(a[0])
        return 0

    def ipnet_entry(self, a):
        # MIB_IPNET_ROW2: SOCKADDR_INET @0, InterfaceIndex @28, InterfaceLuid @32,
        # PhysicalAddress @40, PhysicalAddressLength @72, State @76; 88 bytes.
        row = self.read(a[0], 88)
        family = struct.unpack_from("<H", row)[0]
        ip = str(ipaddress.ip_address(row[4:8] if family == AF_INET else row[8:24]))
        mac = self.neighbours.get(ip)
        if mac is None:
            return 0xC0000225  # STATUS_NOT_FOUND
        self.se.mem_write(a[0] + 40, mac.ljust(32, b"\0") + struct.pack("<Ii", 6, 5))  # NlnsReachable
        return STATUS_SUCCESS

    def address_change(self, kind, luid, text):
        """Calls the registered callback as netio does (PASSIVE_LEVEL, a worker thread)."""
        for callback, ctx in list(self.notifications.values()):
            row = 0
            if text is not None:
                row = self.alloc(UNICAST_ROW_SIZE, "mib_row")
                self.se.mem_write(row, self.unicast_row(luid, text))
            self.call(callback, [ctx, row, kind], f"address-change callback ({kind}, {text})")

    def register_dma(self, a):
        handle, desc, phandle = a
        self.dma_desc = self.read(desc, 0x30)
        self.maps["dma"] = handle
        self.se.mem_write(phandle, struct.pack("<Q", DMA_HANDLE))
        return NDIS_STATUS_SUCCESS

    def map_io(self, a):
        pva, handle, phys, length = a
        va = self.alloc(length, "bar_%x" % phys)
        self.maps[va] = (phys, length)
        self.device.map_bar(phys, va, length)
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
        va, bus = self.device.alloc_shared(length)
        self.shared[va] = length
        self.se.mem_write(pva, struct.pack("<Q", va))
        self.se.mem_write(ppa, struct.pack("<Q", bus))
        return 0

    def free_shared(self, a):
        _h, length, _c, va, _pa = a
        if check(self.shared.pop(va, None) == length, f"NdisMFreeSharedMemory(0x{va:x}, {length}) frees a live block"):
            self.device.free_shared(va)
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

    def at_dispatch(self):
        """True while a DPC routine runs (from `pump`, or from a wait's stub): the IRQL a
        routine called now runs at is DISPATCH_LEVEL (the harness runs no other code there)."""
        return self.stub_dpcs or bool(self.call_stack) and self.call_stack[-1] == "DPC"

    def delay(self, a):
        # The DPCs a previous stub called (if any) have returned: the stub waits again.
        self.stub_dpcs = False
        interval = struct.unpack("<q", self.read(a[2], 8))[0]
        self.clock += -interval if interval < 0 else 10
        self.device.run()
        self.deliver()
        return 0

    def deliver(self):
        """Runs what is pending (device interrupts, then queued DPCs) before the wait
        returns, as the kernel would while the thread sleeps: a stub calls each routine, then
        KeDelayExecutionThread again (which delivers what those queued), then jumps back to
        the waiting code. Only from a KeDelayExecutionThread hook."""
        self.resume_through(self.deliver_calls(), redeliver=True)

    def deliver_calls(self):
        """The calls `deliver`'s stub makes: the pending ISRs, else the queued DPCs."""
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
            self.stub_dpcs = True
        return calls

    def resume_through(self, calls, redeliver=False, result=0, unsupported=False):
        """From an import's hook: the import returns through a stub that makes `calls` (then,
        with `redeliver`, waits again: KeDelayExecutionThread delivers what they queued) and
        returns `result` to its caller. Nothing happens without calls. `unsupported`: an
        import speakeasy has no handler of its own for, whose hook's return speakeasy always
        performs (with the stub as the return address) rather than skipping it when the
        hook moved the program counter."""
        if not calls:
            return
        zero = self.scratch
        emu = self.se
        rsp = emu.reg_read("rsp")
        ret = self.q(rsp)
        code = b"\x48\x83\xEC\x40" + calls  # sub rsp, 0x40 (rsp is 16-aligned here)
        if redeliver:
            code += b"\x31\xC9\x31\xD2\x49\xB8" + struct.pack("<Q", zero)  # KernelMode, FALSE, &0
            code += b"\x48\xB8" + struct.pack("<Q", self.delay_slot) + b"\x48\x8B\x00\xFF\xD0"
        code += b"\x48\x83\xC4\x40"  # add rsp, 0x40
        code += b"\xB8" + struct.pack("<I", result & 0xFFFF_FFFF)  # mov eax, result
        code += b"\x48\xB9" + struct.pack("<Q", ret) + b"\xFF\xE1"  # jmp to the caller
        stub = self.alloc(0x1000, "harness_deliver")
        emu.mem_write(stub, code)
        if unsupported:
            # The emulator returns from the hooked call to the stub.
            emu.mem_write(rsp, struct.pack("<Q", stub))
            return
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
            handle = len(self.requests)
            struct.pack_into("<I", resp, 16, handle)
            if code == CMD_QUERY_PORT:  # pvrdma_port_attr (pvrdma.md M41): ACTIVE, 1X EDR
                struct.pack_into("<IIII", resp, 16, 4, self.port_mtu, self.port_mtu, 16)
                struct.pack_into("<BBB", resp, 16 + 43, 1, 32, 5)
            elif code == CMD_CREATE_BIND:
                self.bind_mtus.append(struct.unpack_from("<I", req, 16)[0])
            # The data each create answers with (pvrdma.md §"Layouts"), granted as asked.
            if code == CMD_CREATE_CQ:
                struct.pack_into("<I", resp, 20, struct.unpack_from("<I", req, 28)[0])  # cqe
            elif code == CMD_CREATE_MR:
                struct.pack_into("<II", resp, 20, 0x100 + handle, 0x200 + handle)  # lkey, rkey
            elif code == CMD_CREATE_QP:  # v20 response: qpn, qp_handle, the caps asked for
                struct.pack_into("<II", resp, 16, 0x10 + handle, handle)
                resp[24:44] = req[40:60]
            elif code == CMD_DESTROY_QP:
                struct.pack_into("<I", resp, 16, 0)  # events_reported
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
        """Delivers pending device interrupts and queued DPCs between top-level calls, running
        the device model in between until nothing is left on either side."""
        while True:
            self.device.run()
            if not (self.pending_vectors or self.pending_dpcs):
                break
            if self.pending_vectors and self.interrupt_chars is not None:
                isr = struct.unpack_from("<Q", self.interrupt_chars, 0x30)[0]
                vectors, self.pending_vectors = self.pending_vectors, []
                for v in vectors:
                    ours = self.call(isr, [self.interrupt_context, v, self.scratch + 0x100, self.scratch + 0x108], f"MSI-X ISR {v}")
                    self.isr_log.append((v, None if ours is None else ours & 0xFF))
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

    def call_stack_args(self, addr, args, what):
        """A call with more than four arguments. speakeasy 1.5.11 writes the fifth and later
        ones below the top of the 0x20-byte home space instead of above it, so four zero
        slots in front of them put them at rsp+0x28, where the x64 convention has them (a
        stub of ours cannot call imports: speakeasy resolves those by the run's module)."""
        return self.call(addr, list(args[:4]) + [0] * 4 + list(args[4:]), what)

    def call(self, addr, args, what):
        before = len(self.se.emu.runs)
        if measure_stack:
            return self._measured_call(addr, args, what)
        self.call_stack.append(what)
        try:
            self.se.call(addr, args)
        finally:
            self.call_stack.pop()
        runs = self.se.emu.runs[before:]
        run = runs[-1] if runs else None
        # A run that stopped without finishing (no return value collected) did not complete.
        ok = run is not None and not run.error and run.ret_val is not None
        check(ok, f"{what} ran to completion"
              + ("" if ok else f" ({run.error or 'stopped before returning' if run else 'no run'})"))
        # Every routine called here returns an NTSTATUS / NDIS_STATUS (32 bits) or nothing:
        # the upper half of rax is undefined.
        return (run.ret_val & 0xFFFF_FFFF if run and run.ret_val is not None else None)


    def _measured_call(self, addr, args, what):
        """`call`, with the stack below its top page filled with a sentinel before and
        scanned after: the deepest byte written (16-byte granularity) is the call's
        high-water mark, kept per routine in `stack_marks`."""
        global measure_stack
        base = self.se.emu.stack_base
        lo, top = base - kernel_stack, base - 0x1000
        self.se.mem_write(lo, b"\xCC" * (top - lo))
        measure_stack = False
        try:
            st = self.call(addr, args, what)
        finally:
            measure_stack = True
        data = self.read(lo, top - lo)
        first = next((i for i in range(0, len(data), 16) if data[i:i + 16] != b"\xCC" * 16), len(data))
        key = what.split("(")[0].split(":")[-1].strip()
        self.stack_marks[key] = max(self.stack_marks.get(key, 0), base - (lo + first))
        return st


def emulator_config():
    """speakeasy's default profile without its 60-second wall-clock limit per call: on a
    loaded machine a debug image's InitializeEx took longer and was stopped part-way, silently
    (no error, no return value). max_api_count still bounds a runaway call, at 200,000
    rather than speakeasy's 10,000: a debug InitializeEx now makes more than 10,000 import
    calls (the connection engine's table grew from 256 to 2,048 CM slots with issue 22;
    memset, an import in these images, is the most called: 10,391 calls over the release
    image's whole run, against 1,150 spin-lock acquisitions)."""
    path = os.path.join(os.path.dirname(speakeasy.__file__), "configs", "default.json")
    with open(path) as f:
        config = json.load(f)
    config["timeout"] = 0
    config["max_api_count"] = 200_000
    return config


# Set (--stack-report): every top-level call measures its stack high-water mark.
measure_stack = False


def stack_report(harnesses):
    marks = {}
    for hz in harnesses:
        for k, v in hz.stack_marks.items():
            marks[k] = max(marks.get(k, 0), v)
    print(f"stack high-water marks (bytes of the {kernel_stack:#x}-byte stack; the top page always counts):")
    for k, v in sorted(marks.items(), key=lambda kv: -kv[1])[:12]:
        print(f"  {v:6d}  {k}")


def init_params(hz, device=None, if_index=IF_INDEX, luid=NET_LUID):
    """NDIS_MINIPORT_INIT_PARAMETERS for MiniportInitializeEx: the function's memory BARs
    (PVRDMA: BAR0 the MSI-X table, BAR1 registers, BAR2 UAR) and MSI-X messages (three) as
    the device names them (CM_PARTIAL_RESOURCE_LIST, wdm.h pack(4): descriptors of 0x14
    bytes at 8), IfIndex and NetLuid. `device`: the harness's own by default."""
    device = device or hz.device
    bars = device.bars
    descs = b""
    for phys, length in bars:
        descs += struct.pack("<BBHqII", 3, 1, 0, phys, length, 0)  # CmResourceTypeMemory
    for vector in range(device.messages):
        # CmResourceTypeInterrupt, CM_RESOURCE_INTERRUPT_MESSAGE | LATCHED; Translated
        # {Level, Vector, Affinity}.
        descs += struct.pack("<BBHIIQ", 2, 1, 0x3, 0, 0x60 + vector, 1)
    count = len(bars) + device.messages
    rlist = hz.alloc(8 + len(descs), "resources")
    hz.se.mem_write(rlist, struct.pack("<HHI", 1, 1, count) + descs)
    params = hz.alloc(0x40, "init_params")
    hz.se.mem_write(params, struct.pack("<BBHIQQQIIQ", 0x81, 1, 0x40, 0, rlist, 0, 0, if_index, 0, luid)
                    + b"\0" * 0x10)
    return params


def miniport_handlers(chars):
    """The handler pointers of the characteristics DriverEntry registered, by name."""
    return {n: struct.unpack_from("<Q", chars, HANDLERS_OFFSET + 8 * i)[0] for i, n in enumerate(MINIPORT_HANDLERS)}


def bring_up(hz):
    """DriverEntry, SetOptions, InitializeEx, OpenNDKAdapter(2.1), checking only that each
    succeeds (main() checks the details): returns (handlers, MiniportAdapterContext,
    CloseNDKAdapter handler, NDK_ADAPTER)."""
    hz.se.run_module(hz.module, all_entrypoints=False)
    check(hz.chars is not None and not hz.se.emu.runs[0].error, "DriverEntry registered the miniport")
    handlers = miniport_handlers(hz.chars)
    st = hz.call(handlers["SetOptionsHandler"], [DRIVER_HANDLE, 0], "MiniportSetOptions")
    check(st == NDIS_STATUS_SUCCESS, f"MiniportSetOptions: SUCCESS ({st:#x})")
    st = hz.call(handlers["InitializeHandlerEx"], [ADAPTER_HANDLE, 0, init_params(hz)], "MiniportInitializeEx")
    check(st == NDIS_STATUS_SUCCESS, f"MiniportInitializeEx: SUCCESS ({st:#x})")
    hz.pump()
    registration = next(a[4] for a in hz.attributes if a[1] == 0x9E)
    ctx = struct.unpack_from("<Q", registration, 8)[0]
    open_ndk, close_ndk = struct.unpack_from("<QQ", hz.ndk_chars, 8)
    params, out = hz.alloc(12, "open_params"), hz.alloc(8, "adapter_out")
    hz.se.mem_write(params, struct.pack("<HHII", 2, 1, 0, 0))
    st = hz.call(open_ndk, [ctx, params, out], "OpenNDKAdapter(2.1)")
    check(st == NDIS_STATUS_SUCCESS, f"OpenNDKAdapter(2.1): SUCCESS ({st:#x})")
    return handlers, ctx, close_ndk, hz.q(out)


def shut_down(hz, handlers, ctx, close_ndk, adapter):
    """CloseNDKAdapter, Halt, Unload, and the leak checks: no pool or shared-memory block,
    nothing left on the device side, every indirect call a CFG target."""
    hz.call(close_ndk, [ctx, adapter], "CloseNDKAdapter")
    hz.pump()
    hz.call(handlers["HaltHandlerEx"], [ctx, 0], "MiniportHaltEx")
    hz.call(handlers["UnloadHandler"], [0], "MiniportDriverUnload")
    leaks = hz.device.leaks()
    check(not hz.pool and not hz.shared and not leaks,
          f"nothing left: pool {len(hz.pool)}, shared {len(hz.shared)}, {leaks}")
    check(not hz.cfg_violations, f"{hz.indirect_calls} indirect calls, all to CFG targets ({hz.cfg_violations})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("image")
    ap.add_argument("--device", choices=["model", "scripted"], default="scripted")
    ap.add_argument("--kernel-stack", type=lambda v: int(v, 0), default=KERNEL_STACK_SIZE,
                    help="the emulated stack's size (default the x64 kernel stack, 0x6000)")
    ap.add_argument("--stack-report", action="store_true",
                    help="measure and print each top-level call's stack high-water mark")
    args = ap.parse_args()
    global kernel_stack, measure_stack
    kernel_stack = args.kernel_stack
    measure_stack = args.stack_report
    if kernel_stack != KERNEL_STACK_SIZE:
        print(f"WARNING: the emulated stack is {kernel_stack:#x} bytes, not the x64 kernel stack's "
              f"{KERNEL_STACK_SIZE:#x}: a call needing more than {KERNEL_STACK_SIZE:#x} would overflow on Windows")
    hz = Harness(args.image, device=args.device)
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
    check(header(c) == (0x8A, 3, CHARACTERISTICS_REVISION_3_SIZE),
          f"characteristics header {header(c)} = (NDIS_OBJECT_TYPE_MINIPORT_DRIVER_CHARACTERISTICS, REVISION_3, 0xA0)")
    check(c[4:6] == bytes([6, 85]), f"NDIS version {c[4]}.{c[5]} = 6.85 (Windows Server 2022)")
    handlers = miniport_handlers(c)
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

    params = init_params(hz)
    st = hz.call(handlers["InitializeHandlerEx"], [ADAPTER_HANDLE, 0, params], "MiniportInitializeEx")
    hz.check_kept("after InitializeEx")
    check(hz.config_reads == KEYWORDS and not hz.config_open,
          f"InitializeEx read {KEYWORDS} and closed the configuration ({hz.config_reads})")
    check(hz.error_log == [], f"no keyword set, nothing logged ({hz.error_log})")
    check(hz.bound_mtus() == [1024, 1024], f"both CREATE_BINDs carry the default RoCE MTU 1024 ({hz.bound_mtus()})")
    reg = [a for a in hz.attributes if a[1] == 0x9E]
    if check(len(reg) == 1 and hz.attributes[0] is reg[0], "registration attributes set once, first"):
        _h, t, rev, size, data, _ = reg[0]
        check(_h == ADAPTER_HANDLE and (t, rev, size) == (0x9E, 2, 0x1C),
              f"registration attributes header ({t:#x}, {rev}, {size:#x}) = (0x9E, 2, 0x1C)")
        ctx, flags, hang, iface = struct.unpack_from("<QIIi", data, 8)
        check(ctx != 0, "MiniportAdapterContext set")
        check(flags == 0x9, f"AttributeFlags HARDWARE_DEVICE | BUS_MASTER ({flags:#x})")
        check((hang, iface) == (0, 5), f"CheckForHangTimeInSeconds 0, InterfaceType NdisInterfacePci ({hang}, {iface})")
    if check(st == NDIS_STATUS_SUCCESS, f"InitializeEx returned NDIS_STATUS_SUCCESS ({st:#x})"):
        types = [a[1] for a in hz.attributes]
        check(types == [0x9E, 0x9F, 0xB3], f"attributes registration, general, NDK in order ({[hex(t) for t in types]})")
        for _h, t, rev, size, data, extra in hz.attributes:
            if t == 0x9F:
                check((rev, size) == (2, 0xE0), f"general attributes REVISION_2, size 0xE0 ({rev}, {size:#x})")
                check_general(data, extra, 1500, (1, LINK_25G))
            if t == 0xB3:
                check((rev, size) == (1, 0x10), f"NDK attributes REVISION_1, size 0x10 ({rev}, {size:#x})")
                check(data[4] == 1, "NDK Enabled")
                check(header(extra) == (0x80, 1, 0x38), f"NDK capabilities header {header(extra)} = (0x80, 1, 0x38)")
                check(struct.unpack_from("<Q", extra, 0x28)[0] == 0, "MissingCounterMask 0 (every counter kept)")
        general = next(a[4] for a in hz.attributes if a[1] == 0x9F)
        full_run(hz, handlers, reg[0][4] if reg else b"", general)


        restarts(hz, handlers)

    # MiniportDriverUnload
    hz.call(handlers["UnloadHandler"], [0], "MiniportDriverUnload")
    check(hz.deregistered == [DRIVER_HANDLE], "Unload deregistered the driver handle once")
    return finish(hz)


def u32(hz, addr):
    return struct.unpack("<I", hz.read(addr, 4))[0]


def oid_call(hz, handlers, ctx, rtype, oid_value, payload, length, handler="OidRequestHandler"):
    """One OID request (NDIS_OID_REQUEST x64: RequestType @4, DATA @0x20: Oid, the buffer,
    its length, BytesWrittenOrRead @0x34, BytesNeeded @0x38): (status, done, needed, bytes)."""
    buf = hz.alloc(max(length, 1), "oid_buffer")
    hz.se.mem_write(buf, payload.ljust(length, b"\0")[:length])
    req = hz.alloc(0x100, "oid_request")
    hz.se.mem_write(req, struct.pack("<BBHiII", 0x96, 1, 0xF0, rtype, 0, 0) + b"\0" * 0xF0)
    hz.se.mem_write(req + 0x20, struct.pack("<IIQII", oid_value, 0, buf, length, 0))
    hz.in_oid = True
    st = hz.call(handlers[handler], [ctx, req], f"{handler}({oid_value:#x})")
    hz.in_oid = False
    done, needed = struct.unpack("<II", hz.read(req + 0x34, 8))
    return st, done, needed, hz.read(buf, max(length, 1))


def restart(hz, handlers, registry, what):
    """InitializeEx with `registry` as the adapter's keywords (NDIS restarts an adapter when
    an advanced property changes): returns (status, MiniportAdapterContext, NDK attributes'
    Enabled) after the checks every start makes."""
    hz.registry = dict(registry)
    hz.attributes, hz.config_reads, hz.error_log, hz.kept, hz.bind_mtus = [], [], [], [], []
    st = hz.call(handlers["InitializeHandlerEx"], [ADAPTER_HANDLE, 0, init_params(hz)], f"MiniportInitializeEx ({what})")
    hz.check_kept(f"after InitializeEx ({what})")
    check(st == NDIS_STATUS_SUCCESS, f"{what}: InitializeEx SUCCESS, whatever the keywords hold ({st:#x})")
    check(hz.config_reads == KEYWORDS and not hz.config_open, f"{what}: the four keywords and Paired read, the configuration closed")
    hz.pump()
    regs = [a for a in hz.attributes if a[1] == 0x9E]
    ndk = [a for a in hz.attributes if a[1] == 0xB3]
    if not check(len(regs) == 1 and len(ndk) == 1, f"{what}: registration and NDK attributes set"):
        return st, 0, None
    return st, struct.unpack_from("<Q", regs[0][4], 8)[0], ndk[0][4][4]


def restarts(hz, handlers):
    """The keywords across restarts (Halt, then InitializeEx on the same device, as Windows
    does for an advanced-property change) and OID_NDK_SET_STATE: *NetworkDirect 0 and 1,
    values out of range (the INF default with an event-log entry each), a technology the
    device does not carry (NDK off), the RoCE MTU bounded by the port (event) or carried
    into every CREATE_BIND (scripted port 4096)."""
    open_ndk, _ = struct.unpack_from("<QQ", hz.ndk_chars, 8)
    log = lambda kw, value, used: (ADAPTER_HANDLE, NDIS_ERROR_CODE_UNSUPPORTED_CONFIGURATION, [kw, value, used])  # noqa: E731

    def set_state(ctx, value):
        st, done, needed, _ = oid_call(hz, handlers, ctx, 1, OID_NDK_SET_STATE, bytes([value]), 1)
        return st, done, needed

    def open_status(ctx):
        params = hz.alloc(12, "open_params")
        hz.se.mem_write(params, struct.pack("<HHII", 2, 1, 0, 0))
        out = hz.alloc(8, "adapter_out")
        st = hz.call(open_ndk, [ctx, params, out], "OpenNDKAdapter(2.1)")
        return st, hz.q(out)

    def roce_mtu(ctx):
        st, done, _, out = oid_call(hz, handlers, ctx, 0, OID_PVRDMA_ROCE_MTU, b"", 4)
        return struct.unpack("<I", out)[0] if (st, done) == (NDIS_STATUS_SUCCESS, 4) else None

    def halt(ctx, what):
        hz.pump()
        hz.call(handlers["HaltHandlerEx"], [ctx, 0], f"MiniportHaltEx ({what})")
        check(not hz.maps, f"{what}: Halt undid everything")

    close_ndk = struct.unpack_from("<Q", hz.ndk_chars, 0x10)[0]
    events_before = len(hz.pnp_events)

    # *NetworkDirect = 0 (Disable-NetAdapterRdma), the other three out of range.
    what = "*NetworkDirect 0, the rest out of range"
    st, ctx, enabled = restart(hz, handlers, {"*NetworkDirect": 0, "*NetworkDirectTechnology": 9,
                                              "*NetworkDirectRoCEFrameSize": 1500, "*JumboPacket": 100}, what)
    check(enabled == 0, f"{what}: NDK attributes Enabled = FALSE ({enabled})")
    check(hz.error_log == [log(2, 9, 4), log(3, 1500, 1024), log(4, 100, 1514)],
          f"{what}: one event-log entry per value out of range, with the value used ({hz.error_log})")
    check(hz.bound_mtus() == [1024, 1024], f"{what}: CREATE_BIND carries 1024 ({hz.bound_mtus()})")
    check(set_state(ctx, 1) == (NDIS_STATUS_NOT_SUPPORTED, 0, 1),
          f"{what}: OID_NDK_SET_STATE(TRUE): NOT_SUPPORTED (NDK cannot be enabled)")
    check(open_status(ctx)[0] == NDIS_STATUS_ADAPTER_NOT_READY, f"{what}: OpenNDKAdapter: ADAPTER_NOT_READY")
    hz.run_work_items()
    check(len(hz.pnp_events) == events_before, "no PnP event")
    halt(ctx, what)

    # *NetworkDirect = 1, RoCE frame size 2048 and jumbo frames, on a port carrying 4096.
    what = "*NetworkDirect 1, 2048 on a 4096 port"
    hz.port_mtu = 5
    st, ctx, enabled = restart(hz, handlers, {"*NetworkDirect": 1, "*NetworkDirectRoCEFrameSize": 2048,
                                              "*JumboPacket": 9014}, what)
    check(enabled == 1, f"{what}: NDK attributes Enabled = TRUE ({enabled})")
    check(hz.error_log == [], f"{what}: nothing logged ({hz.error_log})")
    check(hz.bound_mtus() == [2048, 2048], f"{what}: each CREATE_BIND carries 2048 ({hz.bound_mtus()})")
    check(roce_mtu(ctx) == 2048, f"{what}: OID_PVRDMA_ROCE_MTU answers 2048")
    general = next(a for a in hz.attributes if a[1] == 0x9F)
    check(struct.unpack_from("<I", general[4], 0x10)[0] == 9000, f"{what}: MtuSize 9000")
    st, adapter = open_status(ctx)
    check(st == NDIS_STATUS_SUCCESS and adapter, f"{what}: OpenNDKAdapter: SUCCESS ({st:#x})")
    hz.call(close_ndk, [ctx, adapter], "CloseNDKAdapter")
    check(set_state(ctx, 0) == (NDIS_STATUS_SUCCESS, 1, 1), f"{what}: OID_NDK_SET_STATE(FALSE): SUCCESS")
    hz.run_work_items()
    check(open_status(ctx)[0] == NDIS_STATUS_ADAPTER_NOT_READY, f"{what}: disabled: OpenNDKAdapter ADAPTER_NOT_READY")
    check(set_state(ctx, 1) == (NDIS_STATUS_SUCCESS, 1, 1), f"{what}: OID_NDK_SET_STATE(TRUE): SUCCESS")
    hz.run_work_items()
    check(hz.pnp_events[events_before:] == [NET_EVENT_NDK_DISABLE, NET_EVENT_NDK_ENABLE],
          f"{what}: NetEventNDKDisable, then NetEventNDKEnable ({hz.pnp_events[events_before:]})")
    halt(ctx, what)

    # 4096 asked; the scripted port carries 1024, the model's 4096 with *JumboPacket 4088
    # (Ethernet MTU 4074 carries 2048): the operational MTU is logged.
    if hz.world is None:
        what, keys, mtu = "4096 on a 1024 port", {"*NetworkDirectRoCEFrameSize": 4096, "*JumboPacket": 9014}, 1024
        hz.port_mtu = 3
    else:
        what, keys, mtu = "4096 with *JumboPacket 4088", {"*NetworkDirectRoCEFrameSize": 4096, "*JumboPacket": 4088}, 2048
    st, ctx, enabled = restart(hz, handlers, keys, what)
    check(enabled == 1 and hz.error_log == [log(3, 4096, mtu)],
          f"{what}: enabled; the operational RoCE MTU {mtu} logged ({enabled}, {hz.error_log})")
    check(hz.bound_mtus() == [mtu, mtu] and roce_mtu(ctx) == mtu, f"{what}: CREATE_BIND and the OID say {mtu}")
    halt(ctx, what)

    # A transport the device does not carry: NDK off, logged.
    what = "*NetworkDirectTechnology 1 (iWARP)"
    st, ctx, enabled = restart(hz, handlers, {"*NetworkDirectTechnology": 1}, what)
    check(enabled == 0 and hz.error_log == [log(2, 1, 0)],
          f"{what}: NDK attributes Enabled = FALSE, logged ({enabled}, {hz.error_log})")
    check(set_state(ctx, 1)[0] == NDIS_STATUS_NOT_SUPPORTED, f"{what}: OID_NDK_SET_STATE(TRUE): NOT_SUPPORTED")
    halt(ctx, what)
    hz.registry = {}


def check_general(data, pm, mtu, link):
    """NDIS_MINIPORT_ADAPTER_GENERAL_ATTRIBUTES: MtuSize @0x10, the four link speeds @0x18,
    MediaConnectState @0x38; PowerManagementCapabilitiesEx @0xD8 (mandatory from NDIS 6.20:
    NDIS_PM_CAPABILITIES REVISION_2, 0x3C bytes, no wake-up)."""
    got_mtu = struct.unpack_from("<I", data, 0x10)[0]
    max_x, x, max_r, r = struct.unpack_from("<QQQQ", data, 0x18)
    state = struct.unpack_from("<I", data, 0x38)[0]
    check(got_mtu == mtu, f"general attributes MtuSize {mtu} ({got_mtu})")
    connected, speed = link
    check((state, x, r) == (connected, speed, speed) and max_x == max_r == LINK_25G,
          f"general attributes: MediaConnectState {connected}, link speed {speed}, maximum {LINK_25G} "
          f"(QUERY_PORT 1X EDR) ({state}, {x}, {r}, {max_x})")
    check(pm is not None and header(pm) == (0x80, 2, 0x3C) and pm[4:] == bytes(0x38),
          f"PowerManagementCapabilitiesEx: NDIS_PM_CAPABILITIES (0x80, 2, 0x3C), no wake-up "
          f"({header(pm) if pm else None})")


def full_run(hz, handlers, registration, general):
    """The real core: OIDs, the NDK adapter for each version, a few NDK calls, Halt."""
    ctx = struct.unpack_from("<Q", registration, 8)[0]
    check(hz.dsr != 0, "bring-up handed the device its DSR")
    # NDIS_SG_DMA_DESCRIPTION: header, Flags, MaximumPhysicalMapping, ProcessSGListHandler @0x10.
    d = hz.dma_desc
    check(header(d) == (0x83, 2, 0x30), f"SG DMA description header {header(d)} = (0x83, REVISION_2 (NDIS 6.85), 0x30)")
    check(struct.unpack_from("<Q", d, 0x28)[0] == 0, "SG DMA PdoOverride NULL")
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
        hz.in_oid = True
        st = hz.call(handlers[handler], [ctx, req], f"{handler}({oid_value:#x})")
        hz.in_oid = False
        done, needed = struct.unpack("<II", hz.read(req + 0x34, 8))
        return st, done, needed, hz.read(buf, max(length, 1))

    regular, direct = "OidRequestHandler", "DirectOidRequestHandler"

    def set_state(value, length=1):
        return oid("OidRequestHandler", 1, OID_NDK_SET_STATE, bytes([value]) * length, length)

    # OID_NDK_SET_STATE (ndkpi.md §6.5, §6.6): exactly one BOOLEAN, never pending; the PnP
    # event follows from the work item, never from inside the OID handler.
    st, done, _, _ = set_state(1)
    check((st, done) == (NDIS_STATUS_SUCCESS, 1), f"OID_NDK_SET_STATE(TRUE) while enabled: SUCCESS, BytesRead 1 ({st:#x}, {done})")
    hz.run_work_items()
    check(hz.pnp_events == [], f"an enable of an enabled adapter announces nothing ({hz.pnp_events})")
    st, done, needed, _ = set_state(1, 2)
    check((st, done, needed) == (NDIS_STATUS_INVALID_LENGTH, 0, 1),
          f"OID_NDK_SET_STATE(2 bytes): INVALID_LENGTH, BytesRead 0, BytesNeeded 1 ({st:#x}, {done}, {needed})")
    st, done, needed, _ = set_state(2)
    check((st, done, needed) == (NDIS_STATUS_INVALID_DATA, 0, 1),
          f"OID_NDK_SET_STATE(2): INVALID_DATA, BytesRead 0, BytesNeeded 1 ({st:#x}, {done}, {needed})")
    st, done, _, _ = set_state(0)
    check((st, done) == (NDIS_STATUS_SUCCESS, 1), f"OID_NDK_SET_STATE(FALSE): SUCCESS, BytesRead 1 ({st:#x}, {done})")
    check(hz.pnp_events == [] and len(hz.pending_work) == 1,
          f"the disable queued one work item and issued no event yet ({hz.pnp_events}, {len(hz.pending_work)})")
    hz.run_work_items()
    check(hz.pnp_events == [NET_EVENT_NDK_DISABLE], f"the work item issued NetEventNDKDisable ({hz.pnp_events})")
    open_ndk, close_ndk = struct.unpack_from("<QQ", hz.ndk_chars, 8)
    params = hz.alloc(12, "open_params")
    hz.se.mem_write(params, struct.pack("<HHII", 2, 1, 0, 0))
    st = hz.call(open_ndk, [ctx, params, hz.scratch + 0x200], "OpenNDKAdapter(2.1) while disabled")
    check(st == NDIS_STATUS_ADAPTER_NOT_READY, f"OpenNDKAdapter while disabled: NDIS_STATUS_ADAPTER_NOT_READY ({st:#x})")
    # A disable and re-enable NDIS never saw announce nothing; the second set finds the
    # item still queued and queues nothing.
    set_state(1)
    set_state(0)
    set_state(1)
    check(len(hz.pending_work) == 1, f"three sets, one queued work item ({len(hz.pending_work)})")
    hz.run_work_items()
    check(hz.pnp_events == [NET_EVENT_NDK_DISABLE, NET_EVENT_NDK_ENABLE],
          f"then NetEventNDKEnable, once ({hz.pnp_events})")

    # OID_NDK_STATISTICS (ndkpi.md §6.6), through the direct OID path.
    def ndis_object(rev, size, length, ty=0x80):
        return struct.pack("<BBH", ty, rev, size).ljust(length, b"\xEE")

    st, done, _, out = oid(direct, 0, OID_NDK_STATISTICS, ndis_object(1, 0xF8, 0xF8), 0xF8)
    check((st, done) == (NDIS_STATUS_SUCCESS, 0xF8), f"OID_NDK_STATISTICS: SUCCESS, BytesWritten 0xF8 ({st:#x}, {done:#x})")
    check(header(out) == (0x80, 1, 0xF8) and out[4:] == bytes(0xF4),
          f"NDIS_NDK_STATISTICS_INFO header (0x80, 1, 0xF8), Flags and every counter 0 ({header(out)})")
    st, done, needed, out = oid(direct, 0, OID_NDK_STATISTICS, ndis_object(1, 0xF8, 0x10), 0x10)
    check((st, done, needed) == (NDIS_STATUS_BUFFER_TOO_SHORT, 0, 0xF8),
          f"OID_NDK_STATISTICS short: BUFFER_TOO_SHORT, BytesWritten 0, BytesNeeded 0xF8 ({st:#x}, {done}, {needed:#x})")
    check(out == ndis_object(1, 0xF8, 0x10), "a short buffer is left untouched")
    # The core reads a later revision as a superset (src/ndis/oid.rs): it is answered.
    st, done, _, _ = oid(direct, 0, OID_NDK_STATISTICS, ndis_object(2, 0xF8, 0xF8), 0xF8)
    check((st, done) == (NDIS_STATUS_SUCCESS, 0xF8), f"OID_NDK_STATISTICS revision 2: SUCCESS, 0xF8 ({st:#x}, {done:#x})")
    for what, body in [("type 0x81", ndis_object(1, 0xF8, 0xF8, ty=0x81)), ("revision 0", ndis_object(0, 0xF8, 0xF8)),
                       ("Size 0x10", ndis_object(1, 0x10, 0xF8))]:
        st, done, needed, out = oid(direct, 0, OID_NDK_STATISTICS, body, 0xF8)
        check((st, done) == (NDIS_STATUS_INVALID_PARAMETER, 0) and out == body,
              f"OID_NDK_STATISTICS {what}: INVALID_PARAMETER, nothing written ({st:#x}, {done})")

    # OID_NDK_CONNECTIONS / OID_NDK_LOCAL_ENDPOINTS: no connection or endpoint yet, so the
    # answer is the 0x10-byte head with Count 0 (ndkpi.md §6.6: size(n) = 0x10 + entry·n).
    for name, value in [("OID_NDK_CONNECTIONS", OID_NDK_CONNECTIONS), ("OID_NDK_LOCAL_ENDPOINTS", OID_NDK_LOCAL_ENDPOINTS)]:
        st, done, _, out = oid(regular, 0, value, ndis_object(1, 0x40, 0x40), 0x40)
        check((st, done) == (NDIS_STATUS_SUCCESS, 0x10), f"{name}: SUCCESS, BytesWritten 0x10 ({st:#x}, {done:#x})")
        check(out[:0x10] == struct.pack("<BBHIII", 0x80, 1, 0x10, 0, 0, 0) and out[0x10:] == b"\xEE" * 0x30,
              f"{name}: header (0x80, 1, 0x10), Count 0, not mapped to TCP, nothing past 0x10 ({out[:0x10].hex()})")
        st, done, needed, out = oid(regular, 0, value, ndis_object(1, 0x10, 8), 8)
        check((st, done, needed) == (NDIS_STATUS_BUFFER_TOO_SHORT, 0, 0x10) and out == ndis_object(1, 0x10, 8),
              f"{name} in 8 bytes: BUFFER_TOO_SHORT, BytesNeeded 0x10, untouched ({st:#x}, {done}, {needed:#x})")
        st, done, _, out = oid(regular, 0, value, ndis_object(1, 0x40, 0x40, ty=0x81), 0x40)
        check((st, done) == (NDIS_STATUS_INVALID_PARAMETER, 0), f"{name} type 0x81: INVALID_PARAMETER ({st:#x}, {done})")

    # General OIDs.
    oid_list, oid_list_len = struct.unpack_from("<QI", general, 0xC8)
    supported = struct.unpack(f"<{oid_list_len // 4}I", hz.read(oid_list, oid_list_len))
    st, done, _, out = oid(regular, 0, OID_GEN_SUPPORTED_LIST, b"", 0x200)
    listed = struct.unpack_from(f"<{done // 4}I", out)
    check((st, done, listed) == (NDIS_STATUS_SUCCESS, oid_list_len, supported),
          f"OID_GEN_SUPPORTED_LIST: SUCCESS, the general attributes' {oid_list_len // 4} OIDs ({st:#x}, {done})")
    check({OID_NDK_SET_STATE, OID_NDK_STATISTICS, OID_NDK_CONNECTIONS, OID_NDK_LOCAL_ENDPOINTS} <= set(listed),
          "OID_GEN_SUPPORTED_LIST has the four NDK OIDs")
    st, done, needed, _ = oid(regular, 0, OID_GEN_SUPPORTED_LIST, b"", 8)
    check((st, done, needed) == (NDIS_STATUS_BUFFER_TOO_SHORT, 0, oid_list_len),
          f"OID_GEN_SUPPORTED_LIST in 8 bytes: BUFFER_TOO_SHORT, BytesNeeded {oid_list_len} ({st:#x}, {needed})")
    st, done, _, out = oid(regular, 0, OID_GEN_HARDWARE_STATUS, b"", 4)
    check((st, done, out) == (NDIS_STATUS_SUCCESS, 4, bytes(4)), f"OID_GEN_HARDWARE_STATUS: NdisHardwareStatusReady ({st:#x}, {out.hex()})")
    st, done, _, out = oid(regular, 0, OID_GEN_MAXIMUM_FRAME_SIZE, b"", 4)
    mtu = struct.unpack_from("<I", general, 0x10)[0]
    check((st, done, out) == (NDIS_STATUS_SUCCESS, 4, struct.pack("<I", mtu)),
          f"OID_GEN_MAXIMUM_FRAME_SIZE: the attributes' MTU {mtu} ({st:#x}, {out.hex()})")
    st, done, needed, _ = oid(regular, 0, OID_GEN_MAXIMUM_FRAME_SIZE, b"", 2)
    check((st, done, needed) == (NDIS_STATUS_BUFFER_TOO_SHORT, 0, 4),
          f"OID_GEN_MAXIMUM_FRAME_SIZE in 2 bytes: BUFFER_TOO_SHORT, BytesNeeded 4 ({st:#x}, {needed})")
    st, done, _, out = oid(regular, 0, OID_GEN_VENDOR_ID, b"", 4)
    check((st, done, out[:3]) == (NDIS_STATUS_SUCCESS, 4, bytes([0x00, 0x50, 0x56])),
          f"OID_GEN_VENDOR_ID: VMware's OUI 00-50-56 ({st:#x}, {out.hex()})")
    st, done, _, _ = oid(regular, 1, OID_GEN_CURRENT_PACKET_FILTER, struct.pack("<I", NDIS_PACKET_TYPE_DIRECTED), 4)
    check((st, done) == (NDIS_STATUS_SUCCESS, 4), f"set OID_GEN_CURRENT_PACKET_FILTER(DIRECTED): SUCCESS, BytesRead 4 ({st:#x}, {done})")
    st, done, _, out = oid(regular, 0, OID_GEN_CURRENT_PACKET_FILTER, b"", 4)
    check((st, done, out) == (NDIS_STATUS_SUCCESS, 4, struct.pack("<I", NDIS_PACKET_TYPE_DIRECTED)),
          f"query OID_GEN_CURRENT_PACKET_FILTER: DIRECTED ({st:#x}, {out.hex()})")
    st, done, needed, _ = oid(regular, 1, OID_GEN_CURRENT_PACKET_FILTER, b"\x01\x00", 2)
    check((st, done, needed) == (NDIS_STATUS_INVALID_LENGTH, 0, 4),
          f"set OID_GEN_CURRENT_PACKET_FILTER in 2 bytes: INVALID_LENGTH, BytesNeeded 4 ({st:#x}, {needed})")
    st, done, _, _ = oid(regular, 0, OID_802_3_MULTICAST_LIST, b"", 64)
    check((st, done) == (NDIS_STATUS_NOT_SUPPORTED, 0), f"OID_802_3_MULTICAST_LIST (not listed): NOT_SUPPORTED ({st:#x})")

    # NDKPI 2.0 Mode 2 (NDK on a NIC switch's vPort) is not offered: a non-default SwitchId
    # or VPortId in NDIS_OPEN_NDK_ADAPTER_PARAMETERS is refused (ndkpi.md §6.3).
    for switch, vport in [(1, 0), (0, 2)]:
        params = hz.alloc(12, "open_params")
        hz.se.mem_write(params, struct.pack("<HHII", 2, 1, switch, vport))
        st = hz.call(open_ndk, [ctx, params, hz.scratch + 0x200], f"OpenNDKAdapter(2.1, switch {switch}, vPort {vport})")
        check(st == NDIS_STATUS_NOT_SUPPORTED,
              f"OpenNDKAdapter on switch {switch}, vPort {vport}: NDIS_STATUS_NOT_SUPPORTED ({st:#x})")
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
        create_cb, close_cb = consumer_callbacks(hz, rec)
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

        # NdkCreateCq (ndkpi.md §2.1 slot 2): adapter, depth, notification callback and
        # context, affinity, create completion, request context, out.
        create_cq = hz.q(dispatch + 0x10)
        cq_rec = hz.scratch + 0x500
        hz.se.mem_write(cq_rec, b"\0" * 0x30)
        cq_create_cb, cq_close_cb = consumer_callbacks(hz, cq_rec)
        notify_cb = hz.alloc(0x10, "consumer_cq_notify")
        hz.se.mem_write(notify_cb, b"\xC3")
        cq_out = hz.scratch + 0x218
        hz.se.mem_write(cq_out, b"\0" * 8)
        st = hz.call_stack_args(create_cq, [a, 64, notify_cb, 0xC0, 0, cq_create_cb, 0xC0C0, cq_out], "NdkCreateCq")
        check(st in (STATUS_PENDING, STATUS_SUCCESS), f"NdkCreateCq(64): STATUS_PENDING or SUCCESS ({st:#x})")
        hz.pump()
        context, status, cq, calls = struct.unpack("<QQQQ", hz.read(cq_rec, 32))
        if st == STATUS_PENDING:
            check((calls, context, status & 0xFFFFFFFF) == (1, 0xC0C0, 0) and cq,
                  f"the CQ's create completion ran once with SUCCESS and the CQ ({calls}, {status:#x})")
        else:
            check(calls == 0, f"an inline create calls no completion ({calls})")
            cq = hz.q(cq_out)
        if check(cq != 0, "NdkCreateCq returned a CQ"):
            check(u32(hz, cq + 4) == 3, f"the CQ's ObjectType is NdkObjectTypeCq ({u32(hz, cq + 4)})")
            cq_dispatch = hz.q(cq + 0x28)
            cq_slots = [hz.q(cq_dispatch + 8 * i) for i in range(7)]
            check(all(f and hz.is_cfg_target(f) for f in cq_slots), "every NDK_CQ_DISPATCH slot set and a CFG target")
            st = hz.call(cq_slots[0], [cq, cq_close_cb, 0xC1C1], "NdkCloseCq")
            check(st in (STATUS_PENDING, STATUS_SUCCESS), f"NdkCloseCq: PENDING or SUCCESS ({st:#x})")
            hz.pump()
            ccontext, ccalls = struct.unpack("<QQ", hz.read(cq_rec + 0x20, 16))
            expect = (1, 0xC1C1) if st == STATUS_PENDING else (0, 0)
            check((ccalls, ccontext) == expect, f"the CQ's close completion ran {expect[0]} time(s) ({ccalls})")

    if hz.world is not None and adapters:
        model_objects_run(hz, adapters[-1])

    for a in adapters:
        hz.call(close_ndk, [ctx, a], "CloseNDKAdapter")
    hz.pump()

    # With no adapter open, a last disable: enable then disable is what NDIS saw last.
    st, done, _, _ = set_state(0)
    check((st, done) == (NDIS_STATUS_SUCCESS, 1), f"OID_NDK_SET_STATE(FALSE): SUCCESS ({st:#x}, {done})")
    hz.run_work_items()
    check(hz.pnp_events == [NET_EVENT_NDK_DISABLE, NET_EVENT_NDK_ENABLE, NET_EVENT_NDK_DISABLE],
          f"PnP events disable, enable, disable, each once ({hz.pnp_events})")

    # NET_BUFFER_LIST (nbl.h): Next @0, ..., NdisReserved, ProtocolReserved and
    # MiniportReserved each DECLSPEC_ALIGN(MEMORY_ALLOCATION_ALIGNMENT = 16) on x64, so
    # Scratch @0x70, SourceHandle @0x78, NblFlags, ChildRefCount, Flags, Status @0x8C. An
    # NDK-only adapter fails every send at once with NDIS_STATUS_REQUEST_ABORTED.
    first, second = hz.alloc(0x100, "nbl"), hz.alloc(0x100, "nbl")
    hz.se.mem_write(first, struct.pack("<Q", second) + b"\0" * 0xF8)
    hz.se.mem_write(second, b"\0" * 0x100)
    hz.call(handlers["SendNetBufferListsHandler"], [ctx, first, 0, 1], "MiniportSendNetBufferLists")
    statuses = [u32(hz, n + NBL_STATUS) for n in (first, second)]
    check(statuses == [0xC0000240] * 2, f"both NBLs completed with NDIS_STATUS_REQUEST_ABORTED ({[hex(x) for x in statuses]})")
    check(hz.sends_completed == [(ADAPTER_HANDLE, first, 1)],
          f"NdisMSendNetBufferListsComplete(adapter, chain, DISPATCH_LEVEL) once ({hz.sends_completed})")

    st = hz.call(handlers["PauseHandler"], [ctx, 0], "MiniportPause")
    check(st == NDIS_STATUS_SUCCESS, f"MiniportPause: NDIS_STATUS_SUCCESS ({st:#x})")
    st = hz.call(handlers["RestartHandler"], [ctx, 0], "MiniportRestart")
    check(st == NDIS_STATUS_SUCCESS, f"MiniportRestart: NDIS_STATUS_SUCCESS ({st:#x})")
    # MiniportResetEx (issue 24 set the handler for the vmxnet3 adapter): the PVRDMA adapter
    # has nothing to reset and succeeds at once with AddressingReset FALSE, queueing nothing.
    addressing = hz.alloc(8, "addressing-reset")
    hz.se.mem_write(addressing, b"\xAA" * 8)
    queued = len(hz.pending_work)
    st = hz.call(handlers["ResetHandlerEx"], [ctx, addressing], "MiniportResetEx")
    check((st, hz.read(addressing, 2), len(hz.pending_work)) == (NDIS_STATUS_SUCCESS, b"\x00\xAA", queued),
          f"MiniportResetEx: NDIS_STATUS_SUCCESS, AddressingReset FALSE, no work item ({st:#x}, {hz.read(addressing, 2).hex()})")
    # The address-resolution seam: registered for changes and listed once at InitializeEx;
    # changes arrive on its callback (this LUID's and another's, a parameter change, the
    # initial notification with no row) until Halt cancels the registration.
    check(hz.notify_log == ["register"], f"InitializeEx registered for address changes ({hz.notify_log})")
    check(hz.address_listings == 1, f"InitializeEx listed the unicast addresses once ({hz.address_listings})")
    check(not hz.mib_tables, f"every MIB table freed ({len(hz.mib_tables)})")
    hz.address_change(MIB_ADD_INSTANCE, NET_LUID, "2001:db8::10")
    hz.address_change(MIB_ADD_INSTANCE, OTHER_LUID, "203.0.113.5")
    hz.address_change(0, NET_LUID, "192.0.2.10")
    hz.address_change(MIB_DELETE_INSTANCE, NET_LUID, "2001:db8::10")
    hz.address_change(MIB_DELETE_INSTANCE, NET_LUID, "192.0.2.99")
    hz.address_change(MIB_INITIAL_NOTIFICATION, NET_LUID, None)
    hz.pump()
    hz.call(handlers["HaltHandlerEx"], [ctx, 0], "MiniportHaltEx")
    check(hz.notify_log == ["register", "cancel"] and not hz.notifications,
          f"Halt cancelled the address-change registration ({hz.notify_log})")
    check(not hz.maps, f"Halt unmapped the BARs and deregistered DMA and interrupts ({list(hz.maps)})")
    print("info device commands answered: " + ", ".join(CMD_NAMES.get(c, hex(c)) for c in hz.requests))
    # The CFG emulation is only worth something if it saw the provider's indirect calls.
    check(hz.indirect_calls > 0, f"the guard dispatch hook saw the indirect calls ({hz.indirect_calls})")


# NDK constants (ndkpi.md §3.4, §4.2, §4.4, the status table).
STATUS_CANCELLED = 0xC0000120
NDK_CQ_NOTIFY_ANY = 1
NDK_MR_FLAG_ALLOW_LOCAL_WRITE, NDK_MR_FLAG_ALLOW_REMOTE_READ = 0x1, 0x2
NdkOperationTypeReceive = 1
WR_FLUSH_ERR = 5  # pvrdma.md, CQE status
# Dispatch slots (ndkpi.md §2): adapter, PD, CQ, MR, QP.
AD_CREATE_CQ, AD_CREATE_PD = 2, 3
PD_CREATE_MR, PD_CREATE_QP, PD_PRIVILEGED_TOKEN = 2, 5, 7
CQ_ARM, CQ_GET_RESULTS, CQ_GET_RESULTS_EX = 3, 4, 6
MR_REGISTER, MR_DEREGISTER, MR_REMOTE_TOKEN, MR_LOCAL_TOKEN = 2, 3, 5, 6
QP_FLUSH, QP_SEND, QP_RECEIVE = 2, 3, 4
NDK_RESULT_SIZE, NDK_RESULT_EX_SIZE = 0x18, 0x28
MDL_PAGES_LOCKED, MDL_SOURCE_IS_NONPAGED_POOL = 0x2, 0x4


class NdkConsumer:
    """A kernel NDK consumer over one emulated provider: creates and closes objects through
    the dispatch tables with its own completion callbacks (harness code, outside the image),
    and builds the structures it passes (SGEs, MDLs). Generic over the harness and the
    adapter, so a two-node run can hold one per side."""

    def __init__(self, hz):
        self.hz = hz

    def recorder(self, what):
        """A callback stub recording its first three arguments and its calls:
        (rcx @0, rdx @8, r8 @0x10, calls @0x18). Returns (stub, record)."""
        hz = self.hz
        rec = hz.alloc(0x20, what + "_record")
        hz.se.mem_write(rec, b"\0" * 0x20)
        stub = hz.alloc(0x40, what)
        hz.se.mem_write(stub, b"\x48\xB8" + struct.pack("<Q", rec)
                        + b"\x48\x89\x08\x48\x89\x50\x08\x4C\x89\x40\x10\x48\xFF\x40\x18\xC3")
        return stub, rec

    def record(self, rec):
        return struct.unpack("<QQQQ", self.hz.read(rec, 0x20))

    def slot(self, obj, index):
        return self.hz.q(self.hz.q(obj + 0x28) + 8 * index)

    def invoke(self, fn, args, what):
        if len(args) > 4:
            return self.hz.call_stack_args(fn, args, what)
        return self.hz.call(fn, args, what)

    def create(self, fn, leading, what, context=0xC7EA7E):
        """NDK_FN_CREATE_*: `leading` arguments, then CreateCompletion, RequestContext and
        the out pointer. Returns the object (None if the create failed), with the checks
        that the completion ran once with SUCCESS (pending) or not at all (inline)."""
        hz = self.hz
        cb, rec = self.recorder("create_completion")
        out = hz.alloc(8, "create_out")
        hz.se.mem_write(out, b"\0" * 8)
        st = self.invoke(fn, list(leading) + [cb, context, out], what)
        hz.pump()
        ctx, status, obj, calls = self.record(rec)
        if st == STATUS_PENDING:
            check((calls, ctx, status & 0xFFFF_FFFF) == (1, context, 0) and obj != 0,
                  f"{what}: PENDING, the completion ran once with SUCCESS ({calls}, {status:#x})")
            return obj or None
        check(st == STATUS_SUCCESS and calls == 0, f"{what}: SUCCESS inline, no completion ({st:#x}, {calls})")
        return hz.q(out) if st == STATUS_SUCCESS else None

    def request(self, fn, leading, what, context=0x4E0):
        """A call taking (RequestCompletion, RequestContext) last: PENDING and one completion
        with SUCCESS, or SUCCESS inline and none."""
        cb, rec = self.recorder("request_completion")
        st = self.invoke(fn, list(leading) + [cb, context], what)
        self.hz.pump()
        ctx, status, _, calls = self.record(rec)
        if st == STATUS_PENDING:
            return check((calls, ctx, status & 0xFFFF_FFFF) == (1, context, 0),
                         f"{what}: PENDING, the completion ran once with SUCCESS ({calls}, {status:#x})")
        return check(st == STATUS_SUCCESS and calls == 0, f"{what}: SUCCESS inline, no completion ({st:#x}, {calls})")

    def close(self, obj, what, context=0xC105E):
        """NDK_FN_CLOSE_OBJECT (slot 0 of every table but the adapter's)."""
        cb, rec = self.recorder("close_completion")
        st = self.hz.call(self.slot(obj, 0), [obj, cb, context], what)
        self.hz.pump()
        ctx, _, _, calls = self.record(rec)
        expect = (1, context) if st == STATUS_PENDING else (0, 0)
        return check(st in (STATUS_PENDING, STATUS_SUCCESS) and (calls, ctx) == expect,
                     f"{what}: {'PENDING' if st == STATUS_PENDING else 'SUCCESS'}, "
                     f"the close completion ran {expect[0]} time(s) ({st:#x}, {calls})")

    def sge(self, address, length, token):
        """NDK_SGE (ndkpi.md §3.1), one entry, in emulator memory."""
        p = self.hz.alloc(0x10, "sge")
        self.hz.se.mem_write(p, struct.pack("<QII", address, length, token))
        return p

    def mdl(self, va, bus, length):
        """One MDL (windows-build.md, x64 _MDL) for `length` bytes of a buffer whose first
        page is at bus address `bus`: its PFN array names the bus pages the device uses."""
        pages = ((va & 0xFFF) + length + 0xFFF) >> 12
        m = self.hz.alloc(0x30 + 8 * pages, "mdl")
        head = struct.pack("<QhhHHQQQII", 0, 0x30 + 8 * pages, MDL_PAGES_LOCKED | MDL_SOURCE_IS_NONPAGED_POOL,
                           0, 0, 0, va, va & ~0xFFF, length, va & 0xFFF)
        self.hz.se.mem_write(m, head + b"".join(struct.pack("<Q", (bus >> 12) + i) for i in range(pages)))
        return m


def model_objects_run(hz, a):
    """What only a real device answers, without a connection: a PD with its privileged token,
    an MR registered over two pages of consumer memory, a CQ and a QP; two receives posted
    before any connection (ndkpi.md §5.3), the CQ armed, NdkFlush (MODIFY_QP to ERR): the
    model flushes both receives, writes their CQEs and a CQ notification and raises vector 2,
    the emulated ISR queues the DPC, the DPC calls the consumer's notification once;
    NdkGetCqResultsEx reaps both as STATUS_CANCELLED; everything closes with nothing left in
    the model."""
    w, node = hz.world, hz.device.node
    c = NdkConsumer(hz)
    # The connection engine's QP1 (its PD, DMA MR, CQ and QP) lives from InitializeEx to
    # Halt: the counts here are the consumer's, above it.
    engine = w.object_counts(node)
    engine_qps = set(w.qp_handles(node))
    check(engine == (1, 1, 1, 1, 0) and len(engine_qps) == 1,
          f"InitializeEx left the connection engine's QP1 in the model: PD, DMA MR, CQ, QP ({engine}, {engine_qps})")
    objects = lambda: tuple(x - y for x, y in zip(w.object_counts(node), engine))  # noqa: E731 (pds, mrs, cqs, qps, srqs)
    before = w.counters(node)
    pd = c.create(c.slot(a, AD_CREATE_PD), [a], "NdkCreatePd")
    if not check(pd is not None, "NdkCreatePd gave a PD"):
        return
    check(objects() == (1, 1, 0, 0, 0), f"the model holds the PD and its DMA MR {objects()}")
    token_out = hz.alloc(8, "token")
    hz.se.mem_write(token_out, b"\0" * 8)
    hz.call(c.slot(pd, PD_PRIVILEGED_TOKEN), [pd, token_out], "NdkGetPrivilegedMemoryRegionToken")
    token = u32(hz, token_out)
    check(token != 0, f"the privileged token is not 0 ({token:#x})")

    mr = c.create(c.slot(pd, PD_CREATE_MR), [pd, 0], "NdkCreateMr")
    buf, bus = hz.device.consumer_buffer(0x2000)
    mdl = c.mdl(buf, bus, 0x2000)
    lkey = rkey = 0
    if check(mr is not None, "NdkCreateMr gave an MR"):
        c.request(c.slot(mr, MR_REGISTER), [mr, mdl, 0x2000, NDK_MR_FLAG_ALLOW_LOCAL_WRITE | NDK_MR_FLAG_ALLOW_REMOTE_READ],
                  "NdkRegisterMr(2 pages)")
        check(objects() == (1, 2, 0, 0, 0), f"the model holds the registered MR {objects()}")
        lkey = hz.call(c.slot(mr, MR_LOCAL_TOKEN), [mr], "NdkGetLocalTokenFromMr")
        rkey = hz.call(c.slot(mr, MR_REMOTE_TOKEN), [mr], "NdkGetRemoteTokenFromMr")
        check(lkey not in (0, token) and rkey not in (0, token),
              f"the MR's local and remote tokens are its own ({lkey:#x}, {rkey:#x})")

    notify, notify_rec = c.recorder("cq_notification")
    cq = c.create(c.slot(a, AD_CREATE_CQ), [a, 16, notify, 0xC9, 0], "NdkCreateCq(16)")
    qp = cq and c.create(c.slot(pd, PD_CREATE_QP), [pd, cq, cq, 0xABC, 4, 4, 1, 1, 0], "NdkCreateQp(4, 4, 1, 1, 0)")
    if not check(cq is not None and qp is not None, "NdkCreateCq and NdkCreateQp gave a CQ and a QP"):
        return
    check(objects() == (1, 2, 1, 1, 0), f"the model holds PD, 2 MRs, CQ, QP {objects()}")

    # The registration as the device sees it: a peer's READ through this QP's PD under the
    # remote token reads the bytes the consumer wrote, across the page boundary (the page
    # directory maps the MDL's two bus pages); past the end, or a WRITE the registration did
    # not allow, the model refuses.
    qp_handles = [h for h in w.qp_handles(node) if h not in engine_qps]
    if check(len(qp_handles) == 1, f"one QP in the model ({qp_handles})"):
        qph = qp_handles[0]
        # No period: a page mapped twice or swapped reads other bytes.
        pattern = random.Random(15).randbytes(0x2000)
        hz.se.mem_write(buf, pattern)
        got = w.remote_read(node, qph, rkey, buf + 0xFF0, 0x20)
        check(got == pattern[0xFF0:0x1010], f"the model reads the MR across its page boundary "
              f"({got.hex() if got else got})")
        check(w.remote_read(node, qph, rkey, buf + 0x1FF0, 0x20) is None, "a READ past the MR's end is refused")
        check(not w.remote_write(node, qph, rkey, buf, b"\xAA"), "a WRITE the registration did not allow is refused")
        check(hz.read(buf, 1) == pattern[:1], "the refused WRITE left the buffer alone")

    for ctx in (0x51, 0x52):
        st = hz.call(c.slot(qp, QP_RECEIVE), [qp, ctx, c.sge(buf, 0x40, lkey), 1], f"NdkReceive({ctx:#x})")
        check(st == STATUS_SUCCESS, f"NdkReceive({ctx:#x}) before any connection: SUCCESS ({st:#x})")
    hz.pump()
    results = hz.alloc(4 * NDK_RESULT_EX_SIZE, "results")
    st = hz.call(c.slot(cq, CQ_GET_RESULTS), [cq, results, 4], "NdkGetCqResults(empty)")
    check(st == 0, f"NdkGetCqResults on the empty CQ: 0 ({st})")
    hz.call(c.slot(cq, CQ_ARM), [cq, NDK_CQ_NOTIFY_ANY], "NdkArmCq(ANY)")
    hz.pump()
    check(c.record(notify_rec)[3] == 0, "the arm of an empty CQ waits")
    vectors_before = w.counters(node)["interrupts"]
    isr_before = len(hz.isr_log)
    hz.call(c.slot(qp, QP_FLUSH), [qp], "NdkFlush")
    hz.pump()
    ctx, status, _, calls = c.record(notify_rec)
    check((calls, ctx, status & 0xFFFF_FFFF) == (1, 0xC9, 0),
          f"the notification ran once, with its context and SUCCESS ({calls}, {ctx:#x}, {status:#x})")
    vectors = w.counters(node)["interrupts"]
    check(vectors[2] - vectors_before[2] == 1, f"the model raised the CQ vector once ({vectors_before} -> {vectors})")
    check((2, 1) in hz.isr_log[isr_before:], f"the emulated ISR took vector 2 as its own {hz.isr_log[isr_before:]}")
    n = hz.call(c.slot(cq, CQ_GET_RESULTS_EX), [cq, results, 4], "NdkGetCqResultsEx")
    got = []
    for i in range(min(n or 0, 4)):
        st, _bytes, qpc, req, ty, err = struct.unpack_from("<IIQQiI", hz.read(results + i * NDK_RESULT_EX_SIZE, 0x20))
        got.append((st, qpc, req, ty, err))
    want = [(STATUS_CANCELLED, 0xABC, r, NdkOperationTypeReceive, WR_FLUSH_ERR) for r in (0x51, 0x52)]
    check((n, got) == (2, want), f"two flushed receives reaped in order: CANCELLED, the QP's context, "
          f"Receive, WR_FLUSH_ERR ({n}, {got})")
    after = w.counters(node)
    check((after["db_qp_recv"] - before["db_qp_recv"], after["db_cq_arm"] - before["db_cq_arm"]) == (2, 1),
          f"the model saw two receive doorbells and one arm ({after['db_qp_recv'] - before['db_qp_recv']}, "
          f"{after['db_cq_arm'] - before['db_cq_arm']})")
    check(after["cqes"] - before["cqes"] == 2 and after["dma_faults"] == 0 and after["bad_mmio"] == 0,
          f"two CQEs, no DMA fault, no bad MMIO ({after['cqes'] - before['cqes']}, {after['dma_faults']}, {after['bad_mmio']})")

    c.close(qp, "NdkCloseQp")
    if mr is not None:
        c.request(c.slot(mr, MR_DEREGISTER), [mr], "NdkDeregisterMr")
        c.close(mr, "NdkCloseMr")
    c.close(cq, "NdkCloseCq")
    c.close(pd, "NdkClosePd")
    check(objects() == (0, 0, 0, 0, 0), f"nothing left in the model {objects()}")
    hz.device.free_consumer_buffer(buf)


def consumer_callbacks(hz, rec):
    """NDK_FN_CREATE_COMPLETION and NDK_FN_CLOSE_COMPLETION stubs recording into `rec`:
    create (context, status, object, calls) at 0..0x20, close (context, calls) at 0x20."""
    create_cb = hz.alloc(0x100, "consumer_create_cb")
    hz.se.mem_write(create_cb, b"\x48\xB8" + struct.pack("<Q", rec)
                    + b"\x48\x89\x08\x48\x89\x50\x08\x4C\x89\x40\x10\x48\xFF\x40\x18\xC3")
    close_cb = hz.alloc(0x100, "consumer_close_cb")
    hz.se.mem_write(close_cb, b"\x48\xB8" + struct.pack("<Q", rec) + b"\x48\x89\x48\x20\x48\xFF\x40\x28\xC3")
    return create_cb, close_cb


def finish(hz):
    check(not hz.work_items, f"no I/O work item left ({len(hz.work_items)})")
    check(not hz.pool, f"no pool block left ({len(hz.pool)})")
    check(not hz.shared, f"no shared-memory block left ({len(hz.shared)})")
    leaks = hz.device.leaks()
    check(not leaks, f"nothing left on the device side {leaks}")
    check(not hz.bad_accesses, f"every BAR access an aligned 32-bit one {hz.bad_accesses}")
    check(not hz.cfg_violations, f"{hz.indirect_calls} indirect calls, all to CFG targets"
          + (f" (violations {[hex(v) for v in hz.cfg_violations]})" if hz.cfg_violations else ""))
    unsupported = [r.error for r in hz.se.emu.runs if r.error and r.error.get("type") == "unsupported_api"]
    check(not unsupported, f"no unsupported API reached {unsupported}")
    if measure_stack:
        stack_report([hz])
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
