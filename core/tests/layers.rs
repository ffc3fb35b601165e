//! The layering rule of ARCHITECTURE.md: a module of `core/src` imports only modules on lower rows of the table
//! below, never its own row's neighbours or anything above (lib.rs, the crate root, is exempt). Paths through the
//! crate root's re-exports (`crate::Node`) hide where an item lives, so outside lib.rs every `crate::` path must
//! name its module.
//!
//! The check parses the crate with `syn`, following `mod` declarations from lib.rs (inline modules and files), and
//! looks at every path of the code: `use` trees, paths in types and expressions, `super::` and `self::` paths
//! (resolved against the module they are written in) and `crate::` / `super::` paths inside macro invocations.
//! Only items under `#[cfg(test)]` (test modules, test-only functions and impls) are exempt, wherever they are in a
//! file.
//!
//! Within the `transport` row, the transports never import each other: code of `transport::X` names nothing of
//! `transport::Y` for another transport `Y`. What they share is in `transport/mod.rs`, in the shared modules of
//! [`TRANSPORT_SHARED`], or in `wire`; every other child module of `transport` is a transport (a new one is
//! covered without being listed).

use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// Rows from the top: each module may import only modules of later rows.
const ROWS: &[&[&str]] = &[
    &["node"],
    &["pubsub"],
    &["service"],
    &["io", "logging"],
    &["monitor", "transport"],
    &["registration"],
    &["wire", "dynamic", "sample"],
    &["config", "types", "sys", "sync", "stats", "process"],
];

/// The child modules of `transport` that are not transports but parts the transports (and `pubsub`) share.
const TRANSPORT_SHARED: &[&str] = &["clock", "recycle"];

fn row_of(module: &str) -> Option<usize> {
    ROWS.iter().position(|row| row.contains(&module))
}

/// Whether `attrs` hold `#[cfg(test)]` (or a `cfg` whose predicate is only true under test, e.g. `all(test, ..)`).
fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>().is_ok_and(|m| match m {
                syn::Meta::Path(p) => p.is_ident("test"),
                syn::Meta::List(l) => {
                    l.path.is_ident("all") && l.tokens.clone().into_iter().any(|t| t.to_string() == "test")
                }
                syn::Meta::NameValue(_) => false,
            })
    })
}

/// A path as written: where it starts and its segments after that start.
#[derive(Debug, Clone)]
enum Start {
    /// `crate::...`
    Crate,
    /// `super::` written `n` times, then the rest.
    Super(usize),
    /// `self::...`
    SelfMod,
}

/// The paths of one module's own code (not of its child modules, which are visited as modules of their own).
#[derive(Default)]
struct Paths {
    found: Vec<(Start, Vec<String>)>,
}

impl Paths {
    fn record(&mut self, segments: &[String]) {
        let Some(first) = segments.first() else { return };
        let (start, rest) = match first.as_str() {
            "crate" => (Start::Crate, &segments[1..]),
            "self" => (Start::SelfMod, &segments[1..]),
            "super" => {
                let n = segments.iter().take_while(|s| *s == "super").count();
                (Start::Super(n), &segments[n..])
            }
            _ => return,
        };
        self.found.push((start, rest.to_vec()));
    }

