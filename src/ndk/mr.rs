//! NDK_MR over PVRDMA MRs (ndkpi.md §5.7; pvrdma.md §1 mapping, §9 MRs, M24–M27).
//!
//! An MR is created empty and is either registered (NdkRegisterMr → CREATE_MR flags 0) or,
//! for a fast-register MR, initialized (NdkInitializeFastRegisterMr → CREATE_MR flags FRMR)
//! and then fast-registered by work requests, each of which gives it a new key: the key byte
//! (bits 7..0) advances, the MR index stays (M24, M26).
//!
//! The device writes (receives, RDMA READ results) only into LOCAL_WRITE memory (pvrdma.md
//! §14), so an MR grants LOCAL_WRITE only when the consumer asked for it:
//! NDK_MR_FLAG_ALLOW_LOCAL_WRITE (which NDK_MR_FLAG_ALLOW_REMOTE_WRITE contains), or
//! NDK_MR_FLAG_RDMA_READ_SINK, which marks memory an RDMA READ writes. A registration with
//! NDK_MR_FLAG_ALLOW_LOCAL_READ alone is read-only to the device: a receive or READ into it
//! fails (LOC_PROT_ERR, STATUS_ACCESS_VIOLATION). The adapter reports
//! RDMA_READ_SINK_NOT_REQUIRED (Project decision (b)): a read sink needs no right beyond
//! LOCAL_WRITE, and the privileged token (LOCAL_WRITE over all memory) may be one.
#![deny(unsafe_code)]

use core::sync::atomic::{AtomicU32, Ordering};

use super::adapter::mdl_error;
use super::consumer_array::ConsumerArray;
use super::error::{NdkError, NdkResult};
use super::object::{Dispatched, Lifetime, NdkObject, ObjRef, RequestHandoff, header};
use super::pd::{Pd, take_successor};
use crate::ndkpi::*;
use crate::os::SpinLock;
use crate::os::mdl::MdlChain;
use crate::pvrdma::PvrdmaError;
use crate::pvrdma::verbs::{Done, MrKeys, MrSpec};
use crate::pvrdma::wqe::AccessFlags;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MrState {
    Idle,
    /// A CREATE_MR is in flight (its request holds a close count).
    Busy,
    Registered(MrKeys),
    FastReg {
        keys: MrKeys,
        max_pages: u32,
        remote: bool,
    },
}

/// A memory region.
pub struct Mr {
    life: Lifetime,
    pd: ObjRef<Pd>,
    fast: bool,
    state: SpinLock<MrState>,
    // Current key of a fast-register MR (changes at each NdkFastRegister).
    key: AtomicU32,
}

impl NdkObject for Mr {
    type Ndk = NDK_MR;
    fn lifetime(&self) -> &Lifetime {
        &self.life
    }
    fn teardown(&self) {
        let st = core::mem::replace(&mut *self.state.lock(), MrState::Idle);
        match st {
            MrState::Registered(k) | MrState::FastReg { keys: k, .. } => {
                self.pd.adapter().hw().destroy_mr(k.handle)
            }
            MrState::Idle | MrState::Busy => {}
        }
    }
    fn release_antecedents(&self) {
        self.pd.put();
    }
}

/// A fast-register request checked against the MR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastRegTicket {
    /// FRMR handle.
    pub handle: u32,
    /// The key the MR gets.
    pub new_key: u32,
}

const MR_FLAGS_ALL: u32 = NDK_MR_FLAG_ALLOW_LOCAL_WRITE
    | NDK_MR_FLAG_ALLOW_REMOTE_READ
    | NDK_MR_FLAG_ALLOW_REMOTE_WRITE
    | NDK_MR_FLAG_RDMA_READ_SINK;

impl Mr {
    /// NdkCreateMr: an empty MR for NdkRegisterMr (`fast` = false) or for fast registration.
    pub fn create(pd: &ObjRef<Pd>, fast: bool) -> NdkResult<ObjRef<Mr>> {
        take_successor(pd)?;
        let ndk = NDK_MR {
            Header: header(pd.adapter().version(), NdkObjectTypeMr),
            Dispatch: Mr::TABLE,
        };
        ObjRef::try_new(
            ndk,
            Mr {
                life: Lifetime::new(),
                pd: pd.clone(),
                fast,
                state: SpinLock::new(MrState::Idle),
                key: AtomicU32::new(0),
            },
        )
        .inspect_err(|_| pd.put())
    }

    /// The PD.
    pub fn pd(&self) -> &ObjRef<Pd> {
        &self.pd
    }

    /// NdkDeregisterMr (completes inline).
    ///
    /// # Errors
    /// STATUS_INVALID_DEVICE_REQUEST if the MR is not registered;
    /// STATUS_INSUFFICIENT_RESOURCES if the DESTROY_MR could not be issued.
    pub fn deregister(&self) -> NdkResult<()> {
        let mut st = self.state.lock();
        match *st {
            MrState::Registered(k) => {
                // A DESTROY_MR that could not be issued leaves the MR registered (and its
                // device object alive) rather than reporting a deregistration that never
                // happened.
                self.pd.adapter().hw().try_destroy_mr(k.handle)?;
                *st = MrState::Idle;
                Ok(())
            }
            _ => Err(NdkError::InvalidDeviceRequest),
        }
    }

