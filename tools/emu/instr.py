#!/usr/bin/env python3
"""Instruction counts of the Windows build: the linked .sys, emulated on the device model,
counted from a provider function's entry to its return, next to the Linux build's callgrind
figures (benches/instructions.expected). docs/BUILD.md, "Instruction counts of the .sys".

Usage: instr.py IMAGE.sys [--iterations N] [--cfg-check-cost C] [--trace SHAPE]

What is counted: every instruction executed inside the image's address range while one
dispatch-table call runs (a unicorn code hook confined to the image, installed for that call
only), so the harness, the device model and the kernel's own routines are not counted. Two
corrections turn that into what Windows would execute in the image plus its CFG checks:

- CFG: the image's indirect calls go through __guard_dispatch_icall_fptr. The harness points
  it at the image's own `jmp rax` stub (counted: 1 instruction each); Windows points it at
  the kernel's guard_dispatch_icall, which checks the target in the CFG bitmap and then jumps
  to it. The Windows figure replaces each stub instruction by --cfg-check-cost (default
  CFG_CHECK_COST below, and why).
- Kernel routines the call imports (spin locks, ...) run outside the image: listed per call
  in the last column, not counted (the Linux figure counts the host build's inline locks).

Shapes: benches/instructions.sh's, on a connected QP: node 0's driver connects to node 1's
(two_nodes.py's Side and connect, one two-node World) and is the one counted; node 1 is the
peer (its RDMA target, its SENDs' source, its receives' sink). Per shape, `--iterations`
iterations of: (a) one NdkRead (1 SGE, 64 bytes, not deferred, so its doorbell store is in
the count); (b) NdkGetCqResults reaping one READ completion; (c) 15 DEFERred NdkRead and a
16th, per request; (d) NdkGetCqResults reaping 16 READ completions, per completion; the
empty poll; NdkArmCq(ANY); NdkReceive (1 SGE); (e) NdkGetCqResults reaping one receive
completion (the peer's SEND consumed one of those receives); (f) reaping 16 receive
completions, per completion; NdkFastRegister of an FRMR with
1 and with 16 pages (each followed, uncounted, by its completion and an NdkInvalidate);
NdkSend (1 SGE, the peer's receive posted first). Everything else (the peer, the reaps
between calls, the device model, the fabric) runs outside the count.
"""
import argparse
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402
from run import check, Harness, NdkConsumer  # noqa: E402

# The x64 CFG dispatch check Windows installs in __guard_dispatch_icall_fptr (the kernel's
# _guard_dispatch_icall for drivers, KernelSight "kCFG / kCET",
# https://splintersfury.github.io/KernelSight/mitigations/kcfg-kcet; ntdll's
# LdrpDispatchUserCallTarget for user mode, lucasg, "How Control Flow Integrity is implemented
# in Windows 10", https://lucasg.github.io/2017/02/05/Control-Flow-Guard/) looks the target up
# in the CFG bitmap and jumps to it. Its fast path, for a valid 16-byte-aligned target, as
# this figure reads it: load the bitmap base; copy the target; shift the copy right 9 (the
# bitmap qword); load that qword; copy the target again; shift right 3 (the bit); test the
# low 4 bits (alignment); a branch not taken; bt; a branch not taken; jmp to the target: 11
# instructions. It is a reading of that shape, not a count taken from a Windows binary here
# (none can be had): --cfg-check-cost overrides it. The harness's stub is that final jmp
# alone, so each dispatch costs 10 more than counted. A kernel running retpoline reaches the
# target through a retpoline thunk instead of the jmp: more than 11 there.
CFG_CHECK_COST = 11

# Shape: (key in benches/instructions.expected, label, rdma-core reference). The reference
# figures are benches/instructions.sh's (rdma-core's vmw_pvrdma, gcc 12 -O2, callgrind
# inclusive, with its locks).
SHAPES = [
    ("read", "(a) NdkRead, 1 SGE, not deferred + doorbell", "131"),
    ("poll1", "(b) NdkGetCqResults reaping 1 completion", "95"),
    ("chain16", "(c) 16-NdkRead DEFER chain, per request", "76.6"),
    ("poll16", "(d) NdkGetCqResults reaping 16, per CQE", "58.4"),
    ("recv1", "(e) NdkGetCqResults reaping 1 receive", "-"),
    ("recv16", "(f) NdkGetCqResults reaping 16 receives, per CQE", "-"),
    ("poll_empty", "NdkGetCqResults, empty CQ", "64 (39)"),
    ("arm", "NdkArmCq (ANY)", "-"),
    ("fastreg1", "NdkFastRegister, 1 page", "-"),
    ("fastreg16", "NdkFastRegister, 16 pages", "-"),
    ("send", "NdkSend, 1 SGE", "-"),
    ("receive", "NdkReceive, 1 SGE", "-"),
]


