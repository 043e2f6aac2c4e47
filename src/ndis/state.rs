//! The NDK enable/disable state of one miniport adapter (ndkpi.md §6.5) and its lifecycle
//! (running, paused, halted).
//!
//! - `*NetworkDirect` decides whether NDK may be enabled at all; InitializeEx reports the
//!   initial state in NDIS_MINIPORT_ADAPTER_NDK_ATTRIBUTES.Enabled and announces nothing.
//! - OID_NDK_SET_STATE changes the wanted state at once (an open while disabled fails
//!   NDIS_STATUS_ADAPTER_NOT_READY) and never pends. The PnP event that tells NDIS is not
//!   issued from the OID handler (it would deadlock, §6.5): the FFI layer's work item asks
//!   [`NdkState::next_event`] and issues what it returns, until it returns `None`. Each
//!   event brings NDIS's view one step towards the wanted state, so a quick disable and
//!   re-enable that NDIS never saw announces nothing.
//! - A disable leaves live NDK objects alone: NDIS answers NetEventNDKDisable by closing
//!   every NDK_ADAPTER, and each close waits until its consumer has closed the objects
//!   under it (§6.3). The event stays pending meanwhile, outside any lock of ours.
//! - Pause and Restart concern the NDIS send/receive path, which this function does not
//!   have: NDK keeps running while paused.
//! - On the Ethernet function of a paired slot (`super::pair`) NDK is served by another
//!   function: while it is absent ([`NdkState::set_present`]) NDK is disabled whatever was
//!   asked, and its arrival and departure are announced like an OID_NDK_SET_STATE.
#![deny(unsafe_code)]

use super::abi::*;
use crate::os::SpinLock;

/// Where the adapter is in its NDIS lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lifecycle {
    Running,
    Paused,
    Halted,
}

#[derive(Clone, Copy, Debug)]
struct Inner {
    /// `*NetworkDirect` ≠ 0.
    allowed: bool,
    /// What the last OID_NDK_SET_STATE (or InitializeEx) asked for.
    wanted: bool,
    /// What NDIS was last told (InitializeEx's attribute or the last event handed out).
    announced: bool,
    /// The function that serves NDK is here (always, unless paired).
    present: bool,
    lifecycle: Lifecycle,
}

/// The state machine; every method is a short critical section, callable at any IRQL ≤
/// DISPATCH_LEVEL.
pub struct NdkState {
    inner: SpinLock<Inner>,
}

impl NdkState {
    /// After InitializeEx: enabled exactly when `*NetworkDirect` allows it.
    pub fn new(network_direct: bool) -> Self {
        Self::with_presence(network_direct, true)
    }

    /// After InitializeEx of an adapter whose NDK is served by a paired function, `present`
    /// or not yet: enabled exactly when `*NetworkDirect` allows it and the function is here.
    pub fn with_presence(network_direct: bool, present: bool) -> Self {
        NdkState {
            inner: SpinLock::new(Inner {
                allowed: network_direct,
                wanted: network_direct,
                announced: network_direct && present,
                present,
                lifecycle: Lifecycle::Running,
            }),
        }
    }

    /// Whether NDK is enabled: asked for, and its function here.
    pub fn enabled(&self) -> bool {
        let s = self.inner.lock();
        s.wanted && s.present
    }

    /// The function serving NDK arrived (`true`) or left; the change is announced through
    /// [`NdkState::next_event`] like an OID_NDK_SET_STATE. Returns whether the enabled
    /// state changed.
    pub fn set_present(&self, present: bool) -> bool {
        let mut s = self.inner.lock();
        let before = s.wanted && s.present;
        s.present = present;
        before != (s.wanted && s.present)
    }

    /// The lifecycle.
    pub fn lifecycle(&self) -> Lifecycle {
        self.inner.lock().lifecycle
    }

    /// OID_NDK_SET_STATE. Enabling when enabled and disabling when disabled succeed and
    /// change nothing.
    ///
    /// # Errors
    /// NDIS_STATUS_NOT_SUPPORTED to enable when `*NetworkDirect` forbids it;
    /// NDIS_STATUS_ADAPTER_NOT_READY after Halt.
    pub fn set(&self, enable: bool) -> Result<(), NDIS_STATUS> {
        let mut s = self.inner.lock();
        if s.lifecycle == Lifecycle::Halted {
            return Err(NDIS_STATUS_ADAPTER_NOT_READY);
        }
        if enable && !s.allowed {
            return Err(NDIS_STATUS_NOT_SUPPORTED);
        }
        s.wanted = enable;
        Ok(())
    }

    /// The NDK PnP event NDIS must be told next, if any (taken: the caller issues it).
    pub fn next_event(&self) -> Option<NET_PNP_EVENT_CODE> {
        let mut s = self.inner.lock();
        let effective = s.wanted && s.present;
        if s.lifecycle == Lifecycle::Halted || effective == s.announced {
            return None;
        }
        s.announced = effective;
        Some(if effective {
            NetEventNDKEnable
        } else {
            NetEventNDKDisable
        })
    }

    /// InitializeEx reports the NDK attributes now: returns their `Enabled` (the effective
    /// state), which NDIS knows from then on, so nothing is announced for it. For an adapter
    /// whose function may have joined before its attributes were set (`super::pair`).
    pub fn report(&self) -> bool {
        let mut s = self.inner.lock();
        let effective = s.wanted && s.present && s.lifecycle != Lifecycle::Halted;
        s.announced = effective;
        effective
    }

