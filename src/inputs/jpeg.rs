//! JPEG decoding as PIL does it, so `pixel_values` of a JPEG equal HF's bit for bit.
//!
//! PIL (what HF's processors receive images from) decodes JPEG with libjpeg-turbo at its
//! defaults: the accurate integer IDCT (`JDCT_ISLOW`), "fancy" (triangle-filter) chroma
//! upsampling and block smoothing. Other decoders (zune-jpeg, jpeg-decoder) pick other IDCTs and
//! upsamplers and differ by a few levels per sample — measured on mobius's cat JPEG: up to 4/255
//! in 6.5 % of `pixel_values`. This module drives the libjpeg-turbo code base through the
//! `mozjpeg` binding: MozJPEG is libjpeg-turbo's fork whose changes are all on the encoder side,
//! and `mozjpeg-sys` compiles it with the C compiler alone (no cmake or nasm, which the
//! `turbojpeg` crate's source build needs). The SIMD kernels are left out; libjpeg-turbo's SIMD
//! and C paths are bit-identical by design, so this only costs speed.
//!
//! Measured equal to Pillow 13.0 (libjpeg-turbo 3.x) on every sample: the cat JPEG (960×686,
//! 4:2:0) and the fixture set of `fixtures/jpeg/` (4:4:4, 4:2:2, 4:2:0, 4:1:1, progressive,
//! restart markers, greyscale, odd sizes; `jpeg::tests`).

use std::os::raw::c_int;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

use mozjpeg::decompress::DecompressBuilder;
use mozjpeg::{ColorSpace, DctMethod};
use mozjpeg_sys as ffi;

/// PIL's decompression-bomb limit: `Image.open` raises `DecompressionBombError` above twice
/// `Image.MAX_IMAGE_PIXELS` (89,478,485). Checked on the header, before any pixel is allocated.
pub const PIL_MAX_PIXELS: usize = 2 * 89_478_485;

/// A decoded JPEG: 8-bit RGB, rows top to bottom, channels interleaved.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedJpeg {
    pub width: usize,
    pub height: usize,
    pub rgb: Vec<u8>,
}

/// Decodes `bytes` to RGB exactly as `PIL.Image.open(f).convert("RGB")` does for YCbCr, RGB and
/// greyscale JPEGs (grey is replicated to three channels, as PIL's `L` → `RGB` does).
///
/// Errors name what is wrong: a corrupt stream (libjpeg's own message), a truncated file (PIL
/// refuses those: "image file is truncated"; libjpeg alone would pad them with grey), or a CMYK /
/// YCCK file (PIL converts those with its own inverted-Adobe formula, not reproduced here).
pub fn decode_like_pil(bytes: &[u8]) -> Result<DecodedJpeg, JpegError> {
    // libjpeg reports fatal errors through `error_exit`, which must not return: ours unwinds with
    // the message (resume_unwind skips the panic hook, so nothing is printed) and it is caught here.
    match catch_unwind(AssertUnwindSafe(|| decode(bytes))) {
        Ok(result) => result,
        Err(payload) => Err(JpegError::Libjpeg(
            payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "libjpeg failed without a message".into()),
        )),
    }
}

/// Why a JPEG cannot be decoded as PIL would.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JpegError {
    /// libjpeg's (or the binding's) own message: a corrupt or truncated stream.
    #[error("{0}")]
    Libjpeg(String),
    #[error("{0} JPEGs are not supported: PIL converts CMYK/YCCK to RGB with its own formula, which this decoder does not reproduce; convert the image to RGB")]
    ColorSpace(String),
    #[error("{width}×{height} = {pixels} pixels exceeds PIL's decompression-bomb limit of {PIL_MAX_PIXELS} (PIL refuses to open it)")]
    TooLarge { width: usize, height: usize, pixels: usize },
    #[error("decoded {got} bytes for a {width}×{height} RGB image ({expected} expected)")]
    Size { got: usize, width: usize, height: usize, expected: usize },
}

fn decode(bytes: &[u8]) -> Result<DecodedJpeg, JpegError> {
    let lib = |e: std::io::Error| JpegError::Libjpeg(e.to_string());
    let mut dec = DecompressBuilder::new().with_err(error_manager()).from_mem(bytes).map_err(lib)?;
    match dec.color_space() {
        ColorSpace::JCS_YCbCr | ColorSpace::JCS_RGB | ColorSpace::JCS_GRAYSCALE => {}
        other => return Err(JpegError::ColorSpace(format!("{other:?}"))),
    }
    let pixels = dec.width().saturating_mul(dec.height());
    if pixels > PIL_MAX_PIXELS {
        return Err(JpegError::TooLarge { width: dec.width(), height: dec.height(), pixels });
    }
    // PIL's settings, which are libjpeg's defaults: set explicitly so a binding's different
    // defaults cannot change the pixels.
    dec.dct_method(DctMethod::IntegerSlow);
    dec.do_fancy_upsampling(true);
    dec.do_block_smoothing(true);
    let (width, height) = (dec.width(), dec.height());
    let mut started = dec.rgb().map_err(lib)?;
    let rgb: Vec<u8> = started.read_scanlines().map_err(lib)?;
    started.finish().map_err(lib)?;
    if rgb.len() != width * height * 3 {
        return Err(JpegError::Size { got: rgb.len(), width, height, expected: width * height * 3 });
    }
    Ok(DecodedJpeg { width, height, rgb })
}

