//! A small FFI over onnxruntime-genai's C API (`ort_genai_c.h`), loaded at run time with
//! `libloading`: no maintained Rust binding of Microsoft's library exists on crates.io
//! (`onnx-genai-*` are another engine; `ort` covers ONNX Runtime alone). Only what the harness
//! drives is bound: a model from a package folder, a generator, its token appends, logits and
//! greedy search. Every handle is freed by its `Drop`; every `OgaResult` becomes a
//! [`GenaiError::Call`] naming the function.

use std::ffi::{c_char, c_void, CStr, CString};
use std::path::Path;
use std::ptr;

use super::error::GenaiError;

#[repr(C)]
pub struct OgaResult(c_void);
#[repr(C)]
pub struct OgaConfig(c_void);
#[repr(C)]
pub struct OgaModel(c_void);
#[repr(C)]
pub struct OgaGeneratorParams(c_void);
#[repr(C)]
pub struct OgaGenerator(c_void);
#[repr(C)]
pub struct OgaTensor(c_void);

type R = *mut OgaResult;

/// The functions used, resolved once from the library (which stays loaded for the process:
/// onnxruntime-genai tears its ORT environment down in a static destructor, so it is never
/// unloaded).
pub struct Api {
    result_get_error: unsafe extern "C" fn(*const OgaResult) -> *const c_char,
    destroy_result: unsafe extern "C" fn(R),
    create_config: unsafe extern "C" fn(*const c_char, *mut *mut OgaConfig) -> R,
    config_clear_providers: unsafe extern "C" fn(*mut OgaConfig) -> R,
    destroy_config: unsafe extern "C" fn(*mut OgaConfig),
    create_model_from_config: unsafe extern "C" fn(*const OgaConfig, *mut *mut OgaModel) -> R,
    destroy_model: unsafe extern "C" fn(*mut OgaModel),
    create_generator_params: unsafe extern "C" fn(*const OgaModel, *mut *mut OgaGeneratorParams) -> R,
    destroy_generator_params: unsafe extern "C" fn(*mut OgaGeneratorParams),
    params_set_search_number: unsafe extern "C" fn(*mut OgaGeneratorParams, *const c_char, f64) -> R,
    params_set_search_bool: unsafe extern "C" fn(*mut OgaGeneratorParams, *const c_char, bool) -> R,
    create_generator: unsafe extern "C" fn(*const OgaModel, *const OgaGeneratorParams, *mut *mut OgaGenerator) -> R,
    destroy_generator: unsafe extern "C" fn(*mut OgaGenerator),
    append_tokens: unsafe extern "C" fn(*mut OgaGenerator, *const i32, usize) -> R,
    generate_next_token: unsafe extern "C" fn(*mut OgaGenerator) -> R,
    get_next_tokens: unsafe extern "C" fn(*const OgaGenerator, *mut *const i32, *mut usize) -> R,
    get_logits: unsafe extern "C" fn(*mut OgaGenerator, *mut *mut OgaTensor) -> R,
    get_output: unsafe extern "C" fn(*const OgaGenerator, *const c_char, *mut *mut OgaTensor) -> R,
    destroy_tensor: unsafe extern "C" fn(*mut OgaTensor),
    tensor_get_type: unsafe extern "C" fn(*mut OgaTensor, *mut i32) -> R,
    tensor_get_shape_rank: unsafe extern "C" fn(*mut OgaTensor, *mut usize) -> R,
    tensor_get_shape: unsafe extern "C" fn(*mut OgaTensor, *mut i64, usize) -> R,
    tensor_get_data: unsafe extern "C" fn(*mut OgaTensor, *mut *mut c_void) -> R,
    _library: libloading::Library,
}

