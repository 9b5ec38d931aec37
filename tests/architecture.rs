//! The shape of the code, held by a test so that it stays: in the harness library (`src/`) and the
//! reference (`reference/src/`) the module import graph has no cycle, neither between files nor
//! between the crate's top-level modules (no folder imports one that imports it back), no library
//! file is longer than 700 lines, no library type is a `Result<_, String>` (errors are typed), and
//! no library file but `context.rs` reads the environment and none sets it (the drivers do).
//!
//! The graph is read from the source with `syn`: every `use` tree, path and path-like token inside
//! a macro call that starts with `crate::`, `super::`, `self::` or the name of a child module is an
//! edge from the file it is written in to the file that *defines* the item, following `pub use`
//! re-exports to their source (so a facade `mod.rs` that re-exports its children, and children
//! that name siblings through it, are told apart). `mod x;` declarations are not edges. Binaries
//! (`src/bin/`, a `main.rs`) are not library code.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

const MAX_LINES: usize = 700;

/// A module's path from the crate root (`["onnx", "pipeline"]`).
type ModPath = Vec<String>;

/// One source file of a crate.
struct SourceFile {
    path: PathBuf,
    module: ModPath,
    ast: syn::File,
    lines: usize,
}

/// What a crate's modules define and re-export, and which file each module lives in.
#[derive(Default)]
struct Crate {
    /// Module → the file that holds it (inline modules map to their file).
    file_of: BTreeMap<ModPath, PathBuf>,
    /// Module → names it defines (items, child modules).
    defines: BTreeMap<ModPath, BTreeSet<String>>,
    /// Module → its child modules.
    children: BTreeMap<ModPath, BTreeSet<String>>,
    /// Module → `pub use` name → the absolute path it re-exports (`None`: another crate's item).
    reexports: BTreeMap<ModPath, BTreeMap<String, Option<ModPath>>>,
}

fn module_of(root: &Path, file: &Path) -> ModPath {
    let rel = file.strip_prefix(root).expect("under the root");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs").to_string();
    if stem != "mod" && stem != "lib" {
        parts.push(stem);
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = entry.expect("entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// Every library file of the crate rooted at `root` (`src/lib.rs` and what is beside it, the
/// binary's `main.rs` left out), parsed.
fn library_files(root: &Path) -> Vec<SourceFile> {
    let mut paths = Vec::new();
    rust_files(root, &mut paths);
    paths.sort();
    paths
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n != "main.rs") && !p.components().any(|c| c.as_os_str() == "bin"))
        .map(|path| {
            let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            SourceFile { module: module_of(root, &path), lines: text.lines().count(), ast, path }
        })
        .collect()
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| a.path().is_ident("cfg") && a.meta.require_list().is_ok_and(|l| l.tokens.to_string() == "test"))
}

/// Flattens a `use` tree into (path, name it binds); `*` binds "*".
fn use_paths(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, String)>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_paths(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let mut full = prefix.clone();
            full.push(n.ident.to_string());
            out.push((full, n.ident.to_string()));
        }
        syn::UseTree::Rename(r) => {
            let mut full = prefix.clone();
            full.push(r.ident.to_string());
            out.push((full, r.rename.to_string()));
        }
        syn::UseTree::Glob(_) => out.push((prefix.clone(), "*".into())),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                use_paths(t, prefix, out);
            }
        }
    }
}

/// `path` (relative to `module`) as an absolute module path, when it names something in this
/// crate: `crate::`, `super::`, `self::`, or a child module of `module`.
fn absolute(module: &ModPath, path: &[String], krate: &Crate) -> Option<ModPath> {
    let (first, rest) = path.split_first()?;
    match first.as_str() {
        "crate" => Some(rest.to_vec()),
        "self" => Some(module.iter().chain(rest).cloned().collect()),
        "super" => {
            let mut base = module.clone();
            base.pop()?;
            let mut rest = rest;
            while rest.first().is_some_and(|s| s == "super") {
                base.pop()?;
                rest = &rest[1..];
            }
            Some(base.into_iter().chain(rest.iter().cloned()).collect())
        }
        child if krate.children.get(module).is_some_and(|c| c.contains(child)) => Some(module.iter().chain(path).cloned().collect()),
        _ => None,
    }
}

