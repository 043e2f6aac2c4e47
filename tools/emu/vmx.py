#!/usr/bin/env python3
"""The vmxnet3 function of the real .sys under the emulator (issue 24): two emulated images,
each the Ethernet miniport of a vmxnet3 (15AD:07B0) vNIC of one pvrdma_simbridge.World, carry
ARP and ICMP echo between two hosts as NET_BUFFER_LISTs (docs/BUILD.md, "The vmxnet3
function").

Usage: vmx.py IMAGE.sys [IMAGE2.sys] [--paired] [--verbose] [--stack-report]

This harness plays NDIS's Ethernet data path on top of run.py's kernel and NDIS (Harness):
the NBL pool, NBL, NET_BUFFER and MDL allocators the miniport uses for its receive NBLs,
the receive indications (recorded, the frames read through the NBLs' MDLs as the protocol
and as the device see them, the NBLs returned later as NDIS does), the send completions
(every NBL completed exactly once), pause and reset completions, and a protocol on each
host that builds the NBLs it sends (several NET_BUFFERs per NBL, frames cut into MDLs whose
pages are physically scattered, a backfilled NET_BUFFER) and answers ARP and ICMP echo.
Layouts are those of nbl.h, ndis.h and wdm.h on x64 (Learn's structure pages:
NET_BUFFER_LIST Status @0x8C, NET_BUFFER 0xB0 bytes, MDL 0x30 bytes then its PFN array),
never read from the Rust sources under test.

--paired puts each vmxnet3 beside a PVRDMA function at function 1 of its slot (vmxnet3.md
P1-P5; the PVRDMA function has no driver here): the same run, with the slot steering the
Ethernet frames to function 0.
"""
import argparse
import ipaddress
import os
import random
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402
from run import ADAPTER_HANDLE, DRIVER_HANDLE, NDIS_STATUS_SUCCESS, Harness, SimDevice, check, header  # noqa: E402
from two_nodes import finish_checks, settle  # noqa: E402

import pvrdma_simbridge  # noqa: E402

VMXNET3_PCI_IDS = run.VMXNET3_PCI_IDS
# The vmxnet3 function's memory BARs as the resource list names them (vmxnet3.md §3.1):
# BAR0 "PT" and BAR1 "VD" (4 KiB of registers each), BAR2 the MSI-X table (never mapped).
VMX_BAR0, VMX_BAR1, VMX_BAR2 = 0xFD00_0000, 0xFD00_1000, 0xFD00_2000
VMX_BARS = [(VMX_BAR0, 0x1000), (VMX_BAR1, 0x1000), (VMX_BAR2, 0x2000)]
VMX_CMD = 0x20  # BAR1 CMD
CMD_NAMES = {0xCAFE0000: "ACTIVATE_DEV", 0xCAFE0001: "QUIESCE_DEV", 0xCAFE0002: "RESET_DEV",
             0xCAFE0003: "UPDATE_RX_MODE", 0xCAFE0004: "UPDATE_MAC_FILTERS", 0xF00D0000: "GET_QUEUE_STATUS",
             0xF00D0001: "GET_STATS", 0xF00D0002: "GET_LINK", 0xF00D0003: "GET_PERM_MAC_LO",
             0xF00D0004: "GET_PERM_MAC_HI", 0xF00D0008: "GET_CONF_INTR"}
# rxMode bits the device reads (vmxnet3.md §3.6).
RXM_UCAST, RXM_MCAST, RXM_BCAST = 0x1, 0x2, 0x4

# nbl.h (x64): NET_BUFFER_LIST up to Status, then NetBufferListInfo[MaxNetBufferListInfo]
# (under 32 entries in NDIS 6.85: the harness allocates room for 32).
NBL_NEXT, NBL_FIRST_NB, NBL_POOL = 0x00, 0x08, 0x20
NBL_SOURCE_HANDLE, NBL_STATUS = 0x78, run.NBL_STATUS
NBL_SIZE = 0x90 + 8 * 32
# NET_BUFFER: the 0x30-byte union (Next, CurrentMdl, CurrentMdlOffset, DataLength,
# MdlChain, DataOffset), ChecksumBias, NdisPoolHandle @0x38, ..., 0xB0 bytes.
NB_NEXT, NB_CURRENT_MDL, NB_CURRENT_MDL_OFFSET, NB_DATA_LENGTH = 0x00, 0x08, 0x10, 0x18
NB_MDL_CHAIN, NB_DATA_OFFSET, NB_POOL = 0x20, 0x28, 0x38
NB_SIZE = 0xB0
# wdm.h MDL: Next, Size, MdlFlags, ..., MappedSystemVa @0x18, StartVa @0x20, ByteCount
# @0x28, ByteOffset @0x2C; the PFN array follows at 0x30.
MDL_MAPPED_VA, MDL_START_VA, MDL_BYTE_COUNT, MDL_BYTE_OFFSET, MDL_PFNS = 0x18, 0x20, 0x28, 0x2C, 0x30
MDL_SOURCE_IS_NONPAGED_POOL = 0x4
# How the harness packs and reads them: the NET_BUFFER fields from CurrentMdl as "<QIIQQQ",
# an MDL's from MappedSystemVa as "<QQII".
assert (NB_CURRENT_MDL_OFFSET, NB_DATA_LENGTH, NB_MDL_CHAIN, NB_DATA_OFFSET) == tuple(
    NB_CURRENT_MDL + d for d in (0x8, 0x10, 0x18, 0x20))
assert (MDL_START_VA, MDL_BYTE_COUNT, MDL_BYTE_OFFSET) == tuple(MDL_MAPPED_VA + d for d in (0x8, 0x10, 0x14))
NBL_POOL_HANDLE = 0x9B10_0000_0001
# ndis.h / ntddndis.h
NDIS_STATUS_PENDING = 0x103
NDIS_STATUS_PAUSED = 0xC023002A
NDIS_STATUS_REQUEST_ABORTED = 0xC0000240
NDIS_RECEIVE_FLAGS_DISPATCH_LEVEL, NDIS_RECEIVE_FLAGS_RESOURCES = 0x1, 0x2
NDIS_SEND_COMPLETE_FLAGS_DISPATCH_LEVEL = 0x1
OID_GEN_CURRENT_PACKET_FILTER = run.OID_GEN_CURRENT_PACKET_FILTER
OID_GEN_MAXIMUM_FRAME_SIZE = run.OID_GEN_MAXIMUM_FRAME_SIZE
OID_GEN_SUPPORTED_LIST = run.OID_GEN_SUPPORTED_LIST
OID_GEN_STATISTICS = 0x00020106
OID_802_3_PERMANENT_ADDRESS, OID_802_3_CURRENT_ADDRESS = 0x01010101, 0x01010102
OID_802_3_MULTICAST_LIST = run.OID_802_3_MULTICAST_LIST
NDIS_PACKET_TYPE_DIRECTED, NDIS_PACKET_TYPE_MULTICAST, NDIS_PACKET_TYPE_BROADCAST = 0x1, 0x2, 0x8
NDIS_MEDIA_STATE_CONNECTED, NDIS_MEDIA_STATE_DISCONNECTED = 1, 2
LINK_10G = 10_000_000_000  # GET_LINK: 10000 Mbps, the model's default
MTU = 1500

# The hosts' addresses (198.18.0.0/15, the benchmarking range) and the frames' numbers.
IPS = ("198.18.0.1", "198.18.0.2")
ECHO_ID = 0x5678
ETH_P_IP, ETH_P_ARP = 0x0800, 0x0806
BROADCAST = b"\xff" * 6
# A page no node's memory holds (under the 52 bits a PFN may have): a DMA there faults.
UNREACHABLE_PFN = 0xF_FFFF_F000


# ---- frames (RFC 826, RFC 791, RFC 792) ----
def inet_checksum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ether(dst, src, ethertype, payload):
    return dst + src + struct.pack("!H", ethertype) + payload


def arp(op, sha, spa, tha, tpa):
    return struct.pack("!HHBBH", 1, ETH_P_IP, 6, 4, op) + sha + ipaddress.ip_address(spa).packed \
        + tha + ipaddress.ip_address(tpa).packed


