//! Chat templates: the tokenizer's Jinja `chat_template` rendered as HF transformers 5.14.1
//! renders it (`utils/chat_template_utils.py`: `_compile_jinja_template`, `render_jinja_template`;
//! `processing_utils.py`: `ProcessorMixin.apply_chat_template`), so `-it` checkpoints get the
//! turn markers their goldens were made with.
//!
//! HF's environment, mirrored here with minijinja: `trim_blocks` and `lstrip_blocks` on, the
//! trailing newline of the template dropped, `loopcontrols` (`break`/`continue`), the globals
//! `raise_exception(msg)` and `strftime_now(fmt)` (refused here: a prompt that depends on the
//! day cannot reproduce a golden), a `tojson` that is Python's `json.dumps` (not Jinja's HTML-safe
//! one), Python's string/dict/list methods (`.strip()`, `.items()`, …; minijinja-contrib's
//! pycompat), and the context `messages`, `add_generation_prompt`, `tools` / `documents` (none)
//! and every named special token of `tokenizer_config.json` (`bos_token`, `eos_token`, …,
//! `image_token`, `boi_token`, …: HF's `special_tokens_map` with the model-specific ones; the
//! processor passes the map its token lookup reads, `tokens::named_tokens`).
//!
//! Where the template comes from, in HF's order: `chat_template.jinja` (which "takes priority
//! over template entries in the tokenizer config"), the legacy processor file
//! `chat_template.json`, then `tokenizer_config.json`'s `chat_template` (a string, or a list of
//! named templates of which `default` is used).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Environment, Error, ErrorKind, Value};
use serde_json::Value as Json;

use crate::inputs::error::InputsError;

/// A checkpoint's chat template and where it was read from.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatTemplate {
    /// The file it came from (for errors and the `inputs` summary).
    pub source: PathBuf,
    text: String,
}

/// One piece of a user turn, in HF's content layout.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    /// `{"type": "image"}`: the template emits the image placeholder here.
    Image,
    /// `{"type": "text", "text": …}`.
    Text(String),
}

impl ChatTemplate {
    /// Looks for a template in `dirs` (first the tokenizer's own folder, then the checkpoint),
    /// then in the already-read `tokenizer_config.json`.
    pub fn find(dirs: &[&Path], tok_config: &Json, tok_config_path: &Path) -> Result<Option<Self>, InputsError> {
        let read = |path: &Path| std::fs::read_to_string(path).map_err(|source| InputsError::Read { path: path.into(), source });
        let config_err = |path: &Path, message: String| InputsError::Config { path: path.into(), message };
        for dir in dirs {
            let jinja = dir.join("chat_template.jinja");
            if jinja.is_file() {
                return Ok(Some(ChatTemplate { text: read(&jinja)?, source: jinja }));
            }
            let legacy = dir.join("chat_template.json");
            if legacy.is_file() {
                let json: Json = serde_json::from_str(&read(&legacy)?).map_err(|e| config_err(&legacy, format!("not valid JSON: {e}")))?;
                return match json.get("chat_template") {
                    Some(Json::String(text)) => Ok(Some(ChatTemplate { text: text.clone(), source: legacy })),
                    _ => Err(config_err(&legacy, "expected {\"chat_template\": \"<jinja text>\"}".into())),
                };
            }
        }
        match tok_config.get("chat_template") {
            None | Some(Json::Null) => Ok(None),
            Some(Json::String(text)) => Ok(Some(ChatTemplate { text: text.clone(), source: tok_config_path.into() })),
            Some(Json::Array(named)) => {
                let default = named.iter().find(|t| t.get("name").and_then(Json::as_str) == Some("default"));
                match default.and_then(|t| t.get("template")).and_then(Json::as_str) {
                    Some(text) => Ok(Some(ChatTemplate { text: text.into(), source: tok_config_path.into() })),
                    None => Err(config_err(
                        tok_config_path,
                        "chat_template is a list of named templates but none is named \"default\" with a \"template\" string".into(),
                    )),
                }
            }
            Some(other) => Err(config_err(
                tok_config_path,
                format!("chat_template must be a string or a list of {{name, template}}, found {}", kind(other)),
            )),
        }
    }

