//! No import cycle between the top-level modules of any crate of the workspace.
//!
//! The graph, read from the source text: the nodes are the top-level modules of a crate (the
//! files `src/X.rs` and folders `src/X/` directly under `src/`, `lib.rs` and `main.rs`
//! excluded); there is an edge A→B when a file of A names `crate::B` (in a `use` — grouped
//! `crate::{B, …}` included — or in a path; `$crate::B` too), or when a file whose parent module
//! is the crate root (`src/A.rs`, `src/A/mod.rs`, or deeper files through enough `super::`)
//! names `super::B`. Comments are skipped (a doc link is not an import). A cycle is a strongly
//! connected set of more than one module; the failure lists each with the lines that make its
//! edges.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Where an edge comes from: `file:line`.
type Edges = BTreeMap<(String, String), Vec<String>>;

/// The top-level modules of the crate whose sources are in `src` and the edges between them.
fn module_graph(src: &Path) -> (BTreeSet<String>, Edges) {
    let mut nodes = BTreeSet::new();
    let mut tops = Vec::new();
    for e in std::fs::read_dir(src).unwrap_or_else(|e| panic!("{}: {e}", src.display())) {
        let p = e.expect("dir entry").path();
        let name = p.file_stem().and_then(|s| s.to_str()).expect("utf-8 name").to_string();
        let module = if p.is_dir() {
            p.join("mod.rs").exists() || src.join(format!("{name}.rs")).exists() || has_rs(&p)
        } else {
            p.extension().is_some_and(|x| x == "rs") && name != "lib" && name != "main"
        };
        if module && name != "bin" && nodes.insert(name.clone()) {
            tops.push(name.clone());
        }
    }
    let mut edges = Edges::new();
    for a in &tops {
        let mut files = Vec::new();
        let file = src.join(format!("{a}.rs"));
        if file.is_file() {
            files.push((file, 1));
        }
        let dir = src.join(a);
        if dir.is_dir() {
            rs_files(&dir, 2, &mut files);
        }
        for (file, depth) in files {
            let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let rel = file.strip_prefix(root()).unwrap_or(&file).display().to_string();
            for (line, b) in named_modules(&strip_comments(&text), depth) {
                if b != *a && nodes.contains(&b) {
                    let at = edges.entry((a.clone(), b)).or_default();
                    let here = format!("{rel}:{line}");
                    if at.last() != Some(&here) {
                        at.push(here);
                    }
                }
            }
        }
    }
    (nodes, edges)
}

fn has_rs(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .map(|rd| rd.flatten().any(|e| e.path().extension().is_some_and(|x| x == "rs")))
        .unwrap_or(false)
}

/// The `.rs` files under `dir` with their module depth below the crate root (`dir/mod.rs` is
/// one less deep than its siblings: it is the folder's module itself).
fn rs_files(dir: &Path, depth: usize, out: &mut Vec<(PathBuf, usize)>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rs_files(&p, depth + 1, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let d = if p.file_name().is_some_and(|n| n == "mod.rs") { depth - 1 } else { depth };
            out.push((p, d));
        }
    }
}

/// The text with `//…` and `/*…*/` comments blanked (newlines kept, so line numbers hold).
/// String literals are kept as they are (a `"//"` in a string does not start a comment).
fn strip_comments(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let mut in_str = false;
    while i < b.len() {
        if in_str {
            out.push(b[i]);
            if b[i] == b'\\' && i + 1 < b.len() {
                out.push(b[i + 1]);
                i += 2;
                continue;
            }
            if b[i] == b'"' {
                in_str = false;
            }
            i += 1;
        } else if b[i] == b'"' && !(i > 0 && b[i - 1] == b'\'' && b.get(i + 1) == Some(&b'\'')) {
            in_str = true;
            out.push(b[i]);
            i += 1;
        } else if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0usize;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if b[i] == b'\n' {
                        out.push(b'\n');
                    }
                    i += 1;
                }
            }
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The first identifier of `s` (after whitespace), if any.
fn leading_ident(s: &str) -> Option<String> {
    let s = s.trim_start();
    let s = s.strip_prefix("r#").unwrap_or(s);
    let n = s.bytes().take_while(|&c| is_ident(c)).count();
    (n > 0).then(|| s[..n].to_string())
}

