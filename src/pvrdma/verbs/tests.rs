//! The verbs against the scripted BAR1 device (testdev): what only a device that breaks the
//! protocol shows (a CREATE response naming a live handle, a CQ of another size than asked).
//! Everything a conforming device does is tested against the device model (`tests/`).
#![allow(unsafe_code)]

use super::*;
use crate::os::Platform;
use crate::pvrdma::cmd::code;
use crate::pvrdma::device::DeviceConfig;
use crate::pvrdma::testdev::FakeDevice;
use std::vec::Vec;

fn wait_for(cond: impl Fn() -> bool) {
    for _ in 0..20_000 {
        if cond() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    panic!("condition not reached");
}

fn requests(fake: &FakeDevice) -> std::vec::Vec<[u8; crate::pvrdma::cmd::REQ_MAX]> {
    fake.st.lock().unwrap().requests.clone()
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from(u32_at(b, o)) | (u64::from(u32_at(b, o + 4)) << 32)
}

/// A CREATE_CQ response naming the handle of a live CQ (the fake answers every command with
/// handle 7) fails that create as a device error, leaves the live CQ filed and alive, and
/// frees none of the new CQ's ring: no DESTROY names it, and DESTROY 7 would destroy the live
/// CQ instead.
#[test]
fn create_response_naming_a_live_handle_keeps_the_live_object_and_quarantines_the_new_ring() {
    let fake = FakeDevice::new(20);
    let platform = fake.platform(fake.dma.clone(), 0x1_2345);
    let p: Arc<dyn Platform> = platform.clone();
    let dev = Device::probe(p, &DeviceConfig::default()).expect("probe");
    {
        let mut st = fake.st.lock().unwrap();
        st.resp_body[0..4].copy_from_slice(&7u32.to_le_bytes());
        st.resp_body[4..8].copy_from_slice(&64u32.to_le_bytes());
    }
    let hw = Verbs::new(Arc::new(dev)).expect("verbs");
    type Answer = Arc<std::sync::Mutex<Option<Result<u32, PvrdmaError>>>>;
    let create = |hw: &Verbs| {
        let answer: Answer = Arc::new(std::sync::Mutex::new(None));
        let a = answer.clone();
        let done = crate::os::alloc::try_box(move |r| *a.lock().unwrap() = Some(r))
            .expect("box")
            .map_box(|b| b as Done<u32>)
            .into_inner();
        hw.create_cq(64, done);
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
    assert_eq!(second, Err(PvrdmaError::BadResponse), "a device error");
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
    assert_eq!(third, Err(PvrdmaError::BadResponse));
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
    let platform = fake.platform(fake.dma.clone(), 0x1_2345);
    let p: Arc<dyn Platform> = platform.clone();
    let dev = Device::probe(p, &DeviceConfig::default()).expect("probe");
    let hw = Verbs::new(Arc::new(dev)).expect("verbs");
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
            .map_box(|b| b as Done<u32>)
            .into_inner();
        hw.create_cq(64, done);
        wait_for(|| answer.lock().unwrap().is_some());
        let r = answer.lock().unwrap().take().expect("answered");
        assert_eq!(
            r,
            Err(PvrdmaError::BadResponse),
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