/// Resolves `name` in `lib` as a function pointer of type `T`.
///
/// # Safety
/// `T` must be the C signature `name` has in onnxruntime-genai 0.18.0's `ort_genai_c.h`.
unsafe fn symbol<T: Copy>(lib: &libloading::Library, path: &Path, name: &'static str) -> Result<T, GenaiError> {
    // SAFETY: the caller states the signature; the pointer lives as long as `lib`, which `Api` owns.
    unsafe { lib.get::<T>(name.as_bytes()) }.map(|s| *s).map_err(|source| GenaiError::Symbol { path: path.into(), name, source })
}

impl Api {
    /// Loads the library at `path` and resolves the functions used.
    ///
    /// # Safety
    /// Loading runs the library's static initialisers, which locate and load ONNX Runtime
    /// (`ORT_LIB_PATH`, set by the caller) and abort the process when none is found.
    pub unsafe fn load(path: &Path) -> Result<Api, GenaiError> {
        // SAFETY: see the function's contract.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|source| GenaiError::Load { path: path.into(), source })?;
        // SAFETY: each signature below is the header's (ort_genai_c.h, 0.18.0).
        unsafe {
            Ok(Api {
                result_get_error: symbol(&lib, path, "OgaResultGetError")?,
                destroy_result: symbol(&lib, path, "OgaDestroyResult")?,
                create_config: symbol(&lib, path, "OgaCreateConfig")?,
                config_clear_providers: symbol(&lib, path, "OgaConfigClearProviders")?,
                destroy_config: symbol(&lib, path, "OgaDestroyConfig")?,
                create_model_from_config: symbol(&lib, path, "OgaCreateModelFromConfig")?,
                destroy_model: symbol(&lib, path, "OgaDestroyModel")?,
                create_generator_params: symbol(&lib, path, "OgaCreateGeneratorParams")?,
                destroy_generator_params: symbol(&lib, path, "OgaDestroyGeneratorParams")?,
                params_set_search_number: symbol(&lib, path, "OgaGeneratorParamsSetSearchNumber")?,
                params_set_search_bool: symbol(&lib, path, "OgaGeneratorParamsSetSearchBool")?,
                create_generator: symbol(&lib, path, "OgaCreateGenerator")?,
                destroy_generator: symbol(&lib, path, "OgaDestroyGenerator")?,
                append_tokens: symbol(&lib, path, "OgaGenerator_AppendTokens")?,
                generate_next_token: symbol(&lib, path, "OgaGenerator_GenerateNextToken")?,
                get_next_tokens: symbol(&lib, path, "OgaGenerator_GetNextTokens")?,
                get_logits: symbol(&lib, path, "OgaGenerator_GetLogits")?,
                get_output: symbol(&lib, path, "OgaGenerator_GetOutput")?,
                destroy_tensor: symbol(&lib, path, "OgaDestroyTensor")?,
                tensor_get_type: symbol(&lib, path, "OgaTensorGetType")?,
                tensor_get_shape_rank: symbol(&lib, path, "OgaTensorGetShapeRank")?,
                tensor_get_shape: symbol(&lib, path, "OgaTensorGetShape")?,
                tensor_get_data: symbol(&lib, path, "OgaTensorGetData")?,
                _library: lib,
            })
        }
    }

    /// `Ok` for a null result, else the error it carries (the result is freed).
    fn check(&self, call: &'static str, r: R) -> Result<(), GenaiError> {
        if r.is_null() {
            return Ok(());
        }
        // SAFETY: `r` is a live result from the library; its string is copied before it is freed.
        let message = unsafe {
            let m = (self.result_get_error)(r);
            let s = if m.is_null() { String::from("(no message)") } else { CStr::from_ptr(m).to_string_lossy().into_owned() };
            (self.destroy_result)(r);
            s
        };
        Err(GenaiError::Call { call, message })
    }
}

fn c_string(s: &str) -> Result<CString, GenaiError> {
    CString::new(s).map_err(|_| GenaiError::Call { call: "argument", message: format!("`{s}` contains a NUL byte") })
}

/// A model loaded from a package folder (its `genai_config.json`) on the CPU.
pub struct Model<'a> {
    api: &'a Api,
    raw: *mut OgaModel,
}

