#!/usr/bin/env python3
"""The paired slot in the real .sys (issue 25): ONE emulated image drives both functions of a
paired vNIC of a pvrdma_simbridge.World, the vmxnet3 function (15AD:07B0, function 0, the
visible Net adapter) and the PVRDMA function (15AD:0820, function 1, `Paired` = 1 in its
registry as the INF sets it), two adapters of one driver as Windows runs them
(docs/BUILD.md, "The paired slot").

Usage: paired.py IMAGE.sys [--verbose]

The harness is vmx.py's (run.py's kernel and NDIS, vmx.py's Ethernet data path) with a second
adapter: each NDIS call names its adapter by handle (NdisMGetBusData, NdisMGetDeviceProperty,
the BAR mappings, DMA, interrupts, shared memory, work items, the configuration, PnP events)
and the harness answers for that adapter's function. The PCI location each learns is
NdisMGetDeviceProperty's PDO and IoGetDeviceProperty's DevicePropertyBusNumber /
DevicePropertyAddress (bus 3, device 0, function 0 and 1). A work item queued while the
driver waits runs in that wait (a system worker thread would), and NdisMNetPnPEvent(
NetEventNDKDisable) closes the NDK_ADAPTERs NDIS opened on the adapter before it returns, as
NDIS does.

Per cycle (both start orders, each with both halt orders, in one image as Windows restarts
adapters): InitializeEx of each function; the vmxnet3 adapter registers the NDK attributes
(Enabled FALSE in either order: the second InitializeEx only hands the join to the vmxnet3
adapter's work item, so no GID is bound and nothing attached on an InitializeEx's stack; the
work item attaches the interface, starts the connection engine and issues
NetEventNDKEnable), the PVRDMA adapter none and reads `Paired`; the capabilities
behind the vmxnet3 adapter's pointer are the PVRDMA function's; the connection engine's GIDs
are the vmxnet3 interface's addresses; OpenNDKAdapter on the vmxnet3 adapter opens an adapter
that creates a PD, on the PVRDMA adapter it is refused; the NDK OIDs answer on the vmxnet3
adapter; then Halt of either function first: PVRDMA first disables NDK on the vmxnet3 adapter
(NetEventNDKDisable from its work item, the open NDK_ADAPTER closed by NDIS, GIDs unbound),
vmxnet3 first leaves the PVRDMA function running without an interface; then the other Halt.
At the end Unload, zero leaks, every indirect call a CFG target.
"""
import argparse
import ipaddress
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402
import vmx  # noqa: E402
from run import ADAPTER_HANDLE, DRIVER_HANDLE, NDIS_STATUS_SUCCESS, check, header  # noqa: E402
import two_nodes  # noqa: E402
from two_nodes import finish_checks  # noqa: E402

import pvrdma_simbridge  # noqa: E402

ETH = ADAPTER_HANDLE
PV = 0xADAD_0000_0002
NAMES = {ETH: "vmxnet3", PV: "PVRDMA"}
# The PVRDMA adapter's own interface (hidden, nothing bound): never the one NDK is opened on.
PV_IF_INDEX, PV_LUID = 8, (6 << 48) | (9 << 24)
# OID_NDK_SET_STATE and the NDK OIDs the vmxnet3 adapter answers.
NDIS_STATUS_ADAPTER_NOT_READY = run.NDIS_STATUS_ADAPTER_NOT_READY
NDIS_STATUS_NOT_SUPPORTED = run.NDIS_STATUS_NOT_SUPPORTED
ENABLE, DISABLE = run.NET_EVENT_NDK_ENABLE, run.NET_EVENT_NDK_DISABLE
# The vmxnet3 interface's addresses (NET_LUID) and one of another interface.
ROWS = [(run.NET_LUID, "198.18.0.1"), (run.NET_LUID, "fd00::1"), (run.OTHER_LUID, "198.51.100.7")]


def gid_of(text):
    ip = ipaddress.ip_address(text)
    return (ip.packed if ip.version == 6 else b"\0" * 10 + b"\xff\xff" + ip.packed)