impl Crate {
    fn build(files: &[SourceFile]) -> Crate {
        let mut krate = Crate::default();
        for f in files {
            krate.file_of.insert(f.module.clone(), f.path.clone());
            krate.scan_items(&f.module, &f.path, &f.ast.items);
        }
        // Re-exports are resolved once every module's children are known.
        for f in files {
            krate.scan_reexports(&f.module, &f.ast.items);
        }
        krate
    }

    fn scan_items(&mut self, module: &ModPath, file: &Path, items: &[syn::Item]) {
        for item in items {
            let name = match item {
                syn::Item::Const(i) => Some(i.ident.to_string()),
                syn::Item::Enum(i) => Some(i.ident.to_string()),
                syn::Item::Fn(i) => Some(i.sig.ident.to_string()),
                syn::Item::Macro(i) => i.ident.as_ref().map(|i| i.to_string()),
                syn::Item::Static(i) => Some(i.ident.to_string()),
                syn::Item::Struct(i) => Some(i.ident.to_string()),
                syn::Item::Trait(i) => Some(i.ident.to_string()),
                syn::Item::Type(i) => Some(i.ident.to_string()),
                syn::Item::Union(i) => Some(i.ident.to_string()),
                syn::Item::Mod(m) => {
                    let child: ModPath = module.iter().cloned().chain([m.ident.to_string()]).collect();
                    self.children.entry(module.clone()).or_default().insert(m.ident.to_string());
                    if let Some((_, inner)) = &m.content {
                        self.file_of.insert(child.clone(), file.to_path_buf());
                        self.scan_items(&child, file, inner);
                    }
                    Some(m.ident.to_string())
                }
                _ => None,
            };
            if let Some(n) = name {
                self.defines.entry(module.clone()).or_default().insert(n);
            }
        }
    }

    fn scan_reexports(&mut self, module: &ModPath, items: &[syn::Item]) {
        for item in items {
            match item {
                syn::Item::Use(u) if !matches!(u.vis, syn::Visibility::Inherited) => {
                    let mut found = Vec::new();
                    use_paths(&u.tree, &mut Vec::new(), &mut found);
                    for (path, name) in found {
                        let abs = absolute(module, &path, self);
                        self.reexports.entry(module.clone()).or_default().insert(name, abs);
                    }
                }
                syn::Item::Mod(m) => {
                    if let Some((_, inner)) = &m.content {
                        let child: ModPath = module.iter().cloned().chain([m.ident.to_string()]).collect();
                        self.scan_reexports(&child, inner);
                    }
                }
                _ => {}
            }
        }
    }

    /// The file defining what the absolute `path` names: the deepest module on it, and through
    /// a `pub use` of that module to the re-exported item's own module.
    fn defining_file(&self, path: &ModPath, depth: usize) -> Option<PathBuf> {
        let mut module_len = 0;
        for n in (0..=path.len()).rev() {
            if self.file_of.contains_key(&path[..n]) {
                module_len = n;
                break;
            }
        }
        let module = path[..module_len].to_vec();
        if let Some(item) = path.get(module_len) {
            let defined_here = self.defines.get(&module).is_some_and(|d| d.contains(item));
            if !defined_here && depth < 8 {
                match self.reexports.get(&module).and_then(|r| r.get(item)) {
                    // Another crate's item, re-exported: not an edge inside this crate.
                    Some(None) => return None,
                    Some(Some(target)) => {
                        let mut next = target.clone();
                        next.extend(path[module_len + 1..].iter().cloned());
                        return self.defining_file(&next, depth + 1);
                    }
                    None => {}
                }
            }
        }
        self.file_of.get(&module).cloned()
    }
}

