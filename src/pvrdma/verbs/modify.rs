//! QP state changes, GID binding and the GSI QP (pvrdma.md §8 MODIFY_QP, CREATE_BIND /
//! DESTROY_BIND, CREATE_QP of type GSI): a [`QpModify`] encoded as MODIFY_QP's attribute mask
//! and `pvrdma_qp_attr`, checked against the ranges Linux checks before sending (so a bad
//! value is refused here, not by a device that may not check).
#![deny(unsafe_code)]

use super::commands::{prepare_qp, submit_then};
use super::tables::QpRecord;
use super::{Done, QpModify, QpSpec, Verbs};
use crate::pvrdma::PvrdmaError;
use crate::pvrdma::cmd::{
    AhAttr, CreateBind, DestroyBind, ModifyQp, QpAttr, QpAttrMask, QpState, QpType,
};
use crate::pvrdma::ud::QP1_QKEY;

/// PSNs and QPNs are 24-bit wire fields.
const MAX_24: u32 = 0x00FF_FFFF;

/// MODIFY_QP of `qp` for `m`, or [`PvrdmaError::InvalidParameter`] for a value out of its
/// range.
pub(super) fn encode(qp: u32, m: &QpModify) -> Result<ModifyQp, PvrdmaError> {
    let mut mask = QpAttrMask::empty();
    let mut attr = QpAttr::default();
    let in_range = |v: Option<u8>, max: u8| v.is_none_or(|v| v <= max);
    let fits_24 = |v: Option<u32>| v.is_none_or(|v| v <= MAX_24);
    if !(m.path_mtu.is_none_or(|v| (1..=5).contains(&v))
        && in_range(m.timeout, 31)
        && in_range(m.min_rnr_timer, 31)
        && in_range(m.retry_cnt, 7)
        && in_range(m.rnr_retry, 7)
        && fits_24(m.dest_qpn)
        && fits_24(m.rq_psn)
        && fits_24(m.sq_psn)
        && m.path.is_none_or(|p| p.flow_label <= 0xF_FFFF))
    {
        return Err(PvrdmaError::InvalidParameter);
    }
    if let Some(s) = m.state {
        mask |= QpAttrMask::STATE;
        attr.qp_state = s as u32;
    }
    if let Some(v) = m.path_mtu {
        mask |= QpAttrMask::PATH_MTU;
        attr.path_mtu = u32::from(v);
    }
    if let Some(v) = m.dest_qpn {
        mask |= QpAttrMask::DEST_QPN;
        attr.dest_qp_num = v;
    }
    if let Some(v) = m.rq_psn {
        mask |= QpAttrMask::RQ_PSN;
        attr.rq_psn = v;
    }
    if let Some(v) = m.sq_psn {
        mask |= QpAttrMask::SQ_PSN;
        attr.sq_psn = v;
    }
    if let Some(p) = m.path {
        mask |= QpAttrMask::AV;
        attr.ah_attr = AhAttr {
            dgid: p.dgid,
            flow_label: p.flow_label,
            sgid_index: p.sgid_index,
            hop_limit: p.hop_limit,
            traffic_class: p.traffic_class,
            // RoCE always carries a GRH (the IP header); RC RTR requires the flag (M39).
            ah_flags: 1,
            port_num: 1,
            dmac: p.dmac,
            ..AhAttr::default()
        };
    }
    if let Some(v) = m.max_rd_atomic {
        mask |= QpAttrMask::MAX_QP_RD_ATOMIC;
        attr.max_rd_atomic = v;
    }
    if let Some(v) = m.max_dest_rd_atomic {
        mask |= QpAttrMask::MAX_DEST_RD_ATOMIC;
        attr.max_dest_rd_atomic = v;
    }
    if let Some(v) = m.timeout {
        mask |= QpAttrMask::TIMEOUT;
        attr.timeout = v;
    }
    if let Some(v) = m.retry_cnt {
        mask |= QpAttrMask::RETRY_CNT;
        attr.retry_cnt = v;
    }
    if let Some(v) = m.rnr_retry {
        mask |= QpAttrMask::RNR_RETRY;
        attr.rnr_retry = v;
    }
    if let Some(v) = m.min_rnr_timer {
        mask |= QpAttrMask::MIN_RNR_TIMER;
        attr.min_rnr_timer = v;
    }
    if let Some(v) = m.qkey {
        mask |= QpAttrMask::QKEY;
        attr.qkey = v;
    }
    if let Some(v) = m.access {
        mask |= QpAttrMask::ACCESS_FLAGS;
        attr.qp_access_flags = v.bits();
    }
    if let Some(v) = m.pkey_index {
        mask |= QpAttrMask::PKEY_INDEX;
        attr.pkey_index = v;
    }
    Ok(ModifyQp {
        qp_handle: qp,
        attr_mask: mask,
        attr,
    })
}

/// GSI RESET → INIT: the attributes §8's table requires (P_Key index, Q_Key).
fn init_gsi(qp: u32) -> ModifyQp {
    ModifyQp {
        qp_handle: qp,
        attr_mask: QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::QKEY,
        attr: QpAttr {
            qp_state: QpState::Init as u32,
            qkey: QP1_QKEY,
            ..QpAttr::default()
        },
    }
}

