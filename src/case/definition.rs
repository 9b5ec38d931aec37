//! One validated case: paths resolved against its YAML's folder (so a case can be run from
//! anywhere), `level:`/`levels:` reconciled, the synthetic stand-in L1 and L3 run on, and the
//! thresholds that apply to it.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::candidate::Candidate;
use super::error::CaseError;
use super::implementations::{default_implementations, ImplementationEntry, ImplementationName};
use super::schema::{ExportPin, GenerationSettings, Inputs, RawCase, Xfail};
use crate::expectation::Expectation;
use crate::level::{Dtype, L3Rule, Level};
use crate::tolerance::{resolve, L5Values, Thresholds, ToleranceError, ToleranceOverrides, Tolerances};
use onnx_parity_reference::BidirectionalScope;

/// A tiny random stand-in for a real model (a checkpoint derived from its config that keeps
/// every architectural feature, and its export): the graph (L1) and same-function (L3) tiers of
/// a case named after a real model run on it, so they need neither the real weights nor a GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct Synthetic {
    pub checkpoint: PathBuf,
    pub onnx: PathBuf,
    /// Its own prompt (`inputs.tensors` of the fixture, or prompts through its tokenizer).
    pub inputs: Inputs,
    pub notes: Option<String>,
}

/// One parsed, validated case. Paths are resolved (relative to the YAML's folder).
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    /// The YAML file.
    pub path: PathBuf,
    /// File stem (`gemma-4-e2b`).
    pub name: String,
    /// Parent folder name (`causal-lm`); goldens live under `goldens/<category>/`.
    pub category: String,
    pub model_id: String,
    pub model_type: String,
    pub revision: Option<String>,
    pub task_type: Option<String>,
    pub dtype: Dtype,
    pub inputs: Inputs,
    /// From `levels:` if present, else from mobius's `level:`.
    pub levels: BTreeSet<Level>,
    pub generation: GenerationSettings,
    pub skip_reason: Option<String>,
    pub ci_skip_reason: Option<String>,
    /// mobius's per-case L5 override (same meaning as `tolerance_overrides.L5`).
    pub min_token_match_ratio: Option<f64>,
    pub notes: Option<String>,
    /// Local HF-format checkpoint folder.
    pub checkpoint: Option<PathBuf>,
    /// Local export package folder.
    pub onnx: Option<PathBuf>,
    /// tokenizer.json (else the checkpoint's is used).
    pub tokenizer: Option<PathBuf>,
    /// Whether prompts go through the tokenizer's chat template: `None` = mobius's convention
    /// (`text-generation` cases are plain completions, every other task uses the template when
    /// the tokenizer has one), `Some(true)` = required, `Some(false)` = never (see
    /// `inputs::prompt`).
    pub chat_template: Option<bool>,
    pub xfail: Option<Xfail>,
    pub tolerance_overrides: ToleranceOverrides,
    /// `None` = the model type's default (what its HF `forward` does).
    pub bidirectional: Option<BidirectionalScope>,
    /// Which rule decides L3 (`l3_rule:`, default calibrated).
    pub l3_rule: L3Rule,
    /// The real model's `config.json` (L2 when the checkpoint itself is absent).
    pub config: Option<PathBuf>,
    /// The hub's parameter count of the real model; L2 fails when the config implies another.
    pub published_parameters: Option<u64>,
    /// The stand-in L1 and L3 run on.
    pub synthetic: Option<Synthetic>,
    /// What the case says its export is (`export:`).
    pub export: Option<ExportPin>,
    /// Other builds of the same model (`variants:`), by name.
    pub variants: BTreeMap<String, Variant>,
    /// The implementations judged against the reference (`implementations:`, default `[onnx]`).
    pub implementations: Vec<ImplementationEntry>,
}

/// Another build of a case's model, with its own expected failures.
#[derive(Debug, Clone, PartialEq)]
pub struct Variant {
    pub onnx: Option<PathBuf>,
    pub export: Option<ExportPin>,
    pub xfail: Option<Xfail>,
    /// Other implementations' expected failures on this build (see [`Case::for_variant`]).
    pub implementations: Vec<ImplementationEntry>,
    pub notes: Option<String>,
}

impl Case {
    /// Every `implementations:` entry the case lists, its own and its variants'.
    pub fn listed_implementations(&self) -> impl Iterator<Item = &ImplementationEntry> {
        self.implementations.iter().chain(self.variants.values().flat_map(|v| &v.implementations))
    }