class SlotHarness(vmx.EthHarness):
    """vmx.py's harness with the slot's PVRDMA function as a second adapter (module docs)."""

    def __init__(self, image, world, node, rows=None, neighbours=None):
        self.pv = None
        self.ints = {}
        self.vq = {ETH: [], PV: []}
        self.registries = {ETH: {}, PV: {"Paired": 1}}
        self.config_handles = {}
        self.reads = {ETH: [], PV: []}
        self.events = []
        self.work_owner = {}
        self.dma_handles = {}
        # NDK_ADAPTERs NDIS opened and has not closed: adapter handle -> [(context, adapter)].
        self.ndk_open = {ETH: [], PV: []}
        self.ndis_closes = []
        self.stub_work = False
        super().__init__(image, world, node, f"node {node}")
        self.unicast_rows = rows or ROWS
        if neighbours is not None:
            self.neighbours = neighbours
        self.pv = run.ModelDevice(self, world, node)
        self.devices = {ETH: self.device, PV: self.pv}

    def adapter_handles(self):
        return [ETH, PV]

    def adapter_pdo(self, handle):
        if handle not in (ETH, PV):
            return None
        dev = self.devices[handle]
        return run.PDO_BASE + (handle & 0xF), dev.location()

    # ---- per-adapter NDIS ----
    def get_bus_data(self, a):
        handle = a[0]
        self.pci_ids = self.devices[handle].pci_ids
        return super().get_bus_data(a)

    def register_dma(self, a):
        handle, desc, phandle = a
        if handle == ETH:
            self.dma_desc = self.read(desc, 0x30)
        dma = run.DMA_HANDLE + (handle & 0xF)
        self.dma_handles[dma] = handle
        self.maps[("dma", handle)] = dma
        self.se.mem_write(phandle, struct.pack("<Q", dma))
        return NDIS_STATUS_SUCCESS

    def deregister_dma(self, a):
        handle = self.dma_handles.pop(a[0], None)
        check(handle is not None, f"NdisMDeregisterScatterGatherDma({a[0]:#x}) of a registration")
        self.maps.pop(("dma", handle), None)
        return 0

    def map_io(self, a):
        pva, handle, phys, length = a
        va = self.alloc(length, "bar_%x" % phys)
        self.maps[va] = (phys, length)
        self.devices[handle].map_bar(phys, va, length)
        self.se.mem_write(pva, struct.pack("<Q", va))
        return NDIS_STATUS_SUCCESS

    def register_interrupt(self, a):
        handle, ctx, chars, phandle = a
        data = self.read(chars, 0x60)
        if handle == ETH:
            self.interrupt_chars = data
        self.ints[handle] = (data, ctx)
        self.maps[("interrupt", handle)] = handle
        self.se.mem_write(phandle, struct.pack("<Q", run.INTERRUPT_HANDLE + (handle & 0xF)))
        return NDIS_STATUS_SUCCESS

    def deregister_interrupt(self, a):
        handle = next((h for h in (ETH, PV) if run.INTERRUPT_HANDLE + (h & 0xF) == a[0]), None)
        check(handle in self.ints, f"NdisMDeregisterInterruptEx({a[0]:#x}) of a registration")
        self.ints.pop(handle, None)
        self.maps.pop(("interrupt", handle), None)
        self.vq[handle] = []
        return 0

    def alloc_shared(self, a):
        handle, length, cached, pva, ppa = a
        va, bus = self.devices[handle].alloc_shared(length)
        self.shared[va] = (handle, length)
        self.se.mem_write(pva, struct.pack("<Q", va))
        self.se.mem_write(ppa, struct.pack("<Q", bus))
        return 0

    def free_shared(self, a):
        handle, length, _c, va, _pa = a
        if check(self.shared.pop(va, None) == (handle, length),
                 f"NdisMFreeSharedMemory({NAMES.get(handle)}, {va:#x}, {length}) frees a live block of the adapter"):
            self.devices[handle].free_shared(va)
        return 0

    def alloc_work_item(self, a):
        check(a[0] in (ETH, PV), f"NdisAllocateIoWorkItem for an adapter handle ({a[0]:#x})")
        handle = run.WORK_ITEM_HANDLE + len(self.work_owner)
        self.work_owner[handle] = a[0]
        self.work_items.add(handle)
        return handle

    def open_config(self, a):
        obj, phandle = a
        t, rev, size = header(self.read(obj, 4))
        adapter, flags = struct.unpack("<QI", self.read(obj + 8, 12))
        check((t, rev, size) == (0xA9, 1, 0x18) and adapter in (ETH, PV) and flags == 0,
              f"NdisOpenConfigurationEx: NDIS_CONFIGURATION_OBJECT (0xA9, 1, 0x18) for an adapter handle "
              f"({t:#x}, {rev}, {size:#x}, {adapter:#x}, {flags})")
        cfg = run.CONFIG_HANDLE + (adapter & 0xF)
        self.config_handles[cfg] = adapter
        self.config_open.add(cfg)
        self.se.mem_write(phandle, struct.pack("<Q", cfg))
        return NDIS_STATUS_SUCCESS

    def read_config(self, a):
        adapter = self.config_handles.get(a[2])
        self.registry = self.registries.get(adapter, {})
        before = len(self.config_reads)
        st = super().read_config(a)
        self.reads.setdefault(adapter, []).extend(self.config_reads[before:])
        return st

    def net_pnp_event(self, a):
        """NdisMNetPnPEvent: run.py's checks, for either adapter; a disable closes the
        NDK_ADAPTERs NDIS opened on the adapter before it returns (through a stub calling
        CloseNDKAdapter for each)."""
        handle, n = a
        event = struct.unpack_from("<i", self.read(n, 0xAC), 8)[0]
        saved, self.in_work_item = self.in_work_item, self.in_work_item or self.stub_work
        was = list(self.pnp_events)
        self.pnp_events = []
        real = run.Harness.net_pnp_event
        # run.py checks the handle against ADAPTER_HANDLE: check it here for both.
        check(handle in (ETH, PV), f"NdisMNetPnPEvent for an adapter handle ({handle:#x})")
        self._pnp_handle_ok(real, a)
        self.pnp_events = was + [event]
        self.in_work_item = saved
        self.events.append((handle, event))
        if event == DISABLE and self.ndk_open.get(handle):
            close = struct.unpack_from("<Q", self.ndk_chars, 0x10)[0]
            calls = b"".join(run.asm_call(close, [ctx, ad]) for ctx, ad in self.ndk_open[handle])
            self.ndis_closes += [(handle, ad) for _ctx, ad in self.ndk_open[handle]]
            self.ndk_open[handle] = []
            self.resume_through(calls, result=NDIS_STATUS_SUCCESS, unsupported=True)
        return NDIS_STATUS_SUCCESS

    def _pnp_handle_ok(self, real, a):
        # run.py's checks of the notification, with the handle it expects.
        real(self, [ADAPTER_HANDLE, a[1]])

    # ---- the two functions' interrupts, DPCs and work items ----
    def run_devices(self):
        self.world.run_devices()
        self.vq[ETH] += self.device.take_vectors()
        if self.pv is not None:
            self.vq[PV] += self.pv.take_vectors()
        for h in (ETH, PV):
            if h not in self.ints:
                self.vq[h] = []

    def pump(self):
        while True:
            self.run_devices()
            pending = [(h, v) for h in (ETH, PV) for v in self.vq[h]]
            if not (pending or self.pending_dpcs):
                break
            if pending:
                self.vq = {ETH: [], PV: []}
                for h, v in pending:
                    chars, ctx = self.ints[h]
                    isr = struct.unpack_from("<Q", chars, 0x30)[0]
                    ours = self.call(isr, [ctx, v, self.scratch + 0x100, self.scratch + 0x108],
                                     f"MSI-X ISR {v} ({NAMES[h]})")
                    self.isr_log.append((v, None if ours is None else ours & 0xFF))
            else:
                kdpc = self.pending_dpcs.pop(0)
                routine, ctx = self.dpcs[kdpc]
                self.call(routine, [kdpc, ctx, 0, 0], "DPC")

    def delay(self, a):
        self.stub_dpcs = False
        self.stub_work = False
        interval = struct.unpack("<q", self.read(a[2], 8))[0]
        self.clock += -interval if interval < 0 else 10
        self.run_devices()
        self.deliver()
        return 0

    def deliver_calls(self):
        """While a thread waits: the pending ISRs of both functions, else the queued DPCs,
        else the queued work items (a system worker thread runs them meanwhile)."""
        calls = b""
        pending = [(h, v) for h in (ETH, PV) for v in self.vq[h]]
        if pending:
            self.vq = {ETH: [], PV: []}
            out = self.scratch + 0x100
            for h, v in pending:
                chars, ctx = self.ints[h]
                calls += run.asm_call(struct.unpack_from("<Q", chars, 0x30)[0], [ctx, v, out, out + 8])
        elif self.pending_dpcs:
            for kdpc in self.pending_dpcs:
                routine, ctx = self.dpcs[kdpc]
                calls += run.asm_call(routine, [kdpc, ctx, 0, 0])
            self.pending_dpcs = []
            self.stub_dpcs = True
        elif self.pending_work and not self.in_oid:
            for handle, routine, ctx in self.pending_work:
                calls += run.asm_call(routine, [ctx, handle])
            self.pending_work = []
            self.stub_work = True
        return calls

    def leaks(self):
        return self.device.leaks() + self.pv.leaks()