    /// NdkGetLocalTokenFromMr (0 before registration or initialization).
    pub fn local_token(&self) -> u32 {
        match *self.state.lock() {
            MrState::Registered(k) => k.lkey,
            MrState::FastReg { .. } => self.key.load(Ordering::Relaxed),
            MrState::Idle | MrState::Busy => 0,
        }
    }

    /// NdkGetRemoteTokenFromMr (0 before registration or initialization).
    pub fn remote_token(&self) -> u32 {
        match *self.state.lock() {
            MrState::Registered(k) => k.rkey,
            MrState::FastReg { .. } => self.key.load(Ordering::Relaxed),
            MrState::Idle | MrState::Busy => 0,
        }
    }

    /// Checks an NdkFastRegister of `pages` pages from a QP of PD `pd`.
    ///
    /// The PD is compared by identity: device handles are per adapter, so another
    /// adapter's PD may carry the same handle.
    ///
    /// # Errors
    /// STATUS_INVALID_PARAMETER if the MR is not an initialized FRMR of that PD or `pages`
    /// exceeds its capacity; STATUS_ACCESS_VIOLATION for remote access on an MR initialized
    /// without RemoteAccess.
    pub fn check_fast_register<'a>(
        &self,
        pd: &ObjRef<Pd>,
        pages: ConsumerArray<'a, NDK_LOGICAL_ADDRESS>,
        wants_remote: bool,
    ) -> NdkResult<(FastRegTicket, &'a [NDK_LOGICAL_ADDRESS])> {
        if self.pd != *pd {
            return Err(NdkError::InvalidParameter);
        }
        match *self.state.lock() {
            MrState::FastReg {
                keys,
                max_pages,
                remote,
            } => {
                // The consumer's page array becomes a slice only within the capacity.
                let pages = match pages.within(max_pages as usize) {
                    Some(p) if !p.is_empty() => p,
                    _ => return Err(NdkError::InvalidParameter),
                };
                if wants_remote && !remote {
                    return Err(NdkError::AccessViolation);
                }
                let cur = self.key.load(Ordering::Relaxed);
                let ticket = FastRegTicket {
                    handle: keys.handle,
                    new_key: (cur & !0xFF) | (cur.wrapping_add(1) & 0xFF),
                };
                Ok((ticket, pages))
            }
            _ => Err(NdkError::InvalidParameter),
        }
    }

    /// The fast-register WQE is posted: the new key is the MR's token from now on.
    pub fn commit_key(&self, key: u32) {
        self.key.store(key, Ordering::Relaxed);
    }

    /// The key NdkInvalidate must name: only fast-register MRs of `pd` (the same PD object,
    /// not an equal handle) qualify (an NdkRegisterMr MR is deregistered, never invalidated,
    /// §5.7).
    ///
    /// # Errors
    /// STATUS_INVALID_PARAMETER otherwise.
    pub fn invalidate_key(&self, pd: &ObjRef<Pd>) -> NdkResult<u32> {
        if self.pd != *pd {
            return Err(NdkError::InvalidParameter);
        }
        match *self.state.lock() {
            MrState::FastReg { .. } => Ok(self.key.load(Ordering::Relaxed)),
            _ => Err(NdkError::InvalidParameter),
        }
    }
}
impl ObjRef<Mr> {
    /// NdkRegisterMr of the first `length` bytes of the chain `mdl`, whose first virtual
    /// address is the region's base index (§5.7). The MDLs are read before this returns. The
    /// CREATE_MR may complete later; its status goes to `req` (inline or through
    /// RequestCompletion), and the request holds a close count meanwhile (§5.2).
    ///
    /// # Errors
    /// STATUS_INVALID_DEVICE_REQUEST on a fast-register MR or one already registered (or
    /// registering); STATUS_INVALID_PARAMETER for unknown flags, REMOTE_WRITE without
    /// LOCAL_WRITE (0x4), length 0 or above MaxRegistrationSize, an MDL chain that is
    /// malformed or not virtually contiguous for `length` bytes (see [`MdlChain::region`]),
    /// a zero-based VA, or a page without an adapter logical address;
    /// STATUS_INSUFFICIENT_RESOURCES if the page list cannot be allocated.
    pub fn register(
        &self,
        mdl: MdlChain<'_>,
        length: usize,
        flags: u32,
        req: alloc::sync::Arc<RequestHandoff>,
    ) -> NdkResult<()> {
        if self.fast {
            return Err(NdkError::InvalidDeviceRequest);
        }
        if flags & !MR_FLAGS_ALL != 0 || (flags & 0x4 != 0 && flags & 0x1 == 0) {
            return Err(NdkError::InvalidParameter);
        }
        let length = length as u64;
        let max = self.pd.adapter().info().MaxRegistrationSize as u64;
        if length == 0 || length > max {
            return Err(NdkError::InvalidParameter);
        }
        let region = mdl.region(length).map_err(mdl_error)?;
        if region.va() == 0 {
            return Err(NdkError::InvalidParameter);
        }
        let mut access = AccessFlags::empty();
        if flags & (NDK_MR_FLAG_ALLOW_LOCAL_WRITE | NDK_MR_FLAG_RDMA_READ_SINK) != 0 {
            access |= AccessFlags::LOCAL_WRITE;
        }
        if flags & NDK_MR_FLAG_ALLOW_REMOTE_READ != 0 {
            access |= AccessFlags::REMOTE_READ;
        }
        if flags & NDK_MR_FLAG_ALLOW_REMOTE_WRITE == NDK_MR_FLAG_ALLOW_REMOTE_WRITE {
            access |= AccessFlags::REMOTE_WRITE;
        }
        if *self.state.lock() != MrState::Idle {
            return Err(NdkError::InvalidDeviceRequest);
        }
        // Read the PFNs only once the request is known to be valid; the list allocates, as
        // registration may.
        let mut pages = alloc::vec::Vec::new();
        pages
            .try_reserve_exact(region.page_count())
            .map_err(|_| NdkError::InsufficientResources)?;
        pages.resize(region.page_count(), 0);
        self.pd.adapter().map_pages(&region, &mut pages)?;
        let spec = MrSpec::Normal {
            start: region.va(),
            length,
            access,
            pages: &pages,
        };
        self.issue(&spec, MrState::Idle, None, req)
    }

