//! The architecture page tells the truth: every `file:line` it cites still names the item it
//! says, and no layer imports from a layer above it (docs/ARCHITECTURE.md, "The layers").

use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every "`src/…rs:N` `item`" pair of the page, as (path, line, item).
fn cited_lines(page: &str) -> Vec<(String, usize, String)> {
    let mut out = Vec::new();
    for row in page.lines() {
        let mut rest = row;
        while let Some(start) = rest.find("`src/") {
            let tail = &rest[start + 1..];
            let Some(end) = tail.find('`') else { break };
            let cite = &tail[..end];
            rest = &tail[end + 1..];
            let Some((path, line)) = cite.rsplit_once(':') else {
                continue;
            };
            let Ok(line) = line.parse::<usize>() else {
                continue;
            };
            // The item follows the citation: " `fn isr`".
            let item = rest
                .trim_start()
                .strip_prefix('`')
                .and_then(|s| s.split_once('`'))
                .map(|(item, _)| item.to_string())
                .unwrap_or_else(|| panic!("{cite}: no `item` after the citation in {row:?}"));
            out.push((path.to_string(), line, item));
        }
    }
    out
}

#[test]
fn every_line_the_architecture_page_cites_names_its_item() {
    let page = fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let cites = cited_lines(&page);
    assert!(cites.len() >= 10, "the page cites {} lines", cites.len());
    let mut wrong = Vec::new();
    for (path, line, item) in &cites {
        let text = fs::read_to_string(root().join(path))
            .unwrap_or_else(|e| panic!("{path} (cited by docs/ARCHITECTURE.md): {e}"));
        let at = text.lines().nth(line - 1).unwrap_or("");
        if !at.contains(item.as_str()) {
            let found = text
                .lines()
                .position(|l| l.contains(item.as_str()))
                .map_or("nowhere".to_string(), |i| format!("line {}", i + 1));
            wrong.push(format!(
                "{path}:{line} should name `{item}` (found at {found})"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/ARCHITECTURE.md:\n{}",
        wrong.join("\n")
    );
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Non-comment lines of the layer `layer` that name `crate::<other>` for a forbidden `other`.
fn upward_imports(layer: &str, forbidden: &[&str]) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(&root().join("src").join(layer), &mut files);
    let mut hits = Vec::new();
    for f in files {
        let text = fs::read_to_string(&f).unwrap();
        for (i, l) in text.lines().enumerate() {
            let code = l.split("//").next().unwrap_or("");
            for other in forbidden {
                let name = format!("crate::{other}");
                let mut from = 0;
                while let Some(at) = code[from..].find(&name) {
                    let end = from + at + name.len();
                    let next = code[end..].chars().next();
                    if !next.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                        hits.push(format!("{}:{}: {}", f.display(), i + 1, l.trim()));
                    }
                    from = end;
                }
            }
        }
    }
    hits
}

#[test]
fn no_layer_imports_from_a_layer_above_it() {
    // os ← pvrdma ← ndk → ndkpi; the connection manager sits between them: os ← cm ← ndk
    // (cm may use os and ndkpi types, never the device or the NDK objects). ndis is the
    // outermost shell; ndkpi holds only the ABI (it re-exports the kernel's MDL from os).
    // vmxnet3, the Ethernet function, sits beside pvrdma on os alone: os ← vmxnet3.
    let rules: [(&str, &[&str]); 6] = [
        ("os", &["pvrdma", "cm", "ndk", "ndkpi", "ndis", "vmxnet3"]),
        ("pvrdma", &["cm", "ndk", "ndkpi", "ndis", "vmxnet3"]),
        ("cm", &["pvrdma", "ndk", "ndis", "vmxnet3"]),
        ("ndkpi", &["pvrdma", "cm", "ndk", "ndis", "vmxnet3"]),
        ("ndk", &["ndis"]),
        ("vmxnet3", &["pvrdma", "cm", "ndk", "ndkpi", "ndis"]),
    ];
    let mut hits = Vec::new();
    for (layer, forbidden) in rules {
        hits.extend(upward_imports(layer, forbidden));
    }
    assert!(
        hits.is_empty(),
        "imports against the layering:\n{}",
        hits.join("\n")
    );
}
