#!/usr/bin/env python3
"""Two emulated .sys images on one two-node device-model World (docs/BUILD.md, "On the
device model"): the frame the end-to-end scenario of issue 15 grows from.

Usage: two_nodes.py IMAGE.sys [IMAGE2.sys]

Each side is its own emulator (Harness) on its own node, with its own IP stack (10.0.0.1 and
10.0.0.2, each the other's neighbour at the other node's MAC): bring-up, a 2.1 adapter, a
PD, an MR over one page of that node's memory, a CQ and a QP; each node's model holds only
its own driver's objects; then everything closes with nothing left on either node.
Not yet: the connection (NdkListen / NdkConnect / NdkAccept over QP1, the connection
manager) and the data transfers over it; they go where this script says so.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402
from run import check, Harness, NdkConsumer  # noqa: E402

import pvrdma_simbridge  # noqa: E402


class Side:
    """One host: an emulated driver on node `node` and a consumer of its adapter."""

    def __init__(self, image, world, node, ip, neighbours):
        self.hz = Harness(image, device="model", world=world, node=node,
                          unicast_rows=[(run.NET_LUID, ip)], neighbours=neighbours)
        self.hz.guard_cfg()
        self.node = node
        self.handlers, self.ctx, self.close_ndk, self.adapter = run.bring_up(self.hz)
        self.c = NdkConsumer(self.hz)

    def objects(self):
        c, a = self.c, self.adapter
        self.pd = c.create(c.slot(a, run.AD_CREATE_PD), [a], f"node {self.node}: NdkCreatePd")
        self.mr = c.create(c.slot(self.pd, run.PD_CREATE_MR), [self.pd, 0], f"node {self.node}: NdkCreateMr")
        self.buf, bus = self.hz.device.consumer_buffer(0x1000)
        c.request(c.slot(self.mr, run.MR_REGISTER),
                  [self.mr, c.mdl(self.buf, bus, 0x1000), 0x1000,
                   run.NDK_MR_FLAG_ALLOW_LOCAL_WRITE | run.NDK_MR_FLAG_ALLOW_REMOTE_READ],
                  f"node {self.node}: NdkRegisterMr")
        self.notify, self.notify_rec = c.recorder("cq_notification")
        self.cq = c.create(c.slot(a, run.AD_CREATE_CQ), [a, 64, self.notify, self.node, 0], f"node {self.node}: NdkCreateCq")
        self.qp = c.create(c.slot(self.pd, run.PD_CREATE_QP), [self.pd, self.cq, self.cq, 0xAB0 + self.node, 16, 16, 1, 1, 0],
                           f"node {self.node}: NdkCreateQp")

    def close(self):
        c = self.c
        c.close(self.qp, f"node {self.node}: NdkCloseQp")
        c.request(c.slot(self.mr, run.MR_DEREGISTER), [self.mr], f"node {self.node}: NdkDeregisterMr")
        c.close(self.mr, f"node {self.node}: NdkCloseMr")
        c.close(self.cq, f"node {self.node}: NdkCloseCq")
        c.close(self.pd, f"node {self.node}: NdkClosePd")
        self.hz.device.free_consumer_buffer(self.buf)
        run.shut_down(self.hz, self.handlers, self.ctx, self.close_ndk, self.adapter)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("image")
    ap.add_argument("image2", nargs="?")
    args = ap.parse_args()
    run.verbose = False
    world = pvrdma_simbridge.World(2)
    (mac0, _), (mac1, _) = world.identity(0), world.identity(1)
    a = Side(args.image, world, 0, "10.0.0.1", {"10.0.0.2": bytes(mac1)})
    b = Side(args.image2 or args.image, world, 1, "10.0.0.2", {"10.0.0.1": bytes(mac0)})
    a.objects()
    check(world.object_counts(0) == (1, 2, 1, 1, 0) and world.object_counts(1) == (0, 0, 0, 0, 0),
          f"node 0's objects on node 0 only ({world.object_counts(0)}, {world.object_counts(1)})")
    b.objects()
    check(world.object_counts(1) == (1, 2, 1, 1, 0), f"node 1's objects on node 1 ({world.object_counts(1)})")
    # The connection and the data path go here: NdkCreateListener/NdkListen on one side,
    # NdkCreateConnector/NdkConnect on the other (QP1 MADs cross the fabric when both
    # harnesses pump and the world runs), then SEND/RECEIVE, WRITE, READ with bytes checked
    # on both nodes through world.dma_read, a DEFER chain, a notification, a disconnect.
    for side in (a, b):
        side.close()
    check(world.object_counts(0) == world.object_counts(1) == (0, 0, 0, 0, 0),
          f"nothing left on either node ({world.object_counts(0)}, {world.object_counts(1)})")
    counters = [world.counters(i) for i in (0, 1)]
    check(all(c["dma_faults"] == 0 and c["bad_mmio"] == 0 for c in counters),
          f"no DMA fault, no bad MMIO on either node ({[(c['dma_faults'], c['bad_mmio']) for c in counters]})")
    if run.failures:
        print(f"{len(run.failures)} check(s) failed", file=sys.stderr)
        return 1
    print(f"two nodes: both drivers up, objects on their own nodes, all closed; "
          f"commands {counters[0]['commands']} and {counters[1]['commands']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