    /// Every leaf of a `use` tree, with the prefix leading to it.
    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                prefix.push(n.ident.to_string());
                self.record(prefix);
                prefix.pop();
            }
            syn::UseTree::Rename(r) => {
                prefix.push(r.ident.to_string());
                self.record(prefix);
                prefix.pop();
            }
            syn::UseTree::Glob(_) => self.record(prefix),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }

    /// `crate :: a :: b`, `super :: ...` sequences in a macro's tokens (the macro's arguments are not parsed).
    fn tokens(&mut self, tokens: proc_macro2::TokenStream) {
        let flat: Vec<proc_macro2::TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < flat.len() {
            if let proc_macro2::TokenTree::Group(g) = &flat[i] {
                self.tokens(g.stream());
                i += 1;
                continue;
            }
            let is_start = matches!(&flat[i], proc_macro2::TokenTree::Ident(id) if id == "crate" || id == "super")
                && !matches!(i.checked_sub(1).map(|j| &flat[j]), Some(proc_macro2::TokenTree::Punct(p)) if p.as_char() == '$');
            if !is_start {
                i += 1;
                continue;
            }
            // Collect `ident (:: ident)*`.
            let mut segments = Vec::new();
            let mut j = i;
            while let Some(proc_macro2::TokenTree::Ident(id)) = flat.get(j) {
                segments.push(id.to_string());
                let colons = matches!(flat.get(j + 1), Some(proc_macro2::TokenTree::Punct(p)) if p.as_char() == ':')
                    && matches!(flat.get(j + 2), Some(proc_macro2::TokenTree::Punct(p)) if p.as_char() == ':');
                if !colons {
                    break;
                }
                j += 3;
            }
            if segments.len() > 1 {
                self.record(&segments);
            }
            i = j.max(i + 1);
        }
    }
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item(&mut self, i: &'ast syn::Item) {
        let attrs: &[syn::Attribute] = match i {
            syn::Item::Const(x) => &x.attrs,
            syn::Item::Enum(x) => &x.attrs,
            syn::Item::ExternCrate(x) => &x.attrs,
            syn::Item::Fn(x) => &x.attrs,
            syn::Item::ForeignMod(x) => &x.attrs,
            syn::Item::Impl(x) => &x.attrs,
            syn::Item::Macro(x) => &x.attrs,
            syn::Item::Mod(_) => return, // visited as a module of its own
            syn::Item::Static(x) => &x.attrs,
            syn::Item::Struct(x) => &x.attrs,
            syn::Item::Trait(x) => &x.attrs,
            syn::Item::TraitAlias(x) => &x.attrs,
            syn::Item::Type(x) => &x.attrs,
            syn::Item::Union(x) => &x.attrs,
            syn::Item::Use(x) => &x.attrs,
            _ => &[],
        };
        if !is_test_only(attrs) {
            syn::visit::visit_item(self, i);
        }
    }

    fn visit_impl_item(&mut self, i: &'ast syn::ImplItem) {
        let attrs: &[syn::Attribute] = match i {
            syn::ImplItem::Const(x) => &x.attrs,
            syn::ImplItem::Fn(x) => &x.attrs,
            syn::ImplItem::Type(x) => &x.attrs,
            syn::ImplItem::Macro(x) => &x.attrs,
            _ => &[],
        };
        if !is_test_only(attrs) {
            syn::visit::visit_impl_item(self, i);
        }
    }

    fn visit_stmt(&mut self, s: &'ast syn::Stmt) {
        let test_only = match s {
            syn::Stmt::Local(l) => is_test_only(&l.attrs),
            syn::Stmt::Macro(m) => is_test_only(&m.attrs),
            _ => false,
        };
        if !test_only {
            syn::visit::visit_stmt(self, s);
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &u.tree);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segments: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        self.record(&segments);
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.tokens(m.tokens.clone());
        syn::visit::visit_macro(self, m);
    }
}

/// A module of the crate: its path below the root (`["transport", "udp", "recv"]`), its file, and the paths its own
/// code names.
struct Module {
    path: Vec<String>,
    file: PathBuf,
    paths: Vec<(Start, Vec<String>)>,
}

/// The file of `mod name;` declared in `file` (whose module is a directory owner when it is lib.rs or mod.rs).
fn child_file(file: &Path, name: &str, attrs: &[syn::Attribute]) -> Option<PathBuf> {
    let dir = file.parent()?;
    for a in attrs {
        if a.path().is_ident("path")
            && let syn::Meta::NameValue(nv) = &a.meta
            && let syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) = &nv.value
        {
            return Some(dir.join(s.value()));
        }
    }
    let stem = file.file_stem()?.to_str()?;
    let base = if stem == "lib" || stem == "mod" { dir.to_path_buf() } else { dir.join(stem) };
    [base.join(format!("{name}.rs")), base.join(name).join("mod.rs")].into_iter().find(|p| p.exists())
}

/// Adds the module at `path` whose items are `items` (written in `file`) and its non-test children.
fn walk(file: &Path, path: Vec<String>, items: &[syn::Item], out: &mut Vec<Module>, errors: &mut Vec<String>) {
    let mut paths = Paths::default();
    for item in items {
        paths.visit_item(item);
    }
    out.push(Module { path: path.clone(), file: file.to_path_buf(), paths: paths.found });
    for item in items {
        let syn::Item::Mod(m) = item else { continue };
        if is_test_only(&m.attrs) {
            continue;
        }
        let mut child = path.clone();
        child.push(m.ident.to_string());
        match &m.content {
            Some((_, inner)) => walk(file, child, inner, out, errors),
            None => match child_file(file, &m.ident.to_string(), &m.attrs) {
                Some(f) => match parse(&f) {
                    Ok(ast) => walk(&f, child, &ast.items, out, errors),
                    Err(e) => errors.push(format!("{}: {e}", f.display())),
                },
                None => errors.push(format!("{}: the file of `mod {}` not found", file.display(), m.ident)),
            },
        }
    }
}

