//! `NDK_MW_DISPATCH` (no MW is ever created, see `ndk/mw.rs`). Every thunk follows the
//! shared `# Safety` contract of [`super`] ("the module contract").

use super::dispatch_table;
use crate::ndk::mw::Mw;
use crate::ndk::object::ObjRef;
use crate::ndkpi::*;

/// # Safety
/// See the module contract.
unsafe extern "system" fn get_remote_token_from_mw(pNdkMw: *mut NDK_MW) -> UINT32 {
    // SAFETY: module contract.
    unsafe { ObjRef::<Mw>::borrow(pNdkMw) }.map_or(0, |mw| mw.remote_token())
}

dispatch_table!(MW_DISPATCH: NDK_MW_DISPATCH, NdkCloseMw: Mw {
    NdkGetRemoteTokenFromMw: get_remote_token_from_mw,
});
