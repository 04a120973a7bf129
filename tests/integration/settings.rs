//! One home for settings and switches: every `RIDGELINE_*` variable the code
//! names is declared (in `ridgeline_operators::tuning` or `ridgeline::config`),
//! every declared one is still named by the code, and docs/settings.md is the
//! generated reference (`RIDGELINE_BLESS=1` rewrites it).
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const MARKER: &str = "<!-- generated: ridgeline::config::settings_reference(); RIDGELINE_BLESS=1 cargo test --test integration settings -->";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Source files of both crates, their tests, benches, examples and CI script,
/// and the README, the architecture page and the user guide and internals pages
/// (the history files keep old names).
fn sources() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else { return };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs" || x == "wgsl") {
                out.push(p);
            }
        }
    }
    let mut out = vec![root().join(".ci/run"), root().join("README.md"), root().join("docs/architecture.md")];
    for d in ["src", "tests", "benches", "examples", "operators/src", "operators/tests", "operators/examples"] {
        walk(&root().join(d), &mut out);
    }
    for d in ["docs/guide", "docs/internals"] {
        let Ok(rd) = std::fs::read_dir(root().join(d)) else { continue };
        out.extend(rd.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "md")));
    }
    out
}

/// Every `RIDGELINE_[A-Z0-9_]+` token in `text` (a trailing `_` is not part of a
/// name; one followed by `*` is a family).
fn names(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("RIDGELINE_") {
        let tail = &rest[i..];
        let len = tail.bytes().take_while(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b'_').count();
        let name = tail[..len].trim_end_matches('_');
        // `RIDGELINE_SKYLINE_*` names a family, not a switch.
        let glob = tail[len..].starts_with('*');
        if name.len() > "RIDGELINE_".len() && !glob {
            out.push(name.to_string());
        }
        rest = &tail[len.max(1)..];
    }
    out
}

fn declared() -> BTreeSet<&'static str> {
    ridgeline_operators::tuning::all_switches().map(|s| s.name).chain(ridgeline::config::SWITCHES.iter().map(|s| s.name)).collect()
}

#[test]
fn every_switch_the_code_names_is_declared() {
    let declared = declared();
    let mut named = BTreeSet::new();
    let mut undeclared = Vec::new();
    let this = root().join("tests/integration/settings.rs");
    for f in sources() {
        if f == this {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for n in names(&text) {
            if !declared.contains(n.as_str()) {
                undeclared.push(format!("{}: {n}", f.strip_prefix(root()).unwrap_or(&f).display()));
            }
            named.insert(n);
        }
    }
    assert!(undeclared.is_empty(), "switches named in code but declared in no SWITCHES table (operators/src/tuning/ or src/config.rs):\n{}", undeclared.join("\n"));
    let stale: Vec<_> = declared.iter().filter(|d| !named.contains(**d)).collect();
    assert!(stale.is_empty(), "declared switches no code reads any more: {stale:?}");
}

#[test]
fn switch_names_are_unique() {
    let all: Vec<_> = ridgeline_operators::tuning::all_switches().map(|s| s.name).chain(ridgeline::config::SWITCHES.iter().map(|s| s.name)).collect();
    assert_eq!(all.len(), declared().len(), "a switch is declared twice: {all:?}");
}

#[test]
fn settings_doc_is_the_generated_reference() {
    let path = root().join("docs/settings.md");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let generated = ridgeline::config::settings_reference();
    let (head, body) = match text.split_once(MARKER) {
        Some((h, b)) => (h.to_string(), b.trim_start_matches('\n').to_string()),
        None => ("# Settings\n\n".to_string(), String::new()),
    };
    if body != generated {
        if std::env::var("RIDGELINE_BLESS").is_ok_and(|v| v == "1") {
            std::fs::write(&path, format!("{head}{MARKER}\n\n{generated}")).unwrap();
            return;
        }
        panic!("docs/settings.md is not the generated reference; run `RIDGELINE_BLESS=1 cargo test --test integration settings` and commit it");
    }
}