def ipv4(src, dst, proto, payload, ident):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), ident, 0, 128, proto, 0,
                    ipaddress.ip_address(src).packed, ipaddress.ip_address(dst).packed)
    return h[:10] + struct.pack("!H", inet_checksum(h)) + h[12:] + payload


def icmp_echo(kind, ident, seq, data):
    m = struct.pack("!BBHHH", kind, 0, 0, ident, seq) + data
    return m[:2] + struct.pack("!H", inet_checksum(m)) + m[4:]


def echo_request(src_mac, dst_mac, src, dst, seq, data):
    return ether(dst_mac, src_mac, ETH_P_IP, ipv4(src, dst, 1, icmp_echo(8, ECHO_ID, seq, data), seq))


def parse(frame):
    """What a host's stack makes of a frame: ("arp", op, sha, spa, tpa), ("echo", type,
    src, dst, id, seq, data) with every checksum verified, or None."""
    if len(frame) < 14:
        return None
    (ethertype,) = struct.unpack_from("!H", frame, 12)
    if ethertype == ETH_P_ARP and len(frame) >= 42:
        _ht, _pt, _hl, _pl, op = struct.unpack_from("!HHBBH", frame, 14)
        return ("arp", op, frame[22:28], str(ipaddress.ip_address(frame[28:32])),
                str(ipaddress.ip_address(frame[38:42])))
    if ethertype != ETH_P_IP or len(frame) < 34:
        return None
    ip = frame[14:]
    total = struct.unpack_from("!H", ip, 2)[0]
    if ip[0] != 0x45 or ip[9] != 1 or inet_checksum(ip[:20]) != 0 or total > len(ip):
        return None
    icmp = ip[20:total]
    if len(icmp) < 8 or inet_checksum(icmp) != 0:
        return None
    kind, _code, _sum, ident, seq = struct.unpack_from("!BBHHH", icmp)
    return ("echo", kind, str(ipaddress.ip_address(ip[12:16])), str(ipaddress.ip_address(ip[16:20])),
            ident, seq, icmp[8:])


def answer(frame, mac, ip):
    """The host's stack: an ARP reply to a request for `ip`, an echo reply to an echo request
    to `ip` (the request's identifier, sequence number and data), else None."""
    p = parse(frame)
    if p and p[0] == "arp" and p[1] == 1 and p[4] == ip:
        return ether(p[2], mac, ETH_P_ARP, arp(2, mac, ip, p[2], p[3]))
    if p and p[0] == "echo" and p[1] == 8 and p[3] == ip:
        _, _, src, _dst, ident, seq, data = p
        return ether(frame[6:12], mac, ETH_P_IP, ipv4(ip, src, 1, icmp_echo(0, ident, seq, data), seq))
    return None


class VmxDevice(SimDevice):
    """The vmxnet3 function (15AD:07B0) of node `node`: BAR0 and BAR1 loads and stores go to
    the model's registers (vmx_bar0_* / vmx_bar1_*), its MSI-X vectors to the harness's ISR
    delivery; BAR2 (the MSI-X table, NDIS's) must never be mapped."""

    device_id = VMXNET3_PCI_IDS[1]
    bars = VMX_BARS
    messages = 3

    def __init__(self, hz, world, node=0):
        super().__init__(hz, world, node)
        self.commands = []
        self.mapped = []
        self.scattered = {}

    def map_bar(self, phys, va, length):
        w, n = self.world, self.node
        self.mapped.append(phys)
        if phys == VMX_BAR0:
            self.register_hooks(va, length, lambda off: w.vmx_bar0_read(n, off),
                                lambda off, v, size: w.vmx_bar0_write(n, off, v, size))
        elif phys == VMX_BAR1:
            self.register_hooks(va, length, lambda off: w.vmx_bar1_read(n, off), self.bar1_write)

    def bar1_write(self, off, value, size):
        if off == VMX_CMD:
            self.commands.append(value)
        self.world.vmx_bar1_write(self.node, off, value, size)

    def take_vectors(self):
        return self.world.take_vmx_vectors(self.node)

    def scattered_buffer(self, pages):
        """`pages` pages of DMA memory at consecutive guest addresses whose bus pages are
        neither consecutive nor in order (each a block of its own, mapped in reverse): what a
        protocol's virtually contiguous buffer looks like physically. Returns (guest VA, bus
        address of each page)."""
        blocks = [self.world.alloc_dma(self.node, 0x1000) for _ in range(pages)]
        va, _ = self.hz.se.emu.get_valid_ranges(pages * 0x1000)
        buses = []
        for i, (host, bus) in enumerate(reversed(blocks)):
            self.uc.mem_map_ptr(va + i * 0x1000, 0x1000, self.prot, host)
            buses.append(bus)
        self.scattered[va] = buses
        return va, buses

    def free_scattered(self, va):
        for i, bus in enumerate(self.scattered.pop(va)):
            self.uc.mem_unmap(va + i * 0x1000, 0x1000)
            self.world.free_dma(self.node, bus)

    def bus_of(self, va):
        for start, buses in self.scattered.items():
            if start <= va < start + 0x1000 * len(buses):
                return buses[(va - start) >> 12] + (va & 0xFFF)
        return super().bus_of(va)

    def leaks(self):
        return super().leaks() + ([f"{len(self.scattered)} scattered buffers"] if self.scattered else [])