fn parse(file: &Path) -> Result<syn::File, String> {
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    syn::parse_file(&text).map_err(|e| e.to_string())
}

/// Every module of the crate whose root is `src/lib.rs`, and the files that could not be read.
fn modules(src: &Path) -> (Vec<Module>, Vec<String>) {
    let lib = src.join("lib.rs");
    let (mut out, mut errors) = (Vec::new(), Vec::new());
    match parse(&lib) {
        Ok(ast) => walk(&lib, Vec::new(), &ast.items, &mut out, &mut errors),
        Err(e) => errors.push(format!("{}: {e}", lib.display())),
    }
    (out, errors)
}

/// The absolute module path a path written in module `at` names (`None`: it climbs above the crate root).
fn resolve(at: &[String], start: &Start, rest: &[String]) -> Option<Vec<String>> {
    let mut base = match start {
        Start::Crate => Vec::new(),
        Start::SelfMod => at.to_vec(),
        Start::Super(n) => at.get(..at.len().checked_sub(*n)?)?.to_vec(),
    };
    base.extend_from_slice(rest);
    Some(base)
}

/// Every violation of the rule in the crate at `src`, as "file: what".
fn violations(src: &Path) -> Vec<String> {
    let (modules, mut found) = modules(src);
    // lib.rs (the root, with its inline modules of re-exports: `shoal::builder`, `shoal::error`) is exempt: it
    // declares the modules and the public surface. A path into it is a path through the crate root.
    let root = src.join("lib.rs");
    let layered: Vec<&Module> = modules.iter().filter(|m| m.file != root).collect();
    let known: std::collections::BTreeSet<&str> =
        layered.iter().filter_map(|m| m.path.first()).map(String::as_str).collect();
    // The transports: child modules of `transport` other than the shared ones.
    let transports: std::collections::BTreeSet<&str> = layered
        .iter()
        .filter(|m| m.path.len() == 2 && m.path[0] == "transport")
        .map(|m| m.path[1].as_str())
        .filter(|name| !TRANSPORT_SHARED.contains(name))
        .collect();
    for m in layered {
        let Some(own) = m.path.first() else { continue };
        let name = m.file.display();
        let Some(row) = row_of(own) else {
            found.push(format!("{name}: module `{own}` has no row in the layer table"));
            continue;
        };
        for (start, rest) in &m.paths {
            let Some(target) = resolve(&m.path, start, rest) else {
                found.push(format!("{name}: a `super::` path above the crate root"));
                continue;
            };
            let Some(top) = target.first() else { continue };
            if top == own {
                if own == "transport"
                    && let (Some(from), Some(to)) = (m.path.get(1), target.get(1))
                    && from != to
                    && transports.contains(to.as_str())
                {
                    found.push(format!(
                        "{name}: `transport::{from}` imports `transport::{to}`; transports never import each other"
                    ));
                }
                continue;
            }
            if !known.contains(top.as_str()) {
                found.push(format!(
                    "{name}: `crate::{top}` goes through the crate root; name the module that defines it"
                ));
                continue;
            }
            match row_of(top) {
                Some(t) if t > row => {}
                Some(_) => found.push(format!("{name}: `{own}` imports `crate::{top}`, which is not below it")),
                None => {
                    found.push(format!("{name}: `{own}` imports `crate::{top}`, which has no row in the layer table"))
                }
            }
        }
    }
    found
}