/// Collects the crate-internal paths a file names.
struct PathCollector<'a> {
    krate: &'a Crate,
    /// The module the code being visited is in (changes inside inline modules).
    module: ModPath,
    found: Vec<(ModPath, String)>,
}

impl PathCollector<'_> {
    fn note(&mut self, segments: Vec<String>) {
        if let Some(abs) = absolute(&self.module, &segments, self.krate) {
            self.found.push((abs, segments.join("::")));
        }
    }

    /// `a :: b :: c` runs in a macro's tokens (format!, assert!, …), recursively into groups.
    fn scan_tokens(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                TokenTree::Group(g) => self.scan_tokens(g.stream()),
                TokenTree::Ident(id) => {
                    let mut segs = vec![id.to_string()];
                    let mut j = i + 1;
                    while j + 2 < tokens.len() + 1 {
                        let colons = matches!((&tokens.get(j), &tokens.get(j + 1)),
                            (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b))) if a.as_char() == ':' && b.as_char() == ':');
                        match (colons, tokens.get(j + 2)) {
                            (true, Some(TokenTree::Ident(next))) => {
                                segs.push(next.to_string());
                                j += 3;
                            }
                            _ => break,
                        }
                    }
                    if segs.len() > 1 {
                        self.note(segs);
                        i = j;
                        continue;
                    }
                }
                _ => {}
            }
            i += 1;
        }
    }
}

impl<'ast> Visit<'ast> for PathCollector<'_> {
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let mut found = Vec::new();
        use_paths(&u.tree, &mut Vec::new(), &mut found);
        for (path, _) in found {
            self.note(path);
        }
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if m.content.is_some() {
            self.module.push(m.ident.to_string());
            syn::visit::visit_item_mod(self, m);
            self.module.pop();
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        self.note(p.segments.iter().map(|s| s.ident.to_string()).collect());
        syn::visit::visit_path(self, p);
    }

    /// `pub(crate)` / `pub(super)` name no item.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.scan_tokens(m.tokens.clone());
        syn::visit::visit_macro(self, m);
    }
}

/// Edges `from file → to file`, each with one path that makes it.
fn import_graph(files: &[SourceFile], krate: &Crate) -> BTreeMap<(PathBuf, PathBuf), String> {
    let mut edges = BTreeMap::new();
    for f in files {
        let mut c = PathCollector { krate, module: f.module.clone(), found: Vec::new() };
        c.visit_file(&f.ast);
        for (abs, text) in c.found {
            if let Some(target) = krate.defining_file(&abs, 0) {
                if target != f.path {
                    edges.entry((f.path.clone(), target)).or_insert(text);
                }
            }
        }
    }
    edges
}

/// The strongly connected components with more than one file (Tarjan).
fn cycles(edges: &BTreeMap<(PathBuf, PathBuf), String>) -> Vec<Vec<PathBuf>> {
    let nodes: BTreeSet<&PathBuf> = edges.keys().flat_map(|(a, b)| [a, b]).collect();
    let nodes: Vec<&PathBuf> = nodes.into_iter().collect();
    let index_of: BTreeMap<&PathBuf, usize> = nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let mut adj = vec![Vec::new(); nodes.len()];
    for (a, b) in edges.keys() {
        adj[index_of[a]].push(index_of[b]);
    }
    struct State {
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        sccs: Vec<Vec<usize>>,
    }
    fn strong(v: usize, adj: &[Vec<usize>], s: &mut State) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in &adj[v] {
            match s.index[w] {
                None => {
                    strong(w, adj, s);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                _ => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                scc.push(w);
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                s.sccs.push(scc);
            }
        }
    }
    let n = nodes.len();
    let mut s = State { index: vec![None; n], low: vec![0; n], on_stack: vec![false; n], stack: Vec::new(), next: 0, sccs: Vec::new() };
    for v in 0..n {
        if s.index[v].is_none() {
            strong(v, &adj, &mut s);
        }
    }
    s.sccs.into_iter().map(|scc| scc.into_iter().map(|i| nodes[i].clone()).collect()).collect()
}

