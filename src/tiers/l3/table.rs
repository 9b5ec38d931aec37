//! L3's `calibration` metric: one row per compared tensor (its fixed-row and calibrated numbers
//! and verdicts), a type written by L3 and read back by the reports, so both agree on each field.

use super::stage::Judged;
use crate::tiers::outcome::Status;

pub(super) fn calibration_row(j: &Judged) -> serde_json::Value {
    let verdict = |pass: bool| if pass { Status::Pass } else { Status::Fail };
    let row = CalibrationRow {
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
    };
    serde_json::to_value(row).unwrap_or_default()
}

/// One tensor's row of L3's `calibration` table (the metric of that name, keyed by tensor):
/// written by L3 and read back by the reports as this type, so the two agree on every field.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CalibrationRow {
    pub max_abs_diff: f64,
    pub fixed_row_status: Status,
    /// Under the calibrated rule.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub calibrated: Option<CalibratedRow>,
}

/// The calibrated rule's part of a [`CalibrationRow`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CalibratedRow {
    pub e_cand_rms: f64,
    pub e_cand_max: f64,
    pub e_floor_rms: f64,
    pub e_floor_max: f64,
    pub ratio: f64,
    pub calibrated_status: Status,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the row's keys (what reports carried before it was a type) and its round trip.
    #[test]
    fn a_row_keeps_its_keys_and_reads_back() {
        let row = CalibrationRow {
            max_abs_diff: 8e-3,
            fixed_row_status: Status::Fail,
            calibrated: Some(CalibratedRow {
                e_cand_rms: 1e-4,
                e_cand_max: 1e-3,
                e_floor_rms: 1e-6,
                e_floor_max: 1e-5,
                ratio: 100.0,
                calibrated_status: Status::Fail,
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
        assert_eq!((back.fixed_row_status, back.calibrated), (Status::Pass, None));
    }
}