impl<'a> Model<'a> {
    /// Loads `dir`'s package. The providers the config lists are cleared: the harness judges
    /// the CPU execution provider (as its own pipeline does by default).
    pub fn open(api: &'a Api, dir: &Path) -> Result<Model<'a>, GenaiError> {
        let path = c_string(&dir.to_string_lossy())?;
        let mut config = ptr::null_mut();
        // SAFETY: valid C string and out-pointer; the config is destroyed below on every path.
        api.check("OgaCreateConfig", unsafe { (api.create_config)(path.as_ptr(), &mut config) })?;
        let mut raw = ptr::null_mut();
        // SAFETY: `config` is live until destroyed here; the model does not borrow it.
        let made = unsafe {
            api.check("OgaConfigClearProviders", (api.config_clear_providers)(config))
                .and_then(|_| api.check("OgaCreateModelFromConfig", (api.create_model_from_config)(config, &mut raw)))
        };
        // SAFETY: created above, not used after.
        unsafe { (api.destroy_config)(config) };
        made?;
        Ok(Model { api, raw })
    }

    /// A generator that decodes greedily up to `max_length` positions (prompt included).
    pub fn generator(&self, max_length: usize) -> Result<Generator<'a>, GenaiError> {
        let api = self.api;
        let mut params = ptr::null_mut();
        // SAFETY: live model, valid out-pointer.
        api.check("OgaCreateGeneratorParams", unsafe { (api.create_generator_params)(self.raw, &mut params) })?;
        let (max, sample) = (c_string("max_length")?, c_string("do_sample")?);
        let mut raw = ptr::null_mut();
        // SAFETY: `params` is live until destroyed here; the generator copies what it needs.
        let made = unsafe {
            api.check(
                "OgaGeneratorParamsSetSearchNumber(max_length)",
                (api.params_set_search_number)(params, max.as_ptr(), max_length as f64),
            )
            .and_then(|_| {
                api.check("OgaGeneratorParamsSetSearchBool(do_sample)", (api.params_set_search_bool)(params, sample.as_ptr(), false))
            })
            .and_then(|_| api.check("OgaCreateGenerator", (api.create_generator)(self.raw, params, &mut raw)))
        };
        // SAFETY: created above, not used after.
        unsafe { (api.destroy_generator_params)(params) };
        made?;
        Ok(Generator { api, raw, _model: std::marker::PhantomData })
    }
}

impl Drop for Model<'_> {
    fn drop(&mut self) {
        // SAFETY: created by `open`; generators borrow the model, so none outlives it.
        unsafe { (self.api.destroy_model)(self.raw) }
    }
}

/// One sequence being decoded.
pub struct Generator<'a> {
    api: &'a Api,
    raw: *mut OgaGenerator,
    _model: std::marker::PhantomData<&'a ()>,
}

/// A float tensor copied out of the library: its shape and values as f32.
#[derive(Debug, Clone)]
pub struct Floats {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

impl Generator<'_> {
    /// Feeds `tokens` (the prompt, or one teacher-forced token) and runs the model on them.
    pub fn append(&mut self, tokens: &[i64]) -> Result<(), GenaiError> {
        let ids = tokens
            .iter()
            .map(|&t| {
                i32::try_from(t)
                    .map_err(|_| GenaiError::Call { call: "OgaGenerator_AppendTokens", message: format!("token {t} is not an int32") })
            })
            .collect::<Result<Vec<i32>, _>>()?;
        // SAFETY: live generator; the slice outlives the call.
        self.api.check("OgaGenerator_AppendTokens", unsafe { (self.api.append_tokens)(self.raw, ids.as_ptr(), ids.len()) })
    }