class EthHarness(Harness):
    """run.py's Harness with NDIS's Ethernet data path (module docs): pools, NBLs and MDLs
    the miniport allocates, receive indications, send / pause / reset completions."""

    def __init__(self, image, world, node, tag):
        self.tag = tag
        # NdisAllocateNetBufferListPool: handle -> parameters; the NBLs ("NDIS's") and MDLs
        # the miniport allocated and has not freed: address -> details.
        self.nbl_pools = {}
        self.pool_params = []
        self.nbls = {}
        self.mdls = {}
        self.nbl_allocs = self.mdl_allocs = 0
        # Receive indications: dicts with the frame as the NBL's MDLs show it to the
        # protocol and as the device wrote it (the PFNs' bus pages), the flags, the NBL.
        self.received = []
        self.held = []
        self.indications = []
        # NBLs the protocol sent: address -> {"frames", "completions", "status", "flags"}.
        self.sent = {}
        self.send_order = []
        self.pause_completions = []
        self.reset_completions = []
        self.reset_requests = 0
        # Misuses of NDIS's allocators (checked once at the end: each call is not a check).
        self.misuse = []
        self.frees = {"NdisFreeNetBufferList": 0, "NdisFreeMdl": 0}
        super().__init__(image, device=VmxDevice, world=world, node=node)

    def _hooks(self):
        super()._hooks()
        h = self._hook
        h("ndis", "NdisAllocateNetBufferListPool", 2, self.alloc_nbl_pool)
        h("ndis", "NdisFreeNetBufferListPool", 1, self.free_nbl_pool)
        h("ndis", "NdisAllocateNetBufferAndNetBufferList", 6, self.alloc_nbl)
        h("ndis", "NdisFreeNetBufferList", 1, self.free_nbl)
        h("ndis", "NdisAllocateMdl", 3, self.alloc_mdl)
        h("ndis", "NdisFreeMdl", 1, self.free_mdl)
        h("ndis", "NdisMIndicateReceiveNetBufferLists", 5, self.indicate_receive)
        h("ndis", "NdisMPauseComplete", 1, self.pause_complete)
        h("ndis", "NdisMResetComplete", 3, self.reset_complete)
        h("ndis", "NdisMResetMiniport", 1, self.reset_miniport)

    # ---- NDIS's allocators ----
    def expect(self, ok, what):
        if not ok:
            self.misuse.append(what)
        return ok

    def alloc_nbl_pool(self, a):
        handle, params = a
        p = self.read(params, 0x10)
        self.pool_params.append((handle, p))
        pool = NBL_POOL_HANDLE + len(self.pool_params)
        self.nbl_pools[pool] = p
        return pool

    def free_nbl_pool(self, a):
        pool = a[0]
        left = [n for n, d in self.nbls.items() if d["pool"] == pool]
        check(pool in self.nbl_pools and not left,
              f"{self.tag}: NdisFreeNetBufferListPool({pool:#x}) frees a live pool with no NBL left ({len(left)})")
        self.nbl_pools.pop(pool, None)
        return 0

    def alloc_nbl(self, a):
        """NdisAllocateNetBufferAndNetBufferList(Pool, ContextSize, ContextBackFill,
        MdlChain, DataOffset, DataLength): one NBL with one NET_BUFFER, in one block as NDIS
        allocates them."""
        pool, ctx_size, backfill, mdl, offset, length = a
        ctx_size, backfill, offset = ctx_size & 0xFFFF, backfill & 0xFFFF, offset & 0xFFFF_FFFF
        if not self.expect(pool in self.nbl_pools and self.nbl_pools[pool][5] == 1,
                           f"NdisAllocateNetBufferAndNetBufferList from {pool:#x}: not a live pool allocating NET_BUFFERs"):
            return 0
        # The receive NBL describes its whole buffer: the MDL's bytes from offset 0.
        self.expect(mdl in self.mdls and offset == 0 and length == self.mdls[mdl][1],
                    f"NdisAllocateNetBufferAndNetBufferList(MDL {mdl:#x}, DataOffset {offset}, DataLength {length}): "
                    f"not a live MDL's bytes")
        nbl = self.alloc(NBL_SIZE + NB_SIZE, "nbl")
        nb = nbl + NBL_SIZE
        self.se.mem_write(nbl, b"\0" * (NBL_SIZE + NB_SIZE))
        self.se.mem_write(nbl + NBL_FIRST_NB, struct.pack("<Q", nb))
        self.se.mem_write(nbl + NBL_POOL, struct.pack("<Q", pool))
        self.se.mem_write(nb + NB_CURRENT_MDL, struct.pack("<QIIQQQ", mdl, offset, 0, length, mdl, offset))
        self.se.mem_write(nb + NB_POOL, struct.pack("<Q", pool))
        self.nbls[nbl] = {"pool": pool, "nb": nb, "mdl": mdl, "context": (ctx_size, backfill)}
        self.nbl_allocs += 1
        return nbl

    def free_nbl(self, a):
        nbl = a[0]
        self.expect(nbl in self.nbls and nbl not in self.held,
                    f"NdisFreeNetBufferList({nbl:#x}): not a live NBL, or one NDIS holds")
        self.frees["NdisFreeNetBufferList"] += 1
        self.nbls.pop(nbl, None)
        return 0

    def alloc_mdl(self, a):
        """NdisAllocateMdl(NdisHandle, VirtualAddress, Length): an MDL over non-paged memory
        (MmBuildMdlForNonPagedPool's: the system VA mapped, the pages' PFNs)."""
        handle, va, length = a
        length &= 0xFFFF_FFFF
        pages = ((va & 0xFFF) + length + 0xFFF) >> 12
        buses = [self.device.bus_of((va & ~0xFFF) + i * 0x1000) for i in range(pages)]
        if not self.expect(handle == ADAPTER_HANDLE and length and None not in buses,
                           f"NdisAllocateMdl({handle:#x}, {va:#x}, {length}): not the adapter's, or not over memory "
                           f"the device reaches"):
            return 0
        mdl = self.alloc(MDL_PFNS + 8 * pages, "mdl")
        self.se.mem_write(mdl, struct.pack("<QhhHHQQQII", 0, MDL_PFNS + 8 * pages, MDL_SOURCE_IS_NONPAGED_POOL, 0, 0,
                                           0, va, va & ~0xFFF, length, va & 0xFFF)
                          + b"".join(struct.pack("<Q", b >> 12) for b in buses))
        self.mdls[mdl] = (va, length)
        self.mdl_allocs += 1
        return mdl

    def free_mdl(self, a):
        mdl = a[0]
        in_nbl = [n for n, d in self.nbls.items() if d["mdl"] == mdl]
        self.expect(mdl in self.mdls and not in_nbl, f"NdisFreeMdl({mdl:#x}): not a live MDL, or a live NBL holds it")
        self.frees["NdisFreeMdl"] += 1
        self.mdls.pop(mdl, None)
        return 0

    # ---- the data path ----
    def frame_of(self, nb):
        """The frame of NET_BUFFER `nb`: DataLength bytes from CurrentMdl at
        CurrentMdlOffset, as the MDLs' virtual addresses show them and as their PFNs' bus
        pages hold them (the device's view)."""
        mdl, off = struct.unpack("<QI", self.read(nb + NB_CURRENT_MDL, 12))
        length = self.q(nb + NB_DATA_LENGTH) & 0xFFFF_FFFF
        seen, dma = b"", b""
        while length and mdl:
            va, start, count, boff = struct.unpack("<QQII", self.read(mdl + MDL_MAPPED_VA, 24))
            take = min(count - off, length)
            seen += self.read(va + off, take)
            pos = boff + off
            while len(dma) < len(seen):
                pfn = self.q(mdl + MDL_PFNS + 8 * (pos >> 12))
                n = min(0x1000 - (pos & 0xFFF), len(seen) - len(dma))
                dma += self.world.dma_read(self.device.node, (pfn << 12) + (pos & 0xFFF), n) or b"?"
                pos += n
            length -= take
            off = 0
            mdl = self.q(mdl)
        return seen if not length else None, dma

    def indicate_receive(self, a):
        handle, nbls, port, count, flags = a
        count, flags = count & 0xFFFF_FFFF, flags & 0xFFFF_FFFF
        chain, nbl = [], nbls
        while nbl and len(chain) <= count:
            chain.append(nbl)
            nbl = self.q(nbl + NBL_NEXT)
        self.indications.append((count, flags, self.at_dispatch()))
        check(handle == ADAPTER_HANDLE and port & 0xFFFF_FFFF == 0 and len(chain) == count > 0,
              f"{self.tag}: NdisMIndicateReceiveNetBufferLists(adapter, a chain of {count} NBLs, port 0) "
              f"({handle:#x}, {len(chain)})")
        for nbl in chain[:count]:
            d = self.nbls.get(nbl)
            nb = self.q(nbl + NBL_FIRST_NB)
            source = self.q(nbl + NBL_SOURCE_HANDLE)
            status = struct.unpack("<I", self.read(nbl + NBL_STATUS, 4))[0]
            check(d is not None and nbl not in self.held and nb == d["nb"] and self.q(nb + NB_NEXT) == 0
                  and source == ADAPTER_HANDLE and status == NDIS_STATUS_SUCCESS,
                  f"{self.tag}: an indicated NBL is one of the miniport's, not held by NDIS, one NET_BUFFER, "
                  f"SourceHandle the adapter, Status SUCCESS ({nbl:#x}, {source:#x}, {status:#x})")
            seen, dma = self.frame_of(nb)
            self.received.append({"frame": seen, "dma": dma, "flags": flags, "nbl": nbl,
                                  "dispatch": self.at_dispatch()})
            if not flags & NDIS_RECEIVE_FLAGS_RESOURCES:
                self.held.append(nbl)
        return 0

    def send_complete(self, a):
        handle, nbls, flags = a
        super().send_complete(a)
        nbl, n = nbls, 0
        while nbl and n < 10_000:
            rec = self.sent.get(nbl)
            status = struct.unpack("<I", self.read(nbl + NBL_STATUS, 4))[0]
            check(handle == ADAPTER_HANDLE and rec is not None and rec["completions"] == 0,
                  f"{self.tag}: NdisMSendNetBufferListsComplete completes an NBL the protocol sent, once "
                  f"({nbl:#x}, {rec and rec['completions']})")
            if rec is not None:
                rec["completions"] += 1
                rec["status"] = status
                rec["flags"] = flags & 0xFFFF_FFFF
                rec["dispatch"] = self.at_dispatch()
            nbl = self.q(nbl + NBL_NEXT)
            n += 1
        return 0

    def pause_complete(self, a):
        self.pause_completions.append(a[0])
        return 0

    def reset_complete(self, a):
        self.reset_completions.append((a[0], a[1] & 0xFFFF_FFFF, a[2] & 0xFF))
        return 0

    def reset_miniport(self, a):
        check(a[0] == ADAPTER_HANDLE, f"{self.tag}: NdisMResetMiniport for the adapter")
        self.reset_requests += 1
        return 0


