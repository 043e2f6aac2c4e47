//! End to end over the hardware layer, against its scripted fake device (testdev): the NDK
//! consumer's calls through the dispatch tables, the commands, rings and doorbells they
//! produce, and CQNE and async-event delivery. The test plays the NDK consumer, which calls
//! through raw object pointers.
#![allow(unsafe_code)]

use super::*;
use crate::ndk::completion::{tag, wr_id};
use crate::ndkpi::*;
use crate::os::Platform;
use crate::os::host::{HostDevice, HostPlatform};
use crate::pvrdma::cmd::{code, mr_flags, srq_attr_mask};
use crate::pvrdma::device::DeviceConfig;
use crate::pvrdma::eqe::EqeType;
use crate::pvrdma::testdev::{FakeDevice, Mode};
use core::sync::atomic::{AtomicU32, Ordering};
use std::vec::Vec;

#[test]
fn device_errors_map_to_seam_errors() {
    assert_eq!(hw_error(PvrdmaError::NoMemory), HwError::NoResources);
    assert_eq!(hw_error(PvrdmaError::QueueFull), HwError::NoResources);
    assert_eq!(
        hw_error(PvrdmaError::CommandFailed { code: 9, err: 12 }),
        HwError::NoResources
    );
    assert_eq!(
        hw_error(PvrdmaError::CommandFailed { code: 9, err: 22 }),
        HwError::Invalid
    );
    assert_eq!(hw_error(PvrdmaError::Timeout), HwError::Failed);
    let rejected = |err| hw_error(PvrdmaError::CommandRejected { code: 1, err });
    assert_eq!(rejected(12), HwError::NoResources);
    assert_eq!(rejected(22), HwError::Invalid);
    assert_eq!(rejected(95), HwError::Invalid);
    assert_eq!(rejected(16), HwError::Failed, "BUSY");
    let failed = |err| hw_error(PvrdmaError::CommandFailed { code: 9, err });
    assert_eq!(failed(95), HwError::Invalid);
    assert_eq!(failed(2), HwError::Failed, "UNKNOWN_HANDLE");
    assert_eq!(failed(200), HwError::Failed);
}

static NOTIFY: AtomicU32 = AtomicU32::new(0);
static NOTIFY_STATUS: AtomicU32 = AtomicU32::new(0);
static SRQ_NOTIFY: AtomicU32 = AtomicU32::new(0);

static NOTIFY_CPU: AtomicU32 = AtomicU32::new(u32::MAX);

unsafe extern "system" fn cq_cb(_ctx: PVOID, st: NTSTATUS) {
    NOTIFY_CPU.store(
        crate::os::host::current_processor().unwrap_or(u32::MAX - 1),
        Ordering::SeqCst,
    );
    NOTIFY_STATUS.store(st as u32, Ordering::SeqCst);
    NOTIFY.fetch_add(1, Ordering::SeqCst);
}
static SRQ_STATUS: AtomicU32 = AtomicU32::new(0);

unsafe extern "system" fn srq_cb(_ctx: PVOID, st: NTSTATUS) {
    SRQ_STATUS.store(st as u32, Ordering::SeqCst);
    SRQ_NOTIFY.fetch_add(1, Ordering::SeqCst);
}
static CREATED: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);
static CREATES: AtomicU32 = AtomicU32::new(0);

static CREATE_STATUS: AtomicU32 = AtomicU32::new(0);

unsafe extern "system" fn create_cb(c: PVOID, s: NTSTATUS, o: *mut NDK_OBJECT_HEADER) {
    CREATE_STATUS.store(s as u32 ^ c as u32, Ordering::SeqCst);
    CREATED.store(o as usize, Ordering::SeqCst);
    CREATES.fetch_add(1, Ordering::SeqCst);
}
static ORDER: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

unsafe extern "system" fn close_cb(c: PVOID) {
    ORDER.lock().unwrap().push(c as u32);
}
static REQUESTS: AtomicU32 = AtomicU32::new(0);
static REQ_WAIT: AtomicU32 = AtomicU32::new(0);
static REQ_STATUS: AtomicU32 = AtomicU32::new(u32::MAX);

unsafe extern "system" fn request_cb(c: PVOID, s: NTSTATUS) {
    if !c.is_null() {
        ORDER.lock().unwrap().push(c as u32);
    }
    REQ_STATUS.store(s as u32, Ordering::SeqCst);
    REQUESTS.fetch_add(1, Ordering::SeqCst);
}