class Slot:
    """One paired node: the image, its handlers, and each adapter's context while started."""

    def __init__(self, image, world, node=0, rows=None, neighbours=None):
        self.world, self.node = world, node
        self.hz = SlotHarness(image, world, node, rows, neighbours)
        self.hz.guard_cfg()
        self.tag = f"node {node}"
        self.ctx = {}
        self.general = {}
        self.ndk_attr = {}

    def bring_up(self):
        hz, t = self.hz, self.tag
        hz.se.run_module(hz.module, all_entrypoints=False)
        entry = hz.se.emu.runs[0]
        check(not entry.error and entry.ret_val == 0 and hz.chars is not None,
              f"{t}: DriverEntry ran, STATUS_SUCCESS, the miniport registered ({entry.error or ''})")
        self.handlers = run.miniport_handlers(hz.chars)
        st = hz.call(self.handlers["SetOptionsHandler"], [DRIVER_HANDLE, 0], f"{t}: MiniportSetOptions")
        check(st == NDIS_STATUS_SUCCESS and hz.ndk_chars is not None,
              f"{t}: MiniportSetOptions: SUCCESS, the NDK provider characteristics registered ({st:#x})")
        self.open_ndk, self.close_ndk = struct.unpack_from("<QQ", hz.ndk_chars, 8)

    def start(self, h, pv_there):
        """MiniportInitializeEx of function `h` (and MiniportRestart, as NDIS follows it)."""
        hz, t = self.hz, f"{self.tag} {NAMES[h]}"
        first = len(hz.attributes)
        hz.reads[h] = []
        hz.kept = []
        dev = hz.devices[h]
        params = run.init_params(hz, dev, *((run.IF_INDEX, run.NET_LUID) if h == ETH else (PV_IF_INDEX, PV_LUID)))
        props = len(hz.device_properties)
        st = hz.call(self.handlers["InitializeHandlerEx"], [h, 0, params], f"{t}: MiniportInitializeEx")
        hz.check_kept(f"{t}: after InitializeEx")
        hz.pump()
        check(st == NDIS_STATUS_SUCCESS, f"{t}: MiniportInitializeEx: SUCCESS ({st:#x})")
        pdo = run.PDO_BASE + (h & 0xF)
        check(hz.device_properties[props:] == [(pdo, 14), (pdo, 16)],
              f"{t}: IoGetDeviceProperty(PDO, DevicePropertyBusNumber / DevicePropertyAddress) once each "
              f"({hz.device_properties[props:]})")
        attrs = [x for x in hz.attributes[first:] if x[0] == h]
        types = [x[1] for x in attrs]
        want = [0x9E, 0x9F, 0xB3] if h == ETH else [0x9E, 0x9F]
        check(types == want, f"{t}: attributes {[hex(x) for x in want]} in order "
                             f"({'registration, general, NDK' if h == ETH else 'no NDK attributes'}) "
                             f"({[hex(x) for x in types]})")
        check(hz.reads[h] == run.KEYWORDS and not hz.config_open,
              f"{t}: read {run.KEYWORDS} and closed the configuration ({hz.reads[h]})")
        if len(attrs) < 2:
            return False
        self.ctx[h] = struct.unpack_from("<Q", attrs[0][4], 8)[0]
        self.general[h] = attrs[1]
        if h == ETH:
            _h, _t, rev, size, data, caps = attrs[2]
            enabled, caps_ptr = data[4], struct.unpack_from("<Q", data, 8)[0]
            self.ndk_attr = {"caps": caps_ptr, "at_init": caps}
            check((rev, size, enabled) == (1, 0x10, 0),
                  f"{t}: NDK attributes REVISION_1 0x10, Enabled FALSE (the PVRDMA function "
                  f"{'is there: the join waits for the work item' if pv_there else 'is not there yet'}) "
                  f"({rev}, {size:#x}, {enabled})")
            oid_list, oid_len = struct.unpack_from("<QI", attrs[1][4], 0xC8)
            oids = set(struct.unpack(f"<{oid_len // 4}I", hz.read(oid_list, oid_len)))
            check({run.OID_NDK_SET_STATE, run.OID_NDK_STATISTICS, run.OID_NDK_CONNECTIONS,
                   run.OID_NDK_LOCAL_ENDPOINTS} <= oids,
                  f"{t}: the supported-OID list names the four NDK OIDs")
            st = hz.call(self.handlers["RestartHandler"], [self.ctx[h], vmx.restart_params(hz)], f"{t}: MiniportRestart")
            hz.pump()
            check(st == NDIS_STATUS_SUCCESS, f"{t}: MiniportRestart: SUCCESS ({st:#x})")
        return True

    def oid(self, h, rtype, oid_value, payload, length):
        return run.oid_call(self.hz, self.handlers, self.ctx[h], rtype, oid_value, payload, length)

    def open(self, h, what):
        """OpenNDKAdapter(2.1) through NDIS on adapter `h`: (status, NDK_ADAPTER)."""
        hz = self.hz
        params, out = hz.alloc(12, "open_params"), hz.alloc(8, "adapter_out")
        hz.se.mem_write(params, struct.pack("<HHII", 2, 1, 0, 0))
        hz.se.mem_write(out, b"\0" * 8)
        st = hz.call(self.open_ndk, [self.ctx[h], params, out], what)
        adapter = hz.q(out)
        if st == NDIS_STATUS_SUCCESS:
            hz.ndk_open[h].append((self.ctx[h], adapter))
        return st, adapter

    def close(self, h, adapter, what):
        hz = self.hz
        hz.ndk_open[h] = [x for x in hz.ndk_open[h] if x[1] != adapter]
        hz.call(self.close_ndk, [self.ctx[h], adapter], what)
        hz.pump()

    def gids(self):
        return sorted(bytes(g) for _i, g, _t, _m in self.world.gids(self.node))

    def halt(self, h):
        hz, t = self.hz, f"{self.tag} {NAMES[h]}"
        st = NDIS_STATUS_SUCCESS
        if h == ETH:
            st = hz.call(self.handlers["PauseHandler"], [self.ctx[h], vmx.pause_params(hz)], f"{t}: MiniportPause")
            hz.pump()
        check(st == NDIS_STATUS_SUCCESS, f"{t}: MiniportPause: SUCCESS ({st:#x})")
        hz.call(self.handlers["HaltHandlerEx"], [self.ctx.pop(h), 0], f"{t}: MiniportHaltEx")
        hz.pump()

    def cycle(self, first, halt_first):
        """Both functions started (`first` first), the paired NDK surface checked, then Halt
        of `halt_first` first and of the other."""
        hz = self.hz
        other = PV if first == ETH else ETH
        label = f"{self.tag} [{NAMES[first]} starts first, {NAMES[halt_first]} halts first]"
        hz.events = []
        if not (self.start(first, pv_there=False) and self.start(other, pv_there=first == PV)):
            return False
        self.check_deferred(label)
        hz.run_work_items()
        want = [(ETH, ENABLE)]
        check(hz.events == want, f"{label}: NDK PnP events {want}: NetEventNDKEnable from the vmxnet3 adapter's "
                                 f"work item, which joined the pair ({hz.events})")
        self.check_surface(label)
        st, adapter = self.open(ETH, f"{label}: OpenNDKAdapter(2.1) on the vmxnet3 adapter")
        ok = check(st == NDIS_STATUS_SUCCESS and adapter, f"{label}: OpenNDKAdapter on the vmxnet3 adapter: SUCCESS ({st:#x})")
        if ok:
            c = run.NdkConsumer(hz)
            pd = c.create(c.slot(adapter, run.AD_CREATE_PD), [adapter], f"{label}: NdkCreatePd")
            check(pd is not None, f"{label}: the PVRDMA function made a PD for the vmxnet3 adapter's NDK_ADAPTER")
            if pd:
                c.close(pd, f"{label}: NdkClosePd")
        return self.halts(label, halt_first, adapter if ok else None)

    def check_deferred(self, label):
        """After both InitializeEx calls (and the vmxnet3 restart), before any work item ran:
        the join waits for the vmxnet3 adapter's work item (queued), nothing was attached on
        an InitializeEx's stack (no GID bound, no PnP event)."""
        hz = self.hz
        queued = [hz.work_owner.get(w[0]) for w in hz.pending_work]
        check(queued == [ETH] and self.gids() == [] and hz.events == [],
              f"{label}: after both InitializeEx: the join waits for the vmxnet3 adapter's work item (queued), no GID "
              f"bound, no PnP event yet ({[NAMES.get(q) for q in queued]}, {self.gids()}, {hz.events})")

    def check_surface(self, label):
        """The paired NDK surface once both functions run: the vmxnet3 adapter's capabilities
        are the PVRDMA function's, the GIDs the vmxnet3 interface's addresses, NDK is refused
        on the PVRDMA adapter and its OIDs answer on the vmxnet3 one."""
        hz = self.hz
        # The capabilities behind the pointer NDIS keeps are the PVRDMA function's.
        caps = hz.read(self.ndk_attr["caps"], 0x38)
        max_qp, max_cq, max_mr, max_pd = struct.unpack_from("<IIII", caps, 8)
        info = hz.read(struct.unpack_from("<Q", caps, 0x30)[0], 0x68)
        version, vendor, device = struct.unpack_from("<IIi", info, 0)
        check(header(caps) == (0x80, 1, 0x38) and min(max_qp, max_cq, max_mr, max_pd) > 0
              and (vendor, device) == (0x15AD, 0x0820),
              f"{label}: the vmxnet3 adapter's NDK capabilities are the PVRDMA function's (QPs {max_qp}, CQs {max_cq}, "
              f"MRs {max_mr}, PDs {max_pd}; VendorId {vendor:#x}, DeviceId {device:#x})")
        mine = [ip for luid, ip in hz.unicast_rows if luid == run.NET_LUID]
        want_gids = sorted(gid_of(ip) for ip in mine)
        check(self.gids() == want_gids,
              f"{label}: the PVRDMA function's GIDs are the vmxnet3 interface's addresses ({', '.join(mine)}), "
              f"not another interface's ({[g.hex() for g in self.gids()]})")
        # NDK on the vmxnet3 adapter only.
        st, _ = self.open(PV, f"{label}: OpenNDKAdapter(2.1) on the PVRDMA adapter")
        check(st == NDIS_STATUS_ADAPTER_NOT_READY,
              f"{label}: OpenNDKAdapter on the PVRDMA adapter: ADAPTER_NOT_READY (it offers no NDK of its own) ({st:#x})")
        st, done, _, _ = self.oid(PV, 1, run.OID_NDK_SET_STATE, b"\x01", 1)
        check(st == NDIS_STATUS_NOT_SUPPORTED,
              f"{label}: OID_NDK_SET_STATE(TRUE) on the PVRDMA adapter: NOT_SUPPORTED ({st:#x})")
        st, done, _, out = self.oid(ETH, 0, run.OID_NDK_STATISTICS, struct.pack("<BBH", 0x80, 1, 0xF8), 0xF8)
        check((st, done, header(out)) == (NDIS_STATUS_SUCCESS, 0xF8, (0x80, 1, 0xF8)),
              f"{label}: OID_NDK_STATISTICS on the vmxnet3 adapter: SUCCESS, 0xF8 bytes ({st:#x}, {done})")

    def halts(self, label, halt_first, adapter):
        """Halt of `halt_first`, then of the other, with `adapter` (an NDK_ADAPTER NDIS opened
        on the vmxnet3 adapter, or None) open: the PVRDMA function first disables NDK on the
        vmxnet3 adapter and NDIS closes the adapter; the vmxnet3 adapter first has it closed by
        NDIS before its Halt."""
        hz = self.hz
        ok = adapter is not None
        hz.events = []
        if halt_first == PV:
            # NDK goes away under an open NDK_ADAPTER: the vmxnet3 adapter's work item
            # announces the disable, NDIS closes the adapter, then the Halt goes on.
            closes = len(hz.ndis_closes)
            self.halt(PV)
            hz.run_work_items()
            check(hz.events == [(ETH, DISABLE)] and hz.ndis_closes[closes:] == ([(ETH, adapter)] if ok else []),
                  f"{label}: PVRDMA Halt: NetEventNDKDisable on the vmxnet3 adapter, from its work item during the "
                  f"Halt, and NDIS closed the open NDK_ADAPTER ({hz.events}, {hz.ndis_closes[closes:]})")
            st, _ = self.open(ETH, f"{label}: OpenNDKAdapter(2.1) on the vmxnet3 adapter without its function")
            check(st == NDIS_STATUS_ADAPTER_NOT_READY, f"{label}: OpenNDKAdapter then: ADAPTER_NOT_READY ({st:#x})")
            check(self.gids() == [] and not any(self.world.object_counts(self.node)),
                  f"{label}: every GID unbound, no model object left ({self.gids()}, {self.world.object_counts(self.node)})")
            self.halt(ETH)
            hz.run_work_items()
        else:
            # NDIS closes the vmxnet3 adapter's NDK_ADAPTERs before its Halt.
            if ok:
                self.close(ETH, adapter, f"{label}: CloseNDKAdapter")
            self.halt(ETH)
            hz.run_work_items()
            check(self.gids() == [] and hz.events == [],
                  f"{label}: vmxnet3 Halt: the PVRDMA function detached (its GIDs unbound), no PnP event "
                  f"({self.gids()}, {hz.events})")
            st, _ = self.open(PV, f"{label}: OpenNDKAdapter(2.1) on the PVRDMA adapter alone")
            check(st == NDIS_STATUS_ADAPTER_NOT_READY, f"{label}: the PVRDMA adapter alone offers no NDK ({st:#x})")
            self.halt(PV)
            hz.run_work_items()
        check(not hz.ints and not [k for k in hz.maps if k != "dma"] and not hz.shared,
              f"{label}: both Halts unmapped every BAR, deregistered DMA and interrupts, freed shared memory "
              f"({list(hz.maps)}, {len(hz.shared)})")
        return True

    def finish(self, started):
        hz, t = self.hz, self.tag
        hz.call(self.handlers["UnloadHandler"], [0], f"{t}: MiniportDriverUnload")
        check(hz.deregistered == [DRIVER_HANDLE], f"{t}: Unload deregistered the driver")
        check(not hz.nbls and not hz.mdls and not hz.nbl_pools and not hz.misuse,
              f"{t}: every receive NBL, MDL and pool freed, no misuse ({len(hz.nbls)}, {len(hz.mdls)}, {hz.misuse[:3]})")
        hz.device.free_scattered(started.arena) if started else None
        leaks = hz.leaks()
        check(not hz.pool and not hz.shared and not leaks,
              f"{t}: no pool block, shared-memory block, DMA region or model object left ({len(hz.pool)}, "
              f"{len(hz.shared)}, {leaks})")
        check(not hz.notifications and not hz.mib_tables,
              f"{t}: the address notification cancelled, every MIB table freed")
        check(not hz.cfg_violations and hz.indirect_calls > 0,
              f"{t}: {hz.indirect_calls} indirect calls, all to CFG targets {[hex(v) for v in hz.cfg_violations]}")
        finish_checks(self)