class Host:
    """One host: an emulated image driving node `node`'s vmxnet3, and its protocol."""

    def __init__(self, image, world, node, ip):
        self.world, self.node, self.ip = world, node, ip
        self.tag = f"node {node}"
        self.hz = EthHarness(image, world, node, self.tag)
        self.hz.guard_cfg()
        self.mac = bytes(world.identity(node)[0])
        self.ctx = None
        self.handlers = None
        # The protocol's send buffers: a bump allocator over physically scattered pages.
        self.arena, self.arena_bus = self.hz.device.scattered_buffer(48)
        self.arena_used = 0

    def runs(self):
        return len(self.hz.se.emu.runs)

    # ---- bring-up ----
    def bring_up(self):
        hz, t = self.hz, self.tag
        hz.se.run_module(hz.module, all_entrypoints=False)
        entry = hz.se.emu.runs[0]
        check(not entry.error and entry.ret_val == 0 and hz.chars is not None,
              f"{t}: DriverEntry ran, STATUS_SUCCESS, the miniport registered ({entry.error or ''})")
        self.handlers = run.miniport_handlers(hz.chars)
        st = hz.call(self.handlers["SetOptionsHandler"], [DRIVER_HANDLE, 0], f"{t}: MiniportSetOptions")
        check(st == NDIS_STATUS_SUCCESS, f"{t}: MiniportSetOptions: SUCCESS ({st:#x})")
        st = hz.call(self.handlers["InitializeHandlerEx"], [ADAPTER_HANDLE, 0, run.init_params(hz)],
                     f"{t}: MiniportInitializeEx")
        hz.check_kept(f"{t}: after InitializeEx")
        hz.pump()
        check(st == NDIS_STATUS_SUCCESS, f"{t}: MiniportInitializeEx on 15AD:07B0: SUCCESS ({st:#x})")
        check("NdisMGetBusData" in hz.calls and hz.pci_ids == VMXNET3_PCI_IDS,
              f"{t}: InitializeEx read the function's PCI IDs (NdisMGetBusData answered 15AD:07B0)")
        types = [a[1] for a in hz.attributes]
        # Issue 25: the adapter offers NDK for its slot's PVRDMA function; with none here (no
        # driver for it in this run, or none in the slot) Enabled stays FALSE.
        if not check(types == [0x9E, 0x9F, 0xB3], f"{t}: registration, general and NDK attributes, in order "
                                                   f"({[hex(x) for x in types]})"):
            return False
        _h, _t, rev, size, ndk, _caps = hz.attributes[2]
        check((rev, size, ndk[4]) == (1, 0x10, 0),
              f"{t}: NDK attributes REVISION_1 0x10, Enabled FALSE (no PVRDMA function joined) ({rev}, {size:#x}, {ndk[4]})")
        _h, _t, rev, size, reg, _ = hz.attributes[0]
        self.ctx, flags, hang, iface = struct.unpack_from("<QIIi", reg, 8)
        check((rev, size, flags, hang, iface) == (2, 0x1C, 0x9, 0, 5) and self.ctx,
              f"{t}: registration attributes REVISION_2 0x1C, HARDWARE_DEVICE | BUS_MASTER, no hang check, PCI "
              f"({rev}, {size:#x}, {flags:#x}, {hang}, {iface})")
        self.check_general(hz.attributes[1])
        check(hz.config_reads == run.KEYWORDS and not hz.config_open,
              f"{t}: the vmxnet3 adapter read its NDK keywords and closed the configuration ({hz.config_reads})")
        # Resources: BAR0 and BAR1 mapped, not the MSI-X BAR; SG DMA; MSI-X handlers.
        check(sorted(hz.device.mapped) == [VMX_BAR0, VMX_BAR1],
              f"{t}: BAR0 and BAR1 mapped, BAR2 (the MSI-X table) not ({[hex(p) for p in hz.device.mapped]})")
        d = hz.dma_desc
        check(header(d) == (0x83, 2, 0x30) and struct.unpack_from("<I", d, 4)[0] & 1
              and hz.is_cfg_target(struct.unpack_from("<Q", d, 0x10)[0]),
              f"{t}: SG DMA registered: (0x83, 2, 0x30), 64-bit, ProcessSGListHandler a CFG target")
        ic = hz.interrupt_chars
        isrs = struct.unpack_from("<4Q", ic, 8) + struct.unpack_from("<4Q", ic, 0x30)
        check(header(ic) == (0x84, 1, 0x60) and ic[0x28] == 1 and all(hz.is_cfg_target(f) for f in isrs),
              f"{t}: NdisMRegisterInterruptEx: (0x84, 1, 0x60), MsiSupported, eight handlers, CFG targets")
        # The receive NBLs: one pool (NET_BUFFER_LIST_POOL_PARAMETERS), one MDL and one NBL
        # per receive buffer.
        if check(len(hz.pool_params) == 1, f"{t}: one NBL pool ({len(hz.pool_params)})"):
            handle, p = hz.pool_params[0]
            proto, alloc_nb, ctx_size, tag, data = struct.unpack_from("<BBHII", p, 4)
            check(handle == ADAPTER_HANDLE and header(p) == (0x80, 1, 0x10)
                  and (proto, alloc_nb, ctx_size, tag, data) == (0, 1, 0, int.from_bytes(b"Vmx3", "little"), 0),
                  f"{t}: NdisAllocateNetBufferListPool(adapter, (0x80, 1, 0x10), PROTOCOL_ID_DEFAULT, NET_BUFFERs, "
                  f"no context, 'Vmx3', no data) ({header(p)}, {proto}, {alloc_nb}, {ctx_size}, {tag:#x}, {data})")
        check(len(hz.nbls) == len(hz.mdls) == 512 and all(d["context"] == (0, 0) for d in hz.nbls.values()),
              f"{t}: 512 receive NBLs, one MDL each ({len(hz.nbls)}, {len(hz.mdls)})")
        active, link, mac, revision = self.world.vmx_state(self.node)
        check((active, link, mac, revision) == (True, True, self.mac, 1),
              f"{t}: the model is active, link up, the MAC, revision 1 ({active}, {link}, {mac.hex()}, {revision})")
        flt = self.world.vmx_filter(self.node)
        check(flt == (0, []), f"{t}: the device receives nothing until NDIS sets a packet filter ({flt})")
        st = hz.call(self.handlers["RestartHandler"], [self.ctx, restart_params(hz)], f"{t}: MiniportRestart")
        hz.pump()
        check(st == NDIS_STATUS_SUCCESS and hz.link_indications() == [],
              f"{t}: MiniportRestart: SUCCESS, no link indication (the attributes said it) ({st:#x})")
        return True

    def check_general(self, attr):
        _h, _t, rev, size, g, pm = attr
        t = self.tag
        check((rev, size) == (2, 0xE0), f"{t}: general attributes REVISION_2, 0xE0 ({rev}, {size:#x})")
        media, phys, mtu = struct.unpack_from("<iiI", g, 8)
        max_x, x, max_r, r = struct.unpack_from("<QQQQ", g, 0x18)
        state, duplex = struct.unpack_from("<ii", g, 0x38)
        check((media, mtu, max_x, x, max_r, r, state, duplex) == (0, MTU, LINK_10G, LINK_10G, LINK_10G, LINK_10G,
                                                                 NDIS_MEDIA_STATE_CONNECTED, 2),
              f"{t}: general attributes: NdisMedium802_3, MtuSize 1500, 10 Gb/s each way (GET_LINK), connected, "
              f"full duplex ({media}, {mtu}, {x}, {r}, {max_x}, {state}, {duplex})")
        mac_options, _filters, mcast, mac_len = struct.unpack_from("<IIIH", g, 0x50)
        perm, cur = g[0x5E:0x5E + mac_len], g[0x7E:0x7E + mac_len]
        check((mac_options, mcast, mac_len, perm, cur) == (0xD, 32, 6, self.mac, self.mac),
              f"{t}: MacOptions COPY_LOOKAHEAD_DATA | TRANSFERS_NOT_PEND | NO_LOOPBACK, 32 multicast addresses, "
              f"permanent and current MAC the vNIC's ({mac_options:#x}, {mcast}, {perm.hex()}, {cur.hex()})")
        if_type = struct.unpack_from("<H", g, 0xB4)[0]
        oid_list, oid_len = struct.unpack_from("<QI", g, 0xC8)
        self.supported_oids = struct.unpack(f"<{oid_len // 4}I", self.hz.read(oid_list, oid_len)) if oid_list else ()
        check(if_type == 6 and oid_len % 4 == 0 and {OID_GEN_CURRENT_PACKET_FILTER, OID_802_3_MULTICAST_LIST,
                                                      OID_GEN_STATISTICS} <= set(self.supported_oids),
              f"{t}: IfType ETHERNET_CSMACD, a supported-OID list with the filter, multicast and statistics OIDs "
              f"({if_type}, {oid_len})")
        check(pm is not None and header(pm) == (0x80, 2, 0x3C) and pm[4:] == bytes(0x38),
              f"{t}: PowerManagementCapabilitiesEx: (0x80, 2, 0x3C), no wake-up")

    # ---- OIDs ----
    def oid(self, rtype, oid_value, payload, length):
        return run.oid_call(self.hz, self.handlers, self.ctx, rtype, oid_value, payload, length)

    def configure(self, multicast):
        """What NDIS and TCP/IP set after the restart: the packet filter (directed, multicast,
        broadcast) and a multicast list; each reaches the device's DriverShared filter."""
        t = self.tag
        f = NDIS_PACKET_TYPE_DIRECTED | NDIS_PACKET_TYPE_MULTICAST | NDIS_PACKET_TYPE_BROADCAST
        st, done, _, _ = self.oid(1, OID_GEN_CURRENT_PACKET_FILTER, struct.pack("<I", f), 4)
        check((st, done) == (NDIS_STATUS_SUCCESS, 4), f"{t}: OID_GEN_CURRENT_PACKET_FILTER set: SUCCESS, 4 bytes read")
        st, done, _, out = self.oid(0, OID_GEN_CURRENT_PACKET_FILTER, b"", 4)
        check((st, done, out) == (NDIS_STATUS_SUCCESS, 4, struct.pack("<I", f)),
              f"{t}: OID_GEN_CURRENT_PACKET_FILTER query: {f:#x} ({st:#x}, {out.hex()})")
        st, done, _, _ = self.oid(1, OID_802_3_MULTICAST_LIST, b"".join(multicast), 6 * len(multicast))
        check((st, done) == (NDIS_STATUS_SUCCESS, 6 * len(multicast)),
              f"{t}: OID_802_3_MULTICAST_LIST set ({len(multicast)}): SUCCESS ({st:#x}, {done})")
        flt = self.world.vmx_filter(self.node)
        check(flt == (RXM_UCAST | RXM_MCAST | RXM_BCAST, [bytes(m) for m in multicast]),
              f"{t}: the device's rxMode is UCAST | MCAST | BCAST, its multicast table the list ({flt})")
        for oid, want in ((OID_802_3_CURRENT_ADDRESS, self.mac), (OID_802_3_PERMANENT_ADDRESS, self.mac),
                          (OID_GEN_MAXIMUM_FRAME_SIZE, struct.pack("<I", MTU))):
            st, done, _, out = self.oid(0, oid, b"", len(want))
            check((st, done, out) == (NDIS_STATUS_SUCCESS, len(want), want), f"{t}: OID {oid:#x}: {want.hex()} ({out.hex()})")
        st, done, _, out = self.oid(0, OID_GEN_SUPPORTED_LIST, b"", 4 * len(self.supported_oids))
        check((st, done) == (NDIS_STATUS_SUCCESS, 4 * len(self.supported_oids))
              and struct.unpack(f"<{len(self.supported_oids)}I", out) == self.supported_oids,
              f"{t}: OID_GEN_SUPPORTED_LIST equals the general attributes' list")

    def statistics(self):
        """OID_GEN_STATISTICS (NDIS_STATISTICS_INFO, ntddndis.h): the packet and octet counts."""
        st, done, _, b = self.oid(0, OID_GEN_STATISTICS, b"", 0x98)
        check((st, done, header(b)) == (NDIS_STATUS_SUCCESS, 0x98, (0x80, 1, 0x98)),
              f"{self.tag}: OID_GEN_STATISTICS: SUCCESS, NDIS_STATISTICS_INFO (0x80, 1, 0x98) ({st:#x}, {done})")
        f = struct.unpack_from("<18Q", b, 8)
        return {"in_ucast": f[3], "in_mcast": f[4], "in_bcast": f[5], "out_ucast": f[7], "out_mcast": f[8],
                "out_bcast": f[9], "in_octets": f[2], "out_octets": f[6]}

    # ---- the protocol's sends ----
    def buffer(self, length, offset=0):
        """`length` bytes of the arena (physically scattered pages), starting `offset` bytes
        into a fresh page: the guest VA."""
        pages = (offset + length + 0xFFF) >> 12
        if self.arena_used + pages > len(self.arena_bus):
            raise RuntimeError("send arena exhausted")
        va = self.arena + self.arena_used * 0x1000 + offset
        self.arena_used += pages
        return va

    def mdl(self, va, data, pfns=None):
        """An MDL over `data` written at `va` (wdm.h layout, the PFNs of the arena's pages, or
        `pfns`)."""
        hz = self.hz
        hz.se.mem_write(va, data)
        pages = ((va & 0xFFF) + len(data) + 0xFFF) >> 12
        m = hz.alloc(MDL_PFNS + 8 * pages, "send_mdl")
        if pfns is None:
            pfns = [hz.device.bus_of((va & ~0xFFF) + i * 0x1000) >> 12 for i in range(pages)]
        hz.se.mem_write(m, struct.pack("<QhhHHQQQII", 0, MDL_PFNS + 8 * pages, MDL_SOURCE_IS_NONPAGED_POOL, 0, 0,
                                       0, va, va & ~0xFFF, len(data), va & 0xFFF)
                        + b"".join(struct.pack("<Q", p) for p in pfns))
        return m

    def net_buffer(self, frame, layout):
        """A NET_BUFFER for `frame`: "one" MDL, "split" (the 42 bytes of Ethernet, IP and ICMP
        headers in one MDL, the data in another that crosses a page boundary between two
        pages whose bus addresses are out of order), "backfill" (one MDL whose first 16
        bytes are backfill: DataOffset and CurrentMdlOffset 16), or "unreachable" (one MDL
        whose PFN names a page outside the node's memory: the device's read faults)."""
        hz = self.hz
        nb = hz.alloc(NB_SIZE, "send_nb")
        offset = 0
        if layout == "split":
            head = self.mdl(self.buffer(42, 0x100), frame[:42])
            tail = self.mdl(self.buffer(len(frame) - 42, 0x1000 - 0x200), frame[42:])
            hz.se.mem_write(head, struct.pack("<Q", tail))
            first = head
        elif layout == "unreachable":
            first = self.mdl(self.buffer(len(frame), 0x80), frame, pfns=[UNREACHABLE_PFN])
        elif layout == "backfill":
            offset = 16
            first = self.mdl(self.buffer(len(frame) + offset, 0x40), b"\xBF" * offset + frame)
        else:
            first = self.mdl(self.buffer(len(frame), 0x80), frame)
        hz.se.mem_write(nb, b"\0" * NB_SIZE)
        hz.se.mem_write(nb + NB_CURRENT_MDL, struct.pack("<QIIQQQ", first, offset, 0, len(frame), first, offset))
        return nb

    def send(self, nbls, what, expect=NDIS_STATUS_SUCCESS):
        """MiniportSendNetBufferLists with a chain of NBLs, each a list of (frame, layout):
        returns the NBLs' addresses."""
        hz = self.hz
        addrs = []
        for frames in nbls:
            nbl = hz.alloc(NBL_SIZE, "send_nbl")
            hz.se.mem_write(nbl, b"\0" * NBL_SIZE)
            nbs = [self.net_buffer(f, layout) for f, layout in frames]
            for a, b in zip(nbs, nbs[1:]):
                hz.se.mem_write(a + NB_NEXT, struct.pack("<Q", b))
            hz.se.mem_write(nbl + NBL_FIRST_NB, struct.pack("<Q", nbs[0]))
            # The status the miniport must overwrite.
            hz.se.mem_write(nbl + NBL_STATUS, struct.pack("<I", 0xDEADBEEF))
            hz.sent[nbl] = {"frames": [f for f, _ in frames], "completions": 0, "status": None, "flags": None}
            hz.send_order.append(nbl)
            addrs.append(nbl)
        for a, b in zip(addrs, addrs[1:]):
            hz.se.mem_write(a + NBL_NEXT, struct.pack("<Q", b))
        hz.call(self.handlers["SendNetBufferListsHandler"], [self.ctx, addrs[0], 0, 0],
                f"{self.tag}: MiniportSendNetBufferLists ({what})")
        return addrs

    def completed(self, nbls, what, status=NDIS_STATUS_SUCCESS, dispatch=True):
        """Each NBL completed once with `status`, from a DPC (`dispatch`) or not, its
        NDIS_SEND_COMPLETE_FLAGS_DISPATCH_LEVEL saying which."""
        got = [(self.hz.sent[n]["completions"], self.hz.sent[n]["status"]) for n in nbls]
        where = [(self.hz.sent[n].get("dispatch"), self.hz.sent[n]["flags"]) for n in nbls]
        want = (dispatch, NDIS_SEND_COMPLETE_FLAGS_DISPATCH_LEVEL if dispatch else 0)
        ok = check(got == [(1, status)] * len(nbls),
                   f"{self.tag}: {what}: every NBL completed once with {status:#x} ({got})")
        return check(where == [want] * len(nbls),
                     f"{self.tag}: {what}: completed {'from a DPC, DISPATCH_LEVEL' if dispatch else 'at PASSIVE_LEVEL'}"
                     f" as the flags say ((in a DPC, flags): {where})") and ok

    def take_received(self):
        got, self.hz.received = self.hz.received, []
        return got

    def return_held(self):
        """MiniportReturnNetBufferLists with what NDIS holds, chained, as NDIS returns them
        once the protocol is done with them (PASSIVE_LEVEL, between calls)."""
        hz = self.hz
        held, hz.held = hz.held, []
        if not held:
            return
        for a, b in zip(held, held[1:] + [0]):
            hz.se.mem_write(a + NBL_NEXT, struct.pack("<Q", b))
        hz.call(self.handlers["ReturnNetBufferListsHandler"], [self.ctx, held[0], 0],
                f"{self.tag}: MiniportReturnNetBufferLists({len(held)})")
        hz.pump()