/// The crate-root children a file names, with their line numbers: `crate::B`, `crate::{B, …}`
/// and, from a file `depth` modules below the root, `super::` repeated `depth` times then `B`.
fn named_modules(text: &str, depth: usize) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let b = text.as_bytes();
    let line_of = |pos: usize| text[..pos].bytes().filter(|&c| c == b'\n').count() + 1;
    let roots: Vec<String> = {
        let mut v = vec!["crate::".to_string()];
        if depth >= 1 {
            v.push("super::".repeat(depth));
        }
        v
    };
    for root in &roots {
        let mut from = 0;
        while let Some(off) = text[from..].find(root.as_str()) {
            let pos = from + off;
            from = pos + root.len();
            if pos > 0 && is_ident(b[pos - 1]) {
                continue;
            }
            // `super::super::x` from a file 1 deep is not `super::` then `super`.
            if root.starts_with("super") && pos >= 2 && &text[pos - 2..pos] == "::" {
                continue;
            }
            let rest = &text[from..];
            if root.starts_with("super") && rest.starts_with("super::") {
                continue;
            }
            if let Some(group) = rest.trim_start().strip_prefix('{') {
                for item in top_level_items(group) {
                    if let Some(id) = leading_ident(&item) {
                        found.push((line_of(pos), id));
                    }
                }
            } else if let Some(id) = leading_ident(rest) {
                found.push((line_of(pos), id));
            }
        }
    }
    found.retain(|(_, id)| id != "self" && id != "super" && id != "crate");
    found
}

