// DEV ONLY — not to be committed.
use super::*;

#[test]
fn devcheck_against_hf_dump() {
    let Ok(dir) = std::env::var("G4DEV") else { return };
    let manifest: Value = serde_json::from_str(&std::fs::read_to_string(Path::new(&dir).join("manifest.json")).unwrap()).unwrap();
    let (mut ok, mut bad, mut pairs) = (0, 0, 0);
    for case in manifest.as_array().unwrap() {
        let d = PathBuf::from(case["dir"].as_str().unwrap());
        let text = case["text"].as_str().unwrap();
        let images: Vec<PathBuf> = case["images"].as_array().unwrap().iter().map(|p| PathBuf::from(p.as_str().unwrap())).collect();
        let want = crate::inputs::load_safetensors(&d.join("processor.safetensors")).unwrap();
        let got = match Processor::from_checkpoint(&d).and_then(|p| p.process(text, &images)) {
            Ok(g) => g,
            Err(e) => {
                println!("{}: ERROR {e}", d.display());
                bad += 1;
                continue;
            }
        };
        let (g, w) = (got.pixel_values.as_ref().unwrap(), want.pixel_values.as_ref().unwrap());
        let bits = g.shape == w.shape && g.data.iter().zip(&w.data).all(|(a, b)| a.to_bits() == b.to_bits());
        let same = got.input_ids == want.input_ids
            && got.mm_token_type_ids == want.mm_token_type_ids
            && got.image_position_ids == want.image_position_ids
            && bits;
        if same {
            ok += 1;
            pairs += images.len();
        } else {
            bad += 1;
            let nd = if g.shape == w.shape { g.data.iter().zip(&w.data).filter(|(a, b)| a.to_bits() != b.to_bits()).count() } else { usize::MAX };
            println!(
                "{}: MISMATCH ids {} mm {} pos {} shape {:?} vs {:?} pixel diffs {nd} ({})",
                d.display(),
                got.input_ids == want.input_ids,
                got.mm_token_type_ids == want.mm_token_type_ids,
                got.image_position_ids == want.image_position_ids,
                g.shape,
                w.shape,
                case["kwargs"]
            );
        }
    }
    println!("devcheck: {ok} cases equal ({pairs} image/config pairs), {bad} differ");
    assert_eq!(bad, 0);
}
