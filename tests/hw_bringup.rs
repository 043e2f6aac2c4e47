//! Bring-up of the driver's hardware layer against the device model (pvrdma.md §1, §4, §5,
//! M1, M4, M5, M7, M38): default and older VERSIONs, caps as configured, the DSR as written,
//! GID binding, refused devices, teardown.

mod common;

use common::{Harness, Mode, Rig, RigConfig};
use pvrdma_ndk::pvrdma::PvrdmaError;
use pvrdma_ndk::pvrdma::device::DeviceConfig as DrvConfig;
use pvrdma_ndk::pvrdma::dsr::Caps as DrvCaps;
use pvrdma_sim::DeviceConfig;
use pvrdma_sim::dsr::Caps as SimCaps;

/// Every caps field distinct, so a field read at the wrong offset cannot pass.
fn distinctive_caps() -> SimCaps {
    SimCaps {
        fw_ver: 0x0102_0304_0506_0708,
        node_guid: Some([0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]),
        max_mr_size: 0x0000_0012_3456_7000,
        page_size_cap: 0x0000_0000_0020_1000,
        atomic_arg_sizes: 0x0C,
        ex_comp_mask: 0xA001,
        device_cap_flags2: 0xA002,
        max_fa_bit_boundary: 0xA003,
        log_max_atomic_inline_arg: 0xA004,
        vendor_id: 0x15AD,
        vendor_part_id: 0x0820,
        hw_ver: 0xA007,
        max_qp: 1000,
        max_qp_wr: 2048,
        device_cap_flags: 0xA00A,
        max_sge: 13,
        max_sge_rd: 12,
        max_cq: 999,
        max_cqe: 32768,
        max_mr: 5000,
        max_pd: 998,
        max_qp_rd_atom: 11,
        max_ee_rd_atom: 10,
        max_res_rd_atom: 9999,
        max_qp_init_rd_atom: 9,
        max_ah: 997,
        max_srq: 996,
        max_srq_wr: 1024,
        max_srq_sge: 8,
        max_uar: 7,
        gid_tbl_len: 6,
        max_pkeys: 5,
        local_ca_ack_delay: 14,
        phys_port_cnt: 1,
        mode: 0,
        atomic_ops: 3,
        bmme_flags: 7,
        gid_types: 2,
        max_fast_reg_page_list_len: 300,
    }
}

