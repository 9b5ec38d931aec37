//! L3's `calibration` metric: one row per compared tensor (its fixed-row and calibrated numbers
//! and verdicts), a type written by L3 and read back by the reports, so both agree on each field.

use super::stage::Judged;
use crate::tier_metrics::{CalibratedRow, CalibrationRow, RuleVerdict};

pub(super) fn calibration_row(j: &Judged) -> CalibrationRow {
    let verdict = RuleVerdict::of;
    CalibrationRow {
        max_abs_diff: j.fixed.max_abs_diff,
        fixed_row_status: verdict(j.fixed.pass),
        calibrated: j.calibrated.as_ref().map(|c| CalibratedRow {
            e_cand_rms: c.e_cand_rms,
            e_cand_max: c.e_cand_max,
            e_floor_rms: c.e_floor_rms,
            e_floor_max: c.e_floor_max,
            ratio: c.ratio,
            calibrated_status: verdict(c.pass),
        }),
    }
}
