use super::*;

/// The field names a derived `Deserialize` asks for (serde hands them to `deserialize_struct`).
fn fields_of<'de, T: Deserialize<'de>>() -> Vec<&'static str> {
    struct Fields(Vec<&'static str>);
    #[derive(Debug)]
    struct Stop;
    impl std::fmt::Display for Stop {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("stop")
        }
    }
    impl std::error::Error for Stop {}
    impl serde::de::Error for Stop {
        fn custom<M: std::fmt::Display>(_: M) -> Self {
            Stop
        }
    }
    impl<'de> Deserializer<'de> for &mut Fields {
        type Error = Stop;
        fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
            Err(Stop)
        }
        fn deserialize_struct<V: serde::de::Visitor<'de>>(
            self,
            _: &'static str,
            f: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Stop> {
            self.0.extend_from_slice(f);
            Err(Stop)
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit unit_struct
            newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let mut f = Fields(Vec::new());
    let _ = T::deserialize(&mut f);
    f.0
}

/// Guards the rendering's keys: no two parts name one key (the flattened object would keep one
/// of them), and none ends like a per-stage key in a way that would be read back as a stage.
#[test]
fn every_key_is_named_once() {
    let mut all: Vec<&str> = [
        fields_of::<Compared>(),
        fields_of::<Trial>(),
        fields_of::<L1Metrics>(),
        fields_of::<L2Metrics>(),
        fields_of::<L3Metrics>(),
        fields_of::<QuantizationMetrics>(),
        fields_of::<L4Metrics>(),
        fields_of::<L5Metrics>(),
    ]
    .concat();
    let n = all.len();
    assert!(n > 80, "{n} keys: the parts' fields were not read");
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n, "a key is named by two parts");
}

fn row() -> CalibrationRow {
    CalibrationRow {
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
    }
}

/// Guards a calibration row's keys (what reports carried before it was a type) and its round
/// trip, and a fixed-rule row (no calibrated part).
#[test]
fn a_row_keeps_its_keys_and_reads_back() {
    let v = serde_json::to_value(row()).expect("serialises");
    let keys: Vec<&str> = v.as_object().expect("object").keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        ["calibrated_status", "e_cand_max", "e_cand_rms", "e_floor_max", "e_floor_rms", "fixed_row_status", "max_abs_diff", "ratio"]
    );
    assert_eq!(serde_json::from_value::<CalibrationRow>(v).expect("reads back"), row());
    let fixed_only = serde_json::json!({"max_abs_diff": 0.5, "fixed_row_status": "pass"});
    let back: CalibrationRow = serde_json::from_value(fixed_only).expect("a fixed-rule row");
    assert_eq!((back.fixed_row_status, back.calibrated), (RuleVerdict::Pass, None));
}

fn sample() -> Metrics {
    let mut m = Metrics::default();
    m.compared.max_abs_diff = Some(8e-3);
    m.compared.argmax_match = Some(true);
    m.trial.xfail_signature = Some("first_divergence: layer 3".into());
    m.l1.op_inventory = Some([("MatMul".to_string(), 7)].into());
    m.l3.first_divergent_layer = Some(3);
    m.l3.layer_local_max_abs_diff = Some(vec![1e-6, f64::NAN, 2.5e-3]);
    m.l3.l3_rule = Some(L3Rule::Calibrated);
    m.l3.calibration = Some([("prefill".to_string(), row())].into());
    m.l3.image_blocks = Some(vec![[2, 5]]);
    m.quantized.int8_steps_adopted_first = Some(vec![AdoptedStep {
        run: "local".into(),
        which: "floor".into(),
        key: "layers.0.mlp.up_proj.weight".into(),
        row: 1,
        col: 2,
        own: 63.5,
        candidate: 63.500001,
    }]);
    m.l4.top10 = Some(vec![5, 6]);
    m.l5.text = Some("hi".into());
    m.stage_max_abs_diff.insert("pixels".into(), 0.25);
    m.component_calibrated_ratio.insert("pixels".into(), 10.0);
    m
}

/// Guards the rendering's shape (the keys reports carried as a string map, flat and sorted)
/// and that a record reads back to the same metrics, NaN included.
#[test]
fn renders_flat_and_reads_back() {
    let m = sample();
    let r = m.rendered();
    let keys: Vec<&str> = r.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "argmax_match",
            "calibration",
            "first_divergent_layer",
            "image_blocks",
            "int8_steps_adopted_first",
            "l3_rule",
            "layer_local_max_abs_diff",
            "max_abs_diff",
            "op_inventory",
            "pixels_calibrated_ratio",
            "pixels_max_abs_diff",
            "text",
            "top10",
            "xfail_signature"
        ]
    );
    assert_eq!(r["layer_local_max_abs_diff"], serde_json::json!([1e-6, null, 2.5e-3]));
    assert_eq!(r["int8_steps_adopted_first"][0]["in"], "floor");
    assert_eq!(r["calibration"]["prefill"]["calibrated_status"], "fail");
    let text = serde_json::to_string(&m).expect("serialises");
    let back: Metrics = serde_json::from_str(&text).expect("reads back");
    let nan = back.l3.layer_local_max_abs_diff.as_ref().expect("kept")[1];
    assert!(nan.is_nan(), "null reads back as NaN");
    assert_eq!(back.rendered(), r);
    assert_eq!(Metrics::default().rendered().len(), 0);
}

/// Guards several implementations' metrics: each under its label, read back by label, and a
/// key this version does not know kept.
#[test]
fn candidates_and_unknown_keys_round_trip() {
    let mut m = Metrics::default();
    m.candidates.push(("ONNX".into(), sample()));
    m.candidates
        .push(("ort-genai".into(), Metrics { compared: Compared { max_abs_diff: Some(0.5), ..Default::default() }, ..Default::default() }));
    m.other.insert("from_a_later_version".into(), serde_json::json!({"a": 1}));
    let r = m.rendered();
    assert_eq!(r["ort-genai/max_abs_diff"], 0.5);
    assert_eq!(r["ONNX/first_divergent_layer"], 3);
    let back = Metrics::from_rendered(r.clone()).expect("reads back");
    assert_eq!(back.rendered(), r);
    assert_eq!(back.candidates.len(), 2);
    assert_eq!(back.value("from_a_later_version"), Some(serde_json::json!({"a": 1})));
}