def linux_figures(path):
    figures = {}
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and not line.startswith("#"):
                    try:
                        figures[parts[0]] = float(parts[1])
                    except ValueError:
                        pass
    except OSError:
        pass
    return figures


class Counter:
    """Counts the instructions the image executes during one call (a code hook on the image
    range, added for the call and removed after it), and those of the guard dispatch stub."""

    def __init__(self, hz):
        import unicorn
        self.hz = hz
        self.uc = hz.se.emu.emu_eng.emu
        self.kind = unicorn.UC_HOOK_CODE
        self.stub = hz.q(hz.base + hz.guard_dispatch_slot)
        self.end = hz.base + hz.pe.OPTIONAL_HEADER.SizeOfImage - 1
        check(hz.in_image(self.stub) and hz.read(self.stub, 2) == b"\xFF\xE0",
              f"the image's guard dispatch stub is one `jmp rax` inside the image ({hz.read(self.stub, 2).hex()})")

    def call(self, fn, args, what, trace=None):
        """Runs one call; returns (result, image instructions, stub instructions, kernel
        routines called). `trace`, a list, gets each instruction's (address, bytes)."""
        counts = [0, 0]
        stub = self.stub

        def on_code(uc, addr, size, user):
            counts[0] += 1
            if addr == stub:
                counts[1] += 1
            if trace is not None:
                trace.append((addr, bytes(uc.mem_read(addr, size))))

        apis = len(self.hz.calls)
        h = self.uc.hook_add(self.kind, on_code, None, self.hz.base, self.end)
        try:
            # More than four arguments: speakeasy needs them padded (Harness.call_stack_args).
            st = self.hz.call_stack_args(fn, args, what) if len(args) > 4 else self.hz.call(fn, args, what)
        finally:
            self.uc.hook_del(h)
        return st, counts[0], counts[1], self.hz.calls[apis:]


def print_trace(hz, shape, trace):
    import capstone
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    print(f"trace of one {shape} call ({len(trace)} instructions; image offsets):")
    for addr, code in trace:
        for insn in md.disasm(code, addr):
            print(f"  {addr - hz.base:#08x}  {insn.mnemonic} {insn.op_str}")
            break


QP_FAST_REGISTER, QP_INVALIDATE = 6, 7
MR_INITIALIZE_FAST_REGISTER = 4
FRMR_PAGES = 16


class Measured:
    """Per shape: one row per request, (image instructions, stub instructions, kernel
    routines called) as the Counter saw them."""

    def __init__(self, counter, shape, n, trace_shapes):
        self.counter, self.shape, self.n, self.trace_shapes = counter, shape, n, trace_shapes
        self.rows, self.trace = [], None

    def call(self, i, fn, args, what, want=None, per=1):
        """One counted call, standing for `per` requests (its counts divided among them)."""
        trace = [] if self.shape in self.trace_shapes and i == self.n - 1 else None
        st, image, stub, apis = self.counter.call(fn, args, f"{self.shape} {i}: {what}", trace)
        if trace:
            self.trace = trace
        if want is not None:
            check(st == want, f"{self.shape} {i}: {what}: {want:#x} ({st:#x})")
        self.rows.append((image / per, stub / per, tuple(apis)))
        return st