def status_of(hz, handle):
    """(connected, xmit speed) of each NDIS_STATUS_LINK_STATE adapter `handle` indicated
    since the last call (NDIS_LINK_STATE: MediaConnectState @4, XmitLinkSpeed @0x10)."""
    mine = [i for i in hz.status_indications if i["handle"] == handle]
    hz.status_indications = [i for i in hz.status_indications if i["handle"] != handle]
    out = []
    for i in mine:
        b = i["buffer"].ljust(0x28, b"\0")
        check(i["code"] == run.NDIS_STATUS_LINK_STATE and i["source"] == handle and header(b) == (0x80, 1, 0x28),
              f"NdisMIndicateStatusEx({NAMES[handle]}): NDIS_STATUS_LINK_STATE from the adapter, NDIS_LINK_STATE "
              f"(0x80, 1, 0x28) ({i['code']:#x}, {header(b)})")
        out.append((struct.unpack_from("<I", b, 4)[0], struct.unpack_from("<Q", b, 0x10)[0]))
    return out


class PairedSide(two_nodes.Side):
    """One paired node of the two-node run: the Slot (both functions started, `first` first)
    and two_nodes.py's NDK consumer on the NDK_ADAPTER opened through the vmxnet3 adapter
    (`eth` is vmx.py's protocol on the same adapter: ARP, ICMP echo); `halt_first` halts first
    at the end."""

    def __init__(self, image, world, node, ip, ip6, neighbours, first, halt_first):
        rows = [(run.NET_LUID, ip), (run.NET_LUID, ip6), (run.OTHER_LUID, "198.51.100.7")]
        self.slot = Slot(image, world, node, rows, neighbours)
        self.hz = self.slot.hz
        self.world, self.node, self.ip, self.tag = world, node, ip, f"node {node}"
        self.mac = bytes(world.identity(node)[0])
        self.first, self.halt_first = first, halt_first
        self.arena, self.arena_bus = self.hz.device.scattered_buffer(48)
        self.arena_used = 0
        slot = self.slot
        slot.bring_up()
        other = PV if first == ETH else ETH
        slot.start(first, pv_there=False)
        slot.start(other, pv_there=first == PV)
        slot.check_deferred(self.tag)
        self.hz.run_work_items()
        want = [(ETH, ENABLE)]
        check(self.hz.events == want, f"{self.tag}: {NAMES[first]} started first: NDK PnP events {want} ({self.hz.events})")
        self.hz.events, self.hz.pnp_events = [], []
        self.handlers, self.ctx, self.close_ndk = slot.handlers, slot.ctx[ETH], slot.close_ndk
        # The general attributes' OID list (vmx.Host.configure checks the query against it).
        oid_list, oid_len = struct.unpack_from("<QI", slot.general[ETH][4], 0xC8)
        self.supported_oids = struct.unpack(f"<{oid_len // 4}I", self.hz.read(oid_list, oid_len))
        st, self.adapter = slot.open(ETH, f"{self.tag}: OpenNDKAdapter(2.1) on the vmxnet3 adapter")
        check(st == NDIS_STATUS_SUCCESS, f"{self.tag}: OpenNDKAdapter(2.1) through the vmxnet3 adapter: SUCCESS ({st:#x})")
        slot.check_surface(f"{self.tag} [{NAMES[first]} started first]")
        self.c = run.NdkConsumer(self.hz)
        # vmx.py's protocol host over the same adapter and harness.
        self.eth = vmx.Host.__new__(vmx.Host)
        for k in ("world", "node", "ip", "tag", "hz", "mac", "ctx", "handlers", "arena", "arena_bus", "arena_used",
                  "supported_oids"):
            setattr(self.eth, k, getattr(self, k))
        # The link indications of bring-up are not the flap's.
        status_of(self.hz, ETH), status_of(self.hz, PV)

    def close(self):
        """The consumer closes its objects; the NDK_ADAPTER stays open into the Halts
        (`Slot.halts`: closed by NDIS at the disable, or before the vmxnet3 Halt)."""
        c, t, hz, slot = self.c, self.tag, self.hz, self.slot
        c.close(self.qp, f"{t}: NdkCloseQp")
        c.request(c.slot(self.mr, run.MR_DEREGISTER), [self.mr], f"{t}: NdkDeregisterMr")
        c.close(self.mr, f"{t}: NdkCloseMr")
        c.close(self.cq, f"{t}: NdkCloseCq")
        c.close(self.pd, f"{t}: NdkClosePd")
        hz.device.free_consumer_buffer(self.buf)
        slot.halts(f"{t} [{NAMES[self.first]} started first]", self.halt_first, self.adapter)
        hz.device.free_scattered(self.arena)
        slot.finish(None)