    /// A template given as text (tests, and callers that hold one already).
    pub fn from_text(text: impl Into<String>, source: impl Into<PathBuf>) -> Self {
        ChatTemplate { text: text.into(), source: source.into() }
    }

    /// Renders one user turn (`[{"role": "user", "content": [...]}]`) with
    /// `add_generation_prompt=True`, as mobius renders its vision-language prompts.
    pub fn render_user_turn(&self, content: &[Content], special_tokens: &BTreeMap<String, String>) -> Result<String, InputsError> {
        // Maps keep insertion order (minijinja's preserve_order), as Python dicts do: a template
        // that iterates or `tojson`s a message sees HF's key order.
        let items: Vec<Value> = content
            .iter()
            .map(|c| match c {
                Content::Image => Value::from_pairs([("type", "image")]),
                Content::Text(t) => Value::from_pairs([("type", Value::from("text")), ("text", Value::from(t.as_str()))]),
            })
            .collect();
        let messages = Value::from(vec![Value::from_pairs([("role", Value::from("user")), ("content", Value::from(items))])]);
        self.render(messages, true, special_tokens)
    }

    /// Renders `messages` (HF's message list) with HF's context.
    pub fn render(
        &self,
        messages: Value,
        add_generation_prompt: bool,
        special_tokens: &BTreeMap<String, String>,
    ) -> Result<String, InputsError> {
        let err = |e: Error| InputsError::Config { path: self.source.clone(), message: format!("chat template: {}", describe(&e)) };
        let env = environment();
        let text = without_generation_tags(&self.text);
        let template = env.template_from_str(&text).map_err(err)?;
        let mut ctx: BTreeMap<String, Value> = special_tokens.iter().map(|(k, v)| (k.clone(), Value::from(v.as_str()))).collect();
        ctx.insert("messages".into(), messages);
        ctx.insert("add_generation_prompt".into(), Value::from(add_generation_prompt));
        ctx.insert("tools".into(), Value::from(()));
        ctx.insert("documents".into(), Value::from(()));
        template.render(ctx).map_err(err)
    }
}

/// HF's `{% generation %}…{% endgeneration %}` block (its `AssistantTracker` extension, which
/// only records where assistant text lies and renders the body unchanged) as the equivalent
/// `{% if true %}…{% endif %}`, whitespace-control marks kept, so minijinja (which has no such
/// tag) renders it identically.
fn without_generation_tags(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains("generation") {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{%") {
        out.push_str(&rest[..start]);
        let tag = &rest[start..];
        // The tag's end, searched after its "{%" ("{%}" is no tag: minijinja reports it).
        let Some(end) = tag[2..].find("%}").map(|i| i + 2) else {
            out.push_str(tag);
            return std::borrow::Cow::Owned(out);
        };
        let inner = &tag[2..end];
        let (open, body) = match inner.strip_prefix(['-', '+']) {
            Some(b) => (&inner[..1], b),
            None => ("", inner),
        };
        let (body, close) = match body.strip_suffix(['-', '+']) {
            Some(b) => (b, &body[b.len()..]),
            None => (body, ""),
        };
        match body.trim() {
            "generation" => out.push_str(&format!("{{%{open} if true {close}%}}")),
            "endgeneration" => out.push_str(&format!("{{%{open} endif {close}%}}")),
            _ => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    std::borrow::Cow::Owned(out)
}

/// The Jinja environment of HF's `_compile_jinja_template`.
fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .keep_trailing_newline(false)
        .build()
        .expect("the default delimiters are a valid syntax");
    env.set_syntax(syntax);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", |message: String| -> Result<Value, Error> {
        Err(Error::new(ErrorKind::InvalidOperation, format!("raise_exception: {message}")))
    });
    env.add_function("strftime_now", |_format: String| -> Result<Value, Error> {
        Err(Error::new(
            ErrorKind::InvalidOperation,
            "strftime_now: the template puts today's date into the prompt, so its ids change from day to day and cannot reproduce a golden",
        ))
    });
    env.add_filter("tojson", tojson);
    env
}

