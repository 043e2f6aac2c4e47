//! The connection side of the NDK provider (ndkpi.md §5.10–5.12; cm.md): the per-device
//! connection [`engine`](mod@engine) joining the sans-IO connection manager (`crate::cm`) to the adapter's
//! GSI QP ([`qp1`]), the GID table and the OS's address resolver, and the three connection
//! objects it serves: [`connector`], [`listener`], [`shared_endpoint`].
//!
//! The object core (`ndk/*.rs`) never names this folder: an [`NdkDevice`] holds its engine as
//! an `Arc<dyn Connections>` (the trait the core defines), [`start`] puts it there and
//! [`engine()`] finds it again for the connection objects and the layers above.

pub mod conn_stats;
pub mod connector;
pub mod engine;
pub mod listener;
pub mod qp1;
pub mod shared_endpoint;

use alloc::sync::Arc;

pub use engine::{CmEngine, EngineConfig, EngineStats};

use crate::ndk::adapter::NdkDevice;
use crate::os::Platform;
use crate::os::net::AddressResolver;
use crate::pvrdma::PvrdmaError;

/// Starts the connection engine of `ndk` over `resolver` (PASSIVE_LEVEL, once the device runs
/// and its events reach `ndk`): QP1, a GID per interface address, the CM. Until this
/// succeeds, connectors, listeners and shared endpoints answer STATUS_NOT_IMPLEMENTED. An
/// engine started earlier is stopped.
///
/// # Errors
/// What [`CmEngine::start`] reported.
pub fn start(
    ndk: &NdkDevice,
    platform: Arc<dyn Platform>,
    resolver: Arc<dyn AddressResolver>,
    cfg: EngineConfig,
) -> Result<(), PvrdmaError> {
    let engine = CmEngine::start(platform, ndk.hw_handle(), resolver, cfg)?;
    ndk.set_connections(Some(engine));
    Ok(())
}

/// The connection engine of `ndk`, if started.
pub fn engine(ndk: &NdkDevice) -> Option<Arc<CmEngine>> {
    let any: Arc<dyn core::any::Any + Send + Sync> = ndk.connections()?;
    any.downcast::<CmEngine>().ok()
}