def paired_flap(world, side):
    """The vmxnet3 link goes down and up: the vmxnet3 adapter indicates it; its NDK surface
    tells the PVRDMA function, which reports its port down, then (UNQUIESCE) up again."""
    hz, t = side.hz, side.tag
    world.set_link(side.node, False)
    two_nodes.settle(world, (side,))
    eth, pv = status_of(hz, ETH), status_of(hz, PV)
    check(eth == [(vmx.NDIS_MEDIA_STATE_DISCONNECTED, run.NDIS_LINK_SPEED_UNKNOWN)]
          and pv == [(vmx.NDIS_MEDIA_STATE_DISCONNECTED, run.NDIS_LINK_SPEED_UNKNOWN)],
          f"{t}: vmxnet3 link down: the vmxnet3 adapter indicates it, and the PVRDMA function its port down "
          f"({eth}, {pv})")
    world.set_link(side.node, True)
    two_nodes.settle(world, (side,))
    eth, pv = status_of(hz, ETH), status_of(hz, PV)
    check(eth == [(vmx.NDIS_MEDIA_STATE_CONNECTED, vmx.LINK_10G)] and pv == [(vmx.NDIS_MEDIA_STATE_CONNECTED, run.LINK_25G)],
          f"{t}: vmxnet3 link up: the vmxnet3 adapter connected at 10 Gb/s, the PVRDMA port active again at "
          f"25 Gb/s after UNQUIESCE ({eth}, {pv})")