/// `Result<_, String>` anywhere in a library file's types.
struct StringErrors {
    found: Vec<String>,
}

impl<'ast> Visit<'ast> for StringErrors {
    fn visit_type_path(&mut self, t: &'ast syn::TypePath) {
        if let Some(last) = t.path.segments.last() {
            if last.ident == "Result" {
                if let syn::PathArguments::AngleBracketed(args) = &last.arguments {
                    let types: Vec<&syn::Type> = args
                        .args
                        .iter()
                        .filter_map(|a| match a {
                            syn::GenericArgument::Type(t) => Some(t),
                            _ => None,
                        })
                        .collect();
                    if let [_, syn::Type::Path(err)] = types.as_slice() {
                        if err.path.segments.last().is_some_and(|s| s.ident == "String") {
                            self.found.push(quote_type(t));
                        }
                    }
                }
            }
        }
        syn::visit::visit_type_path(self, t);
    }
}

fn quote_type(t: &syn::TypePath) -> String {
    use quote::ToTokens;
    t.to_token_stream().to_string()
}

/// The top-level module a file belongs to (`src/tiers/l1/mod.rs` → `tiers`, `src/context.rs` →
/// `context`).
fn top_module(root: &Path, file: &Path) -> PathBuf {
    let rel = file.strip_prefix(root).expect("under the root");
    let first = rel.iter().next().map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string()).unwrap_or_default();
    PathBuf::from(first)
}

/// The edges between top-level modules (a folder, or a file beside `lib.rs`), each with one
/// file edge that makes it.
fn module_edges(root: &Path, edges: &BTreeMap<(PathBuf, PathBuf), String>) -> BTreeMap<(PathBuf, PathBuf), String> {
    let mut out = BTreeMap::new();
    for ((a, b), via) in edges {
        let (ma, mb) = (top_module(root, a), top_module(root, b));
        if ma != mb && ma != Path::new("lib") && mb != Path::new("lib") {
            out.entry((ma, mb)).or_insert_with(|| format!("{} → {} ({via})", a.display(), b.display()));
        }
    }
    out
}

/// Reading or setting the process environment in a library file (`context.rs` is the one reader,
/// for the drivers; nothing in the library sets it).
fn environment_access(file: &SourceFile) -> Vec<String> {
    let text = fs::read_to_string(&file.path).unwrap_or_default();
    let body = text.split("#[cfg(test)]").next().unwrap_or_default();
    let reads = ["env::var(", "env::var_os(", "env::vars(", "env::vars_os("];
    let sets = ["env::set_var(", "env::remove_var("];
    let reader = file.path.file_name().is_some_and(|n| n == "context.rs");
    let mut out = Vec::new();
    for (i, line) in body.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        if sets.iter().any(|p| code.contains(p)) || (!reader && reads.iter().any(|p| code.contains(p))) {
            out.push(format!(
                "{}:{}: `{}` (only the drivers set the environment; only context.rs reads it)",
                file.path.display(),
                i + 1,
                code.trim()
            ));
        }
    }
    out
}