/// HF's `tojson`: `json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`.
fn tojson(value: &Value, kwargs: Kwargs) -> Result<String, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    kwargs.assert_all_used()?;
    let (item, key) = match separators.as_deref() {
        Some([item, key]) => (item.clone(), key.clone()),
        Some(other) => {
            return Err(Error::new(ErrorKind::InvalidOperation, format!("tojson: separators must be two strings, got {}", other.len())))
        }
        // Python's defaults: ", " without indent, "," with one.
        None if indent.is_some() => (",".into(), ": ".into()),
        None => (", ".into(), ": ".into()),
    };
    let mut out = String::new();
    let style = PyJson { indent, item, key, sort_keys: sort_keys.unwrap_or(false), ensure_ascii: ensure_ascii.unwrap_or(false) };
    python_dumps(value, &style, 0, &mut out)?;
    Ok(out)
}

struct PyJson {
    indent: Option<usize>,
    item: String,
    key: String,
    sort_keys: bool,
    ensure_ascii: bool,
}

/// Python's `json.dumps` layout (separators, indentation, `ensure_ascii` escapes) of a template
/// value, maps in their insertion order.
fn python_dumps(v: &Value, o: &PyJson, depth: usize, out: &mut String) -> Result<(), Error> {
    let newline = |out: &mut String, depth: usize| {
        if let Some(n) = o.indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * depth));
        }
    };
    let unsupported = |what: &str| Error::new(ErrorKind::InvalidOperation, format!("tojson: {what} is not JSON serializable"));
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number if v.is_integer() => out.push_str(&v.to_string()),
        ValueKind::Number => {
            let x = f64::try_from(v.clone()).map_err(|_| unsupported("a number"))?;
            out.push_str(&python_float(x));
        }
        ValueKind::String => crate::python_json::write_string(v.as_str().unwrap_or_default(), o.ensure_ascii, out),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&o.item);
                }
                newline(out, depth + 1);
                python_dumps(item, o, depth + 1, out)?;
            }
            newline(out, depth);
            out.push(']');
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = v.try_iter()?.collect();
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            if o.sort_keys {
                keys.sort();
            }
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(&o.item);
                }
                newline(out, depth + 1);
                match k.as_str() {
                    Some(s) => crate::python_json::write_string(s, o.ensure_ascii, out),
                    // Python writes int/float/bool/None keys as strings.
                    None => crate::python_json::write_string(&k.to_string(), o.ensure_ascii, out),
                }
                out.push_str(&o.key);
                python_dumps(&v.get_item(k)?, o, depth + 1, out)?;
            }
            newline(out, depth);
            out.push('}');
        }
        ValueKind::Bytes => return Err(unsupported("bytes")),
        _ => return Err(unsupported(&format!("a {}", v.kind()))),
    }
    Ok(())
}

/// A float as Python's `json.dumps` writes it (`float.__repr__`): the shortest round-trip digits,
/// positional with ".0" for exponents −4 ≤ e < 16, else `1.5e+16` / `1e-05`; `NaN`, `Infinity`.
fn python_float(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity".into() } else { "-Infinity".into() };
    }
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if x == 0.0 || (-4..16).contains(&exp) {
        let positional = format!("{x}");
        if positional.contains('.') {
            positional
        } else {
            positional + ".0"
        }
    } else {
        format!("{mantissa}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
    }
}