    /// NdkInitializeFastRegisterMr; completes like [`Self::register`]. A repeated call
    /// replaces the FRMR.
    ///
    /// # Errors
    /// STATUS_INVALID_DEVICE_REQUEST on a non-fast MR (or one being initialized);
    /// STATUS_INVALID_PARAMETER for 0 pages; STATUS_IMPLEMENTATION_LIMIT above FRMRPageCount
    /// (`max_fast_reg_page_list_len`).
    pub fn initialize_fast_register(
        &self,
        pages: u32,
        remote: bool,
        req: alloc::sync::Arc<RequestHandoff>,
    ) -> NdkResult<()> {
        if !self.fast {
            return Err(NdkError::InvalidDeviceRequest);
        }
        if pages == 0 {
            return Err(NdkError::InvalidParameter);
        }
        if pages > self.pd.adapter().info().FRMRPageCount {
            return Err(NdkError::ImplementationLimit);
        }
        let old = {
            let mut st = self.state.lock();
            match *st {
                MrState::Busy => return Err(NdkError::InvalidDeviceRequest),
                MrState::FastReg { keys, .. } => {
                    *st = MrState::Idle;
                    Some(keys.handle)
                }
                _ => None,
            }
        };
        if let Some(h) = old {
            self.pd.adapter().hw().destroy_mr(h);
        }
        let spec = MrSpec::FastReg { max_pages: pages };
        self.issue(&spec, MrState::Idle, Some((pages, remote)), req)
    }

    /// Marks the MR busy, takes a close count and issues CREATE_MR; the completion installs
    /// the keys (FRMR: `fast` = (pages, remote)) or restores `from`, completes `req`, then
    /// drops the count.
    fn issue(
        &self,
        spec: &MrSpec<'_>,
        from: MrState,
        fast: Option<(u32, bool)>,
        req: alloc::sync::Arc<RequestHandoff>,
    ) -> NdkResult<()> {
        {
            let mut st = self.state.lock();
            if *st != from {
                return Err(NdkError::InvalidDeviceRequest);
            }
            *st = MrState::Busy;
        }
        if !self.life.try_get() {
            *self.state.lock() = from;
            return Err(NdkError::InvalidDeviceRequest);
        }
        let me = self.clone();
        let done = move |r: Result<MrKeys, PvrdmaError>| {
            let status = match r {
                Ok(keys) => {
                    let new = match fast {
                        Some((max_pages, remote)) => {
                            me.key.store(keys.rkey, Ordering::Relaxed);
                            me.pd.adapter().device().forget_remote_invalidate(keys.rkey);
                            MrState::FastReg {
                                keys,
                                max_pages,
                                remote,
                            }
                        }
                        None => MrState::Registered(keys),
                    };
                    *me.state.lock() = new;
                    Ok(())
                }
                Err(e) => {
                    *me.state.lock() = from;
                    Err(NdkError::from(e))
                }
            };
            // RequestCompletion before the count drops: a close waiting on it completes
            // after (CloseCompletion is the last callback, §5.1).
            req.complete(status);
            me.put();
        };
        match crate::os::alloc::try_box(done) {
            Ok(b) => {
                let d: Done<MrKeys> = b.map_box(|b| b as Done<MrKeys>).into_inner();
                self.pd.adapter().hw().create_mr(self.pd.handle(), spec, d);
                Ok(())
            }
            Err(_) => {
                *self.state.lock() = from;
                self.put();
                Err(NdkError::InsufficientResources)
            }
        }
    }
}