def main():
    import two_nodes
    from two_nodes import Side, connect, settle, put
    import pvrdma_simbridge

    ap = argparse.ArgumentParser()
    ap.add_argument("image")
    ap.add_argument("--iterations", type=int, default=32)
    ap.add_argument("--cfg-check-cost", type=int, default=CFG_CHECK_COST)
    ap.add_argument("--trace", choices=[s for s, _, _ in SHAPES], action="append", default=[],
                    help="print the instructions of the shape's last call (image offsets)")
    ap.add_argument("--expected", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                       "..", "..", "benches", "instructions.expected"))
    args = ap.parse_args()
    n = args.iterations
    run.verbose = False
    world = pvrdma_simbridge.World(2)
    macs = [bytes(world.identity(i)[0]) for i in (0, 1)]
    ips = two_nodes.IPS
    a, b = (Side(args.image, world, i, ips[i], {ips[1 - i]: macs[1 - i]}) for i in (0, 1))
    counter = Counter(a.hz)
    depth = max(16, n) * 2
    for side in (a, b):
        side.objects(qp_depth=depth, cq_depth=4 * depth)
    conn = connect(world, b, a)
    if conn is None:
        return 1
    listener, incoming, outgoing, disc, _, _ = conn
    hz, c = a.hz, a.c
    results = hz.alloc(16 * run.NDK_RESULT_SIZE, "results")
    sge = c.sge(a.buf, 64, a.lkey)
    remote = b.buf + 0x2000
    peer_sge = b.c.sge(b.buf + 0x1000, 64, b.lkey)
    qp_send, qp_recv, qp_read = c.slot(a.qp, run.QP_SEND), c.slot(a.qp, run.QP_RECEIVE), c.slot(a.qp, two_nodes.QP_READ)
    get_results = c.slot(a.cq, run.CQ_GET_RESULTS)
    # FRMRs for the fast-register shapes over 16 pages of node 0's memory.
    frmr = {}
    pages_buf, pages_bus = hz.device.consumer_buffer(FRMR_PAGES * 0x1000)
    page_array = put(hz, b"".join(struct.pack("<Q", pages_bus + 0x1000 * i) for i in range(FRMR_PAGES)))
    for pages in (1, FRMR_PAGES):
        mr = c.create(c.slot(a.pd, run.PD_CREATE_MR), [a.pd, 1], f"NdkCreateMr (fast register, {pages})")
        c.request(c.slot(mr, MR_INITIALIZE_FAST_REGISTER), [mr, pages, 1], f"NdkInitializeFastRegisterMr({pages})")
        frmr[pages] = mr

    def reap(side, k, what):
        got = side.reap(k, what)
        check(len(got) == k and all(r[0] == 0 for r in got), f"{what}: {k} completions, all SUCCESS ({got})")

    def peer_sends(k):
        for j in range(k):
            st = b.c.invoke(b.c.slot(b.qp, run.QP_SEND), [b.qp, 0x900 + j, b.c.sge(b.buf, 64, b.lkey), 1, 0], "peer NdkSend")
            check(st == run.STATUS_SUCCESS, f"peer NdkSend: SUCCESS ({st:#x})")
        settle(world, (a, b))

    measured = {}
    # The order of measurement: the receives posted by "receive" are the ones the peer's
    # SENDs complete for "recv1".
    order = ["read", "poll1", "chain16", "poll16", "poll_empty", "arm", "receive", "recv1", "recv16",
             "fastreg1", "fastreg16", "send"]
    for shape in order:
        m = Measured(counter, shape, n, args.trace)
        for i in range(n):
            if shape == "poll_empty":
                m.call(i, get_results, [a.cq, results, 1], "NdkGetCqResults", 0)
            elif shape == "arm":
                m.call(i, c.slot(a.cq, run.CQ_ARM), [a.cq, run.NDK_CQ_NOTIFY_ANY], "NdkArmCq")
            elif shape == "receive":
                m.call(i, qp_recv, [a.qp, 0x5000 + i, sge, 1], "NdkReceive", run.STATUS_SUCCESS)
            elif shape == "recv1":
                # The receives "receive" posted, consumed one at a time by the peer's SENDs
                # (as poll1: one CQE on the CQ when it is reaped).
                peer_sends(1)
                reap(b, 1, "peer's send")
                m.call(i, get_results, [a.cq, results, 1], "NdkGetCqResults", 1)
            elif shape == "recv16":
                for j in range(16):
                    st = hz.call(qp_recv, [a.qp, 0x5800 + j, sge, 1], "NdkReceive")
                    check(st == run.STATUS_SUCCESS, f"NdkReceive: SUCCESS ({st:#x})")
                peer_sends(16)
                reap(b, 16, "peer's sends")
                m.call(i, get_results, [a.cq, results, 16], "NdkGetCqResults(16)", 16, per=16)
            elif shape == "read":
                m.call(i, qp_read, [a.qp, 0x6000 + i, sge, 1, remote, b.rkey, 0], "NdkRead", run.STATUS_SUCCESS)
                settle(world, (a, b))
                reap(a, 1, "read")
            elif shape == "poll1":
                c.invoke(qp_read, [a.qp, 0x6000 + i, sge, 1, remote, b.rkey, 0], "NdkRead")
                settle(world, (a, b))
                m.call(i, get_results, [a.cq, results, 1], "NdkGetCqResults", 1)
            elif shape in ("chain16", "poll16"):
                for j in range(16):
                    fargs = [a.qp, 0x7000 + j, sge, 1, remote, b.rkey, two_nodes.NDK_OP_FLAG_DEFER if j < 15 else 0]
                    if shape == "chain16":
                        m.call(i, qp_read, fargs, "NdkRead (chain)", run.STATUS_SUCCESS)
                    else:
                        c.invoke(qp_read, fargs, "NdkRead (chain)")
                settle(world, (a, b))
                if shape == "chain16":
                    reap(a, 16, "chain")
                else:
                    m.call(i, get_results, [a.cq, results, 16], "NdkGetCqResults(16)", 16, per=16)
            elif shape == "send":
                st = b.hz.call(b.c.slot(b.qp, run.QP_RECEIVE), [b.qp, 0x8000 + i, peer_sge, 1], "peer NdkReceive")
                check(st == run.STATUS_SUCCESS, f"peer NdkReceive: SUCCESS ({st:#x})")
                m.call(i, qp_send, [a.qp, 0x8000 + i, sge, 1, 0], "NdkSend", run.STATUS_SUCCESS)
                settle(world, (a, b))
                reap(a, 1, "send")
                reap(b, 1, "peer's receive")
            elif shape in ("fastreg1", "fastreg16"):
                pages = 1 if shape == "fastreg1" else FRMR_PAGES
                mr = frmr[pages]
                m.call(i, c.slot(a.qp, QP_FAST_REGISTER),
                       [a.qp, 0xF000 + i, mr, pages, page_array, 0, pages * 0x1000, pages_buf, 0],
                       "NdkFastRegister", run.STATUS_SUCCESS)
                settle(world, (a, b))
                reap(a, 1, "fast register")
                token = hz.call(c.slot(mr, run.MR_LOCAL_TOKEN), [mr], "NdkGetLocalTokenFromMr")
                st = hz.call(c.slot(a.qp, QP_INVALIDATE), [a.qp, 0xE000 + i, mr, 0], "NdkInvalidate")
                check(st == run.STATUS_SUCCESS and token != 0, f"NdkInvalidate: SUCCESS ({st:#x}, {token:#x})")
                settle(world, (a, b))
                reap(a, 1, "invalidate")
        settle(world, (a, b))
        measured[shape] = m.rows
        if m.trace:
            print_trace(hz, shape, m.trace)

    # Teardown: disconnect, everything closes, both adapters, Halt, Unload.
    st, done = a.start(c.slot(outgoing, two_nodes.CONN_DISCONNECT), [outgoing], "NdkDisconnect", 0xD15C)
    settle(world, (a, b))
    st2, _ = b.start(b.c.slot(incoming, two_nodes.CONN_DISCONNECT), [incoming], "peer NdkDisconnect", 0xD15D)
    settle(world, (a, b))
    a.completed(done, 0xD15C, "NdkDisconnect")
    a.reap(0, "after the disconnect")
    c.close(outgoing, "NdkCloseConnector")
    b.c.close(incoming, "peer NdkCloseConnector")
    b.c.close(listener, "NdkCloseListener")
    for mr in frmr.values():
        c.close(mr, "NdkCloseMr (fast register)")
    hz.device.free_consumer_buffer(pages_buf)
    settle(world, (a, b))
    for side in (a, b):
        side.close()

    linux = linux_figures(args.expected)
    cost = args.cfg_check_cost
    print()
    print(f"Instructions per request, Windows .sys (emulated, connected, {n} iterations each) beside the Linux "
          f"build (callgrind) and rdma-core")
    print(f"{'shape':46} {'Linux':>7} {'Windows':>8} {'image':>7} {'CFG':>4} {'rdma-core':>9}  kernel routines per request (not counted)")
    for shape, label, ref in SHAPES:
        rows = measured[shape]
        if not rows:
            print(f"{label:46} {'-':>7} {'failed':>8}")
            continue
        # A row is one request, but poll16's and recv16's, one call reaping 16 (its counts divided).
        image = sum(r[0] for r in rows) / len(rows)
        stubs = sum(r[1] for r in rows) / len(rows)
        windows = image + stubs * (cost - 1)
        apis = {}
        for r in rows:
            for name in r[2]:
                apis[name] = apis.get(name, 0) + 1
        per = 16 if shape in ("poll16", "recv16") else 1
        kernel = ", ".join(f"{k} x{v / len(rows) / per:g}" for k, v in sorted(apis.items())) or "none"
        lin = linux.get(shape)
        lo, hi = min(r[0] for r in rows), max(r[0] for r in rows)
        spread = "" if lo == hi else f" (image {lo:g}..{hi:g})"
        print(f"{label:46} {lin if lin is not None else '-':>7} {windows:>8.1f} {image:>7.1f} {stubs:>4g} {ref:>9}  {kernel}{spread}")
    print(f"Windows = image instructions + (CFG dispatches x {cost - 1}): each dispatch is the harness's 1-instruction "
          f"`jmp rax` stub, counted as Windows' {cost}-instruction guard_dispatch_icall fast path (instr.py, CFG_CHECK_COST).")
    print(f"Linux: {os.path.normpath(args.expected)} (callgrind, inclusive, {linux and 'committed figures' or 'missing'}); "
          "rdma-core: benches/instructions.sh's reference (vmw_pvrdma, gcc 12 -O2, inclusive, with its locks).")
    if run.failures:
        print(f"{len(run.failures)} check(s) failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