/// minijinja's error with its template line, and the causes it chains.
fn describe(e: &Error) -> String {
    let mut text = match e.line() {
        Some(line) => format!("{} (template line {line})", e),
        None => e.to_string(),
    };
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

fn kind(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gemma 3's chat template (the shape of `-it` Gemma templates), with `<|image|>` items.
    const GEMMA: &str = "{{ bos_token }}\n{%- for message in messages -%}\n    {%- if (message['role'] == 'assistant') -%}\n        {%- set role = \"model\" -%}\n    {%- else -%}\n        {%- set role = message['role'] -%}\n    {%- endif -%}\n    {{ '<start_of_turn>' + role + '\n' }}\n    {%- if message['content'] is string -%}\n        {{ message['content'] | trim }}\n    {%- elif message['content'] is iterable -%}\n        {%- for item in message['content'] -%}\n            {%- if item['type'] == 'image' -%}\n                {{ '<|image|>' }}\n            {%- elif item['type'] == 'text' -%}\n                {{ item['text'] | trim }}\n            {%- endif -%}\n        {%- endfor -%}\n    {%- else -%}\n        {{ raise_exception(\"Invalid content type\") }}\n    {%- endif -%}\n    {{ '<end_of_turn>\n' }}\n{%- endfor -%}\n{%- if add_generation_prompt -%}\n    {{'<start_of_turn>model\n'}}\n{%- endif -%}\n";

    fn t_err(text: &str) -> String {
        ChatTemplate::from_text(text, "t").render(Value::from(Vec::<Value>::new()), false, &tokens()).unwrap_err().to_string()
    }

    fn tokens() -> BTreeMap<String, String> {
        [("bos_token", "<bos>"), ("eos_token", "<eos>")].into_iter().map(|(k, v)| (k.into(), v.into())).collect()
    }

    /// Guards: a user turn renders as transformers renders it (string checked against
    /// jinja2 3.1 with HF's settings): images first, text trimmed, generation prompt.
    #[test]
    fn renders_a_user_turn_like_hf() {
        let t = ChatTemplate::from_text(GEMMA, "t.jinja");
        let got = t.render_user_turn(&[Content::Image, Content::Text(" Describe this image in detail. ".into())], &tokens()).unwrap();
        assert_eq!(got, "<bos><start_of_turn>user\n<|image|>Describe this image in detail.<end_of_turn>\n<start_of_turn>model\n");
    }

    /// Guards: trim_blocks/lstrip_blocks (a block tag's own line leaves no whitespace), Python
    /// string methods, loop controls and HF's tojson layout.
    #[test]
    fn hf_environment_features() {
        let t = ChatTemplate::from_text(
            "{% for m in messages %}\n  {% if loop.index0 > 0 %}{% break %}{% endif %}\n{{ m['content'].strip().upper() }}|{{ m | tojson }}\n{% endfor %}\n",
            "t",
        );
        let turn = |c: &str| Value::from_pairs([("role", Value::from("user")), ("content", Value::from(c))]);
        let messages = Value::from(vec![turn("  hé \"x\" "), turn("no")]);
        let got = t.render(messages, false, &tokens()).unwrap();
        assert_eq!(got, "HÉ \"X\"|{\"role\": \"user\", \"content\": \"  hé \\\"x\\\" \"}\n");
        let indented = ChatTemplate::from_text(
            "{{ {'a': [1, 2], 'b': {}} | tojson(indent=2, ensure_ascii=True) }}{{ 'é' | tojson(ensure_ascii=True) }}",
            "t",
        )
        .render(Value::from(Vec::<Value>::new()), false, &tokens())
        .unwrap();
        assert_eq!(indented, "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {}\n}\"\\u00e9\"");
    }

    /// Guards: floats as Python's `repr` writes them (values checked with CPython 3.11).
    #[test]
    fn floats_like_python() {
        for (x, py) in [
            (0.1, "0.1"),
            (123.0, "123.0"),
            (-0.0, "-0.0"),
            (1e-5, "1e-05"),
            (1.5e16, "1.5e+16"),
            (1e15, "1000000000000000.0"),
            (2.5e-4, "0.00025"),
            (1e300, "1e+300"),
            (f64::NAN, "NaN"),
        ] {
            assert_eq!(python_float(x), py, "{x}");
        }
    }

    /// Guards: HF's `{% generation %}` blocks render their body, whitespace control kept
    /// (expected strings from transformers 5.14.1's environment).
    #[test]
    fn generation_blocks_render_their_body() {
        let t = ChatTemplate::from_text("a {%- generation -%}  b  {%- endgeneration %} c{% generation %}d{% endgeneration %}", "t");
        assert_eq!(t.render(Value::from(Vec::<Value>::new()), false, &tokens()).unwrap(), "ab cd");
        assert_eq!(without_generation_tags("{{ 'generation' }}{% if x %}"), "{{ 'generation' }}{% if x %}");
        // Found by tests/fuzz.rs: "{%}" (the "%}" overlapping the "{%") is no tag, not a panic.
        assert_eq!(without_generation_tags("generation {%}"), "generation {%}");
        assert!(t_err("{%} generation").contains("t"));
    }

    /// Guards: raise_exception and strftime_now are errors naming the template file and the
    /// message, never a silently different prompt.
    #[test]
    fn template_errors_name_the_file() {
        let t = ChatTemplate::from_text("{{ raise_exception('roles must alternate') }}", "dir/chat_template.jinja");
        let e = t.render_user_turn(&[], &tokens()).unwrap_err().to_string();
        assert!(e.contains("dir/chat_template.jinja") && e.contains("roles must alternate"), "{e}");
        let t = ChatTemplate::from_text("{{ strftime_now('%d %b %Y') }}", "t");
        assert!(t.render_user_turn(&[], &tokens()).unwrap_err().to_string().contains("date"));
        let t = ChatTemplate::from_text("{% if %}", "bad.jinja");
        let e = t.render_user_turn(&[], &tokens()).unwrap_err().to_string();
        assert!(e.contains("bad.jinja") && e.contains("syntax"), "{e}");
    }

    /// Guards: HF's lookup order and the shapes `chat_template` may take.
    #[test]
    fn finds_templates_in_hf_order() {
        let dir = tempfile::tempdir().unwrap();
        let cfg_path = dir.path().join("tokenizer_config.json");
        let cfg = serde_json::json!({"chat_template": "from config"});
        let found = ChatTemplate::find(&[dir.path()], &cfg, &cfg_path).unwrap().unwrap();
        assert_eq!((found.text.as_str(), found.source.as_path()), ("from config", cfg_path.as_path()));
        let named = serde_json::json!({"chat_template": [{"name": "tool_use", "template": "t"}, {"name": "default", "template": "d"}]});
        assert_eq!(ChatTemplate::find(&[dir.path()], &named, &cfg_path).unwrap().unwrap().text, "d");
        let no_default = serde_json::json!({"chat_template": [{"name": "tool_use", "template": "t"}]});
        assert!(ChatTemplate::find(&[dir.path()], &no_default, &cfg_path).unwrap_err().to_string().contains("default"));
        assert!(ChatTemplate::find(&[dir.path()], &serde_json::json!({"chat_template": 3}), &cfg_path).is_err());
        assert_eq!(ChatTemplate::find(&[dir.path()], &serde_json::json!({}), &cfg_path).unwrap(), None);
        std::fs::write(dir.path().join("chat_template.json"), r#"{"chat_template": "legacy"}"#).unwrap();
        assert_eq!(ChatTemplate::find(&[dir.path()], &cfg, &cfg_path).unwrap().unwrap().text, "legacy");
        std::fs::write(dir.path().join("chat_template.jinja"), "jinja file").unwrap();
        assert_eq!(ChatTemplate::find(&[dir.path()], &cfg, &cfg_path).unwrap().unwrap().text, "jinja file");
    }
}