/// libjpeg's standard error manager with fatal errors and the end-of-data warning turned into
/// unwinding errors; the other warnings (e.g. "extraneous bytes before marker") are ignored, as
/// PIL ignores them.
fn error_manager() -> ffi::jpeg_error_mgr {
    // SAFETY: jpeg_error_mgr is a plain C struct of integers and function pointers, for which
    // all-zero is a valid value; jpeg_std_error fills in every field.
    let mut err: ffi::jpeg_error_mgr = unsafe { std::mem::zeroed() };
    unsafe { ffi::jpeg_std_error(&mut err) };
    err.error_exit = Some(fatal);
    err.emit_message = Some(warning);
    err
}

/// The text of libjpeg's current message.
fn message(cinfo: &mut ffi::jpeg_common_struct) -> String {
    // SAFETY: `cinfo.err` points at the error manager libjpeg is reporting through; format_message
    // writes a NUL-terminated message of at most JMSG_LENGTH_MAX (80) bytes into the buffer.
    unsafe {
        let Some(err) = cinfo.err.as_ref() else { return "libjpeg error".into() };
        let code = err.msg_code;
        match err.format_message {
            Some(format) => {
                let buffer = [0u8; 80];
                format(cinfo, &buffer);
                let text = buffer.split(|&c| c == 0).next().unwrap_or_default();
                String::from_utf8_lossy(text).into_owned()
            }
            None => format!("libjpeg message code {code}"),
        }
    }
}

extern "C-unwind" fn fatal(cinfo: &mut ffi::jpeg_common_struct) {
    let text = message(cinfo);
    resume_unwind(Box::new(format!("corrupt or unsupported JPEG: {text}")));
}

extern "C-unwind" fn warning(cinfo: &mut ffi::jpeg_common_struct, level: c_int) {
    // SAFETY: as in `message`.
    let code = unsafe { cinfo.err.as_ref().map(|e| e.msg_code) };
    if level < 0 && code == Some(ffi::JWRN_JPEG_EOF as c_int) {
        let text = message(cinfo);
        resume_unwind(Box::new(format!("truncated JPEG ({text}): PIL refuses it (\"image file is truncated\")")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn fixtures() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/jpeg")
    }

    /// Guards: every fixture JPEG decodes to exactly the RGB bytes Pillow gave for it
    /// (`fixtures/jpeg/pil.safetensors`, written by scripts/make_jpeg_fixtures.py).
    #[test]
    fn decodes_like_pillow_on_every_fixture() {
        let oracle = std::fs::read(fixtures().join("pil.safetensors")).expect("fixtures/jpeg/pil.safetensors");
        let st = safetensors::SafeTensors::deserialize(&oracle).expect("oracle");
        let mut names = st.names();
        names.sort();
        assert!(names.len() >= 8, "{names:?}");
        for name in names {
            let want = st.tensor(name).unwrap();
            let got = decode_like_pil(&std::fs::read(fixtures().join(name)).unwrap()).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!([got.height, got.width, 3], want.shape(), "{name}");
            let differing = got.rgb.iter().zip(want.data()).filter(|(a, b)| a != b).count();
            assert_eq!(differing, 0, "{name}: {differing} samples differ from Pillow's");
        }
    }

    /// Guards: a truncated file is an error (as in PIL), not an image padded with grey.
    #[test]
    fn truncated_jpeg_is_an_error() {
        let bytes = std::fs::read(fixtures().join("q90-420.jpg")).unwrap();
        let e = decode_like_pil(&bytes[..bytes.len() * 2 / 3]).unwrap_err().to_string();
        assert!(e.contains("truncated"), "{e}");
    }

    /// Guards: garbage is an error carrying libjpeg's message, never a panic.
    #[test]
    fn garbage_is_an_error() {
        let e = decode_like_pil(b"\xff\xd8\xff\xe0 not a jpeg at all").unwrap_err().to_string();
        assert!(e.contains("JPEG"), "{e}");
        let e = decode_like_pil(b"").unwrap_err().to_string();
        assert!(!e.is_empty());
    }
}
