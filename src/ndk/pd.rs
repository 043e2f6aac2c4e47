//! NDK_PD over a PVRDMA PD (ndkpi.md §2.2, §5.7 privileged token; pvrdma.md §1 mapping).
//!
//! Each PD owns a DMA MR (CREATE_MR flags DMA, LOCAL_WRITE only) whose lkey is the
//! privileged token: local read and write of adapter logical addresses, never remote
//! access (pitfall 13).
#![deny(unsafe_code)]

use super::adapter::Adapter;
use super::error::{NdkError, NdkResult};
use super::object::{CreateHandoff, Dispatched, Lifetime, NdkObject, ObjRef, header};
use crate::ndkpi::*;
use crate::pvrdma::PvrdmaError;
use crate::pvrdma::verbs::{Done, MrKeys};

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
    /// NdkCreatePd with the device commands possibly completing later: the result goes to
    /// `handoff` (inline or through CreateCompletion).
    ///
    /// # Errors
    /// Inline failures before any command was issued.
    pub fn create_async(
        adapter: &ObjRef<Adapter>,
        handoff: alloc::sync::Arc<CreateHandoff<Pd>>,
    ) -> NdkResult<()> {
        take_successor(adapter)?;
        let a = adapter.clone();
        let done = move |r: Result<(u32, MrKeys), PvrdmaError>| {
            let made = match r {
                Ok((handle, dma)) => Self::wrap(&a, handle, dma),
                Err(e) => Err(e.into()),
            };
            if made.is_err() {
                a.put();
            }
            handoff.complete(made);
        };
        let done = crate::os::alloc::try_box(done)
            .map(|b| b.map_box(|b| b as Done<(u32, MrKeys)>).into_inner())
            .map_err(|_| NdkError::InsufficientResources);
        match done {
            Ok(d) => {
                adapter.hw().create_pd(d);
                Ok(())
            }
            Err(e) => {
                adapter.put();
                Err(e)
            }
        }
    }

    fn wrap(adapter: &ObjRef<Adapter>, handle: u32, dma: MrKeys) -> NdkResult<ObjRef<Pd>> {
        let ndk = NDK_PD {
            Header: header(adapter.version(), NdkObjectTypePd),
            Dispatch: Pd::TABLE,
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
            let hw = adapter.hw();
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