    /// Whether [`NdkState::next_event`] would return an event now (nothing is taken).
    pub fn pending(&self) -> bool {
        let s = self.inner.lock();
        s.lifecycle != Lifecycle::Halted && (s.wanted && s.present) != s.announced
    }

    /// Whether an NDK_ADAPTER may be opened now.
    ///
    /// # Errors
    /// NDIS_STATUS_ADAPTER_NOT_READY while disabled or after Halt.
    pub fn may_open(&self) -> Result<(), NDIS_STATUS> {
        let s = self.inner.lock();
        if s.wanted && s.present && s.lifecycle != Lifecycle::Halted {
            Ok(())
        } else {
            Err(NDIS_STATUS_ADAPTER_NOT_READY)
        }
    }

    /// Pause / Restart / Halt. Returns the previous lifecycle. A halted adapter stays halted.
    pub fn move_to(&self, to: Lifecycle) -> Lifecycle {
        let mut s = self.inner.lock();
        let was = s.lifecycle;
        if was != Lifecycle::Halted {
            s.lifecycle = to;
        }
        was
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enable_disable_and_events() {
        let s = NdkState::new(true);
        assert!(s.enabled());
        assert_eq!(
            s.next_event(),
            None,
            "InitializeEx's attribute said enabled"
        );
        assert_eq!(s.may_open(), Ok(()));
        // Enabling when enabled: success, nothing to announce.
        assert_eq!(s.set(true), Ok(()));
        assert_eq!(s.next_event(), None);
        assert_eq!(s.set(false), Ok(()));
        assert_eq!(s.may_open(), Err(NDIS_STATUS_ADAPTER_NOT_READY));
        assert_eq!(s.next_event(), Some(NetEventNDKDisable));
        assert_eq!(s.next_event(), None);
        assert_eq!(s.set(false), Ok(()));
        assert_eq!(s.next_event(), None);
        assert_eq!(s.set(true), Ok(()));
        assert_eq!(s.next_event(), Some(NetEventNDKEnable));
        // A disable and re-enable before the work item ran: NDIS saw neither.
        assert_eq!(s.set(false), Ok(()));
        assert_eq!(s.set(true), Ok(()));
        assert_eq!(s.next_event(), None);
    }

    #[test]
    fn network_direct_zero_forbids_enabling() {
        let s = NdkState::new(false);
        assert!(!s.enabled());
        assert_eq!(s.may_open(), Err(NDIS_STATUS_ADAPTER_NOT_READY));
        assert_eq!(s.set(true), Err(NDIS_STATUS_NOT_SUPPORTED));
        assert_eq!(s.set(false), Ok(()));
        assert_eq!(s.next_event(), None);
    }

    #[test]
    fn presence_of_the_paired_function_gates_ndk() {
        // The Ethernet function starts before the RDMA function: disabled, nothing to say.
        let s = NdkState::with_presence(true, false);
        assert!(!s.enabled());
        assert_eq!(s.may_open(), Err(NDIS_STATUS_ADAPTER_NOT_READY));
        assert_eq!(s.next_event(), None);
        assert!(s.set_present(true));
        assert_eq!(s.may_open(), Ok(()));
        assert_eq!(s.next_event(), Some(NetEventNDKEnable));
        assert!(s.set_present(false));
        assert_eq!(s.may_open(), Err(NDIS_STATUS_ADAPTER_NOT_READY));
        assert_eq!(s.next_event(), Some(NetEventNDKDisable));
        // Disabled by OID while absent: its return changes nothing NDIS sees.
        assert_eq!(s.set(false), Ok(()));
        assert!(!s.set_present(true));
        assert_eq!(s.next_event(), None);
        assert_eq!(s.set(true), Ok(()));
        assert_eq!(s.next_event(), Some(NetEventNDKEnable));
        // `*NetworkDirect` 0: presence never enables.
        let off = NdkState::with_presence(false, false);
        assert!(!off.set_present(true));
        assert_eq!(off.next_event(), None);
        assert!(!off.enabled());
    }

    #[test]
    fn a_function_joined_before_the_attributes_is_reported_not_announced() {
        let s = NdkState::with_presence(true, false);
        assert!(s.set_present(true));
        assert!(s.pending());
        assert!(s.report(), "the attributes say enabled");
        assert!(!s.pending());
        assert_eq!(s.next_event(), None, "NDIS learnt it from the attributes");
        // A departure between the attributes and the work item's installation is pending.
        assert!(s.set_present(false));
        assert!(s.pending());
        assert_eq!(s.next_event(), Some(NetEventNDKDisable));
        assert!(!s.pending());
        s.move_to(Lifecycle::Halted);
        assert!(s.set_present(true));
        assert!(!s.pending() && !s.report(), "nothing after Halt");
    }

    #[test]
    fn pause_keeps_ndk_and_halt_is_final() {
        let s = NdkState::new(true);
        assert_eq!(s.move_to(Lifecycle::Paused), Lifecycle::Running);
        assert_eq!(s.may_open(), Ok(()));
        assert_eq!(s.move_to(Lifecycle::Running), Lifecycle::Paused);
        assert_eq!(s.set(false), Ok(()));
        assert_eq!(s.move_to(Lifecycle::Halted), Lifecycle::Running);
        // Nothing is announced after Halt, and nothing reopens.
        assert_eq!(s.next_event(), None);
        assert_eq!(s.move_to(Lifecycle::Running), Lifecycle::Halted);
        assert_eq!(s.lifecycle(), Lifecycle::Halted);
        assert_eq!(s.set(true), Err(NDIS_STATUS_ADAPTER_NOT_READY));
        assert_eq!(s.may_open(), Err(NDIS_STATUS_ADAPTER_NOT_READY));
    }
}