/// Every violation of the rules in the crate rooted at `root`, as lines for a person.
fn violations(root: &Path) -> Vec<String> {
    let files = library_files(root);
    let krate = Crate::build(&files);
    let edges = import_graph(&files, &krate);
    let mut out = Vec::new();
    let modules = module_edges(root, &edges);
    for scc in cycles(&modules) {
        let members: BTreeSet<&PathBuf> = scc.iter().collect();
        let inner: Vec<String> =
            modules.iter().filter(|((a, b), _)| members.contains(a) && members.contains(b)).map(|(_, via)| via.clone()).collect();
        let names: Vec<String> = scc.iter().map(|m| m.display().to_string()).collect();
        out.push(format!("modules {{{}}} import each other: {}", names.join(", "), inner.join("; ")));
    }
    for f in &files {
        out.extend(environment_access(f));
    }
    for scc in cycles(&edges) {
        let members: BTreeSet<&PathBuf> = scc.iter().collect();
        let inner: Vec<String> = edges
            .iter()
            .filter(|((a, b), _)| members.contains(a) && members.contains(b))
            .map(|((a, b), via)| format!("{} → {} ({via})", a.display(), b.display()))
            .collect();
        out.push(format!("import cycle among {} files: {}", scc.len(), inner.join("; ")));
    }
    for f in &files {
        if f.lines > MAX_LINES {
            out.push(format!("{}: {} lines (at most {MAX_LINES})", f.path.display(), f.lines));
        }
        let mut s = StringErrors { found: Vec::new() };
        // Unit tests may use strings as errors; library code may not.
        let mut lib = f.ast.clone();
        lib.items.retain(|i| !matches!(i, syn::Item::Mod(m) if is_cfg_test(&m.attrs)));
        s.visit_file(&lib);
        for t in s.found {
            out.push(format!("{}: `{t}`: an untyped error", f.path.display()));
        }
    }
    out
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Guards issue 17's shape for the harness library: no import cycle, no file over 700 lines, no
/// `Result<_, String>`.
#[test]
fn harness_library_is_acyclic_small_and_typed() {
    let v = violations(&repo().join("src"));
    assert!(v.is_empty(), "{} violations:\n{}", v.len(), v.join("\n"));
}

/// Guards the same for the reference crate.
#[test]
fn reference_is_acyclic_small_and_typed() {
    let v = violations(&repo().join("reference/src"));
    assert!(v.is_empty(), "{} violations:\n{}", v.len(), v.join("\n"));
}

/// Guards the gate itself: a deliberately broken crate (a cycle through a facade re-export, a
/// file of 701 lines, a `Result<(), String>`) shows each violation; the same crate repaired
/// (children naming each other directly, a short file, a typed error) shows none.
#[test]
fn the_gate_sees_each_violation() {
    let dir = tempfile::tempdir().expect("tmp");
    let root = dir.path();
    let write = |rel: &str, text: &str| {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        fs::write(p, text).expect("write");
    };
    write("lib.rs", "pub mod a;\npub mod b;\npub mod big;\n");
    write("a/mod.rs", "pub mod x;\npub use x::X;\npub fn helper() {}\n");
    write("a/x.rs", "pub struct X;\npub fn f() { crate::b::g(); }\n");
    write("b.rs", "pub fn g() { let _ = crate::a::helper(); }\npub fn e() -> Result<(), String> { Ok(()) }\n");
    write("big.rs", &"// line\n".repeat(701));
    let v = violations(root);
    let text = v.join("\n");
    assert!(text.contains("import cycle among 3 files"), "{text}");
    assert!(text.contains("big.rs: 701 lines"), "{text}");
    assert!(text.contains("b.rs: `Result < () , String >`"), "{text}");
    // The same files make the modules `a` and `b` import each other.
    assert!(text.contains("modules {a, b} import each other") || text.contains("modules {b, a} import each other"), "{text}");
    assert_eq!(v.len(), 4, "{text}");

    // A child that names a sibling through the facade's re-export is an edge to the sibling,
    // not to the facade: no cycle.
    write("b.rs", "pub fn g() { let _ = crate::a::X; }\n#[derive(Debug)]\npub struct E;\npub fn e() -> Result<(), E> { Ok(()) }\n");
    write("a/x.rs", "pub struct X;\npub fn f() {}\n");
    write("big.rs", "// short\n");
    let v = violations(root);
    assert!(v.is_empty(), "{}", v.join("\n"));
    // A macro's tokens count: a path inside format! closes the cycle again.
    write("a/x.rs", "pub struct X;\npub fn f() -> String { format!(\"{:?}\", crate::b::E) }\n");
    write("a/mod.rs", "pub mod x;\npub use x::X;\npub fn helper() { x::f(); }\n");
    write("b.rs", "pub fn g() { crate::a::helper(); }\n#[derive(Debug)]\npub struct E;\n");
    let v = violations(root);
    assert!(v.iter().any(|l| l.starts_with("import cycle")), "{}", v.join("\n"));
    // Folders that import each other through files that do not form a file cycle.
    write("a/x.rs", "pub struct X;\npub fn f() {}\n");
    write("a/y.rs", "pub fn y() { crate::b::g(); }\n");
    write("a/mod.rs", "pub mod x;\npub mod y;\n");
    write("b.rs", "pub fn g() { let _ = crate::a::x::X; }\n");
    let v = violations(root);
    assert_eq!(v.len(), 1, "{}", v.join("\n"));
    assert!(v[0].contains("import each other") && !v[0].starts_with("import cycle"), "{}", v.join("\n"));
    // The environment: read outside context.rs, or set anywhere in the library.
    write("b.rs", "pub fn g() { let _ = std::env::var_os(\"X\"); }\n");
    write("a/y.rs", "pub fn y() { std::env::set_var(\"X\", \"1\"); }\n");
    write("context.rs", "pub fn from_env() { let _ = std::env::var_os(\"X\"); }\n");
    let v = violations(root);
    let text = v.join("\n");
    assert_eq!(v.len(), 2, "{text}");
    assert!(text.contains("b.rs:1") && text.contains("a/y.rs:1") && !text.contains("context.rs:"), "{text}");
}

/// The graph's input and output names spelled outside `src/onnx/protocol.rs` in non-test code:
/// `(file, line)` for each line holding one of them as an exact string literal.
fn protocol_literals(src: &Path) -> Vec<(PathBuf, usize)> {
    const NAMES: [&str; 10] = [
        "input_ids",
        "attention_mask",
        "position_ids",
        "inputs_embeds",
        "pixel_values",
        "pixel_position_ids",
        "image_position_ids",
        "image_features",
        "per_layer_inputs",
        "logits",
    ];
    let mut paths = Vec::new();
    rust_files(src, &mut paths);
    paths.sort();
    let mut out = Vec::new();
    for path in paths.into_iter().filter(|p| !p.ends_with("onnx/protocol.rs")) {
        let text = fs::read_to_string(&path).expect("source");
        for (i, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("#[cfg(test)]") {
                break;
            }
            if !line.trim_start().starts_with("//") && NAMES.iter().any(|n| line.contains(&format!("\"{n}\""))) {
                out.push((path.clone(), i + 1));
            }
        }
    }
    out
}

/// Guards issue 45: the protocol's names live in `src/onnx/protocol.rs`; outside it, non-test
/// code spells them on at most 5 lines (the `Component` enum's definitions, which its macro takes
/// as literals). A name spelled again elsewhere fails naming the line.
#[test]
fn protocol_names_live_in_one_place() {
    let found = protocol_literals(&repo().join("src"));
    let lines: Vec<String> = found.iter().map(|(p, l)| format!("{}:{l}", p.display())).collect();
    assert!(found.len() <= 5, "{} lines spell a protocol name outside src/onnx/protocol.rs:\n{}", found.len(), lines.join("\n"));
    // The gate sees a spelling: a scratch file with one.
    let dir = tempfile::tempdir().expect("tmp");
    fs::write(dir.path().join("x.rs"), "fn f() -> &'static str { \"logits\" }\n#[cfg(test)]\nmod t { const A: &str = \"input_ids\"; }\n")
        .expect("write");
    assert_eq!(protocol_literals(dir.path()).len(), 1, "a literal before the tests is seen, one in them is not");
}