def restart_params(hz):
    """NDIS_MINIPORT_RESTART_PARAMETERS (ndis.h): header (0x80, 1, 0x20), no attributes."""
    p = hz.alloc(0x20, "restart_params")
    hz.se.mem_write(p, struct.pack("<BBH", 0x80, 1, 0x20) + b"\0" * 0x1C)
    return p


def pause_params(hz):
    """NDIS_MINIPORT_PAUSE_PARAMETERS (ndis.h): header (0x80, 1, 0x10), Flags 0, PauseReason
    NDIS_PAUSE_NDIS_INTERNAL (1)."""
    p = hz.alloc(0x10, "pause_params")
    hz.se.mem_write(p, struct.pack("<BBHII", 0x80, 1, 0x10, 0, 1) + b"\0" * 4)
    return p


def exchange(world, a, b, nbls, what):
    """`a` sends `nbls` (lists of (frame, layout)); `b` must receive exactly those frames, in
    order, its stack answering each with one NBL of one frame (a chain); `a` must receive
    exactly the answers. Returns the answers."""
    sides = (a, b)
    frames = [f for nbl in nbls for f, _ in nbl]
    sent = a.send(nbls, what)
    settle(world, sides)
    a.completed(sent, what)
    got = b.take_received()
    check([r["frame"] for r in got] == [r["dma"] for r in got] == frames,
          f"{b.tag}: received {len(frames)} frame(s) of {what}, byte for byte, as sent (the protocol's and the "
          f"device's view) ({[len(r['frame'] or b'') for r in got]})")
    check(all(r["flags"] == NDIS_RECEIVE_FLAGS_DISPATCH_LEVEL and r["dispatch"] for r in got),
          f"{b.tag}: indicated from a DPC with NDIS_RECEIVE_FLAGS_DISPATCH_LEVEL, the NBLs lent to NDIS "
          f"({[(r['flags'], r['dispatch']) for r in got]})")
    check(a.take_received() == [], f"{a.tag}: nothing of its own came back (NO_LOOPBACK)")
    replies = [answer(r["frame"] or b"", b.mac, b.ip) for r in got]
    b.return_held()
    if not check(all(replies), f"{b.tag}: its stack answers each frame of {what}"):
        return []
    sent = b.send([[(r, "one")] for r in replies], f"answers to {what}")
    settle(world, sides)
    b.completed(sent, f"answers to {what}")
    back = a.take_received()
    check([r["frame"] for r in back] == [r["dma"] for r in back] == replies,
          f"{a.tag}: received the {len(replies)} answer(s) to {what}, byte for byte ({[len(r['frame'] or b'') for r in back]})")
    a.return_held()
    return [parse(r) for r in replies]


