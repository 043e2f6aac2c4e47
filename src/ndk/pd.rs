//! NDK_PD over a PVRDMA PD (ndkpi.md §2.2, §5.7 privileged token; pvrdma.md §1 mapping).
//!
//! Each PD owns a DMA MR (CREATE_MR flags DMA, LOCAL_WRITE only) whose lkey is the
//! privileged token: local read and write of adapter logical addresses, never remote
//! access (pitfall 13).
#![deny(unsafe_code)]

use super::adapter::Adapter;
use super::dispatch;
use super::error::{NdkError, NdkResult};
use super::hw::{MrKeys, MrSpec};
use super::object::{Lifetime, NdkObject, ObjRef, header};
use crate::ndkpi::*;

/// A protection domain.
pub struct Pd {
    life: Lifetime,
    adapter: ObjRef<Adapter>,
    handle: u32,
    dma: MrKeys,
}

impl NdkObject for Pd {
    type Ndk = NDK_PD;
    fn lifetime(&self) -> &Lifetime {
        &self.life
    }
    fn teardown(&self) {
        let hw = self.adapter.hw();
        hw.destroy_mr(self.dma.handle);
        hw.destroy_pd(self.handle);
    }
    fn release_antecedents(&self) {
        self.adapter.put();
    }
}

impl Pd {
    /// NdkCreatePd.
    pub fn create(adapter: &ObjRef<Adapter>) -> NdkResult<ObjRef<Pd>> {
        if !adapter.lifetime().try_get() {
            return Err(NdkError::InvalidDeviceRequest);
        }
        let made = Self::create_inner(adapter);
        if made.is_err() {
            adapter.put();
        }
        made
    }

    fn create_inner(adapter: &ObjRef<Adapter>) -> NdkResult<ObjRef<Pd>> {
        let hw = adapter.hw();
        let handle = hw.create_pd()?;
        let dma = match hw.create_mr(handle, &MrSpec::Dma) {
            Ok(k) => k,
            Err(e) => {
                hw.destroy_pd(handle);
                return Err(e.into());
            }
        };
        let ndk = NDK_PD {
            Header: header(adapter.version(), NdkObjectTypePd),
            Dispatch: &dispatch::PD_DISPATCH,
        };
        ObjRef::try_new(
            ndk,
            Pd {
                life: Lifetime::new(),
                adapter: adapter.clone(),
                handle,
                dma,
            },
        )
        .inspect_err(|_| {
            hw.destroy_mr(dma.handle);
            hw.destroy_pd(handle);
        })
    }

    /// Device handle.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// The adapter.
    pub fn adapter(&self) -> &ObjRef<Adapter> {
        &self.adapter
    }

    /// NdkGetPrivilegedMemoryRegionToken: the DMA MR's lkey.
    pub fn privileged_token(&self) -> u32 {
        self.dma.lkey
    }
}

/// Takes a successor count on `antecedent` for a new object (§5.2); fails once it closes.
pub(crate) fn take_successor<T: NdkObject>(antecedent: &ObjRef<T>) -> NdkResult<()> {
    if antecedent.lifetime().try_get() {
        Ok(())
    } else {
        Err(NdkError::InvalidDeviceRequest)
    }
}
