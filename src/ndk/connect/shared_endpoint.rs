//! NDK_SHARED_ENDPOINT (ndkpi.md §5.10, §5.11): a local address:port reserved for many
//! outgoing connections. Each connector connected through it holds a successor count on it,
//! so the address:port is released only when the shared endpoint and all those connectors
//! have closed (its close stays pending until then).
#![deny(unsafe_code)]

use alloc::sync::Arc;
use core::net::{IpAddr, SocketAddr};

use super::conn_stats::EndpointRole;
use super::engine::CmEngine;
use crate::ndk::adapter::Adapter;
use crate::ndk::error::{NdkError, NdkResult};
use crate::ndk::object::{Dispatched, Lifetime, NdkObject, ObjRef, header};
use crate::ndkpi::*;

/// A shared endpoint.
pub struct SharedEndpoint {
    life: Lifetime,
    adapter: ObjRef<Adapter>,
    engine: Arc<CmEngine>,
    ip: IpAddr,
    port: u16,
}

impl NdkObject for SharedEndpoint {
    type Ndk = NDK_SHARED_ENDPOINT;
    fn lifetime(&self) -> &Lifetime {
        &self.life
    }
    fn teardown(&self) {
        self.engine.release_endpoint(self.ip, self.port);
    }
    fn release_antecedents(&self) {
        self.adapter.put();
    }
}

impl SharedEndpoint {
    /// NdkCreateSharedEndpoint on `addr` (port 0: ephemeral).
    ///
    /// # Errors
    /// STATUS_NOT_IMPLEMENTED without a connection engine; STATUS_INVALID_ADDRESS (not an
    /// address of the interface), STATUS_SHARING_VIOLATION, STATUS_TOO_MANY_ADDRESSES,
    /// STATUS_INSUFFICIENT_RESOURCES, STATUS_INVALID_DEVICE_REQUEST (adapter closing).
    pub fn create(
        adapter: &ObjRef<Adapter>,
        addr: SocketAddr,
    ) -> NdkResult<ObjRef<SharedEndpoint>> {
        let engine = super::engine(adapter.device()).ok_or(NdkError::NotImplemented)?;
        let ip = addr.ip();
        if ip.is_unspecified() || !engine.is_local(ip) {
            return Err(NdkError::InvalidAddress);
        }
        if !adapter.lifetime().try_get() {
            return Err(NdkError::InvalidDeviceRequest);
        }
        let port = match engine.reserve_endpoint_as(ip, addr.port(), EndpointRole::Shared) {
            Ok(p) => p,
            Err(e) => {
                adapter.put();
                return Err(e);
            }
        };
        let ndk = NDK_SHARED_ENDPOINT {
            Header: header(adapter.version(), NdkObjectTypeSharedEndpoint),
            Dispatch: SharedEndpoint::TABLE,
        };
        ObjRef::try_new(
            ndk,
            SharedEndpoint {
                life: Lifetime::new(),
                adapter: adapter.clone(),
                engine: engine.clone(),
                ip,
                port,
            },
        )
        .map_err(|_| {
            engine.release_endpoint(ip, port);
            adapter.put();
            NdkError::InsufficientResources
        })
    }

    /// The local address.
    pub fn local_address(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.port)
    }

    /// The local port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The adapter.
    pub fn adapter(&self) -> &ObjRef<Adapter> {
        &self.adapter
    }
}