/// The comma-separated items of a brace group (`group` starts after its `{`), up to its `}`.
fn top_level_items(group: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut depth = 0usize;
    let mut cur = String::new();
    for c in group.chars() {
        match c {
            '{' => {
                depth += 1;
                cur.push(c);
            }
            '}' if depth == 0 => break,
            '}' => {
                depth -= 1;
                cur.push(c);
            }
            ',' if depth == 0 => items.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    items.push(cur);
    items
}

/// The strongly connected components of more than one node (Tarjan), each sorted.
fn cycles(nodes: &BTreeSet<String>, edges: &Edges) -> Vec<Vec<String>> {
    struct T<'a> {
        adj: BTreeMap<&'a str, Vec<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        t.index.insert(v, t.next);
        t.low.insert(v, t.next);
        t.next += 1;
        t.stack.push(v);
        t.on.insert(v);
        for w in t.adj.get(v).cloned().unwrap_or_default() {
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low[v];
                t.low.insert(v, lv.min(lw));
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low[v];
                t.low.insert(v, lv.min(iw));
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut adj: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges.keys() {
        adj.entry(a.as_str()).or_default().push(b.as_str());
    }
    let mut t = T {
        adj,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for n in nodes {
        if !t.index.contains_key(n.as_str()) {
            visit(&mut t, n);
        }
    }
    t.out.sort();
    t.out
}

/// The report of the cycles of a crate: each strongly connected set and its edges with the
/// lines that make them (empty when there is none).
fn cycle_report(src: &Path) -> String {
    let (nodes, edges) = module_graph(src);
    let mut report = String::new();
    for comp in cycles(&nodes, &edges) {
        report.push_str(&format!("cycle among {{{}}}:\n", comp.join(", ")));
        for ((a, b), at) in &edges {
            if comp.contains(a) && comp.contains(b) {
                let more = if at.len() > 3 { format!(" (+{} more)", at.len() - 3) } else { String::new() };
                report.push_str(&format!("  {a} -> {b}: {}{more}\n", at[..at.len().min(3)].join(", ")));
            }
        }
    }
    report
}

/// The workspace's member folders, read from the root `Cargo.toml`'s `members = [...]`, so a
/// new crate is checked without touching this file.
fn workspace_members() -> Vec<String> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    let start = manifest.find("members").expect("Cargo.toml has no `members`");
    let list = &manifest[start..];
    let open = list.find('[').expect("`members = [`");
    let close = list.find(']').expect("`members = [...]`");
    let members: Vec<String> = list[open + 1..close]
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect();
    assert!(members.len() >= 10, "only {} workspace members read from Cargo.toml: {members:?}", members.len());
    members
}

/// Every crate of the workspace: the top-level modules of its `src/` (where it has one) import
/// each other without a cycle. All crates are checked before the test fails, so the failure
/// lists every cycle of every crate.
#[test]
fn no_crate_has_an_import_cycle() {
    let mut report = String::new();
    let mut checked = Vec::new();
    for krate in workspace_members() {
        let src = root().join(&krate).join("src");
        if !src.is_dir() {
            continue;
        }
        checked.push(krate.clone());
        let r = cycle_report(&src);
        if !r.is_empty() {
            report.push_str(&format!("{krate}:\n{r}"));
        }
    }
    for krate in ["hal", "runtime", "capi", "sim", "vfio", "neff"] {
        assert!(checked.iter().any(|c| c == krate), "{krate} was not checked: {checked:?}");
        let (nodes, _) = module_graph(&root().join(krate).join("src"));
        assert!(nodes.len() >= 5, "{krate}: only {} top-level modules found: {nodes:?}", nodes.len());
    }
    assert!(report.is_empty(), "import cycles between the top-level modules of a crate:\n{report}");
}

/// The checker itself, on a made-up crate: it finds a cycle made by a grouped `use`, a path in
/// an expression and a root-level `super::`, ignores comments and deeper `super::`, and finds
/// none once the back edge is gone.
#[test]
fn the_checker_finds_the_cycles_it_must_and_no_others() {
    let dir = std::env::temp_dir().join(format!("no-cycles-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("core/deep")).expect("mkdir");
    let write = |p: &str, t: &str| std::fs::write(src.join(p), t).expect("write");
    write("lib.rs", "mod a; mod core; mod leaf; mod z; use crate::a::X;\n");
    write(
        "leaf.rs",
        "// crate::a is only named in a comment\n/* and crate::z in /* a nested */ one */\npub fn f() {}\n",
    );
    write("a.rs", "use crate::{leaf, core::{Y, deep}};\npub struct X;\n");
    write("core/mod.rs", "pub mod deep;\npub struct Y;\nfn g() { super::leaf::f(); }\n");
    write("core/deep/mod.rs", "fn h() { let s = \"crate::z\"; super::super::z::q(); }\n");
    write("z.rs", "pub fn q() { let _ = super::a::X; }\n");
    let (nodes, edges) = module_graph(&src);
    let names: Vec<&str> = nodes.iter().map(String::as_str).collect();
    assert_eq!(names, ["a", "core", "leaf", "z"]);
    let pairs: Vec<(&str, &str)> = edges.keys().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    // `"crate::z"` in a string literal counts as naming it: strings are not parsed away, and
    // the rule is about names; core/deep/mod.rs also reaches z through `super::super::`.
    assert_eq!(pairs, [("a", "core"), ("a", "leaf"), ("core", "leaf"), ("core", "z"), ("z", "a")]);
    assert_eq!(cycles(&nodes, &edges), [vec!["a".to_string(), "core".into(), "z".into()]]);
    let report = cycle_report(&src);
    assert!(report.contains("z -> a: ") && report.contains("z.rs:1"), "{report}");
    write("z.rs", "pub fn q() {}\n");
    assert_eq!(cycle_report(&src), "");
    let _ = std::fs::remove_dir_all(&dir);
}