#[test]
fn lower_layers_never_import_higher_ones() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let (modules, errors) = modules(&src);
    assert!(errors.is_empty(), "{errors:#?}");
    // Every source file of the crate is reached through its `mod` declarations (none skipped by the walk).
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let reached: std::collections::BTreeSet<&Path> = modules.iter().map(|m| m.file.as_path()).collect();
    let unreached: Vec<&PathBuf> =
        files.iter().filter(|f| !reached.contains(f.as_path()) && !f.ends_with("tests.rs")).collect();
    assert!(unreached.is_empty(), "files the module walk did not reach: {unreached:#?}");
    let found = violations(&src);
    assert!(found.is_empty(), "layering violations (see ARCHITECTURE.md, Layers):\n{}", found.join("\n"));
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read core/src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The check sees what the rule forbids wherever it is written, and only test code is exempt.
#[test]
fn the_check_sees_a_reverse_import() {
    let dir = std::env::temp_dir().join(format!("shoal_layers_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("transport")).expect("temp dir");
    let write = |file: &str, text: &str| std::fs::write(dir.join(file), text).expect("write");
    write("lib.rs", "mod transport;\nmod wire;\nmod sample;\nmod sys;\nmod node;\nmod pubsub;\n");
    write("node.rs", "");
    write("pubsub.rs", "");
    // A transport reaching up into pubsub, a grouped import of node, and a path through the crate root; then a test
    // module in the middle of the file, and after it a path up through `super::` from an inline module.
    write(
        "transport/mod.rs",
        "use crate::pubsub::runtime::Runtime;\nuse crate::{wire, node::X};\n\
         #[cfg(test)]\nmod tests { use crate::node::Node; }\n\
         mod inner { fn f() { super::super::node::g(); } }\n",
    );
    // A path in a type; a comment does not count; a test-only function does not count, the function after it does
    // (in a macro's arguments).
    write(
        "wire.rs",
        "fn f() -> crate::Sample { todo!() }\n// crate::node in a comment\n\
         #[cfg(test)]\nfn t() { crate::node::x(); }\n\
         fn g() { tracing::debug!(\"{}\", crate::pubsub::y()); }\n",
    );
    write("sample.rs", "#[cfg(test)]\nmod tests { use crate::node::Node; }\nuse super::sys::Z;\n");
    write("sys.rs", "impl A { #[cfg(test)] fn t() { crate::node::x(); } }\n");
    let found = violations(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    let expect = [
        "`transport` imports `crate::pubsub`",
        "`transport` imports `crate::node`",
        "`transport` imports `crate::node`",
        "`crate::Sample` goes through the crate root",
        "`wire` imports `crate::pubsub`",
    ];
    assert_eq!(found.len(), expect.len(), "{found:#?}");
    for (f, e) in found.iter().zip(expect) {
        assert!(f.contains(e), "{e} in {found:#?}");
    }
}

/// The check sees one transport importing another (through `crate::` and `super::` paths, in code and in macros),
/// and lets transports use what `transport/mod.rs`, a shared module and `wire` offer; test code is exempt.
#[test]
fn the_check_sees_a_transport_importing_another() {
    let dir = std::env::temp_dir().join(format!("shoal_layers_transports_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("transport/tcp")).expect("temp dir");
    let write = |file: &str, text: &str| std::fs::write(dir.join(file), text).expect("write");
    write("lib.rs", "mod transport;\nmod wire;\n");
    write("wire.rs", "pub fn content_hash() {}\n");
    write("transport/mod.rs", "pub mod clock;\npub mod udp;\npub mod tcp;\npub trait LayerWriter {}\n");
    write("transport/clock.rs", "pub struct Clocks;\n");
    // udp: shared parts only (the parent's trait, the shared clock module, wire, its own modules).
    write(
        "transport/udp.rs",
        "use crate::transport::LayerWriter;\nuse super::clock::Clocks;\nuse crate::wire::content_hash;\n\
         pub mod codec { pub fn put_varint() {} fn f() { super::g(); } }\nfn g() {}\n",
    );
    // tcp: a `use` of udp's codec, then in a submodule a `super::super::udp` path in an expression and a
    // `crate::transport::udp` path inside a macro; a test module importing udp is exempt.
    write(
        "transport/tcp/mod.rs",
        "mod frame;\nuse crate::transport::udp::codec::put_varint;\n\
         #[cfg(test)]\nmod tests { use crate::transport::udp::codec::put_varint; }\n",
    );
    write(
        "transport/tcp/frame.rs",
        "fn f() { super::super::udp::codec::put_varint(); }\n\
         fn g() { tracing::debug!(\"{:?}\", crate::transport::udp::g()); }\n\
         fn h() { super::super::LayerWriter::x(); crate::transport::clock::Clocks; }\n",
    );
    let found = violations(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    let expect = [
        "transport/tcp/mod.rs: `transport::tcp` imports `transport::udp`",
        "transport/tcp/frame.rs: `transport::tcp` imports `transport::udp`",
        "transport/tcp/frame.rs: `transport::tcp` imports `transport::udp`",
    ];
    assert_eq!(found.len(), expect.len(), "{found:#?}");
    for (f, e) in found.iter().zip(expect) {
        assert!(f.contains(e), "{e} in {found:#?}");
    }
}