    /// Reads and validates one case file.
    pub fn load(path: &Path) -> Result<Case, CaseError> {
        let text = std::fs::read_to_string(path).map_err(|source| CaseError::Io { path: path.to_path_buf(), source })?;
        Case::from_yaml_str(&text, path)
    }

    /// Parses case YAML as if it were read from `path` (used for names and relative paths).
    pub fn from_yaml_str(text: &str, path: &Path) -> Result<Case, CaseError> {
        let raw: RawCase = serde_yaml::from_str(text).map_err(|e| CaseError::Parse { path: path.to_path_buf(), message: e.to_string() })?;
        let invalid = |field: &'static str, message: String| CaseError::Invalid { path: path.to_path_buf(), field, message };

        let levels = match (&raw.levels, &raw.level) {
            (Some(list), _) => {
                let set: BTreeSet<Level> = list.iter().copied().collect();
                if set.is_empty() {
                    return Err(invalid("levels", "must list at least one of L1..L5".into()));
                }
                if set.len() != list.len() {
                    return Err(invalid("levels", "lists a level twice".into()));
                }
                set
            }
            (None, Some(expr)) => expr.0.clone(),
            (None, None) => return Err(invalid("levels", "missing: give `levels: [L1, ..]` or mobius's `level: \"L4+L5\"`".into())),
        };
        let overrides = raw.tolerance_overrides.unwrap_or_default();
        let override_ratio = overrides.l5.as_ref().and_then(|l5| l5.min_token_match_ratio);
        if raw.min_token_match_ratio.is_some() && override_ratio.is_some() {
            return Err(invalid("min_token_match_ratio", "given both at top level and in tolerance_overrides.L5; keep one".into()));
        }

        if raw.synthetic.is_some() && !raw.variants.is_empty() {
            return Err(invalid(
                "variants",
                "not supported beside `synthetic:` yet (a variant names its own export; give the stand-in's variants as their own case)"
                    .into(),
            ));
        }
        if let Some(bad) =
            raw.variants.keys().find(|k| k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        {
            return Err(invalid(
                "variants",
                format!("variant name {bad:?}: use letters, digits, `-` and `_` (it becomes part of the trial name)"),
            ));
        }
        let implementations = raw.implementations.unwrap_or_else(default_implementations);
        if implementations.is_empty() {
            return Err(invalid("implementations", "lists none: give at least one (`[onnx]` is the default)".into()));
        }
        if let Some(twice) = implementations.iter().enumerate().find(|(i, e)| implementations[..*i].iter().any(|o| o.name == e.name)) {
            return Err(invalid("implementations", format!("lists {} twice", twice.1.name)));
        }
        let base = path.parent().unwrap_or(Path::new(""));
        let resolve = |p: Option<PathBuf>| p.map(|p| if p.is_absolute() { p } else { normalize(&base.join(p)) });
        let mut inputs = raw.inputs.unwrap_or_default();
        inputs.tensors = resolve(inputs.tensors.take());
        let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let category = path.parent().and_then(|p| p.file_name()).map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();

        Ok(Case {
            path: path.to_path_buf(),
            name,
            category,
            model_id: raw.model_id,
            model_type: raw.model_type,
            revision: raw.revision,
            task_type: raw.task_type,
            dtype: raw.dtype,
            inputs,
            levels,
            generation: raw.generation.unwrap_or_default(),
            skip_reason: raw.skip_reason,
            ci_skip_reason: raw.ci_skip_reason,
            min_token_match_ratio: raw.min_token_match_ratio,
            notes: raw.notes,
            checkpoint: resolve(raw.checkpoint),
            onnx: resolve(raw.onnx),
            tokenizer: resolve(raw.tokenizer),
            chat_template: raw.chat_template,
            xfail: raw.xfail,
            tolerance_overrides: overrides,
            bidirectional: raw.bidirectional,
            l3_rule: raw.l3_rule.unwrap_or(L3Rule::Calibrated),
            config: resolve(raw.config),
            published_parameters: raw.published_parameters,
            export: raw.export,
            variants: raw
                .variants
                .into_iter()
                .map(|(name, v)| {
                    (
                        name,
                        Variant {
                            onnx: resolve(v.onnx),
                            export: v.export,
                            xfail: v.xfail,
                            implementations: v.implementations,
                            notes: v.notes,
                        },
                    )
                })
                .collect(),
            implementations,
            synthetic: raw.synthetic.map(|syn| {
                let mut inputs = syn.inputs.unwrap_or_default();
                inputs.tensors = resolve(inputs.tensors.take());
                Synthetic {
                    checkpoint: resolve(Some(syn.checkpoint)).unwrap_or_default(),
                    onnx: resolve(Some(syn.onnx)).unwrap_or_default(),
                    inputs,
                    notes: syn.notes,
                }
            }),
        })
    }

    /// The case L1 and L3 run on: the synthetic stand-in (its checkpoint, export and inputs, the
    /// rest of this case unchanged) when the case has one, else the case itself.
    pub fn for_synthetic_tiers(&self) -> Cow<'_, Case> {
        match &self.synthetic {
            None => Cow::Borrowed(self),
            Some(s) => Cow::Owned(Case {
                checkpoint: Some(s.checkpoint.clone()),
                onnx: Some(s.onnx.clone()),
                inputs: s.inputs.clone(),
                tokenizer: None,
                synthetic: None,
                ..self.clone()
            }),
        }
    }