def new_qp(side):
    """The consumer's next QP on its PD and CQ (a disconnected QP is not connected again)."""
    c, t = side.c, side.tag
    c.close(side.qp, f"{t}: NdkCloseQp (the parted connection's)")
    side.qp = c.create(c.slot(side.pd, run.PD_CREATE_QP),
                       [side.pd, side.cq, side.cq, two_nodes.QP_CONTEXT[side.node], 16, 16, 1, 1, 0],
                       f"{t}: NdkCreateQp")


def flap_and_reconnect(world, server, client):
    """The vmxnet3 link down and up under a live connection, and the consumer's recovery: a
    connection, data both ways; the client's vmxnet3 link down (its PVRDMA port with it) and
    up (UNQUIESCE); the consumer hangs up the connection it had and connects again on new
    QPs: SEND/RECEIVE both ways, WRITE and READ move their bytes. Returns the QPs created
    besides the scenario's (two per side)."""
    sides = (server, client)
    for s in sides:
        new_qp(s)
    conn = two_nodes.connect(world, server, client)
    if not check(conn is not None, "a second connection before the link flap"):
        return 1
    listener, incoming, outgoing, _disc, _, _ = conn
    two_nodes.send_receive(world, client, server, 300, 21)
    paired_flap(world, client)
    two_nodes.hang_up(world, server, client, listener, incoming, outgoing)
    for s in sides:
        new_qp(s)
    conn = two_nodes.connect(world, server, client)
    if not check(conn is not None, f"{client.tag}: reconnected after the vmxnet3 link came back"):
        return 2
    listener, incoming, outgoing, _disc, _, _ = conn
    two_nodes.send_receive(world, client, server, 400, 22)
    two_nodes.send_receive(world, server, client, 500, 23)
    two_nodes.rdma(world, client, server, 24)
    two_nodes.hang_up(world, server, client, listener, incoming, outgoing)
    for s in sides:
        c = s.counters()
        check(s.lists() == [[], []] and c["active"] == 0 and (c["failure"], c["error"]) == (0, 0),
              f"{s.tag}: after the reconnection parted: nothing listed, no active connection, no failure or error "
              f"({c})")
    return 2


