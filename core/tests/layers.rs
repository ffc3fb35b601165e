//! The layering rule of ARCHITECTURE.md: a module of `core/src` imports only modules on lower rows of the table
//! below, never its own row's neighbours or anything above (lib.rs, the crate root, is exempt). Paths through the
//! crate root's re-exports (`crate::Node`) hide where an item lives, so outside lib.rs every `crate::` path must
//! name its module. Test code (`#[cfg(test)]` to the end of a file, files named `tests.rs`) is exempt.

use std::path::{Path, PathBuf};

/// Rows from the top: each module may import only modules of later rows.
const ROWS: &[&[&str]] = &[
    &["node"],
    &["pubsub"],
    &["io"],
    &["monitor", "transport"],
    &["registration"],
    &["wire", "dynamic", "sample"],
    &["config", "types", "sys", "sync", "stats"],
];

fn row_of(module: &str) -> Option<usize> {
    ROWS.iter().position(|row| row.contains(&module))
}

/// The top-level module a file of `core/src` belongs to (`transport/udp/recv.rs` → `transport`).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    Some(first.trim_end_matches(".rs").to_string())
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

/// The non-test code of a file: everything before its first `#[cfg(test)]`, comments removed.
fn code_of(text: &str) -> String {
    let end = text.find("#[cfg(test)]").unwrap_or(text.len());
    text[..end]
        .lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first segment of every `crate::` path in `code`, including each branch of `crate::{a, b::c}`.
fn crate_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().last();
        rest = &rest[i + "crate::".len()..];
        // `$crate::` in macros and identifiers ending in "crate" are not paths of this crate.
        if before.is_some_and(|c| c == '$' || c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let end = group
                .char_indices()
                .find(|&(_, c)| {
                    depth += match c {
                        '{' => 1,
                        '}' => -1,
                        _ => 0,
                    };
                    depth == 0
                })
                .map_or(group.len(), |(i, _)| i);
            let mut level = 0;
            let mut item = String::new();
            for c in group[..end].chars().chain(std::iter::once(',')) {
                match c {
                    '{' => level += 1,
                    '}' => level -= 1,
                    ',' if level == 0 => {
                        out.push(first_segment(item.trim()));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
        } else {
            out.push(first_segment(rest));
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

fn first_segment(path: &str) -> String {
    path.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
}

/// Every violation of the rule in `core/src`, as "file: what".
fn violations(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in files {
        let name = file.display();
        if file.file_name().is_some_and(|n| n == "tests.rs") || file == src.join("lib.rs") {
            continue;
        }
        let module = module_of(src, &file).expect("a file below core/src");
        let Some(row) = row_of(&module) else {
            found.push(format!("{name}: module `{module}` has no row in the layer table"));
            continue;
        };
        let text = std::fs::read_to_string(&file).expect("read source");
        for target in crate_paths(&code_of(&text)) {
            if target == module {
                continue;
            }
            match row_of(&target) {
                Some(t) if t > row => {}
                Some(_) => found.push(format!("{name}: `{module}` imports `crate::{target}`, which is not below it")),
                None => found.push(format!(
                    "{name}: `crate::{target}` goes through the crate root; name the module that defines it"
                )),
            }
        }
    }
    found
}

#[test]
fn lower_layers_never_import_higher_ones() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = violations(&src);
    assert!(found.is_empty(), "layering violations (see ARCHITECTURE.md, Layers):\n{}", found.join("\n"));
}

#[test]
fn the_check_sees_a_reverse_import() {
    let dir = std::env::temp_dir().join(format!("shoal_layers_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("transport")).expect("temp dir");
    // A transport reaching up into pubsub, a grouped import of node, and a path through the crate root.
    std::fs::write(dir.join("transport/mod.rs"), "use crate::pubsub::runtime::Runtime;\nuse crate::{wire, node::X};\n")
        .expect("write");
    std::fs::write(dir.join("wire.rs"), "fn f() -> crate::Sample { todo!() }\n// crate::node in a comment\n")
        .expect("write");
    std::fs::write(dir.join("sample.rs"), "#[cfg(test)]\nmod tests { use crate::node::Node; }\n").expect("write");
    let found = violations(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(found.len(), 3, "{found:#?}");
    assert!(found[0].contains("`transport` imports `crate::pubsub`"), "{found:#?}");
    assert!(found[1].contains("`transport` imports `crate::node`"), "{found:#?}");
    assert!(found[2].contains("`crate::Sample` goes through the crate root"), "{found:#?}");
}