    /// The case as its variant `name` runs: that build's export and pin (its dtype from the
    /// pin), its expected failures over the case's (a finding of the model's, such as an
    /// exporter bug every build shares, holds for each build unless the variant says otherwise;
    /// its signature still has to match), the rest — checkpoint, inputs, goldens — the case's own.
    pub fn for_variant(&self, name: &str) -> Option<Case> {
        let v = self.variants.get(name)?;
        Some(Case {
            onnx: v.onnx.clone(),
            dtype: v.export.as_ref().and_then(|p| p.dtype).unwrap_or(self.dtype),
            export: v.export.clone(),
            xfail: merge_xfail(self.xfail.as_ref(), v.xfail.as_ref()),
            implementations: variant_implementations(&self.implementations, &v.implementations),
            variants: BTreeMap::new(),
            ..self.clone()
        })
    }

    /// The case as implementation `name` (not `onnx`) is judged in it (on a variant's case: on that
    /// variant's build, [`Case::for_variant`]): the reference's
    /// checkpoint is also what `name` loads, its expected failures are its entry's (the export's
    /// are about the export), it has no variants; `None` when the case does not list `name`.
    pub fn for_implementation(&self, name: &ImplementationName) -> Option<Case> {
        let entry = self.implementations.iter().find(|e| e.name == *name && !name.is_onnx())?;
        Some(Case { xfail: entry.xfail.clone(), variants: BTreeMap::new(), ..self.clone() })
    }

    /// The case as `candidate` runs it: its variant's build ([`Case::for_variant`]) in its
    /// implementation ([`Case::for_implementation`]); `None` when the case has no such variant or
    /// does not list the implementation.
    pub fn view(&self, candidate: &Candidate) -> Option<Case> {
        let build = match &candidate.variant {
            Some(v) => self.for_variant(v)?,
            None => self.clone(),
        };
        match candidate.implementation.is_onnx() {
            true => Some(build),
            false => build.for_implementation(&candidate.implementation),
        }
    }

    /// Whether the case judges its ONNX export (`onnx` is in `implementations:`).
    pub fn judges_onnx(&self) -> bool {
        self.implementations.iter().any(|e| e.name.is_onnx())
    }

    /// The `xfail` reason that applies to `level`, if any (on every EP it holds on).
    pub fn xfail_for(&self, level: Level) -> Option<&Expectation> {
        match &self.xfail {
            None => None,
            Some(Xfail::All(e)) => Some(e),
            Some(Xfail::PerLevel(map)) => map.get(&level),
        }
    }

    /// The `xfail` entry of `level` that holds for a trial on `ep` (an entry with `on:` holds
    /// only on the EPs it names).
    pub fn xfail_on(&self, level: Level, ep: crate::eps::RunEp) -> Option<&Expectation> {
        self.xfail_for(level).filter(|e| e.holds_on(ep))
    }

    /// The thresholds that apply to this case: its dtype's rows of `tol`, its
    /// `tolerance_overrides` (and mobius's top-level `min_token_match_ratio`) applied.
    pub fn thresholds(&self, tol: &Tolerances) -> Result<Thresholds, ToleranceError> {
        let mut overrides = self.tolerance_overrides.clone();
        // Case::load rejects giving both spellings of the L5 override.
        if let Some(ratio) = self.min_token_match_ratio {
            overrides.l5 = Some(L5Values { min_token_match_ratio: Some(ratio) });
        }
        resolve(tol, self.dtype, &overrides)
    }
}

