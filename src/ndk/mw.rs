//! NDK_MW: memory windows are not supported (pvrdma.md §1: the PVRDMA WQE union has no
//! bind-MW layout, §10). NdkCreateMw and NdkBind return STATUS_NOT_SUPPORTED and the adapter
//! reports MaxWindowSize = 0, so no MW object is ever created; the NDK_MW_DISPATCH table
//! still exists with every slot (§5.0).
#![deny(unsafe_code)]

use super::error::{NdkError, NdkResult};
use super::object::{Lifetime, NdkObject};
use crate::ndkpi::NDK_MW;

/// A memory window (never instantiated; see the module docs).
pub struct Mw {
    life: Lifetime,
}

impl NdkObject for Mw {
    type Ndk = NDK_MW;
    fn lifetime(&self) -> &Lifetime {
        &self.life
    }
}

impl Mw {
    /// NdkCreateMw.
    ///
    /// # Errors
    /// Always STATUS_NOT_SUPPORTED.
    pub fn create() -> NdkResult<()> {
        Err(NdkError::NotSupported)
    }

    /// NdkGetRemoteTokenFromMw: an MW is never bound, so it has no token.
    pub fn remote_token(&self) -> u32 {
        0
    }
}
