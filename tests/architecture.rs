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

// ---------------------------------------------------------------- inside the NDK layer

/// The code of a Rust file, line by line with its number, comments left out (doc comments
/// and `//` tails).
fn code_lines(text: &str) -> Vec<(usize, String)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.split("//").next().unwrap_or("").to_string()))
        .filter(|(_, l)| !l.trim().is_empty())
        .collect()
}

/// Whether `code` names the path `path` (a whole path segment sequence: `super::dispatch`
/// matches `super::dispatch::X` and `super::dispatch;`, not `super::dispatcher`).
fn names_path(code: &str, path: &str) -> bool {
    let mut from = 0;
    while let Some(at) = code[from..].find(path) {
        let start = from + at;
        let end = start + path.len();
        let before = code[..start].chars().next_back();
        let after = code[end..].chars().next();
        let bounded = |c: Option<char>| !c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        if bounded(before) && bounded(after) {
            return true;
        }
        from = end;
    }
    false
}

/// Every `.rs` file under `dir` (relative to the repository), with its text.
fn sources(dir: &str) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    rust_files(&root().join(dir), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|f| {
            let text = fs::read_to_string(&f).unwrap();
            (f.strip_prefix(root()).unwrap().to_path_buf(), text)
        })
        .collect()
}

/// Lines of the files under `dir` (but those under `except`) that name one of `paths`.
fn naming(dir: &str, except: &[&str], paths: &[&str]) -> Vec<String> {
    let mut hits = Vec::new();
    for (f, text) in sources(dir) {
        // Unit tests drive a layer as its callers do, from above.
        if except.iter().any(|e| f.starts_with(e)) || f.ends_with("tests.rs") {
            continue;
        }
        for (n, code) in code_lines(&text) {
            // The module declarations in `ndk/mod.rs` name their children.
            if code.trim_start().starts_with("pub mod ") || code.trim_start().starts_with("mod ") {
                continue;
            }
            if paths.iter().any(|p| names_path(&code, p)) {
                hits.push(format!("{}:{n}: {}", f.display(), code.trim()));
            }
        }
    }
    hits
}

/// `dispatch/` is the top of the NDK layer: an object names its table through
/// `object::Dispatched`, which `dispatch/<object>.rs` implements, so no file but `dispatch/*`
/// names `ndk::dispatch`.
#[test]
fn only_dispatch_names_dispatch() {
    let hits = naming(
        "src/ndk",
        &["src/ndk/dispatch"],
        &[
            "crate::ndk::dispatch",
            "super::dispatch",
            "super::super::dispatch",
        ],
    );
    assert!(
        hits.is_empty(),
        "ndk/dispatch named below it:\n{}",
        hits.join("\n")
    );
}

/// The object core (`src/ndk/*.rs`) holds the connection side as the `Connections` trait it
/// defines and never names `ndk/connect/` (which names the core freely).
#[test]
fn the_object_core_never_names_the_connection_side() {
    let hits = naming(
        "src/ndk",
        &["src/ndk/connect", "src/ndk/dispatch"],
        &["crate::ndk::connect", "super::connect"],
    );
    assert!(
        hits.is_empty(),
        "ndk/connect named by the object core:\n{}",
        hits.join("\n")
    );
}

/// The device layer speaks device terms: nothing under `src/pvrdma` names the NDK layer (nor
/// its ABI), whatever the path (`crate::ndk`, `super::super::ndk`).
#[test]
fn pvrdma_never_names_ndk() {
    let hits = naming(
        "src/pvrdma",
        &[],
        &["crate::ndk", "crate::ndkpi", "super::super::ndk"],
    );
    assert!(hits.is_empty(), "pvrdma names ndk:\n{}", hits.join("\n"));
}

// ---------------------------------------------------------------- the page's counts

const NUMBERS: [&str; 21] = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
];

fn number(word: &str) -> Option<usize> {
    word.parse()
        .ok()
        .or_else(|| NUMBERS.iter().position(|n| n.eq_ignore_ascii_case(word)))
}

/// The page's sections: (heading, body).
fn sections(page: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in page.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            out.push((h.to_string(), String::new()));
        } else if let Some((_, body)) = out.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    out
}

/// Every "crosses N files" of the page states how many distinct files its section's step
/// table cites: the count is the test's, the page only repeats it.
#[test]
fn each_path_crosses_the_files_its_table_cites() {
    let page = fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for (heading, body) in sections(&page) {
        let prose = body.replace('\n', " ");
        let Some(at) = prose.find(" crosses ") else {
            continue;
        };
        let rest = &prose[at + " crosses ".len()..];
        let word = rest.split_whitespace().next().unwrap_or("");
        let unit = rest.split_whitespace().nth(1).unwrap_or("");
        assert!(
            unit.trim_end_matches(|c: char| !c.is_alphabetic()) == "files",
            "\"{heading}\": \"crosses\" is not followed by \"N files\""
        );
        let stated = number(word).unwrap_or_else(|| panic!("\"{heading}\": {word:?} files"));
        let mut files: Vec<String> = body
            .lines()
            .filter(|l| l.starts_with('|'))
            .flat_map(|l| cited_lines(l).into_iter().map(|(p, _, _)| p))
            .collect();
        files.sort();
        files.dedup();
        if files.len() != stated {
            wrong.push(format!(
                "\"{heading}\" says it crosses {stated} files; its table cites {}: {}",
                files.len(),
                files.join(", ")
            ));
        }
        checked += 1;
    }
    assert!(checked >= 2, "the page states {checked} path counts");
    assert!(
        wrong.is_empty(),
        "docs/ARCHITECTURE.md:\n{}",
        wrong.join("\n")
    );
}

/// The layer table's "files" column: the number of `.rs` files under each folder it names.
#[test]
fn the_layer_table_counts_each_folders_files() {
    let page = fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let (_, layers) = sections(&page)
        .into_iter()
        .find(|(h, _)| h == "The layers")
        .expect("a \"The layers\" section");
    let mut rows = 0;
    let mut wrong = Vec::new();
    for row in layers.lines().filter(|l| l.starts_with("| `src/")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let folder = cells[1].trim_matches('`');
        let stated: usize = cells[2]
            .parse()
            .unwrap_or_else(|_| panic!("{folder}: files column {:?}", cells[2]));
        let mut files = Vec::new();
        rust_files(&root().join(folder), &mut files);
        // A layer's own files: a folder listed on a row of its own is counted there.
        let nested: Vec<String> = layers
            .lines()
            .filter(|l| l.starts_with("| `src/"))
            .map(|l| {
                l.split('|')
                    .nth(1)
                    .unwrap()
                    .trim()
                    .trim_matches('`')
                    .to_string()
            })
            .filter(|f| f != folder && f.starts_with(folder))
            .collect();
        let own = files
            .iter()
            .filter(|f| {
                let rel = f
                    .strip_prefix(root())
                    .unwrap()
                    .to_string_lossy()
                    .to_string();
                !nested.iter().any(|n| rel.starts_with(n.as_str()))
            })
            .count();
        if own != stated {
            wrong.push(format!(
                "{folder}: the page says {stated} files, there are {own}"
            ));
        }
        rows += 1;
    }
    assert!(rows >= 6, "{rows} layer rows");
    assert!(
        wrong.is_empty(),
        "docs/ARCHITECTURE.md:\n{}",
        wrong.join("\n")
    );
}