/// Removes `.` and `name/..` pairs lexically, so messages show `fixtures/x` rather than
/// `cases/cat/../../fixtures/x` (no filesystem access: the path may not exist yet).
fn normalize(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out: Vec<Component<'_>> = Vec::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir if matches!(out.last(), Some(Component::Normal(_))) => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    if out.is_empty() {
        PathBuf::from(".")
    } else {
        out.iter().collect()
    }
}

/// A variant's `xfail` over its case's: the variant's entry for a level wins; a level it does not
/// name keeps the case's.
fn merge_xfail(case: Option<&Xfail>, variant: Option<&Xfail>) -> Option<Xfail> {
    let levels = |x: &Xfail| -> BTreeMap<Level, Expectation> {
        match x {
            Xfail::All(e) => Level::ALL.iter().map(|l| (*l, e.clone())).collect(),
            Xfail::PerLevel(m) => m.clone(),
        }
    };
    match (case, variant) {
        (None, v) => v.cloned(),
        (c, None) => c.cloned(),
        (_, Some(v @ Xfail::All(_))) => Some(v.clone()),
        (Some(c), Some(v)) => {
            let mut merged = levels(c);
            merged.extend(levels(v));
            Some(Xfail::PerLevel(merged))
        }
    }
}

/// The names of a candidate's trials (beside [`Case`], whose category and name they start with).
impl Candidate {
    /// `<category>/<name>`, with `@<variant>` for a variant, ` [<implementation>]` for an
    /// implementation other than the pipeline and ` on <ep>` for an EP other than the CPU: the
    /// case part of its trial names.
    pub fn id(&self, case: &Case) -> String {
        self.name_with(case, None)
    }

    /// The trial name of tier `level`: `<category>/<case>[@<variant>]::L<n>`, with
    /// ` [<implementation>]` after it for an implementation other than the pipeline
    /// (`causal-lm/gemma4-text-dense::L3 [candle-transformers]`) and ` on <ep>` for an EP other
    /// than the CPU (`vision-language/unified-vision@cuda-f16::L3 on cuda:0`): a CPU trial keeps
    /// the name it has in a CPU-only run.
    pub fn trial_name(&self, case: &Case, level: Level) -> String {
        self.name_with(case, Some(level))
    }

    fn name_with(&self, case: &Case, level: Option<Level>) -> String {
        let mut name = format!("{}/{}", case.category, case.name);
        if let Some(v) = &self.variant {
            name.push_str(&format!("@{v}"));
        }
        if let Some(l) = level {
            name.push_str(&format!("::{l}"));
        }
        if !self.implementation.is_onnx() {
            name.push_str(&format!(" [{}]", self.implementation));
        }
        name.push_str(&self.ep.trial_suffix());
        name
    }
}