fn assert_caps_equal(d: &DrvCaps, s: &SimCaps, mac: [u8; 6]) {
    let guid = s.node_guid.unwrap_or_else(|| pvrdma_sim::dsr::eui64(mac));
    assert_eq!(d.fw_ver, s.fw_ver);
    assert_eq!(d.node_guid, guid);
    assert_eq!(d.sys_image_guid, guid);
    assert_eq!(d.max_mr_size, s.max_mr_size);
    assert_eq!(d.page_size_cap, s.page_size_cap);
    assert_eq!(d.atomic_arg_sizes, s.atomic_arg_sizes);
    assert_eq!(d.ex_comp_mask, s.ex_comp_mask);
    assert_eq!(d.device_cap_flags2, s.device_cap_flags2);
    assert_eq!(d.max_fa_bit_boundary, s.max_fa_bit_boundary);
    assert_eq!(d.log_max_atomic_inline_arg, s.log_max_atomic_inline_arg);
    assert_eq!(d.vendor_id, s.vendor_id);
    assert_eq!(d.vendor_part_id, s.vendor_part_id);
    assert_eq!(d.hw_ver, s.hw_ver);
    assert_eq!(d.max_qp, s.max_qp);
    assert_eq!(d.max_qp_wr, s.max_qp_wr);
    assert_eq!(d.device_cap_flags, s.device_cap_flags);
    assert_eq!(d.max_sge, s.max_sge);
    assert_eq!(d.max_sge_rd, s.max_sge_rd);
    assert_eq!(d.max_cq, s.max_cq);
    assert_eq!(d.max_cqe, s.max_cqe);
    assert_eq!(d.max_mr, s.max_mr);
    assert_eq!(d.max_pd, s.max_pd);
    assert_eq!(d.max_qp_rd_atom, s.max_qp_rd_atom);
    assert_eq!(d.max_ee_rd_atom, s.max_ee_rd_atom);
    assert_eq!(d.max_res_rd_atom, s.max_res_rd_atom);
    assert_eq!(d.max_qp_init_rd_atom, s.max_qp_init_rd_atom);
    assert_eq!(d.max_ah, s.max_ah);
    assert_eq!(d.max_srq, s.max_srq);
    assert_eq!(d.max_srq_wr, s.max_srq_wr);
    assert_eq!(d.max_srq_sge, s.max_srq_sge);
    assert_eq!(d.max_uar, s.max_uar);
    assert_eq!(d.gid_tbl_len, s.gid_tbl_len);
    assert_eq!(d.max_pkeys, s.max_pkeys);
    assert_eq!(d.local_ca_ack_delay, s.local_ca_ack_delay);
    assert_eq!(d.phys_port_cnt, s.phys_port_cnt);
    assert_eq!(d.mode, s.mode);
    assert_eq!(d.atomic_ops, s.atomic_ops);
    assert_eq!(d.bmme_flags, s.bmme_flags);
    assert_eq!(d.gid_types, s.gid_types);
    assert_eq!(d.max_fast_reg_page_list_len, s.max_fast_reg_page_list_len);
    // Fields the model leaves reserved (zero).
    for v in [
        d.max_ee_init_rd_atom,
        d.max_ee,
        d.max_rdd,
        d.max_mw,
        d.max_raw_ipv6_qp,
        d.max_raw_ethy_qp,
        d.max_mcast_grp,
        d.max_mcast_qp_attach,
        d.max_total_mcast_qp_attach,
        d.max_fmr,
        d.max_map_per_fmr,
    ] {
        assert_eq!(v, 0);
    }
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}

#[test]
fn default_bringup_and_clean_teardown() {
    let h = Harness::deterministic();
    assert_eq!(h.dev().version(), 20);
    assert!(h.rig.model.with_core(|c| c.is_active()));
    let model = DeviceConfig::default();
    assert_caps_equal(h.dev().caps(), &model.caps, model.mac);
    assert!(h.dev().caps().supports_frmr());
    assert_eq!(h.dev().caps().max_fast_reg_pages(20), 512);
    let c = h.rig.model.counters();
    assert_eq!((c.dma_faults, c.bad_mmio, c.commands), (0, 0, 0));
    // DSR: driver_version 20, gos_info 64-bit, the default UAR PFN as u64.
    let dsr = h.rig.read_dsr(0, 72);
    assert_eq!(u32_at(&dsr, 0), 20);
    assert_eq!(u32_at(&dsr, 8), 2);
    assert_eq!(u64_at(&dsr, 64), common::DEFAULT_UAR_PFN);
    assert_eq!(u32_at(&dsr, 32), 4, "async ring: 4 pages (M13)");
    assert_eq!(u32_at(&dsr, 48), 4, "CQ ring: 4 pages (M13)");
    h.finish();
}

#[test]
fn caps_parsed_equal_the_model_config() {
    let m = DeviceConfig {
        caps: distinctive_caps(),
        ..DeviceConfig::default()
    };
    let h = Harness::new(Mode::Deterministic, 1, m.clone());
    assert_caps_equal(h.dev().caps(), &m.caps, m.mac);
    assert_eq!(h.dev().caps().max_fast_reg_pages(20), 300);
    h.finish();
}

