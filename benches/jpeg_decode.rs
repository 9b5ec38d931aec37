//! JPEG decoding cost: `inputs::jpeg::decode_like_pil` (libjpeg-turbo's C code, no SIMD: what
//! makes `pixel_values` equal PIL's) against zune-jpeg (the `image` crate's decoder, used before,
//! a few levels off PIL). Run: `cargo bench --bench jpeg_decode [IMAGE.jpg]` (default: mobius's cat
//! from the anchors folder when present, else the largest fixture JPEG). Prints the median of
//! each and the ratio; the decode is a one-off per image next to a model's prefill.

mod support;

use std::path::PathBuf;

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let path = std::env::args().skip(1).find(|a| !a.starts_with('-')).map(PathBuf::from).unwrap_or_else(|| {
        let cat = root.join("../shared/anchors/mobius/testdata/pipeline-cat-chonk.jpeg");
        if cat.is_file() {
            cat
        } else {
            root.join("fixtures/jpeg/q85-420-progressive.jpg")
        }
    });
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let ours = onnx_parity::inputs::jpeg::decode_like_pil(&bytes).expect("decode");
    let repeats = if ours.width * ours.height > 100_000 { 21 } else { 501 };
    let (t_ours, _) = support::time(repeats, || {
        std::hint::black_box(onnx_parity::inputs::jpeg::decode_like_pil(&bytes).expect("decode"));
    });
    let (t_zune, _) = support::time(repeats, || {
        let opts = zune_jpeg::zune_core::options::DecoderOptions::default()
            .jpeg_set_out_colorspace(zune_jpeg::zune_core::colorspace::ColorSpace::RGB);
        let mut d = zune_jpeg::JpegDecoder::new_with_options(zune_jpeg::zune_core::bytestream::ZCursor::new(&bytes), opts);
        std::hint::black_box(d.decode().expect("zune"));
    });
    println!(
        "{} ({}x{}): libjpeg-turbo C (PIL-exact) {:.2} ms, zune-jpeg {:.2} ms, ratio {:.2}x (median of {repeats})",
        path.display(),
        ours.width,
        ours.height,
        t_ours * 1e3,
        t_zune * 1e3,
        t_ours / t_zune
    );
}
