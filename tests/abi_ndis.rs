//! NDIS-side handler tables called through the ABI (ndkpi.md §6.2, §6.3, §6.9), and the
//! small const helpers of the ABI modules (flags, MDL accessors, status classification).

use core::ffi::c_void;
use std::cell::RefCell;

use pvrdma_ndk::ndis::*;
use pvrdma_ndk::ndkpi::{
    ADDRESS_AND_SIZE_TO_SPAN_PAGES, AdapterFlags, MDL, MDL_MAPPED_TO_SYSTEM_VA, MmGetMdlByteCount,
    MmGetMdlByteOffset, MmGetMdlPfnArray, MmGetMdlVirtualAddress, MrFlags, NDK_ADAPTER,
    NDK_MR_FLAG_ALLOW_LOCAL_READ, NDK_VERSION, OpFlags, STATUS_BUFFER_OVERFLOW, STATUS_PENDING,
    STATUS_SUCCESS, STATUS_TIMEOUT, mdl_page_count, nt_success,
};

thread_local! {
    static LOG: RefCell<Vec<(&'static str, Vec<u64>)>> = const { RefCell::new(Vec::new()) };
}

fn record(name: &'static str, args: &[u64]) {
    LOG.with(|l| l.borrow_mut().push((name, args.to_vec())));
}

fn take() -> Vec<(&'static str, Vec<u64>)> {
    LOG.with(|l| core::mem::take(&mut *l.borrow_mut()))
}

fn p<T>(addr: usize) -> *mut T {
    core::ptr::without_provenance_mut(addr)
}

fn a<T>(ptr: *const T) -> u64 {
    ptr as usize as u64
}

/// Loads the function pointer at byte `offset` of a `#[repr(C)]` table, as compiled C does.
///
/// # Safety
/// `table` points to a live table whose member at `offset` has type `F`.
unsafe fn slot<F: Copy>(table: *const c_void, offset: usize) -> F {
    assert_eq!(core::mem::size_of::<F>(), core::mem::size_of::<usize>());
    // SAFETY: the caller guarantees `offset` is inside the table.
    let at = unsafe { table.cast::<u8>().add(offset) };
    // SAFETY: the caller guarantees an `F` is stored there, pointer-aligned.
    unsafe { at.cast::<F>().read() }
}

unsafe extern "system" fn open_handler(
    context: NDIS_HANDLE,
    parameters: *mut NDIS_OPEN_NDK_ADAPTER_PARAMETERS,
    out: *mut *mut NDK_ADAPTER,
) -> NDIS_STATUS {
    record("Open", &[a(context), a(parameters), a(out)]);
    NDIS_STATUS_BAD_VERSION
}

unsafe extern "system" fn close_handler(context: NDIS_HANDLE, adapter: *mut NDK_ADAPTER) {
    record("Close", &[a(context), a(adapter)]);
}

#[test]
fn provider_characteristics_reach_open_and_close_handlers_at_their_offsets() {
    let chars = NDIS_NDK_PROVIDER_CHARACTERISTICS {
        Header: NDIS_OBJECT_HEADER {
            Type: NDIS_OBJECT_TYPE_NDK_PROVIDER_CHARACTERISTICS,
            Revision: NDIS_NDK_PROVIDER_CHARACTERISTICS_REVISION_1,
            Size: NDIS_SIZEOF_NDK_PROVIDER_CHARACTERISTICS_REVISION_1,
        },
        Flags: 0,
        OpenNDKAdapterHandler: open_handler,
        CloseNDKAdapterHandler: close_handler,
    };
    let table: *const c_void = (&raw const chars).cast();
    // SAFETY: an NDIS_NDK_PROVIDER_CHARACTERISTICS has the open handler at 0x08.
    let open: OPEN_NDK_ADAPTER_HANDLER = unsafe { slot(table, 0x08) };
    // SAFETY: ... and the close handler at 0x10.
    let close: CLOSE_NDK_ADAPTER_HANDLER = unsafe { slot(table, 0x10) };

    let mut params = NDIS_OPEN_NDK_ADAPTER_PARAMETERS {
        Version: NDK_VERSION { Major: 2, Minor: 1 },
        SwitchId: NDIS_DEFAULT_SWITCH_ID,
        VPortId: NDIS_DEFAULT_VPORT_ID,
    };
    let params_ptr: *mut NDIS_OPEN_NDK_ADAPTER_PARAMETERS = &mut params;
    // SAFETY: `open` is `open_handler`, which only records its arguments.
    let status = unsafe { open(p(0x3001), params_ptr, p(0x3002)) };
    assert_eq!(status, NDIS_STATUS_BAD_VERSION);
    assert_eq!(status as u32, 0xC001_0004);
    // SAFETY: `close` is `close_handler`, which only records its arguments.
    unsafe { close(p(0x3003), p(0x3004)) };
    assert_eq!(
        take(),
        vec![
            ("Open", vec![0x3001, a(params_ptr), 0x3002]),
            ("Close", vec![0x3003, 0x3004]),
        ]
    );
}

unsafe extern "system" fn wsk_open(
    client: PWSK_CLIENT,
    version: NDK_VERSION,
    if_index: NET_IFINDEX,
    out: *mut *mut NDK_ADAPTER,
) -> NTSTATUS {
    record(
        "WskOpen",
        &[
            a(client),
            u64::from(version.Major),
            u64::from(version.Minor),
            u64::from(if_index),
            a(out),
        ],
    );
    0x0B01
}

unsafe extern "system" fn wsk_close(client: PWSK_CLIENT, adapter: *mut NDK_ADAPTER) {
    record("WskClose", &[a(client), a(adapter)]);
}

#[test]
fn wsk_ndk_dispatch_passes_version_by_value() {
    let dispatch = WSK_PROVIDER_NDK_DISPATCH {
        WskOpenNdkAdapter: wsk_open,
        WskCloseNdkAdapter: wsk_close,
    };
    let table: *const c_void = (&raw const dispatch).cast();
    // SAFETY: WSK_PROVIDER_NDK_DISPATCH has the open function at 0x0.
    let open: PFN_WSK_NDK_OPEN_ADAPTER = unsafe { slot(table, 0x0) };
    // SAFETY: ... and the close function at 0x8.
    let close: PFN_WSK_NDK_CLOSE_ADAPTER = unsafe { slot(table, 0x8) };
    let version = NDK_VERSION { Major: 7, Minor: 9 };
    // SAFETY: `open` is `wsk_open`, which only records its arguments.
    let status = unsafe { open(p(0x3101), version, 0xA1, p(0x3102)) };
    assert_eq!(status, 0x0B01);
    // SAFETY: `close` is `wsk_close`, which only records its arguments.
    unsafe { close(p(0x3103), p(0x3104)) };
    assert_eq!(
        take(),
        vec![
            ("WskOpen", vec![0x3101, 7, 9, 0xA1, 0x3102]),
            ("WskClose", vec![0x3103, 0x3104]),
        ]
    );
}

#[test]
fn variable_length_oid_buffers_size_by_entry_count() {
    assert_eq!(NDIS_SIZEOF_NDK_CONNECTIONS_REVISION_1(0), 0x10);
    assert_eq!(NDIS_SIZEOF_NDK_CONNECTIONS_REVISION_1(2), 0x90);
    assert_eq!(NDIS_SIZEOF_NDK_LOCAL_ENDPOINTS_REVISION_1(1), 0x34);
    assert_eq!(NDIS_SIZEOF_NDK_LOCAL_ENDPOINTS_REVISION_1(4), 0xA0);
    // Header.Size saturates at MAXUSHORT: 0x10 + 0x40 * 1023 = 0xFFD0 fits, 1024 does not.
    assert_eq!(
        ndis_header_size(NDIS_SIZEOF_NDK_CONNECTIONS_REVISION_1(1023)),
        0xFFD0
    );
    assert_eq!(
        ndis_header_size(NDIS_SIZEOF_NDK_CONNECTIONS_REVISION_1(1024)),
        0xFFFF
    );
}

#[test]
fn performance_counter_mask_is_one_bit_per_field_index() {
    let mask = NDIS_NDK_PERFORMANCE_COUNTER_MASK(0)
        | NDIS_NDK_PERFORMANCE_COUNTER_MASK(4)
        | NDIS_NDK_PERFORMANCE_COUNTER_MASK(25);
    assert_eq!(mask, 0x0200_0011);
    assert_eq!(NDIS_NDK_PERFORMANCE_COUNTER_MASK(63), 1 << 63);
    assert_eq!(NDIS_NDK_PERFORMANCE_COUNTER_MASK(64), 0);
    assert_eq!(NDIS_NDK_PERFORMANCE_COUNTER_MASK(u32::MAX), 0);
}

#[test]
fn flag_types_carry_the_c_bit_values() {
    assert_eq!(OpFlags::all().bits(), 0x3FF);
    assert_eq!(OpFlags::from_bits(0x400), None);
    let remote_write = OpFlags::from_bits(0x30).unwrap();
    assert_eq!(remote_write, OpFlags::ALLOW_REMOTE_WRITE);
    assert!(remote_write.contains(OpFlags::ALLOW_LOCAL_WRITE));
    assert_eq!(OpFlags::RDMA_READ_LOCAL_INVALIDATE.bits(), 0x100);
    assert_eq!(OpFlags::DEFER.bits(), 0x200);

    // ALLOW_LOCAL_READ is 0: it parses as "no bits", and 0x5 implies local write.
    assert_eq!(
        MrFlags::from_bits(NDK_MR_FLAG_ALLOW_LOCAL_READ),
        Some(MrFlags::empty())
    );
    assert_eq!(MrFlags::all().bits(), 0xF);
    assert!(MrFlags::ALLOW_REMOTE_WRITE.contains(MrFlags::ALLOW_LOCAL_WRITE));
    assert!(!MrFlags::ALLOW_REMOTE_WRITE.contains(MrFlags::ALLOW_REMOTE_READ));

    // 0x10 (read-local-invalidate supported) is deliberately not advertisable.
    assert_eq!(AdapterFlags::all().bits(), 0x0001_010F);
    assert_eq!(AdapterFlags::from_bits(0x10), None);
}

#[test]
fn mdl_accessors_read_only_the_descriptor() {
    let mdl = MDL {
        Next: core::ptr::null_mut(),
        Size: 0x30 + 3 * 8,
        MdlFlags: MDL_MAPPED_TO_SYSTEM_VA,
        AllocationProcessorNumber: 0,
        Reserved: 0,
        Process: core::ptr::null_mut(),
        MappedSystemVa: core::ptr::null_mut(),
        // Never dereferenced: for NDK the VA is an index.
        StartVa: p(0x7FF0_1234_5000),
        ByteCount: 0x2000,
        ByteOffset: 0x10,
    };
    assert_eq!(MmGetMdlVirtualAddress(&mdl), 0x7FF0_1234_5010);
    assert_eq!(MmGetMdlByteCount(&mdl), 0x2000);
    assert_eq!(MmGetMdlByteOffset(&mdl), 0x10);
    // 0x10 + 0x2000 bytes from a page start touch three pages.
    assert_eq!(mdl_page_count(&mdl), 3);
    let base: *const MDL = &mdl;
    assert_eq!(MmGetMdlPfnArray(&mdl) as usize, base as usize + 0x30);
    assert_eq!(ADDRESS_AND_SIZE_TO_SPAN_PAGES(0x5FFF, 1), 1);
    assert_eq!(ADDRESS_AND_SIZE_TO_SPAN_PAGES(0x5FFF, 2), 2);
    assert_eq!(ADDRESS_AND_SIZE_TO_SPAN_PAGES(0x6000, 0), 0);
}

#[test]
fn nt_success_accepts_success_and_informational_codes_only() {
    assert!(nt_success(STATUS_SUCCESS));
    assert!(nt_success(STATUS_PENDING));
    assert!(nt_success(STATUS_TIMEOUT));
    assert!(!nt_success(STATUS_BUFFER_OVERFLOW));
    assert!(!nt_success(NDIS_STATUS_RESOURCES));
    assert_eq!(NDIS_STATUS_RESOURCES as u32, 0xC000_009A);
}