def two_node_run(image, listener):
    """Issue 25 item 5: two paired nodes, node 0 starting its vmxnet3 function first and
    halting its PVRDMA function first, node 1 the other way round; a ping between the
    vmxnet3 interfaces' addresses, then two_nodes.py's NDK scenario over them."""
    world = pvrdma_simbridge.World(2, kind="paired")
    macs = [bytes(world.identity(i)[0]) for i in (0, 1)]
    ips, ips6 = vmx.IPS, two_nodes.IPS6
    sides = [PairedSide(image, world, i, ips[i], ips6[i], {ips[1 - i]: macs[1 - i], ips6[1 - i]: macs[1 - i]},
                        ETH if i == 0 else PV, PV if i == 0 else ETH) for i in (0, 1)]
    a, b = (s.eth for s in sides)
    check(macs[0] != macs[1] and all(s.mac == macs[s.node] for s in sides), "each vNIC has its MAC")
    for s in sides:
        s.eth.configure([bytes.fromhex("01005e000001")])
    arp_req = vmx.ether(vmx.BROADCAST, a.mac, vmx.ETH_P_ARP, vmx.arp(1, a.mac, a.ip, b"\0" * 6, b.ip))
    got = vmx.exchange(world, a, b, [[(arp_req, "one")]], "an ARP request for " + b.ip)
    check(got == [("arp", 2, b.mac, b.ip, a.ip)], f"{a.tag}: the ARP reply says {b.ip} is at {b.mac.hex(':')} ({got})")
    data = bytes(range(256)) * 4
    got = vmx.exchange(world, a, b, [[(vmx.echo_request(a.mac, b.mac, a.ip, b.ip, 1, data), "split")]],
                       f"a ping from {a.ip} to {b.ip}")
    check(got == [("echo", 0, b.ip, a.ip, vmx.ECHO_ID, 1, data)], f"{a.tag}: {b.ip} answers the ping, seq 1, 1024 bytes")
    for s in sides:
        pc = world.counters(s.node)
        check(pc["dma_faults"] == 0, f"{s.tag}: no DMA fault on the PVRDMA function")
    two_nodes.scenario(world, sides, listener, flap=paired_flap, middle=flap_and_reconnect)
    return sides


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("image")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--two-nodes", action="store_true",
                    help="issue 25 item 5: two paired nodes, a ping, then the two-node NDK scenario")
    ap.add_argument("--stack-report", action="store_true",
                    help="measure each top-level call's stack high-water mark (run.py's)")
    args = ap.parse_args()
    run.verbose = args.verbose or True
    run.measure_stack = args.stack_report
    started = time.monotonic()
    if args.two_nodes:
        sides = two_node_run(args.image, 0)
        if args.stack_report:
            run.stack_report([s.hz for s in sides])
        for line in run.log_lines:
            print("info DbgPrintEx: " + line.rstrip())
        if run.failures:
            print(f"{len(run.failures)} check(s) failed", file=sys.stderr)
            return 1
        print(f"two paired nodes, a ping over vmxnet3 and the NDK scenario through the vmxnet3 adapters: "
              f"{run.passed} checks passed, {sum(s.hz.indirect_calls for s in sides)} CFG-checked indirect calls "
              f"({time.monotonic() - started:.0f} s)")
        return 0
    world = pvrdma_simbridge.World(1, kind="paired")
    slot = Slot(args.image, world)
    slot.bring_up()
    for first in (ETH, PV):
        for halt_first in (PV, ETH):
            t0 = time.monotonic()
            ok = slot.cycle(first, halt_first)
            print(f"info {NAMES[first]} first, {NAMES[halt_first]} halts first: {time.monotonic() - t0:.0f} s")
            if not ok:
                break
    slot.finish(None)
    if args.stack_report:
        run.stack_report([slot.hz])
    for line in run.log_lines:
        print("info DbgPrintEx: " + line.rstrip())
    if run.failures:
        print(f"{len(run.failures)} check(s) failed", file=sys.stderr)
        return 1
    print(f"one paired node (vmxnet3 + PVRDMA in one image), both start orders and both halt orders: "
          f"{run.passed} checks passed, {slot.hz.indirect_calls} CFG-checked indirect calls "
          f"({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