/// A variant's implementations: the case's, each other runtime's expected failures the
/// variant's own entry's (the case's are about the case's build), and those only the variant lists.
fn variant_implementations(case: &[ImplementationEntry], variant: &[ImplementationEntry]) -> Vec<ImplementationEntry> {
    let own = |name: &ImplementationName| variant.iter().find(|e| e.name == *name);
    let mut out: Vec<ImplementationEntry> = case
        .iter()
        .map(|e| match (e.name.is_onnx(), own(&e.name)) {
            (true, _) => e.clone(),
            (false, Some(v)) => v.clone(),
            (false, None) => ImplementationEntry { xfail: None, ..e.clone() },
        })
        .collect();
    out.extend(variant.iter().filter(|v| !case.iter().any(|e| e.name == v.name)).cloned());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tolerance::{L3Tolerance, L3Values, L4Tolerance};

    fn parse(yaml: &str) -> Result<Case, CaseError> {
        Case::from_yaml_str(yaml, Path::new("/cases/causal-lm/demo.yaml"))
    }

    const MINIMAL: &str = "model_id: m\nmodel_type: gemma4_text\ndtype: float32\nlevel: \"L4+L5\"\n";

    /// Guards: our additions parse, and relative paths resolve against the YAML's folder while
    /// absolute ones stay.
    #[test]
    fn additions_parse_and_paths_resolve() {
        let yaml = r#"
model_id: tiny/gemma4
model_type: gemma4_unified
dtype: float16
levels: [L1, L3, L5]
checkpoint: ../../fixtures/tiny/checkpoint
onnx: /abs/onnx
tokenizer: tok/tokenizer.json
inputs:
  input_ids: [2, 105, 106]
  tensors: inputs.safetensors
generation:
  max_new_tokens: 8
  eos_token_id: [1, 106]
xfail: "exporter drops the bidirectional block (measured: L3 max_abs_diff 0.8)"
tolerance_overrides:
  # measured: f16 decode drifts by 0.15 on step 3
  L3: {atol: 0.2}
  L4: {near_tie_margin: 0.2}
bidirectional: sliding-windowed
"#;
        let c = parse(yaml).unwrap();
        assert_eq!(c.levels, BTreeSet::from([Level::L1, Level::L3, Level::L5]));
        assert_eq!(c.dtype, Dtype::Float16);
        // `..` is resolved lexically so messages show short paths.
        assert_eq!(c.checkpoint, Some(PathBuf::from("/fixtures/tiny/checkpoint")));
        assert_eq!(c.onnx, Some(PathBuf::from("/abs/onnx")));
        assert_eq!(c.tokenizer, Some(PathBuf::from("/cases/causal-lm/tok/tokenizer.json")));
        assert_eq!(c.inputs.tensors, Some(PathBuf::from("/cases/causal-lm/inputs.safetensors")));
        assert_eq!(c.inputs.input_ids, Some(vec![2, 105, 106]));
        assert_eq!(c.generation.eos_token_id, Some(vec![1, 106]));
        assert_eq!(c.bidirectional, Some(BidirectionalScope::SlidingWindowed));
        assert_eq!(c.tolerance_overrides.l3, Some(L3Values { atol: Some(0.2), rtol: None }));
        assert_eq!(c.xfail_for(Level::L3), c.xfail_for(Level::L5));
        assert!(c.xfail_for(Level::L1).unwrap().reason.starts_with("exporter"));
        assert_eq!((c.name.as_str(), c.category.as_str()), ("demo", "causal-lm"));
    }

    /// Guards: `levels:` wins over `level:`; `level:` alone is parsed; neither is an error.
    #[test]
    fn levels_source() {
        let c = parse(&format!("{MINIMAL}levels: [L3]\n")).unwrap();
        assert_eq!(c.levels, BTreeSet::from([Level::L3]));
        let c = parse(MINIMAL).unwrap();
        assert_eq!(c.levels, BTreeSet::from([Level::L4, Level::L5]));
        let e = parse("model_id: m\nmodel_type: t\ndtype: float32\n").unwrap_err();
        assert!(matches!(e, CaseError::Invalid { field: "levels", .. }), "{e}");
        assert!(parse(&format!("{MINIMAL}levels: []\n")).is_err());
        assert!(parse(&format!("{MINIMAL}levels: [L3, L3]\n")).is_err());
    }

    /// Guards: per-level xfail applies only to the levels it names.
    #[test]
    fn xfail_per_level() {
        let c = parse(&format!("{MINIMAL}xfail:\n  L5: drifts after 12 tokens\n")).unwrap();
        assert_eq!(c.xfail_for(Level::L5).map(|e| e.reason.as_str()), Some("drifts after 12 tokens"));
        assert_eq!(c.xfail_for(Level::L4), None);
        assert!(parse(&format!("{MINIMAL}xfail:\n  L9: x\n")).is_err());
    }

    /// Guards the variant's xfail over the case's: its own levels win, the others are inherited,
    /// a string xfail replaces them all; the variant's dtype comes from its pin.
    #[test]
    fn variant_xfail_over_the_case() {
        let yaml = format!(
            "{MINIMAL}onnx: e\nxfail:\n  L3: case-wide bug\n  L5: case-wide drift\nvariants:\n  f16:\n    onnx: v\n    export: {{dtype: float16}}\n    \
             xfail:\n      L5: its own drift\n  all:\n    onnx: w\n    xfail: broken\n  plain:\n    onnx: x\n"
        );
        let c = parse(&yaml).unwrap();
        let f16 = c.for_variant("f16").unwrap();
        assert_eq!(f16.xfail_for(Level::L3).map(|e| e.reason.as_str()), Some("case-wide bug"));
        assert_eq!(f16.xfail_for(Level::L5).map(|e| e.reason.as_str()), Some("its own drift"));
        assert_eq!((f16.dtype, Candidate::variant("f16").id(&f16)), (Dtype::Float16, "causal-lm/demo@f16".to_string()));
        assert_eq!(c.view(&Candidate::variant("f16")), Some(f16));
        let all = c.for_variant("all").unwrap();
        assert_eq!(all.xfail_for(Level::L3).map(|e| e.reason.as_str()), Some("broken"));
        let plain = c.for_variant("plain").unwrap();
        assert_eq!(plain.xfail_for(Level::L3), c.xfail_for(Level::L3));
        assert_eq!(plain.xfail_for(Level::L4), None);
        assert!(c.for_variant("missing").is_none());
    }

    /// Guards: an unknown key is an error naming the file and the key (top level and nested).
    #[test]
    fn unknown_key_is_named() {
        let e = parse(&format!("{MINIMAL}tolerence_overrides: {{}}\n")).unwrap_err().to_string();
        assert!(e.contains("/cases/causal-lm/demo.yaml") && e.contains("tolerence_overrides"), "{e}");
        assert!(e.contains("tolerance_overrides"), "should list the expected keys: {e}");
        let e = parse(&format!("{MINIMAL}inputs:\n  prompt: [hi]\n")).unwrap_err().to_string();
        assert!(e.contains("demo.yaml") && e.contains("`prompt`") && e.contains("prompts"), "{e}");
        let e = parse(&format!("{MINIMAL}tolerance_overrides:\n  L3: {{atol: 1, margin: 2}}\n")).unwrap_err().to_string();
        assert!(e.contains("margin"), "{e}");
        let e = parse(&format!("{MINIMAL}tolerance_overrides:\n  float32: {{atol: 1}}\n")).unwrap_err().to_string();
        assert!(e.contains("float32"), "dtype level is not part of overrides: {e}");
    }

    /// Guards: wrong types are errors naming the key and the expected type.
    #[test]
    fn wrong_type_is_named() {
        let e =
            parse("model_id: m\nmodel_type: t\ndtype: float32\nlevel: L4\ngeneration:\n  max_new_tokens: many\n").unwrap_err().to_string();
        assert!(e.contains("demo.yaml") && e.contains("max_new_tokens"), "{e}");
        let e = parse(&format!("{MINIMAL}inputs:\n  input_ids: [1, two]\n")).unwrap_err().to_string();
        assert!(e.contains("input_ids"), "{e}");
        let e = parse(&format!("{MINIMAL}generation:\n  eos_token_id: one\n")).unwrap_err().to_string();
        assert!(e.contains("eos_token_id") && e.contains("token id"), "{e}");
        let e = parse("model_type: t\ndtype: float32\nlevel: L4\n").unwrap_err().to_string();
        assert!(e.contains("model_id"), "missing required key must be named: {e}");
    }

    /// Guards: bad values (dtype, level strings, bidirectional, ratios) are rejected with the
    /// allowed values in the message.
    #[test]
    fn bad_values_are_rejected() {
        let e = parse("model_id: m\nmodel_type: t\ndtype: float64\nlevel: L4\n").unwrap_err().to_string();
        assert!(e.contains("dtype") && e.contains("float64") && e.contains("bfloat16"), "{e}");
        for bad in ["L6", "L4+L4", "L4,L5", "l4", "L4+"] {
            let e = parse(&format!("model_id: m\nmodel_type: t\ndtype: int4\nlevel: \"{bad}\"\n")).unwrap_err().to_string();
            assert!(e.contains("level"), "{bad}: {e}");
        }
        let e = parse(&format!("{MINIMAL}bidirectional: both\n")).unwrap_err().to_string();
        assert!(e.contains("bidirectional") && e.contains("sliding-windowed"), "{e}");
        let e = parse(&format!("{MINIMAL}min_token_match_ratio: 1.5\n")).unwrap_err().to_string();
        assert!(e.contains("min_token_match_ratio") && e.contains("[0, 1]"), "{e}");
        let e = parse(&format!("{MINIMAL}tolerance_overrides:\n  L3: {{atol: -1}}\n")).unwrap_err().to_string();
        assert!(e.contains("atol"), "{e}");
        let e = parse(&format!("{MINIMAL}min_token_match_ratio: 0.9\ntolerance_overrides:\n  L5: {{min_token_match_ratio: 0.8}}\n"))
            .unwrap_err();
        assert!(matches!(e, CaseError::Invalid { field: "min_token_match_ratio", .. }), "{e}");
    }

    // ----- the thresholds that apply to a case -----

    /// The thresholds of `c` under `t`.
    fn resolve(t: &Tolerances, c: &Case) -> Result<Thresholds, ToleranceError> {
        c.thresholds(t)
    }

    fn case(extra: &str, dtype: &str) -> Case {
        let yaml = format!("model_id: m\nmodel_type: t\ndtype: {dtype}\nlevel: L3+L4+L5\n{extra}");
        Case::from_yaml_str(&yaml, Path::new("/c/cat/x.yaml")).unwrap()
    }

    /// Guards: the case dtype picks the row.
    #[test]
    fn dtype_selects_row() {
        let t = Tolerances::defaults();
        let th = resolve(&t, &case("", "bfloat16")).unwrap();
        assert_eq!(th.l3, Some(L3Tolerance { atol: 0.5, rtol: 0.5 }));
        assert_eq!(th.l4.near_tie_margin, 0.5);
        assert_eq!(th.l5.min_token_match_ratio, 0.8);
        assert!(th.overridden.is_empty());
    }

    /// Guards: overrides replace only the numbers they name; the rest come from the row.
    #[test]
    fn overrides_apply_per_key() {
        let t = Tolerances::defaults();
        let c = case(
            "tolerance_overrides:\n  L3: {atol: 0.02}\n  L4: {top10_jaccard_warn: 0.2}\n  L5: {min_token_match_ratio: 0.5}\n",
            "float32",
        );
        let th = resolve(&t, &c).unwrap();
        assert_eq!(th.l3, Some(L3Tolerance { atol: 0.02, rtol: 1e-3 }));
        assert_eq!(th.l4, L4Tolerance { near_tie_margin: 0.01, top10_jaccard_warn: 0.2, cosine_similarity_warn: 0.999 });
        assert_eq!(th.l5.min_token_match_ratio, 0.5);
        assert_eq!(th.overridden, vec!["L3.atol", "L4.top10_jaccard_warn", "L5.min_token_match_ratio"]);
    }

    /// Guards: mobius's top-level `min_token_match_ratio` overrides the L5 row.
    #[test]
    fn top_level_ratio_overrides_l5() {
        let th = resolve(&Tolerances::defaults(), &case("min_token_match_ratio: 0.85\n", "float32")).unwrap();
        assert_eq!(th.l5.min_token_match_ratio, 0.85);
    }

    /// Guards: a quantized dtype is judged at L3 in its activations' precision (float32: against
    /// the reference on its own dequantized weights), by that precision's rows; L4/L5 keep the
    /// int4 rows (mobius's); a case may still override L3.
    #[test]
    fn int4_is_judged_at_its_activations_precision() {
        let t = Tolerances::defaults();
        let th = resolve(&t, &case("", "int4")).unwrap();
        assert_eq!(th.l3, Some(L3Tolerance { atol: 1e-3, rtol: 1e-3 }));
        assert_eq!(th.l3_calibrated.map(|r| r.k), Some(4.0));
        assert_eq!(th.l4.near_tie_margin, 1.0);
        assert_eq!(th.l5.min_token_match_ratio, 0.7);
        let th = resolve(&t, &case("tolerance_overrides:\n  L3: {atol: 1.0, rtol: 0.5}\n", "int4")).unwrap();
        assert_eq!(th.require_l3().unwrap(), L3Tolerance { atol: 1.0, rtol: 0.5 });
    }

    /// Guards: a tolerance file missing an L4/L5 row for the case's dtype is an error naming it.
    #[test]
    fn missing_rows_are_errors() {
        let t = Tolerances::from_yaml_str(
            "L4:\n  float32: {near_tie_margin: 0.01, top10_jaccard_warn: 0.7, cosine_similarity_warn: 0.999}\n",
            Path::new("t.yaml"),
        )
        .unwrap();
        let e = resolve(&t, &case("", "float32")).unwrap_err().to_string();
        assert!(e.contains("L5") && e.contains("float32"), "{e}");
        let e = resolve(&t, &case("", "float16")).unwrap_err().to_string();
        assert!(e.contains("L4") && e.contains("float16"), "{e}");
    }
}
