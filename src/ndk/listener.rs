//! NDK_LISTENER: connection management is a later issue (cm.md; ndkpi.md §5.10–5.12).
//!
//! NdkCreateListener returns STATUS_NOT_IMPLEMENTED, so no object of this type exists yet; its dispatch
//! table is complete (§5.0) and every slot returns STATUS_NOT_IMPLEMENTED (QueryExtension:
//! STATUS_NOT_SUPPORTED, close: STATUS_SUCCESS).
#![deny(unsafe_code)]

use super::error::{NdkError, NdkResult};
use super::object::{Lifetime, NdkObject};
use crate::ndkpi::NDK_LISTENER;

/// Placeholder state (never instantiated; see the module docs).
pub struct Listener {
    life: Lifetime,
}

impl NdkObject for Listener {
    type Ndk = NDK_LISTENER;
    fn lifetime(&self) -> &Lifetime {
        &self.life
    }
}

impl Listener {
    /// NdkCreateListener.
    ///
    /// # Errors
    /// Always STATUS_NOT_IMPLEMENTED (connection management is not written yet).
    pub fn create() -> NdkResult<()> {
        Err(NdkError::NotImplemented)
    }
}