def scenario(image, image2, kind):
    world = pvrdma_simbridge.World(2, kind=kind)
    hosts = [Host(image if i == 0 else (image2 or image), world, i, IPS[i]) for i in (0, 1)]
    a, b = hosts
    print(f"-- two {kind} nodes: {a.tag} ({a.ip}, {a.mac.hex(':')}) and {b.tag} ({b.ip}, {b.mac.hex(':')})")
    if kind == "paired":
        fns = [world.functions(i) for i in (0, 1)]
        check(all(f == [(0, 0x15AD, 0x07B0), (1, 0x15AD, 0x0820)] for f in fns),
              f"each slot: vmxnet3 at function 0, PVRDMA at function 1 ({fns})")
    for h in hosts:
        if not h.bring_up():
            return hosts
    for h in hosts:
        # The all-hosts group as TCP/IP joins it (01:00:5e:00:00:01).
        h.configure([bytes.fromhex("01005e000001")])
    before = [world.vmx_counters(i) for i in (0, 1)]

    # ARP: a broadcast request, a unicast reply.
    arp_req = ether(BROADCAST, a.mac, ETH_P_ARP, arp(1, a.mac, a.ip, b"\0" * 6, b.ip))
    got = exchange(world, a, b, [[(arp_req, "one")]], "an ARP request for " + b.ip)
    check(got == [("arp", 2, b.mac, b.ip, a.ip)], f"{a.tag}: the ARP reply says {b.ip} is at {b.mac.hex(':')} ({got})")
    peer = got[0][2] if got else b.mac

    # ICMP echo: 1400 bytes of data in an MDL of its own that crosses a page boundary
    # between two pages whose bus addresses are out of order.
    rnd = random.Random(24)
    data = rnd.randbytes(1400)
    got = exchange(world, a, b, [[(echo_request(a.mac, peer, a.ip, b.ip, 1, data), "split")]], "an ICMP echo request")
    check(got == [("echo", 0, b.ip, a.ip, ECHO_ID, 1, data)], f"{a.tag}: the echo reply carries seq 1 and the 1400 bytes")

    # A chain of two NBLs, the first with two NET_BUFFERs (the second backfilled), the
    # second with one: three frames in order, three answers in order.
    payloads = {seq: rnd.randbytes(n) for seq, n in ((2, 56), (3, 1000), (4, 1472))}
    req = {seq: echo_request(a.mac, peer, a.ip, b.ip, seq, d) for seq, d in payloads.items()}
    got = exchange(world, a, b, [[(req[2], "one"), (req[3], "backfill")], [(req[4], "split")]],
                   "a chain of 2 NBLs (2 + 1 NET_BUFFERs)")
    check(got == [("echo", 0, b.ip, a.ip, ECHO_ID, s, payloads[s]) for s in (2, 3, 4)],
          f"{a.tag}: three echo replies, seq 2, 3, 4, their data")

    # What each side counted: the device (GET_STATS through OID_GEN_STATISTICS) and the model.
    after = [world.vmx_counters(i) for i in (0, 1)]
    stats = [h.statistics() for h in hosts]
    a_out = [arp_req] + [echo_request(a.mac, peer, a.ip, b.ip, 1, data)] + [req[s] for s in (2, 3, 4)]
    check((stats[0]["out_bcast"], stats[0]["out_ucast"], stats[0]["in_ucast"], stats[0]["in_bcast"]) == (1, 4, 5, 0)
          and (stats[1]["in_bcast"], stats[1]["in_ucast"], stats[1]["out_ucast"], stats[1]["out_bcast"]) == (1, 4, 5, 0),
          f"OID_GEN_STATISTICS: {a.tag} sent 1 broadcast + 4 unicast and received 5, {b.tag} the mirror "
          f"({stats[0]}, {stats[1]})")
    check(stats[0]["out_octets"] == sum(len(f) for f in a_out) == stats[1]["in_octets"],
          f"the octets {a.tag} sent are the frames' and {b.tag} received as many "
          f"({stats[0]['out_octets']}, {sum(len(f) for f in a_out)}, {stats[1]['in_octets']})")
    moved = [(x["tx_frames"] - y["tx_frames"], x["rx_frames"] - y["rx_frames"]) for x, y in zip(after, before)]
    check(moved == [(5, 5), (5, 5)], f"the models sent and received 5 frames each ({moved})")

    # The filter at work: a frame to the group in the multicast list arrives, one to another
    # group is refused by the device (OID_802_3_MULTICAST_LIST reached its table).
    group = bytes.fromhex("01005e000001")
    joined = ether(group, a.mac, ETH_P_IP, ipv4(a.ip, "224.0.0.1", 1, icmp_echo(8, ECHO_ID, 12, b"joined"), 12))
    other = ether(bytes.fromhex("01005e0000fb"), a.mac, ETH_P_IP,
                  ipv4(a.ip, "224.0.0.251", 1, icmp_echo(8, ECHO_ID, 13, b"other"), 13))
    filtered = world.vmx_counters(1)["rx_filtered"]
    sent = a.send([[(joined, "one")], [(other, "one")]], "to the joined group and to another")
    settle(world, hosts)
    a.completed(sent, "two multicast frames")
    got = b.take_received()
    b.return_held()
    check([r["frame"] for r in got] == [joined] and world.vmx_counters(1)["rx_filtered"] == filtered + 1,
          f"{b.tag}: the frame to 224.0.0.1's group indicated, the other group's filtered by the device "
          f"({len(got)}, {world.vmx_counters(1)['rx_filtered'] - filtered})")

    # The link: node 1's port down, then up: one indication each, only on node 1.
    world.set_link(1, False)
    settle(world, hosts)
    check(b.hz.link_indications() == [(NDIS_MEDIA_STATE_DISCONNECTED, run.NDIS_LINK_SPEED_UNKNOWN,
                                       run.NDIS_LINK_SPEED_UNKNOWN)],
          f"{b.tag}: link down: one NDIS_STATUS_LINK_STATE, disconnected, speeds unknown")
    world.set_link(1, True)
    settle(world, hosts)
    check(b.hz.link_indications() == [(NDIS_MEDIA_STATE_CONNECTED, LINK_10G, LINK_10G)],
          f"{b.tag}: link up: one NDIS_STATUS_LINK_STATE, connected at 10 Gb/s")
    check(a.hz.link_indications() == [], f"{a.tag}: no link indication")

    # MiniportResetEx with a frame in the device: PENDING, the reset from the work item,
    # NdisMResetComplete(SUCCESS, AddressingReset FALSE); the frame the device never sent
    # ends REQUEST_ABORTED; traffic flows after it.
    in_flight = a.send([[(echo_request(a.mac, peer, a.ip, b.ip, 5, b"lost"), "one")]], "echo seq 5, then a reset")
    out = a.hz.alloc(1, "addressing_reset")
    a.hz.se.mem_write(out, b"\x01")
    st = a.hz.call(a.handlers["ResetHandlerEx"], [a.ctx, out], f"{a.tag}: MiniportResetEx")
    check(st == NDIS_STATUS_PENDING and a.hz.read(out, 1) == b"\0" and len(a.hz.pending_work) == 1,
          f"{a.tag}: MiniportResetEx: PENDING, AddressingReset FALSE, one work item queued ({st:#x})")
    st2 = a.hz.call(a.handlers["ResetHandlerEx"], [a.ctx, out], f"{a.tag}: MiniportResetEx again")
    check(st2 == 0xC001000D, f"{a.tag}: a reset while one is queued: NDIS_STATUS_RESET_IN_PROGRESS ({st2:#x})")
    # The work item runs before the device looks at its Tx ring: QUIESCE_DEV drops the
    # doorbell, the frame was never sent.
    a.hz.run_work_items()
    settle(world, hosts)
    check(a.hz.reset_completions == [(ADAPTER_HANDLE, NDIS_STATUS_SUCCESS, 0)],
          f"{a.tag}: NdisMResetComplete(adapter, SUCCESS, FALSE) once ({a.hz.reset_completions})")
    a.completed(in_flight, "the frame in the device at the reset (from the work item)", NDIS_STATUS_REQUEST_ABORTED,
                dispatch=False)
    check(b.take_received() == [], f"{b.tag}: the aborted frame never arrived")
    got = exchange(world, a, b, [[(echo_request(a.mac, peer, a.ip, b.ip, 6, data[:64]), "one")]], "echo seq 6 after the reset")
    check(got == [("echo", 0, b.ip, a.ip, ECHO_ID, 6, data[:64])], f"{a.tag}: the reset device carries echo seq 6")

    # A device fault: a frame in a page the device cannot reach. The model's read faults and
    # it stops the Tx queue (TQERR, V8); the event DPC reads the queue status and the
    # miniport asks NDIS for a reset (NdisMResetMiniport), which NDIS answers with
    # MiniportResetEx: the frame ends REQUEST_ABORTED, the device carries traffic again.
    faults = world.vmx_counters(0)
    bad = a.send([[(echo_request(a.mac, peer, a.ip, b.ip, 10, b"unreachable"), "unreachable")]],
                 "echo seq 10 in a page the device cannot reach")
    settle(world, hosts)
    now = world.vmx_counters(0)
    check((now["dma_faults"] - faults["dma_faults"], now["tx_queue_errors"] - faults["tx_queue_errors"]) == (1, 1),
          f"{a.tag}: the model faulted on the frame and stopped its Tx queue (TQERR)")
    check(a.hz.reset_requests == 1 and a.hz.sent[bad[0]]["completions"] == 0,
          f"{a.tag}: the miniport asked NDIS for a reset (NdisMResetMiniport once); the frame is not completed "
          f"({a.hz.reset_requests})")
    a.hz.se.mem_write(out, b"\x01")
    st = a.hz.call(a.handlers["ResetHandlerEx"], [a.ctx, out], f"{a.tag}: MiniportResetEx (NDIS's answer)")
    settle(world, hosts)
    check(st == NDIS_STATUS_PENDING and a.hz.read(out, 1) == b"\0" and a.hz.reset_completions[1:] == [(ADAPTER_HANDLE, NDIS_STATUS_SUCCESS, 0)],
          f"{a.tag}: MiniportResetEx: PENDING, then NdisMResetComplete(SUCCESS, FALSE) ({st:#x}, {a.hz.reset_completions})")
    a.completed(bad, "the frame the device faulted on", NDIS_STATUS_REQUEST_ABORTED, dispatch=False)
    check(b.take_received() == [] and a.hz.reset_requests == 1,
          f"{b.tag}: nothing arrived; no second reset request")
    got = exchange(world, a, b, [[(echo_request(a.mac, peer, a.ip, b.ip, 11, data[:300]), "split")]],
                   "echo seq 11 after the fault's reset")
    check(got == [("echo", 0, b.ip, a.ip, ECHO_ID, 11, data[:300])], f"{a.tag}: the device carries echo seq 11")

    # Pause with a receive NDIS still holds: PENDING until it comes back; sends fail PAUSED;
    # frames for the paused adapter are dropped by its quiesced device; restart recovers.
    a.send([[(echo_request(a.mac, peer, a.ip, b.ip, 7, b"held"), "one")]], "echo seq 7 (held by NDIS)")
    settle(world, hosts)
    held = b.take_received()
    check(len(held) == 1 and len(b.hz.held) == 1, f"{b.tag}: echo seq 7 indicated and held ({len(held)})")
    st = b.hz.call(b.handlers["PauseHandler"], [b.ctx, pause_params(b.hz)], f"{b.tag}: MiniportPause")
    b.hz.pump()
    check(st == NDIS_STATUS_PENDING and b.hz.pause_completions == [],
          f"{b.tag}: MiniportPause with a receive held: PENDING, not complete ({st:#x})")
    paused = b.send([[(answer(held[0]["frame"], b.mac, b.ip), "one")]], "a send while pausing")
    b.completed(paused, "a send while pausing (inside the call)", NDIS_STATUS_PAUSED, dispatch=False)
    inactive = world.vmx_counters(1)["rx_inactive"]
    a.send([[(echo_request(a.mac, peer, a.ip, b.ip, 8, b"dropped"), "one")]], "echo seq 8 to the paused node")
    settle(world, hosts)
    check(b.take_received() == [] and world.vmx_counters(1)["rx_inactive"] == inactive + 1,
          f"{b.tag}: the frame for the pausing adapter was dropped by its quiesced device, nothing indicated")
    b.return_held()
    check(b.hz.pause_completions == [ADAPTER_HANDLE],
          f"{b.tag}: the last return completed the pause: NdisMPauseComplete once ({b.hz.pause_completions})")
    st = b.hz.call(b.handlers["RestartHandler"], [b.ctx, restart_params(b.hz)], f"{b.tag}: MiniportRestart")
    b.hz.pump()
    check(st == NDIS_STATUS_SUCCESS and world.vmx_state(1)[0], f"{b.tag}: MiniportRestart: SUCCESS, the device active again")
    check(world.vmx_filter(1) == (RXM_UCAST | RXM_MCAST | RXM_BCAST, [bytes.fromhex("01005e000001")]),
          f"{b.tag}: the restart wrote the filter back ({world.vmx_filter(1)})")
    got = exchange(world, a, b, [[(echo_request(a.mac, peer, a.ip, b.ip, 9, data[:200]), "split")]], "echo seq 9 after the restart")
    check(got == [("echo", 0, b.ip, a.ip, ECHO_ID, 9, data[:200])], f"{a.tag}: the restarted node answers echo seq 9")

    # Teardown: Pause (nothing held: SUCCESS at once), Halt, Unload.
    for h in hosts:
        hz, t = h.hz, h.tag
        st = hz.call(h.handlers["PauseHandler"], [h.ctx, pause_params(hz)], f"{t}: MiniportPause")
        hz.pump()
        check(st == NDIS_STATUS_SUCCESS and len(hz.pause_completions) == (1 if h is b else 0),
              f"{t}: MiniportPause with nothing held: SUCCESS at once ({st:#x})")
        hz.call(h.handlers["HaltHandlerEx"], [h.ctx, 0], f"{t}: MiniportHaltEx")
        hz.call(h.handlers["UnloadHandler"], [0], f"{t}: MiniportDriverUnload")
        check(hz.deregistered == [DRIVER_HANDLE], f"{t}: Unload deregistered the driver")
        check(not hz.maps, f"{t}: Halt unmapped BAR0 and BAR1 and deregistered DMA and the interrupt ({list(hz.maps)})")
        check(not hz.nbls and not hz.mdls and not hz.nbl_pools and not hz.held,
              f"{t}: every receive NBL, MDL and the pool freed, none held ({len(hz.nbls)}, {len(hz.mdls)}, "
              f"{len(hz.nbl_pools)}, {len(hz.held)})")
        check((hz.nbl_allocs, hz.mdl_allocs, hz.frees["NdisFreeNetBufferList"], hz.frees["NdisFreeMdl"])
              == (512, 512, 512, 512) and not hz.misuse,
              f"{t}: 512 NdisAllocateMdl (each the adapter's, over memory the device reaches) and 512 "
              f"NdisAllocateNetBufferAndNetBufferList (from the live pool) over the run, each freed once, the NBL "
              f"(never one NDIS held) before its MDL ({hz.nbl_allocs}, {hz.mdl_allocs}, {hz.frees}, {hz.misuse[:3]})")
        once = [n for n, r in hz.sent.items() if r["completions"] != 1]
        check(not once, f"{t}: every one of the {len(hz.sent)} NBLs the protocol sent completed exactly once ({once})")
        check(hz.reset_requests == (1 if h is a else 0),
              f"{t}: the miniport asked for a reset only for the device fault ({hz.reset_requests})")
        hz.device.free_scattered(h.arena)
        leaks = hz.device.leaks()
        check(not hz.pool and not hz.shared and not leaks,
              f"{t}: no pool block, shared-memory block or DMA region left ({len(hz.pool)}, {len(hz.shared)}, {leaks})")
        c = world.vmx_counters(h.node)
        injected = 1 if h is a else 0
        got = (c["dma_faults"], c["tx_queue_errors"], c["bad_mmio"], c["tx_errors"], c["rx_errors"], c["rx_queue_errors"])
        check(not world.vmx_state(h.node)[0] and got == (injected, injected, 0, 0, 0, 0),
              f"{t}: the device stopped; no DMA fault or Tx queue error but the injected one, no bad MMIO, "
              f"Tx/Rx error or Rx queue error in the model ({got})")
        check(not hz.cfg_violations and hz.indirect_calls > 0,
              f"{t}: {hz.indirect_calls} indirect calls, all to CFG targets {[hex(v) for v in hz.cfg_violations]}")
        finish_checks(h)
        if kind == "paired":
            pc = world.counters(h.node)
            check((pc["commands"], pc["cqes"], pc["dma_faults"]) == (0, 0, 0),
                  f"{t}: the PVRDMA function beside it (no driver) saw nothing: no command, no CQE "
                  f"(no frame was RoCE) ({pc['commands']}, {pc['cqes']})")
        print(f"info {t}: device commands: " + ", ".join(CMD_NAMES.get(c, hex(c)) for c in hz.device.commands))
    return hosts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("image")
    ap.add_argument("image2", nargs="?")
    ap.add_argument("--paired", action="store_true", help="each vmxnet3 beside a PVRDMA function (function 1)")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--stack-report", action="store_true",
                    help="measure each top-level call's stack high-water mark (run.py's)")
    args = ap.parse_args()
    run.verbose = args.verbose
    run.measure_stack = args.stack_report
    started = time.monotonic()
    hosts = scenario(args.image, args.image2, "paired" if args.paired else "vmxnet3")
    if args.stack_report:
        run.stack_report([h.hz for h in hosts])
    for line in run.log_lines:
        print("info DbgPrintEx: " + line.rstrip())
    if run.failures:
        print(f"{len(run.failures)} check(s) failed", file=sys.stderr)
        return 1
    calls = sum(h.hz.indirect_calls for h in hosts)
    print(f"two {'paired ' if args.paired else ''}vmxnet3 nodes, ARP and ICMP echo through the emulated .sys: "
          f"{run.passed} checks passed, {calls} CFG-checked indirect calls ({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
