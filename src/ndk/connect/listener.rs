//! NDK_LISTENER over the connection engine (ndkpi.md §5.10, §5.11).
//!
//! NdkListen reserves the local address:port (port 0: ephemeral) and starts a CM listener
//! on it. Each REQ the CM accepts for it becomes a passive connector, a successor of the
//! listener, handed to NdkConnectEventCallback; from then on the consumer owns it. Once
//! the listener's close is issued, new requests are refused (REJ 28: the peer sees
//! STATUS_CONNECTION_REFUSED); the close stays pending until the connectors it delivered
//! have closed, and only then are the CM listener and the address:port released.
#![deny(unsafe_code)]

use alloc::sync::Arc;
use core::net::{IpAddr, SocketAddr};

use super::conn_stats::EndpointRole;
use super::connector::Connector;
use super::engine::CmEngine;
use crate::cm::ListenerId;
use crate::ndk::adapter::Adapter;
use crate::ndk::error::{NdkError, NdkResult};
use crate::ndk::object::{Dispatched, Lifetime, NdkObject, ObjRef, header};
use crate::ndkpi::*;
use crate::os::SpinLock;

/// A listener.
pub struct Listener {
    life: Lifetime,
    adapter: ObjRef<Adapter>,
    engine: Arc<CmEngine>,
    callback: NDK_FN_CONNECT_EVENT_CALLBACK,
    context: usize,
    bound: SpinLock<Option<(ListenerId, IpAddr, u16)>>,
}

impl NdkObject for Listener {
    type Ndk = NDK_LISTENER;
    fn lifetime(&self) -> &Lifetime {
        &self.life
    }
    fn teardown(&self) {
        let bound = self.bound.lock().take();
        if let Some((id, ip, port)) = bound {
            let _ = self.engine.input(|cm, _| cm.unlisten(id));
            self.engine.unregister_listener(id);
            self.engine.release_endpoint(ip, port);
        }
    }
    fn release_antecedents(&self) {
        self.adapter.put();
    }
}

impl Listener {
    /// NdkCreateListener.
    ///
    /// # Errors
    /// As [`Connector::create`].
    pub fn create(
        adapter: &ObjRef<Adapter>,
        callback: NDK_FN_CONNECT_EVENT_CALLBACK,
        context: usize,
    ) -> NdkResult<ObjRef<Listener>> {
        let engine = super::engine(adapter.device()).ok_or(NdkError::NotImplemented)?;
        if !adapter.lifetime().try_get() {
            return Err(NdkError::InvalidDeviceRequest);
        }
        let ndk = NDK_LISTENER {
            Header: header(adapter.version(), NdkObjectTypeListener),
            Dispatch: Listener::TABLE,
        };
        ObjRef::try_new(
            ndk,
            Listener {
                life: Lifetime::new(),
                adapter: adapter.clone(),
                engine,
                callback,
                context,
                bound: SpinLock::new(None),
            },
        )
        .map_err(|_| {
            adapter.put();
            NdkError::InsufficientResources
        })
    }

    /// The adapter.
    pub fn adapter(&self) -> &ObjRef<Adapter> {
        &self.adapter
    }

    /// The address listened on, once listening.
    pub fn local_address(&self) -> Option<SocketAddr> {
        self.bound
            .lock()
            .map(|(_, ip, port)| SocketAddr::new(ip, port))
    }

    /// NdkControlConnectEvents: a paused listener is treated as absent (REJ 8: the peer
    /// sees STATUS_CONNECTION_REFUSED).
    pub fn pause(&self, paused: bool) {
        let bound = *self.bound.lock();
        if let Some((id, _, _)) = bound {
            let _ = self.engine.input(|cm, _| cm.pause(id, paused));
        }
    }
}

impl ObjRef<Listener> {
    /// NdkListen on `addr` (an unspecified IP: every address of the family; IPv6 covers
    /// IPv4 too).
    ///
    /// # Errors
    /// STATUS_INVALID_DEVICE_STATE (listening already), STATUS_INVALID_ADDRESS (not an
    /// address of the interface), STATUS_SHARING_VIOLATION (address:port in use),
    /// STATUS_TOO_MANY_ADDRESSES (no ephemeral port), STATUS_INSUFFICIENT_RESOURCES.
    pub fn listen(&self, addr: SocketAddr) -> NdkResult<()> {
        let engine = &self.engine;
        if self.bound.lock().is_some() {
            return Err(NdkError::InvalidDeviceState);
        }
        let ip = addr.ip();
        if !ip.is_unspecified() && !engine.is_local(ip) {
            return Err(NdkError::InvalidAddress);
        }
        let port = engine.reserve_endpoint_as(ip, addr.port(), EndpointRole::Listener)?;
        let id = match engine.input(|cm, _| cm.listen(port, ip)) {
            Ok(id) => id,
            Err(e) => {
                engine.release_endpoint(ip, port);
                return Err(NdkError::from(e));
            }
        };
        if !engine.register_listener(id, self) {
            let _ = engine.input(|cm, _| cm.unlisten(id));
            engine.release_endpoint(ip, port);
            return Err(NdkError::InsufficientResources);
        }
        *self.bound.lock() = Some((id, ip, port));
        Ok(())
    }

    /// Hands an incoming connection to the consumer (no lock held). A listener closing
    /// meanwhile gets no callback: the connector is closed here, which refuses the request.
    pub(crate) fn deliver_connect(&self, c: ObjRef<Connector>) {
        if !self.life.try_get() {
            c.close_unpublished();
            return;
        }
        let ptr = c.publish();
        upcall::connect_event(self.callback, self.context, ptr);
        self.put();
    }
}