fn wait_for(cond: impl Fn() -> bool) {
    for _ in 0..20_000 {
        if cond() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    panic!("condition not reached");
}

fn requests(fake: &FakeDevice) -> Vec<[u8; crate::pvrdma::cmd::REQ_MAX]> {
    fake.st.lock().unwrap().requests.clone()
}

/// Waits for the next RequestCompletion, checks that it reported STATUS_SUCCESS, and returns
/// the last request the device received.
fn next_request_succeeded(fake: &FakeDevice) -> [u8; crate::pvrdma::cmd::REQ_MAX] {
    REQ_WAIT.fetch_add(1, Ordering::SeqCst);
    wait_for(|| REQUESTS.load(Ordering::SeqCst) == REQ_WAIT.load(Ordering::SeqCst));
    assert_eq!(REQ_STATUS.load(Ordering::SeqCst), STATUS_SUCCESS as u32);
    *requests(fake).last().expect("a request")
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from(u32_at(b, o)) | (u64::from(u32_at(b, o + 4)) << 32)
}

/// Page `i` of the buffer behind page directory `pdir`.
fn page(fake: &FakeDevice, pdir: u64, i: u64) -> u64 {
    let table = fake.read_u64(pdir + (i >> 9) * 8);
    fake.read_u64(table + (i & 0x1FF) * 8)
}

#[test]
fn ndk_objects_over_the_hardware_layer() {
    let fake = FakeDevice::new(20);
    let platform = HostPlatform::new(
        HostDevice {
            bar1: fake.clone(),
            dma: fake.dma.clone(),
            doorbell: None,
            uar_pfn: 0x1_2345,
            pump: None,
        },
        2,
    );
    // Interrupts raised while `held` runs its call are delivered after the call returns,
    // so a command always completes after the create function that issued it returned
    // (otherwise a fast DPC thread makes it complete inline: STATUS_SUCCESS).
    let hold: Arc<std::sync::Mutex<Option<Vec<u32>>>> = Arc::new(std::sync::Mutex::new(None));
    let (w, h) = (Arc::downgrade(&platform), hold.clone());
    *fake.irq.lock().unwrap() = Some(Arc::new(move |v| {
        if let Some(held) = h.lock().unwrap().as_mut() {
            held.push(v);
        } else if let Some(p) = w.upgrade() {
            p.raise_interrupt(v);
        }
    }));
    let held = |call: &mut dyn FnMut() -> NTSTATUS| {
        *hold.lock().unwrap() = Some(Vec::new());
        let st = call();
        let vectors = hold.lock().unwrap().take().unwrap_or_default();
        for v in vectors {
            platform.raise_interrupt(v);
        }
        st
    };
    let p: Arc<dyn Platform> = platform.clone();
    let dev = Device::probe(p, &DeviceConfig::default()).expect("probe");
    // Every command answers handle 7 @16 and 64 @20 (CQ entries, v20 qp_handle, lkey).
    {
        let mut st = fake.st.lock().unwrap();
        st.resp_body[0..4].copy_from_slice(&7u32.to_le_bytes());
        st.resp_body[4..8].copy_from_slice(&64u32.to_le_bytes());
        st.resp_body[8..12].copy_from_slice(&0x700u32.to_le_bytes());
    }
    let hw = PvrdmaHardware::new(Arc::new(dev)).expect("hw");
    let ndk = NdkDevice::new(hw.clone()).expect("ndk");
    hw.attach(&ndk).expect("attach");
    let a = ndk
        .open_adapter(NDK_VERSION { Major: 2, Minor: 0 })
        .expect("open");
    let before = requests(&fake).len();

    // SAFETY: a live adapter this provider returned (and likewise for every object and
    // pointer used below).
    let ad = unsafe { (*a).Dispatch };
    // SAFETY: the provider's dispatch tables are statics.
    let ad = unsafe { &*ad };
    let mut pd = core::ptr::null_mut();
    // SAFETY: as above.
    let st = held(&mut || unsafe { (ad.NdkCreatePd)(a, create_cb, 0xC1 as PVOID, &mut pd) });
    // The commands complete in the vector-0 DPC: STATUS_PENDING, then CreateCompletion.
    assert_eq!(st, STATUS_PENDING);
    assert!(
        pd.is_null(),
        "the out pointer is not touched after STATUS_PENDING"
    );
    wait_for(|| CREATES.load(Ordering::SeqCst) == 1);
    assert_eq!(
        CREATE_STATUS.load(Ordering::SeqCst),
        0xC1,
        "STATUS_SUCCESS, our context"
    );
    let pd = CREATED.load(Ordering::SeqCst) as *mut NDK_PD;
    assert!(!pd.is_null());
    // SAFETY: the PD delivered by CreateCompletion.
    let h = unsafe { (*pd).Header };
    assert_eq!(
        (h.ObjectType, h.Version),
        (NdkObjectTypePd, NDK_VERSION { Major: 2, Minor: 1 })
    );
    let mut cq = core::ptr::null_mut();
    let mut affinity = GROUP_AFFINITY {
        Mask: 0b10,
        Group: 0,
        Reserved: [0; 3],
    };
    // SAFETY: as above.
    let st = held(&mut || unsafe {
        (ad.NdkCreateCq)(
            a,
            50,
            cq_cb,
            core::ptr::null_mut(),
            &mut affinity,
            create_cb,
            0xC3 as PVOID,
            &mut cq,
        )
    });
    assert_eq!(st, STATUS_PENDING, "CREATE_CQ completes in the command DPC");
    wait_for(|| CREATES.load(Ordering::SeqCst) == 2);
    assert_eq!(CREATE_STATUS.load(Ordering::SeqCst), 0xC3);
    assert!(cq.is_null());
    let cq = CREATED.load(Ordering::SeqCst) as *mut NDK_CQ;
    let reqs = requests(&fake);
    let codes: Vec<u32> = reqs[before..].iter().map(|r| u32_at(r, 8)).collect();
    assert_eq!(codes, [code::CREATE_PD, code::CREATE_MR, code::CREATE_CQ]);
    let mr_req = &reqs[before + 1];
    assert_eq!(
        (u32_at(mr_req, 40), u32_at(mr_req, 48)),
        (7, mr_flags::DMA),
        "DMA MR of PD 7"
    );
    let cq_req = &reqs[before + 2];
    assert_eq!(
        (u32_at(cq_req, 28), u32_at(cq_req, 32)),
        (64, 2),
        "cqe 64, nchunks 2"
    );
    let cq_pdir = u64_at(cq_req, 16);
    // SAFETY: as above.
    let pdd = unsafe { (*pd).Dispatch };
    // SAFETY: the provider's dispatch tables are statics.
    let pdd = unsafe { &*pdd };
    let mut tok = 0;
    // SAFETY: as above.
    unsafe { (pdd.NdkGetPrivilegedMemoryRegionToken)(pd, &mut tok) };
    assert_eq!(tok, 64, "the DMA MR's lkey");

    // A QP (handle 64 in the v20 response), connected by hand, posts a signalled send.
    let mut qp = core::ptr::null_mut();
    // SAFETY: as above.
    let st = held(&mut || unsafe {
        (pdd.NdkCreateQp)(
            pd,
            cq,
            cq,
            0x5A as PVOID,
            4,
            4,
            1,
            2,
            0,
            create_cb,
            0xC4 as PVOID,
            &mut qp,
        )
    });
    assert_eq!(
        st, STATUS_PENDING,
        "CREATE_QP + MODIFY_QP(INIT) complete in the DPC"
    );
    wait_for(|| CREATES.load(Ordering::SeqCst) == 3);
    assert_eq!(CREATE_STATUS.load(Ordering::SeqCst), 0xC4);
    let qp = CREATED.load(Ordering::SeqCst) as *mut NDK_QP;
    let reqs = requests(&fake);
    let qp_req = reqs
        .iter()
        .rev()
        .find(|r| u32_at(&r[..], 8) == code::CREATE_QP)
        .expect("CREATE_QP");
    assert_eq!(u32_at(qp_req, 28), 7, "send CQ handle");
    assert_eq!(
        u32_at(reqs.last().expect("MODIFY_QP"), 8),
        code::MODIFY_QP,
        "RESET → INIT"
    );
    let qp_pdir = u64_at(qp_req, 16);
    // SAFETY: as above.
    unsafe { crate::ndk::set_qp_connected(qp, true) };
    let sge = NDK_SGE {
        Anonymous: crate::ndkpi::NDK_SGE_0 {
            LogicalAddress: 0x9000,
        },
        Length: 12,
        MemoryRegionToken: 64,
    };
    // SAFETY: as above.
    let qpd = unsafe { (*qp).Dispatch };
    // SAFETY: the provider's dispatch tables are statics.
    let qpd = unsafe { &*qpd };
    // SAFETY: as above.
    let st = unsafe {
        (qpd.NdkSend)(
            qp,
            0x33 as PVOID,
            &sge,
            1,
            NDK_OP_FLAG_SEND_AND_SOLICIT_EVENT,
        )
    };
    assert_eq!(st, STATUS_SUCCESS);
    assert_eq!(platform.uar_word(0), 64 | 1 << 30, "SQ doorbell");
    // The WQE sits at byte 4096 of the QP buffer: wr_id, num_sge, opcode SEND, flags.
    let wqe = page(&fake, qp_pdir, 1);
    assert_eq!(fake.read_u64(wqe), wr_id(tag::SQ, 0));
    assert_eq!(fake.read_u32(wqe + 8), 1);
    assert_eq!(fake.read_u32(wqe + 16), 2, "PVRDMA_WR_SEND");
    assert_eq!(fake.read_u32(wqe + 20), 0b110, "SIGNALED | SOLICITED");
    assert_eq!(fake.read_u64(wqe + 80), 0x9000, "SGE addr");

    // Arm, then the device writes the CQE and a CQNE: one callback.
    // SAFETY: as above.
    let cqd = unsafe { (*cq).Dispatch };
    // SAFETY: the provider's dispatch tables are statics.
    let cqd = unsafe { &*cqd };
    // SAFETY: as above.
    unsafe { (cqd.NdkArmCq)(cq, NDK_CQ_NOTIFY_ANY) };
    // CQ_ARM, then POLL: the re-check after the arm found the CQ empty (M48), so the last
    // store to the CQ doorbell is POLL.
    assert_eq!(platform.uar_word(4), 7 | 1 << 31, "CQ_ARM, then CQ_POLL");
    let cq_page0 = page(&fake, cq_pdir, 0);
    let cq_page1 = page(&fake, cq_pdir, 1);
    let mut cqe = [0u8; 64];
    cqe[0..8].copy_from_slice(&wr_id(tag::SQ, 0).to_le_bytes());
    cqe[8..16].copy_from_slice(&64u64.to_le_bytes());
    cqe[24..28].copy_from_slice(&12u32.to_le_bytes());
    fake.write(cq_page1, &cqe);
    fake.write(cq_page0 + 8, &1u32.to_le_bytes());
    fake.post_cqne(7);
    wait_for(|| NOTIFY.load(Ordering::SeqCst) == 1);
    assert_eq!(NOTIFY_STATUS.load(Ordering::SeqCst), STATUS_SUCCESS as u32);
    assert_eq!(
        NOTIFY_CPU.load(Ordering::SeqCst),
        1,
        "delivered by the CQ's DPC on its affinity processor (the CQNE DPC runs on 0)"
    );
    // SAFETY: a zeroed result is a valid value.
    let mut out = [unsafe { core::mem::zeroed::<NDK_RESULT_EX>() }; 2];
    // SAFETY: as above.
    let n = unsafe { (cqd.NdkGetCqResultsEx)(cq, out.as_mut_ptr(), 2) };
    assert_eq!(n, 1);
    assert_eq!(
        (
            out[0].Status,
            out[0].RequestContext as usize,
            out[0].QPContext as usize,
            out[0].Type
        ),
        (STATUS_SUCCESS, 0x33, 0x5A, NdkOperationTypeSend)
    );
    assert_eq!(fake.read_u32(cq_page0 + 12), 1, "cons_head advanced");

    // An SRQ's limit event arrives as an async EQE (SRQ_LIMIT_REACHED, info = handle).
    let mut srq = core::ptr::null_mut();
    // SAFETY: as above.
    let st = held(&mut || unsafe {
        (pdd.NdkCreateSrq)(
            pd,
            16,
            1,
            4,
            Some(srq_cb),
            core::ptr::null_mut(),
            core::ptr::null_mut(),
            create_cb,
            0xC5 as PVOID,
            &mut srq,
        )
    });
    assert_eq!(st, STATUS_PENDING);
    wait_for(|| CREATES.load(Ordering::SeqCst) == 4);
    assert_eq!(CREATE_STATUS.load(Ordering::SeqCst), 0xC5);
    let srq = CREATED.load(Ordering::SeqCst) as *mut NDK_SRQ;
    fake.post_eqe(EqeType::SrqLimitReached as u32, 7);
    wait_for(|| SRQ_NOTIFY.load(Ordering::SeqCst) == 1);
    // CQ_ERR for the CQ: reported at the next arm as an overrun.
    fake.post_eqe(EqeType::CqErr as u32, 7);
    wait_for(|| hw.dev().stats().events >= 2);
    // SAFETY: as above.
    unsafe { (cqd.NdkArmCq)(cq, NDK_CQ_NOTIFY_ERRORS) };
    wait_for(|| NOTIFY.load(Ordering::SeqCst) == 2);
    assert_eq!(
        NOTIFY_STATUS.load(Ordering::SeqCst),
        STATUS_BUFFER_OVERFLOW as u32
    );
    // DEVICE_FATAL: the SRQ reports STATUS_INTERNAL_ERROR (the CQ already reported its
    // error and reports only one).
    fake.post_eqe(EqeType::DeviceFatal as u32, 0);
    wait_for(|| SRQ_NOTIFY.load(Ordering::SeqCst) == 2);
    assert_eq!(
        SRQ_STATUS.load(Ordering::SeqCst),
        STATUS_INTERNAL_ERROR as u32
    );
    // NdkModifySrq: MODIFY_SRQ (LIMIT) through the command DPC, then the arm-time check
    // finds 0 queued < 2 and notifies at once (M45).
    // SAFETY: live SRQ.
    let srqd = unsafe { (*srq).Dispatch };
    // SAFETY: the provider's dispatch tables are statics.
    let srqd = unsafe { &*srqd };
    // SAFETY: as above.
    let st =
        held(&mut || unsafe { (srqd.NdkModifySrq)(srq, 0, 2, request_cb, core::ptr::null_mut()) });
    assert_eq!(st, STATUS_PENDING);
    let m = &next_request_succeeded(&fake);
    assert_eq!(
        (u32_at(m, 8), u32_at(m, 16), u32_at(m, 20)),
        (code::MODIFY_SRQ, 7, srq_attr_mask::LIMIT)
    );
    assert_eq!(SRQ_NOTIFY.load(Ordering::SeqCst), 3);
    assert_eq!(SRQ_STATUS.load(Ordering::SeqCst), STATUS_SUCCESS as u32);

    // NdkRegisterMr: the MDL's pages become the MR's page directory (CREATE_MR flags 0).
    // Handle 9: the PD's DMA MR holds 7, and a live handle twice is refused (table.rs).
    fake.st.lock().unwrap().resp_body[0..4].copy_from_slice(&9u32.to_le_bytes());
    #[repr(C)]
    struct MdlPfn {
        mdl: MDL,
        pfn: [usize; 2],
    }
    let mut m = MdlPfn {
        mdl: MDL {
            Next: core::ptr::null_mut(),
            Size: core::mem::size_of::<MdlPfn>() as i16,
            MdlFlags: MDL_PAGES_LOCKED,
            AllocationProcessorNumber: 0,
            Reserved: 0,
            Process: core::ptr::null_mut(),
            MappedSystemVa: core::ptr::null_mut(),
            StartVa: 0x4000_0000 as PVOID,
            ByteCount: 0x1800,
            ByteOffset: 0x100,
        },
        pfn: [0x51, 0x73],
    };
    let mut mr = core::ptr::null_mut();
    // SAFETY: as above.
    let st = unsafe { (pdd.NdkCreateMr)(pd, 0, create_cb, core::ptr::null_mut(), &mut mr) };
    assert_eq!(st, STATUS_SUCCESS);
    // SAFETY: as above.
    let mrd = unsafe { (*mr).Dispatch };
    // SAFETY: the provider's dispatch tables are statics.
    let mrd = unsafe { &*mrd };
    let mdl = (&raw mut m).cast::<MDL>();
    // SAFETY: as above; the MDL is followed by its PFN array.
    let st = unsafe {
        (mrd.NdkRegisterMr)(
            mr,
            mdl,
            0x1800,
            NDK_MR_FLAG_ALLOW_REMOTE_READ,
            request_cb,
            core::ptr::null_mut(),
        )
    };
    assert_eq!(st, STATUS_PENDING, "CREATE_MR completes in the command DPC");
    let r = &next_request_succeeded(&fake);
    assert_eq!(u32_at(r, 8), code::CREATE_MR);
    assert_eq!((u64_at(r, 16), u64_at(r, 24)), (0x4000_0100, 0x1800));
    // REMOTE_READ only: no LOCAL_WRITE, which the consumer did not ask for.
    assert_eq!(
        (u32_at(r, 44), u32_at(r, 48), u32_at(r, 52)),
        (0b100, mr_flags::NORMAL, 2)
    );
    let dir = u64_at(r, 32);
    assert_eq!(
        (page(&fake, dir, 0), page(&fake, dir, 1)),
        (0x5_1000, 0x7_3000)
    );

    // A fast-register MR (handle 8) and an NdkFastRegister that fills its page list.
    fake.st.lock().unwrap().resp_body[0..4].copy_from_slice(&8u32.to_le_bytes());
    let mut fr = core::ptr::null_mut();
    // SAFETY: as above.
    let st = unsafe { (pdd.NdkCreateMr)(pd, 1, create_cb, core::ptr::null_mut(), &mut fr) };
    assert_eq!(st, STATUS_SUCCESS);
    // SAFETY: as above.
    let st =
        unsafe { (mrd.NdkInitializeFastRegisterMr)(fr, 4, 1, request_cb, core::ptr::null_mut()) };
    assert_eq!(st, STATUS_PENDING, "CREATE_MR completes in the command DPC");
    let r = &next_request_succeeded(&fake);
    assert_eq!((u32_at(r, 48), u32_at(r, 52)), (mr_flags::FRMR, 4));
    let pages = [0x6_0000i64, 0x8_1000];
    // SAFETY: as above.
    let st = unsafe {
        (qpd.NdkFastRegister)(
            qp,
            0x44 as PVOID,
            fr,
            2,
            pages.as_ptr(),
            0,
            0x2000,
            0x9000_0000usize as PVOID,
            NDK_OP_FLAG_ALLOW_REMOTE_WRITE,
        )
    };
    assert_eq!(st, STATUS_SUCCESS);
    let wqe = page(&fake, qp_pdir, 1) + 128; // SQ stride for 2 SGEs: roundup_pow2(80 + 32)
    assert_eq!(fake.read_u32(wqe + 16), 11, "FAST_REG_MR");
    assert_eq!(fake.read_u64(wqe + 32), 0x9000_0000, "iova_start");
    let pl = fake.read_u64(wqe + 40);
    assert_eq!(
        (
            fake.read_u32(wqe + 48),
            fake.read_u32(wqe + 52),
            fake.read_u32(wqe + 56)
        ),
        (12, 2, 0x2000)
    );
    assert_eq!(fake.read_u32(wqe + 60), 0b011, "LOCAL_WRITE | REMOTE_WRITE");
    assert_eq!(
        (page(&fake, pl, 0), page(&fake, pl, 1)),
        (0x6_0000, 0x8_1000)
    );
    // SAFETY: as above.
    let key = unsafe { (mrd.NdkGetRemoteTokenFromMr)(fr) };
    assert_eq!(
        fake.read_u32(wqe + 64),
        key,
        "the new key is the MR's token"
    );

    // An asynchronous create that fails: the DMA MR is refused (err 12), so the PD is
    // destroyed and CreateCompletion reports STATUS_INSUFFICIENT_RESOURCES with no object.
    fake.st
        .lock()
        .unwrap()
        .modes
        .extend([Mode::Respond, Mode::HdrErr(12)]);
    let mut pd2 = core::ptr::null_mut();
    // SAFETY: as above.
    let st = unsafe { (ad.NdkCreatePd)(a, create_cb, 0xC2 as PVOID, &mut pd2) };
    assert_eq!(st, STATUS_PENDING);
    wait_for(|| CREATES.load(Ordering::SeqCst) == 5);
    assert_eq!(
        CREATE_STATUS.load(Ordering::SeqCst),
        STATUS_INSUFFICIENT_RESOURCES as u32 ^ 0xC2
    );
    assert_eq!(CREATED.load(Ordering::SeqCst), 0);
    wait_for(|| {
        requests(&fake)
            .last()
            .is_some_and(|r| u32_at(r, 8) == code::DESTROY_PD)
    });

    // A close while a registration is in flight pends; RequestCompletion comes first,
    // CloseCompletion last (§5.1, §5.2).
    let mut late = core::ptr::null_mut();
    // SAFETY: as above.
    let st = unsafe { (pdd.NdkCreateMr)(pd, 0, create_cb, core::ptr::null_mut(), &mut late) };
    assert_eq!(st, STATUS_SUCCESS);
    // Its own handle: one a live MR holds would fail the registration (`Tables::file`).
    fake.st.lock().unwrap().resp_body[0..4].copy_from_slice(&10u32.to_le_bytes());
    fake.st.lock().unwrap().modes.push_back(Mode::Defer);
    // SAFETY: as above; the MDL is followed by its PFN array.
    let st = unsafe { (mrd.NdkRegisterMr)(late, mdl, 0x1800, 0, request_cb, 0x51 as PVOID) };
    assert_eq!(st, STATUS_PENDING);
    wait_for(|| !fake.st.lock().unwrap().deferred.is_empty());
    // SAFETY: live MR; its table starts with the close slot.
    let st = unsafe { (mrd.NdkCloseMr)(late.cast(), close_cb, 0x52 as PVOID) };
    assert_eq!(st, STATUS_PENDING, "the registration is still in flight");
    assert!(ORDER.lock().unwrap().is_empty());
    fake.release();
    wait_for(|| ORDER.lock().unwrap().len() == 2);
    assert_eq!(*ORDER.lock().unwrap(), [0x51, 0x52]);
    wait_for(|| {
        requests(&fake)
            .last()
            .is_some_and(|r| u32_at(r, 8) == code::DESTROY_MR)
    });

    // Teardown: DESTROY commands, then the adapter close does not wait.
    for obj in [
        mr.cast::<NDK_OBJECT_HEADER>(),
        fr.cast(),
        qp.cast(),
        srq.cast(),
        cq.cast(),
        pd.cast(),
    ] {
        // SAFETY: every object's table starts with its close slot.
        let d = unsafe { (*obj.cast::<NDK_PD>()).Dispatch };
        // SAFETY: the provider's dispatch tables are statics.
        let f = unsafe { (*d).NdkClosePd };
        // SAFETY: as above.
        let st = unsafe { f(obj, close_cb, core::ptr::null_mut()) };
        assert_eq!(st, STATUS_SUCCESS);
    }
    // SAFETY: opened above, closed once.
    unsafe { crate::ndk::dispatch::close_adapter(a) };
    // DESTROYs are submitted without waiting; they reach the device in order.
    let want = [
        code::DESTROY_QP,
        code::DESTROY_SRQ,
        code::DESTROY_CQ,
        code::DESTROY_MR,
        code::DESTROY_PD,
    ];
    wait_for(|| {
        requests(&fake)
            .last()
            .is_some_and(|r| u32_at(r, 8) == code::DESTROY_PD)
    });
    let codes: Vec<u32> = requests(&fake).iter().map(|r| u32_at(r, 8)).collect();
    assert_eq!(&codes[codes.len() - 5..], want);
    platform.executor().shutdown();
}

/// A CREATE_CQ response naming the handle of a live CQ (the fake answers every command with
/// handle 7) fails that create as a device error, leaves the live CQ filed and alive, and
/// frees none of the new CQ's ring: no DESTROY names it, and DESTROY 7 would destroy the live
/// CQ instead.
#[test]
fn create_response_naming_a_live_handle_keeps_the_live_object_and_quarantines_the_new_ring() {
    let fake = FakeDevice::new(20);
    let platform = HostPlatform::new(
        HostDevice {
            bar1: fake.clone(),
            dma: fake.dma.clone(),
            doorbell: None,
            uar_pfn: 0x1_2345,
            pump: None,
        },
        2,
    );
    let w = Arc::downgrade(&platform);
    *fake.irq.lock().unwrap() = Some(Arc::new(move |v| {
        if let Some(p) = w.upgrade() {
            p.raise_interrupt(v);
        }
    }));
    let p: Arc<dyn Platform> = platform.clone();
    let dev = Device::probe(p, &DeviceConfig::default()).expect("probe");
    {
        let mut st = fake.st.lock().unwrap();
        st.resp_body[0..4].copy_from_slice(&7u32.to_le_bytes());
        st.resp_body[4..8].copy_from_slice(&64u32.to_le_bytes());
    }
    let hw = PvrdmaHardware::new(Arc::new(dev)).expect("hw");
    type Answer = Arc<std::sync::Mutex<Option<Result<u32, HwError>>>>;
    let create = |hw: &PvrdmaHardware| {
        let answer: Answer = Arc::new(std::sync::Mutex::new(None));
        let a = answer.clone();
        let done = crate::os::alloc::try_box(move |r| *a.lock().unwrap() = Some(r))
            .expect("box")
            .map_box(|b| b as HwDone<u32>)
            .into_inner();
        hw.create_cq_async(64, None, done);
        wait_for(|| answer.lock().unwrap().is_some());
        let r = answer.lock().unwrap().take().expect("answered");
        let req = *requests(&fake).last().expect("CREATE_CQ");
        assert_eq!(u32_at(&req, 8), code::CREATE_CQ);
        (r, u64_at(&req, 16))
    };
    let (first, live_pdir) = create(&hw);
    assert_eq!(first, Ok(7));
    let before = requests(&fake).len();

    let (second, new_pdir) = create(&hw);
    let codes: Vec<u32> = requests(&fake)[before..]
        .iter()
        .map(|r| u32_at(r, 8))
        .collect();
    assert_eq!(
        codes,
        [code::CREATE_CQ],
        "no DESTROY_CQ for the colliding handle"
    );
    assert_eq!(second, Err(HwError::Failed), "a device error");
    assert_eq!(hw.quarantined(), 1);
    assert!(hw.cq_reader(7).is_ok(), "the live CQ is still filed");
    assert!(
        fake.dma.cpu_of(live_pdir).is_some(),
        "the live ring is intact"
    );
    let new_ring = fake.read_u64(new_pdir);
    assert!(
        fake.dma.cpu_of(new_ring).is_some(),
        "the ring the device was given stays allocated"
    );

    // A colliding response that is also malformed (cqe 3, not a power of two) fails on the
    // handle, before anything could be destroyed for the bad count.
    fake.st.lock().unwrap().resp_body[4..8].copy_from_slice(&3u32.to_le_bytes());
    let before = requests(&fake).len();
    let (third, third_pdir) = create(&hw);
    let codes: Vec<u32> = requests(&fake)[before..]
        .iter()
        .map(|r| u32_at(r, 8))
        .collect();
    assert_eq!(
        codes,
        [code::CREATE_CQ],
        "no DESTROY_CQ for a malformed collision"
    );
    assert_eq!(third, Err(HwError::Failed));
    assert_eq!(hw.quarantined(), 2);
    assert!(fake.dma.cpu_of(third_pdir).is_some());

    // The live CQ's own DESTROY still works, and frees its ring only.
    hw.destroy_cq(7);
    wait_for(|| fake.dma.cpu_of(live_pdir).is_none());
    let last = *requests(&fake).last().expect("DESTROY_CQ");
    assert_eq!((u32_at(&last, 8), u32_at(&last, 16)), (code::DESTROY_CQ, 7));
    assert!(fake.dma.cpu_of(new_pdir).is_some());
    assert!(fake.dma.cpu_of(new_ring).is_some());
}

/// Issue 13 defect 9: a CREATE_CQ response with fewer entries than requested was accepted
/// (the ring read as 32 CQEs where the consumer asked for 64, so the CQ overflowed at half
/// its depth). M11 says the response `cqe` equals the request: anything else fails the
/// create as a device error, and the CQ the device made is destroyed (its ring freed once
/// the DESTROY is answered).
#[test]
fn create_cq_response_with_other_than_the_requested_entries_fails_and_destroys_the_cq() {
    let fake = FakeDevice::new(20);
    let platform = HostPlatform::new(
        HostDevice {
            bar1: fake.clone(),
            dma: fake.dma.clone(),
            doorbell: None,
            uar_pfn: 0x1_2345,
            pump: None,
        },
        2,
    );
    let w = Arc::downgrade(&platform);
    *fake.irq.lock().unwrap() = Some(Arc::new(move |v| {
        if let Some(p) = w.upgrade() {
            p.raise_interrupt(v);
        }
    }));
    let p: Arc<dyn Platform> = platform.clone();
    let dev = Device::probe(p, &DeviceConfig::default()).expect("probe");
    let hw = PvrdmaHardware::new(Arc::new(dev)).expect("hw");
    for (handle, answered) in [(7u32, 32u32), (8, 128)] {
        {
            let mut st = fake.st.lock().unwrap();
            st.resp_body[0..4].copy_from_slice(&handle.to_le_bytes());
            st.resp_body[4..8].copy_from_slice(&answered.to_le_bytes());
        }
        let answer = Arc::new(std::sync::Mutex::new(None));
        let a = answer.clone();
        let done = crate::os::alloc::try_box(move |r| *a.lock().unwrap() = Some(r))
            .expect("box")
            .map_box(|b| b as HwDone<u32>)
            .into_inner();
        hw.create_cq_async(64, None, done);
        wait_for(|| answer.lock().unwrap().is_some());
        let r = answer.lock().unwrap().take().expect("answered");
        assert_eq!(
            r,
            Err(HwError::Failed),
            "cqe {answered} for 64: a device error"
        );
        let create = requests(&fake)
            .iter()
            .rev()
            .find(|r| u32_at(&r[..], 8) == code::CREATE_CQ)
            .copied()
            .expect("CREATE_CQ");
        assert_eq!(u32_at(&create, 28), 64, "asked for 64");
        let pdir = u64_at(&create, 16);
        wait_for(|| fake.dma.cpu_of(pdir).is_none());
        let last = *requests(&fake).last().expect("DESTROY_CQ");
        assert_eq!(
            (u32_at(&last, 8), u32_at(&last, 16)),
            (code::DESTROY_CQ, handle)
        );
        assert!(hw.cq_reader(handle).is_err(), "nothing filed");
    }
    assert_eq!(hw.quarantined(), 0);
    platform.executor().shutdown();
}