impl Verbs {
    /// MODIFY_QP of `qp` with the attributes `m` names (IRQL ≤ DISPATCH_LEVEL); `done` gets
    /// the device's answer. An attribute out of its range (a PSN or QPN above 24 bits, a path
    /// MTU outside 1..=5, a timer code above 31, a retry count above 7, a flow label above 20
    /// bits) is refused with [`PvrdmaError::InvalidParameter`] before anything reaches the
    /// device. Entering ERR completes every outstanding WQE with WR_FLUSH_ERR before `done`
    /// runs (M32).
    pub fn modify_qp(&self, qp: u32, m: &QpModify, done: Done<()>) {
        match encode(qp, m) {
            Ok(cmd) => submit_then(self.dev().cmd(), &cmd, done),
            Err(e) => done(Err(e)),
        }
    }

    /// CREATE_BIND: GID table entry `index` holds the RoCEv2 GID `gid`; packets sent from
    /// `sgid_index = index` carry it as their source address, and the device accepts
    /// packets addressed to it (M38). An index the table does not have fails. The bind's MTU
    /// is the device's `gid_mtu` (the operational RoCE MTU the miniport set).
    pub fn bind_gid(&self, index: u32, gid: [u8; 16], done: Done<()>) {
        let bind = CreateBind::roce_v2(index, gid, self.dev().gid_mtu());
        submit_then(self.dev().cmd(), &bind, done);
    }

    /// DESTROY_BIND: clears GID table entry `index` if it holds `gid`.
    pub fn unbind_gid(&self, index: u32, gid: [u8; 16], done: Done<()>) {
        let cmd = DestroyBind {
            index,
            dest_gid: gid,
        };
        submit_then(self.dev().cmd(), &cmd, done);
    }

    /// CREATE_QP of type GSI (QP1; one per device), then RESET → INIT with P_Key index 0
    /// and Q_Key [`QP1_QKEY`] (cm.md §2, pvrdma.md §14 "UD and GSI"); `done` gets the QP
    /// handle. RTR and RTS follow through [`Verbs::modify_qp`]. `spec.srq` must be `None`.
    pub fn create_gsi_qp(&self, spec: &QpSpec, done: Done<u32>) {
        if spec.srq.is_some() {
            return done(Err(PvrdmaError::InvalidParameter));
        }
        let prepared =
            prepare_qp(self.dev(), self.seam.tables.quarantine(), spec).map(|(mut cmd, rec)| {
                cmd.qp_type = QpType::Gsi;
                (cmd, rec)
            });
        self.create(prepared, done, |s, resp, rec, done| {
            let h = resp.qp_handle;
            if let Err(e) = s.file(h, rec) {
                return done(Err(e));
            }
            let s2 = s.clone();
            submit_then(s.dev.cmd(), &init_gsi(h), move |r| match r {
                Ok(()) => done(Ok(h)),
                Err(e) => {
                    s2.destroy::<QpRecord>(h);
                    done(Err(e));
                }
            });
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::QpPath;
    use super::*;

    #[test]
    fn only_the_named_attributes_are_in_the_mask() {
        let m = QpModify {
            state: Some(QpState::Rtr),
            path_mtu: Some(3),
            dest_qpn: Some(0x105),
            rq_psn: Some(0xABCDEF),
            path: Some(QpPath {
                dgid: [7; 16],
                dmac: [1, 2, 3, 4, 5, 6],
                sgid_index: 2,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
            }),
            max_dest_rd_atomic: Some(16),
            min_rnr_timer: Some(12),
            ..QpModify::default()
        };
        let c = encode(9, &m).expect("in range");
        type M = QpAttrMask;
        assert_eq!(
            c.attr_mask,
            M::STATE
                | M::PATH_MTU
                | M::DEST_QPN
                | M::RQ_PSN
                | M::AV
                | M::MAX_DEST_RD_ATOMIC
                | M::MIN_RNR_TIMER
        );
        assert_eq!(c.qp_handle, 9);
        assert_eq!(c.attr.qp_state, 2);
        assert_eq!(c.attr.dest_qp_num, 0x105);
        assert_eq!(c.attr.ah_attr.sgid_index, 2);
        assert_eq!(c.attr.ah_attr.ah_flags, 1);
        assert_eq!(c.attr.ah_attr.port_num, 1);
        assert_eq!(c.attr.ah_attr.dmac, [1, 2, 3, 4, 5, 6]);
        assert_eq!(c.attr.max_dest_rd_atomic, 16);
        assert_eq!(c.attr.sq_psn, 0);
        let none = encode(1, &QpModify::default()).expect("empty");
        assert_eq!(none.attr_mask, M::empty());
    }

    #[test]
    fn values_out_of_range_are_refused_before_the_device() {
        let bad = [
            QpModify {
                path_mtu: Some(0),
                ..QpModify::default()
            },
            QpModify {
                path_mtu: Some(6),
                ..QpModify::default()
            },
            QpModify {
                sq_psn: Some(1 << 24),
                ..QpModify::default()
            },
            QpModify {
                dest_qpn: Some(1 << 24),
                ..QpModify::default()
            },
            QpModify {
                min_rnr_timer: Some(32),
                ..QpModify::default()
            },
            QpModify {
                timeout: Some(32),
                ..QpModify::default()
            },
            QpModify {
                retry_cnt: Some(8),
                ..QpModify::default()
            },
            QpModify {
                rnr_retry: Some(8),
                ..QpModify::default()
            },
        ];
        for m in bad {
            assert_eq!(encode(1, &m), Err(PvrdmaError::InvalidParameter), "{m:?}");
        }
    }
}
