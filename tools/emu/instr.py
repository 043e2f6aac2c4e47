#!/usr/bin/env python3
"""Instruction counts of the Windows build: the linked .sys, emulated on the device model,
counted from a provider function's entry to its return, next to the Linux build's callgrind
figures (benches/instructions.expected). docs/BUILD.md, "Instruction counts of the .sys".

Usage: instr.py IMAGE.sys [--iterations N] [--cfg-check-cost C]

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

Shapes: only those needing no connection (the connected ones wait for the connection
manager): the empty poll (NdkGetCqResults on an empty CQ, 1 result asked), NdkArmCq(ANY),
and NdkReceive with 1 SGE posted before any connection (ndkpi.md §5.3 allows it).
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

# Shape: (label, benches/instructions.expected key).
SHAPES = [
    ("poll_empty", "NdkGetCqResults, empty CQ"),
    ("arm", "NdkArmCq (ANY)"),
    ("receive", "NdkReceive, 1 SGE (before connection)"),
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
            st = self.hz.call(fn, args, what)
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("image")
    ap.add_argument("--iterations", type=int, default=32)
    ap.add_argument("--cfg-check-cost", type=int, default=CFG_CHECK_COST)
    ap.add_argument("--trace", choices=[s for s, _ in SHAPES], action="append", default=[],
                    help="print the instructions of the shape's last call (image offsets)")
    ap.add_argument("--expected", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                       "..", "..", "benches", "instructions.expected"))
    args = ap.parse_args()
    n = args.iterations
    run.verbose = False
    hz = Harness(args.image, device="model")
    hz.guard_cfg()
    counter = Counter(hz)
    handlers, ctx, close_ndk, a = run.bring_up(hz)
    c = NdkConsumer(hz)
    pd = c.create(c.slot(a, run.AD_CREATE_PD), [a], "NdkCreatePd")
    mr = c.create(c.slot(pd, run.PD_CREATE_MR), [pd, 0], "NdkCreateMr")
    buf, bus = hz.device.consumer_buffer(0x1000)
    c.request(c.slot(mr, run.MR_REGISTER), [mr, c.mdl(buf, bus, 0x1000), 0x1000, run.NDK_MR_FLAG_ALLOW_LOCAL_WRITE],
              "NdkRegisterMr")
    lkey = hz.call(c.slot(mr, run.MR_LOCAL_TOKEN), [mr], "NdkGetLocalTokenFromMr")
    notify, notify_rec = c.recorder("cq_notification")
    cq = c.create(c.slot(a, run.AD_CREATE_CQ), [a, 2 * n + 16, notify, 0, 0], "NdkCreateCq")
    qp = c.create(c.slot(pd, run.PD_CREATE_QP), [pd, cq, cq, 0xABC, n + 1, 16, 1, 1, 0], "NdkCreateQp")
    results = hz.alloc(16 * run.NDK_RESULT_EX_SIZE, "results")
    sge = c.sge(buf, 64, lkey)

    calls = {
        "poll_empty": (c.slot(cq, run.CQ_GET_RESULTS), [cq, results, 1], 0),
        "arm": (c.slot(cq, run.CQ_ARM), [cq, run.NDK_CQ_NOTIFY_ANY], None),
        "receive": (c.slot(qp, run.QP_RECEIVE), [qp, 0x5000, sge, 1], run.STATUS_SUCCESS),
    }
    measured = {}
    for shape, _label in SHAPES:
        fn, fargs, want = calls[shape]
        per_call = []
        trace = None
        for i in range(n):
            trace = [] if shape in args.trace and i == n - 1 else None
            st, image, stub, apis = counter.call(fn, fargs, f"{shape} {i}", trace)
            if want is not None and not check(st == want, f"{shape} {i}: {want:#x} ({st:#x})"):
                break
            per_call.append((image, stub, tuple(apis)))
        hz.pump()
        measured[shape] = per_call
        if trace:
            print_trace(hz, shape, trace)

    # Teardown: the receives flush (CANCELLED), everything closes, the adapter, Halt, Unload.
    hz.call(c.slot(qp, run.QP_FLUSH), [qp], "NdkFlush")
    hz.pump()
    reaped = 0
    while True:
        got = hz.call(c.slot(cq, run.CQ_GET_RESULTS_EX), [cq, results, 16], "NdkGetCqResultsEx")
        if not got:
            break
        reaped += got
    check(reaped == len(measured["receive"]), f"every measured receive flushed ({reaped})")
    c.close(qp, "NdkCloseQp")
    c.request(c.slot(mr, run.MR_DEREGISTER), [mr], "NdkDeregisterMr")
    c.close(mr, "NdkCloseMr")
    c.close(cq, "NdkCloseCq")
    c.close(pd, "NdkClosePd")
    hz.device.free_consumer_buffer(buf)
    run.shut_down(hz, handlers, ctx, close_ndk, a)

    linux = linux_figures(args.expected)
    cost = args.cfg_check_cost
    print()
    print(f"Instructions per call, Windows .sys (emulated, {n} calls each) beside the Linux build (callgrind)")
    print(f"{'shape':40} {'Linux':>8} {'Windows':>8} {'image':>8} {'CFG':>4}  kernel routines per call (not counted)")
    for shape, label in SHAPES:
        rows = measured[shape]
        if not rows:
            print(f"{label:40} {'-':>8} {'failed':>8}")
            continue
        image = sum(r[0] for r in rows) / len(rows)
        stubs = sum(r[1] for r in rows) / len(rows)
        windows = image + stubs * (cost - 1)
        apis = {}
        for r in rows:
            for name in r[2]:
                apis[name] = apis.get(name, 0) + 1
        kernel = ", ".join(f"{k} x{v / len(rows):g}" for k, v in sorted(apis.items())) or "none"
        lin = linux.get(shape)
        spread = "" if min(r[0] for r in rows) == max(r[0] for r in rows) else \
            f" (image {min(r[0] for r in rows)}..{max(r[0] for r in rows)})"
        print(f"{label:40} {lin if lin is not None else '-':>8} {windows:>8.1f} {image:>8.1f} {stubs:>4g}  {kernel}{spread}")
    print(f"Windows = image instructions + (CFG dispatches x {cost - 1}): each dispatch is the harness's 1-instruction "
          f"`jmp rax` stub, counted as Windows' {cost}-instruction guard_dispatch_icall fast path (instr.py, CFG_CHECK_COST).")
    print(f"Linux: {os.path.normpath(args.expected)} (callgrind, inclusive, {linux and 'committed figures' or 'missing'}).")
    if run.failures:
        print(f"{len(run.failures)} check(s) failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