    /// The next-token logits ORT GenAI's search sees (`[1, 1, vocab]`, f32).
    pub fn logits(&mut self) -> Result<Floats, GenaiError> {
        let mut t = ptr::null_mut();
        // SAFETY: live generator, valid out-pointer; the tensor is a fresh copy we destroy.
        self.api.check("OgaGenerator_GetLogits", unsafe { (self.api.get_logits)(self.raw, &mut t) })?;
        self.take_floats("OgaGenerator_GetLogits", t)
    }

    /// The model output `name` of the last run (all its positions), as f32.
    pub fn output(&self, name: &str) -> Result<Floats, GenaiError> {
        let c = c_string(name)?;
        let mut t = ptr::null_mut();
        // SAFETY: as for `logits`.
        self.api.check("OgaGenerator_GetOutput", unsafe { (self.api.get_output)(self.raw, c.as_ptr(), &mut t) })?;
        self.take_floats("OgaGenerator_GetOutput", t)
    }

    /// ORT GenAI's own search step (greedy: `do_sample` false) and the token it chose.
    pub fn generate_next(&mut self) -> Result<i64, GenaiError> {
        let api = self.api;
        // SAFETY: live generator.
        api.check("OgaGenerator_GenerateNextToken", unsafe { (api.generate_next_token)(self.raw) })?;
        let (mut data, mut n) = (ptr::null(), 0usize);
        // SAFETY: the pointer is valid until the next generator call; read at once.
        api.check("OgaGenerator_GetNextTokens", unsafe { (api.get_next_tokens)(self.raw, &mut data, &mut n) })?;
        if data.is_null() || n != 1 {
            return Err(GenaiError::Call { call: "OgaGenerator_GetNextTokens", message: format!("{n} tokens for a batch of 1") });
        }
        // SAFETY: `n` == 1 element at `data`.
        Ok(i64::from(unsafe { *data }))
    }

    /// Copies a tensor the library returned (f32 or f16) and destroys it.
    fn take_floats(&self, call: &'static str, t: *mut OgaTensor) -> Result<Floats, GenaiError> {
        let api = self.api;
        let bad = |message: String| GenaiError::Call { call, message };
        if t.is_null() {
            return Err(bad("no tensor returned".into()));
        }
        // SAFETY: `t` is a live tensor until destroyed at the end; shape and data are read with
        // the rank and element count the library reports.
        let read = unsafe {
            (|| {
                let (mut ty, mut rank) = (0i32, 0usize);
                api.check("OgaTensorGetType", (api.tensor_get_type)(t, &mut ty))?;
                api.check("OgaTensorGetShapeRank", (api.tensor_get_shape_rank)(t, &mut rank))?;
                let mut dims = vec![0i64; rank];
                api.check("OgaTensorGetShape", (api.tensor_get_shape)(t, dims.as_mut_ptr(), rank))?;
                let shape =
                    dims.iter().map(|&d| usize::try_from(d).map_err(|_| bad(format!("dimension {d}")))).collect::<Result<Vec<_>, _>>()?;
                let n: usize = shape.iter().product();
                let mut data = ptr::null_mut();
                api.check("OgaTensorGetData", (api.tensor_get_data)(t, &mut data))?;
                if data.is_null() && n > 0 {
                    return Err(bad("a tensor without data".into()));
                }
                let data = match ty {
                    1 => std::slice::from_raw_parts(data as *const f32, n).to_vec(),
                    10 => std::slice::from_raw_parts(data as *const half::f16, n).iter().map(|x| x.to_f32()).collect(),
                    16 => std::slice::from_raw_parts(data as *const half::bf16, n).iter().map(|x| x.to_f32()).collect(),
                    other => return Err(bad(format!("element type {other}, expected float32, float16 or bfloat16"))),
                };
                Ok(Floats { shape, data })
            })()
        };
        // SAFETY: returned to us by the library; not used after.
        unsafe { (api.destroy_tensor)(t) };
        read
    }
}

impl Drop for Generator<'_> {
    fn drop(&mut self) {
        // SAFETY: created by `Model::generator`.
        unsafe { (self.api.destroy_generator)(self.raw) }
    }
}
