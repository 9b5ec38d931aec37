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

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the row's keys (what reports carried before it was a type) and its round trip.
    #[test]
    fn a_row_keeps_its_keys_and_reads_back() {
        let row = CalibrationRow {
            max_abs_diff: 8e-3,
            fixed_row_status: RuleVerdict::Fail,
            calibrated: Some(CalibratedRow {
                e_cand_rms: 1e-4,
                e_cand_max: 1e-3,
                e_floor_rms: 1e-6,
                e_floor_max: 1e-5,
                ratio: 100.0,
                calibrated_status: RuleVerdict::Fail,
            }),
        };
        let v = serde_json::to_value(&row).expect("serialises");
        let keys: Vec<&str> = v.as_object().expect("object").keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["calibrated_status", "e_cand_max", "e_cand_rms", "e_floor_max", "e_floor_rms", "fixed_row_status", "max_abs_diff", "ratio"]
        );
        assert_eq!(serde_json::from_value::<CalibrationRow>(v).expect("reads back"), row);
        let fixed_only = serde_json::json!({"max_abs_diff": 0.5, "fixed_row_status": "pass"});
        let back: CalibrationRow = serde_json::from_value(fixed_only).expect("a fixed-rule row");
        assert_eq!((back.fixed_row_status, back.calibrated), (RuleVerdict::Pass, None));
    }
}
