//! The kit's own connections: what [`Cluster::connect`] makes on a connection-managed
//! cluster and what [`Qp::close`] and [`Cluster::finish`] part again, so a test that only
//! wants two connected QPs goes through NdkListen / NdkConnect / NdkAccept /
//! NdkCompleteConnect and NdkDisconnect like any consumer, without holding connectors.
//!
//! - One listener per host, made on the first connection to it and closed by
//!   [`Cluster::finish`] once every connection is parted (the listener table is small, and
//!   a listener whose accepted connectors live cannot complete its close: ndkpi.md §5.11).
//! - The connectors of a connection close before either QP does (a connector is its QP's
//!   successor, ndkpi.md §5.3), after a graceful disconnect both sides waited for (§5.12).

use std::sync::Mutex;

use pvrdma_ndk::ndkpi::*;

use super::{Cluster, Connector, Listener, Pump, Qp, sa};

/// InboundReadLimit and OutboundReadLimit of every kit connection, both sides.
pub const KIT_READ_LIMIT: u32 = 8;

/// A connection the kit made: both QPs (by pointer) and both connectors.
pub(super) struct Link {
    qps: [usize; 2],
    client: Connector,
    server: Connector,
}

// SAFETY: the connector pointers name provider objects, which NDKPI lets a consumer call
// from any thread (ndkpi.md §5.2); the rest of each wrapper is `Arc`s of `Send + Sync` data.
unsafe impl Send for Link {}

/// The kit's listeners, one per host (index = host).
#[derive(Default)]
pub(super) struct Links {
    listeners: Mutex<Vec<Option<Listener>>>,
}

impl Link {
    /// Graceful disconnect from the client; the server disconnects on its DisconnectEvent;
    /// both requests complete; then both connectors close.
    fn part(self, pump: &Pump) {
        let client_done = self.client.disconnect_raw();
        let server = &self.server;
        pump.wait_for("the server's DisconnectEvent", || {
            server.disconnects.count() != 0
        });
        assert_eq!(
            self.server.disconnect(),
            STATUS_SUCCESS,
            "server NdkDisconnect"
        );
        assert_eq!(client_done.wait(), STATUS_SUCCESS, "client NdkDisconnect");
        assert_eq!(
            self.client.disconnects.count(),
            0,
            "the client disconnected first"
        );
        assert_eq!(self.client.close(), STATUS_SUCCESS, "NdkCloseConnector");
        assert_eq!(self.server.close(), STATUS_SUCCESS, "NdkCloseConnector");
    }
}

impl Pump {
    /// Parts the kit connection of `qp`, if it has one (before the QP closes).
    pub(super) fn part_link_of(&self, qp: *mut NDK_QP) {
        let link = {
            let mut links = self.links.lock().unwrap();
            links
                .iter()
                .position(|l| l.qps.contains(&(qp as usize)))
                .map(|i| links.swap_remove(i))
        };
        if let Some(l) = link {
            l.part(self);
        }
    }

    /// Parts every kit connection, in the order they were made.
    pub(super) fn part_all_links(&self) {
        let all = std::mem::take(&mut *self.links.lock().unwrap());
        for l in all {
            l.part(self);
        }
    }

    /// Forgets the kit connections without parting them (a failed test's teardown).
    pub(super) fn forget_links(&self) {
        self.links.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

impl Links {
    /// Closes the kit's listeners (every kit connection is parted).
    pub(super) fn close_listeners(&self) {
        let all = std::mem::take(&mut *self.listeners.lock().unwrap());
        for l in all.into_iter().flatten() {
            assert_eq!(l.close(), STATUS_SUCCESS, "NdkCloseListener");
        }
    }

    /// Forgets the listeners without closing them (a failed test's teardown).
    pub(super) fn forget(&self) {
        self.listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

/// `a` and `b` connected through the CM (see the module docs): NdkConnect from `a`'s host
/// to the kit's listener on `b`'s host, NdkAccept of `b`, NdkCompleteConnect.
pub(super) fn connect(c: &Cluster, a: &Qp, b: &Qp) {
    let (ha, hb) = (c.host(a.host()), c.host(b.host()));
    // Held throughout: the listener's connect events then come one connection at a time.
    let mut listeners = c.links.listeners.lock().unwrap();
    if listeners.len() <= hb.index {
        listeners.resize_with(hb.index + 1, || None);
    }
    let listener = listeners[hb.index].get_or_insert_with(|| {
        let l = hb.adapter.create_listener().expect("NdkCreateListener");
        assert_eq!(l.listen(sa(hb.ip, 0)), STATUS_SUCCESS, "NdkListen");
        l
    });
    let to = listener.local_address().expect("listener address");
    let client = ha.adapter.create_connector().expect("NdkCreateConnector");
    let limit = KIT_READ_LIMIT;
    let events = listener.incoming.calls();
    let connect = client.connect_raw(a, sa(ha.ip, 0), to, limit, limit, &[]);
    c.pump()
        .wait_for("NdkConnectEventCallback or NdkConnect's completion", || {
            listener.incoming.calls() != events || connect.ctx.calls() != 0
        });
    if listener.incoming.calls() == events {
        panic!(
            "NdkConnect failed before any ConnectEvent: {:#x}",
            connect.wait()
        );
    }
    let server = listener.next_incoming();
    let accept = server.accept_raw(b, limit, limit, &[]);
    assert_eq!(connect.wait(), STATUS_SUCCESS, "NdkConnect");
    assert_eq!(
        client.complete_connect(),
        STATUS_SUCCESS,
        "NdkCompleteConnect"
    );
    assert_eq!(accept.wait(), STATUS_SUCCESS, "NdkAccept");
    c.pump().links.lock().unwrap().push(Link {
        qps: [a.ptr as usize, b.ptr as usize],
        client,
        server,
    });
}