/// VERSION 18 and 19 (M1): the UAR PFN width in the DSR and the caps both follow.
#[test]
fn older_versions_pick_the_pfn_width() {
    for (version, pfn) in [
        (18u32, 0x000F_E000u64),
        (19, 0x0000_0123_4567_8000u64 >> 12),
    ] {
        let mut cfg = RigConfig::new(Mode::Deterministic);
        cfg.model.version = version;
        cfg.uar_pfn = pfn;
        let h = Harness::with(cfg, &DrvConfig::default());
        assert_eq!(h.dev().version(), version);
        let dsr = h.rig.read_dsr(0, 72);
        assert_eq!(u32_at(&dsr, 0), 20, "driver_version is the driver's own");
        if version == 18 {
            assert_eq!(u32_at(&dsr, 64), pfn as u32);
            assert_eq!(
                u32_at(&dsr, 68),
                0,
                "v18: 32-bit uar_pfn, upper half untouched"
            );
        } else {
            assert_eq!(u64_at(&dsr, 64), pfn);
        }
        assert_eq!(h.dev().caps().max_fast_reg_pages(version), 512);
        h.finish();
    }
}

/// A v18 device cannot take a PFN above 32 bits: refused before the DSR is handed over.
#[test]
fn v18_refuses_a_64_bit_uar_pfn() {
    let mut cfg = RigConfig::new(Mode::Deterministic);
    cfg.model.version = 18;
    cfg.uar_pfn = 1 << 32;
    let rig = Rig::new(cfg);
    assert_eq!(
        rig.probe(&DrvConfig::default()).err(),
        Some(PvrdmaError::InvalidParameter)
    );
    assert_eq!(rig.bar1.dsr_address(), 0, "DSR never written");
    rig.finish();
}

#[test]
fn unsupported_versions_and_caps_are_refused_and_cleaned_up() {
    for version in [17u32, 21] {
        let mut cfg = RigConfig::new(Mode::Deterministic);
        cfg.model.version = version;
        let rig = Rig::new(cfg);
        assert_eq!(
            rig.probe(&DrvConfig::default()).err(),
            Some(PvrdmaError::UnsupportedVersion(version))
        );
        assert_eq!(rig.bar1.writes(), 0);
        rig.finish();
    }
    // gid_types 0 fails PVRDMA_SUPPORTED: the driver resets the device and frees everything.
    let mut cfg = RigConfig::new(Mode::Deterministic);
    cfg.model.caps.gid_types = 0;
    let rig = Rig::new(cfg);
    assert_eq!(
        rig.probe(&DrvConfig::default()).err(),
        Some(PvrdmaError::UnsupportedDevice)
    );
    assert_ne!(rig.bar1.dsr_address(), 0);
    assert!(!rig.model.with_core(|c| c.is_active()));
    rig.finish();
}

#[test]
fn gids_are_bound_at_bringup() {
    let gids = [[0xFE; 16], {
        let mut g = [0u8; 16];
        g[10] = 0xFF;
        g[11] = 0xFF;
        g[12..].copy_from_slice(&[10, 0, 0, 1]);
        g
    }];
    let h = Harness::with(
        RigConfig::new(Mode::Deterministic),
        &DrvConfig {
            gids: &gids,
            ..DrvConfig::default()
        },
    );
    let bound = h.rig.model.with_core(|c| c.gids());
    assert_eq!(bound.len(), 2);
    for (i, (index, e)) in bound.iter().enumerate() {
        assert_eq!(*index, i as u32);
        assert_eq!(e.gid, gids[i]);
        assert_eq!(e.gid_type, 2, "RoCEv2 (M38)");
    }
    assert_eq!(h.dev().cmd().stats().responses, 2);
    assert_eq!(h.rig.model.counters().commands, 2);
    h.finish();
}

#[test]
fn threaded_bringup_with_gids() {
    let gids = [[7u8; 16]];
    let mut cfg = RigConfig::new(Mode::Threaded);
    cfg.processors = 3;
    let h = Harness::with(
        cfg,
        &DrvConfig {
            gids: &gids,
            ..DrvConfig::default()
        },
    );
    assert_eq!(h.rig.model.with_core(|c| c.bound_gids()), 1);
    assert_eq!(h.dev().stats().interrupts[0], 1);
    h.finish();
}
