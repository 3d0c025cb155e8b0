//! The docs are true to the tree: docs/architecture.md's table of crates and what each may
//! depend on is the workspace's dependency graph (`cargo metadata`), and every repository path
//! named in docs/ and README.md exists.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().expect("repo root")
}

/// Crate folder → (dependency folder → optional?): the normal (not dev-, not build-)
/// dependencies between workspace members, from `cargo metadata`.
fn workspace_deps() -> BTreeMap<String, BTreeMap<String, bool>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(root())
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .output()
        .expect("run cargo metadata");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    let packages = meta["packages"].as_array().expect("packages");
    let folder_of = |manifest: &str| -> String {
        let dir = Path::new(manifest).parent().expect("manifest dir");
        dir.strip_prefix(root()).expect("member inside the repo").display().to_string()
    };
    let by_name: BTreeMap<String, String> = packages
        .iter()
        .map(|p| {
            (p["name"].as_str().expect("name").to_string(), folder_of(p["manifest_path"].as_str().expect("manifest")))
        })
        .collect();
    let mut deps = BTreeMap::new();
    for p in packages {
        let folder = folder_of(p["manifest_path"].as_str().expect("manifest"));
        let mut mine = BTreeMap::new();
        for d in p["dependencies"].as_array().expect("dependencies") {
            let normal = d["kind"].is_null();
            if let (true, Some(dep)) = (normal, by_name.get(d["name"].as_str().expect("dep name"))) {
                let optional = d["optional"].as_bool().unwrap_or(false);
                mine.insert(dep.clone(), optional);
            }
        }
        deps.insert(folder, mine);
    }
    deps
}

/// The table `| crate | role | may depend on |` of docs/architecture.md: crate folder → (crate
/// → optional?). The last cell is `—` or a comma-separated list of crate names, an optional
/// dependency in parentheses; anything else in it is an error.
/// A workspace crate's name as the docs write it: lowercase ASCII letters, digits (`k8s`) and
/// `-`, starting with a letter.
fn is_crate_name(n: &str) -> bool {
    n.bytes().next().is_some_and(|c| c.is_ascii_lowercase())
        && n.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
}

fn documented_deps() -> BTreeMap<String, BTreeMap<String, bool>> {
    let text = std::fs::read_to_string(root().join("docs/architecture.md")).expect("docs/architecture.md");
    let mut lines = text.lines().skip_while(|l| !l.starts_with("| crate | role | may depend on |"));
    assert!(lines.next().is_some(), "docs/architecture.md has no `| crate | role | may depend on |` table");
    let mut table = BTreeMap::new();
    for row in lines.skip(1).take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = row.trim().trim_matches('|').split('|').map(str::trim).collect();
        let (Some(first), Some(last)) = (cells.first(), cells.last()) else { panic!("row `{row}`") };
        let name = first.trim_matches('`').to_string();
        assert!(!name.is_empty() && !name.contains(' '), "crate cell `{first}` in `{row}`");
        let mut deps = BTreeMap::new();
        if *last != "—" {
            for item in last.split(',').map(str::trim) {
                let (dep, optional) = match item.strip_prefix('(').and_then(|i| i.strip_suffix(')')) {
                    Some(inner) => (inner, true),
                    None => (item, false),
                };
                assert!(
                    is_crate_name(dep),
                    "`{item}` in the row of `{name}` is not a crate name (a list of names, optional ones in parentheses)"
                );
                deps.insert(dep.to_string(), optional);
            }
        }
        assert!(table.insert(name.clone(), deps).is_none(), "`{name}` has two rows");
    }
    table
}

#[test]
fn the_architecture_table_is_the_workspace_dependency_graph() {
    let real = workspace_deps();
    let documented = documented_deps();
    let mut wrong = Vec::new();
    for (krate, deps) in &real {
        match documented.get(krate) {
            None => wrong.push(format!("`{krate}` is a workspace crate without a row")),
            Some(doc) if doc != deps => {
                let show = |m: &BTreeMap<String, bool>| {
                    m.iter().map(|(d, o)| if *o { format!("({d})") } else { d.clone() }).collect::<Vec<_>>().join(", ")
                };
                wrong.push(format!("`{krate}` depends on [{}], the table says [{}]", show(deps), show(doc)));
            }
            Some(_) => {}
        }
    }
    for krate in documented.keys().filter(|k| !real.contains_key(*k)) {
        wrong.push(format!("`{krate}` has a row but is no workspace crate"));
    }
    assert!(wrong.is_empty(), "docs/architecture.md's crate table is out of date:\n{}", wrong.join("\n"));
}

/// The direct dependencies the diagram must draw: the transitive reduction of the workspace's
/// graph (normal dependencies, optional ones included). `a → b` is drawn unless `a` reaches `b`
/// through another of its dependencies; a required `a → b` counts as reached only along
/// required edges (a path through an optional dependency does not make it implied).
/// Crate → (dependency → optional?).
fn reduced_deps(real: &BTreeMap<String, BTreeMap<String, bool>>) -> BTreeMap<String, BTreeMap<String, bool>> {
    // Whether `from` reaches `to`, along required edges only when `required`.
    let reaches = |from: &str, to: &str, required: bool| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_string()];
        while let Some(c) = stack.pop() {
            if c == to {
                return true;
            }
            if seen.insert(c.clone()) {
                let next = real.get(&c).into_iter().flatten().filter(|(_, o)| !required || !**o);
                stack.extend(next.map(|(d, _)| d.clone()));
            }
        }
        false
    };
    real.iter()
        .map(|(krate, deps)| {
            let kept = deps
                .iter()
                .filter(|(dep, opt)| {
                    let required = !**opt;
                    !deps.iter().any(|(other, o)| other != *dep && (!required || !*o) && reaches(other, dep, required))
                })
                .map(|(d, o)| (d.clone(), *o))
                .collect();
            (krate.clone(), kept)
        })
        .collect()
}

/// One diagram line as the test expects it: `crate → a, b, (optional)`, or `crate → ·`.
fn diagram_line(krate: &str, deps: &BTreeMap<String, bool>) -> String {
    let list: Vec<String> = deps.iter().map(|(d, o)| if *o { format!("({d})") } else { d.clone() }).collect();
    format!("{krate} → {}", if list.is_empty() { "·".to_string() } else { list.join(", ") })
}

/// The diagram of docs/architecture.md: the fenced block right after the heading
/// `## Crates and their dependency direction`. Each line is `crate → deps` (spaces around the
/// arrow as wide as the layout needs) then, after two or more spaces, a free comment; `deps` is `·` (none) or a comma-separated list of crate names,
/// an optional dependency in parentheses. Anything else in the block is an error.
fn diagram_edges(text: &str) -> BTreeMap<String, (usize, BTreeMap<String, bool>)> {
    let start = text.find("\n## Crates and their dependency direction\n").expect("the heading of the crate diagram");
    let mut lines = text[start..].lines().enumerate().skip_while(|(_, l)| !l.starts_with("```"));
    lines.next().expect("a fenced diagram under the heading");
    let first = text[..start].lines().count();
    let mut out = BTreeMap::new();
    for (n, line) in lines.take_while(|(_, l)| !l.starts_with("```")) {
        let at = first + n;
        if line.trim().is_empty() {
            continue;
        }
        let Some((krate, rest)) = line.split_once(" → ") else {
            panic!("docs/architecture.md:{at}: `{line}` is not `crate → deps  comment`")
        };
        let deps = rest.trim_start().split("  ").next().unwrap_or("");
        let krate = krate.trim().to_string();
        let is_name = is_crate_name;
        assert!(is_name(&krate), "docs/architecture.md:{at}: `{krate}` is not a crate name");
        let mut map = BTreeMap::new();
        if deps.trim() != "·" {
            for item in deps.split(',').map(str::trim) {
                let (dep, optional) = match item.strip_prefix('(').and_then(|i| i.strip_suffix(')')) {
                    Some(inner) => (inner, true),
                    None => (item, false),
                };
                assert!(is_name(dep), "docs/architecture.md:{at}: `{item}` is not a crate name (or `(name)`)");
                assert!(map.insert(dep.to_string(), optional).is_none(), "docs/architecture.md:{at}: `{dep}` twice");
            }
        }
        assert!(out.insert(krate.clone(), (at, map)).is_none(), "docs/architecture.md:{at}: `{krate}` has two lines");
    }
    out
}

#[test]
fn the_architecture_diagram_draws_the_direct_dependencies() {
    let real = workspace_deps();
    let want = reduced_deps(&real);
    let text = std::fs::read_to_string(root().join("docs/architecture.md")).expect("docs/architecture.md");
    let drawn = diagram_edges(&text);
    let mut wrong = Vec::new();
    for (krate, deps) in &want {
        match drawn.get(krate) {
            None => wrong.push(format!("no line for `{krate}`: draw `{}`", diagram_line(krate, deps))),
            Some((at, d)) if d != deps => wrong.push(format!(
                "docs/architecture.md:{at}: draws `{}`, must be `{}`",
                diagram_line(krate, d),
                diagram_line(krate, deps)
            )),
            Some(_) => {}
        }
    }
    for (krate, (at, _)) in drawn.iter().filter(|(k, _)| !real.contains_key(*k)) {
        wrong.push(format!("docs/architecture.md:{at}: `{krate}` is no workspace crate"));
    }
    assert!(
        wrong.is_empty(),
        "docs/architecture.md's diagram is not the workspace's direct dependencies \
         (each crate's dependencies less those it reaches through another):\n{}",
        wrong.join("\n")
    );
}

/// The diagram parser and the reduction on made-up input.
#[test]
fn the_diagram_parser_reads_edges_and_the_reduction_drops_implied_ones() {
    let text = "x\n## Crates and their dependency direction\n\ntext\n```text\n  top → mid, (opt)   the top\n\nmid → low  comment → not an edge\nlow → ·\nopt → ·\n```\n";
    let d = diagram_edges(text);
    let got: Vec<String> = d.iter().map(|(k, (_, deps))| diagram_line(k, deps)).collect();
    assert_eq!(got, ["low → ·", "mid → low", "opt → ·", "top → mid, (opt)"]);
    assert_eq!(d["top"].0, 6, "line numbers count from the file's first line");
    assert!(is_crate_name("k8s") && is_crate_name("broker-client"));
    assert!(!is_crate_name("") && !is_crate_name("8k") && !is_crate_name("Cli") && !is_crate_name("a b"));
    let g = |pairs: &[(&str, &[(&str, bool)])]| -> BTreeMap<String, BTreeMap<String, bool>> {
        pairs.iter().map(|(k, ds)| (k.to_string(), ds.iter().map(|(d, o)| (d.to_string(), *o)).collect())).collect()
    };
    // top reaches low through mid (drawn: top → mid only), but its required `deep` only through
    // the optional `opt` (drawn); `(far)` is optional, implied by mid.
    let real = g(&[
        ("top", &[("mid", false), ("low", false), ("opt", true), ("deep", false), ("far", true)]),
        ("mid", &[("low", false), ("far", false)]),
        ("opt", &[("deep", false)]),
        ("low", &[]),
        ("deep", &[]),
        ("far", &[]),
    ]);
    let want = g(&[
        ("top", &[("mid", false), ("opt", true), ("deep", false)]),
        ("mid", &[("low", false), ("far", false)]),
        ("opt", &[("deep", false)]),
        ("low", &[]),
        ("deep", &[]),
        ("far", &[]),
    ]);
    assert_eq!(reduced_deps(&real), want);
}

/// The markdown files the check reads: README.md and everything under docs/.
fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> =
            std::fs::read_dir(dir).expect("read docs").flatten().map(|e| e.path()).collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let mut v = vec![root().join("README.md")];
    walk(&root().join("docs"), &mut v);
    v
}

/// Every file name in the repository (outside `target/` and `.git/`), for bare names.
fn all_file_names() -> &'static BTreeSet<String> {
    static NAMES: std::sync::OnceLock<BTreeSet<String>> = std::sync::OnceLock::new();
    NAMES.get_or_init(scan_file_names)
}

fn scan_file_names() -> BTreeSet<String> {
    fn walk(dir: &Path, out: &mut BTreeSet<String>) {
        for e in std::fs::read_dir(dir).expect("read dir").flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                if name != "target" && name != ".git" {
                    walk(&p, out);
                }
            } else {
                out.insert(name);
            }
        }
    }
    let mut s = BTreeSet::new();
    walk(&root(), &mut s);
    s
}

/// Top-level folders of the repository (`target/` and `.git/` are not the repo's).
fn top_folders() -> BTreeSet<String> {
    std::fs::read_dir(root())
        .expect("read root")
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "target" && n != ".git")
        .collect()
}

const FILE_EXTS: [&str; 4] = [".rs", ".md", ".sh", ".toml"];

/// A code span's word as a repository path, if it is one: relative to the repo (not `/…`, not
/// `./…`, which is a path in some other tree), no URL, no placeholder;
/// its first segment a top-level folder, or it ends in one of [`FILE_EXTS`]. A `:line`
/// suffix and a `#anchor` are dropped.
fn as_repo_path(word: &str, tops: &BTreeSet<String>) -> Option<String> {
    let w = word.trim_start_matches(['(', '"', '\'']).trim_end_matches([',', ';', '.', ')', '"', '\'', ':']);
    if w.is_empty()
        || w.starts_with('/')
        || w.starts_with("./")
        || w.starts_with('-')
        || w.contains("://")
        || w.starts_with('$')
    {
        return None;
    }
    let w = w.split('#').next().unwrap_or(w);
    let w = match w.split_once(':') {
        Some((p, rest)) if rest.chars().next().is_some_and(|c| c.is_ascii_digit()) => p,
        Some(_) => return None, // `sim:cayman`, `crate::path`
        None => w,
    };
    if w.chars().any(|c| matches!(c, '<' | '>' | '{' | '}' | '[' | ']' | '|' | '=' | '…' | '$' | '@' | '%' | '+')) {
        return None; // a placeholder, a pattern or an expression, not one path
    }
    let first = w.split('/').next().unwrap_or("");
    let top = w.contains('/') && tops.contains(first);
    let ext = FILE_EXTS.iter().any(|e| w.ends_with(e)) && w.len() > 3;
    (top || ext).then(|| w.trim_end_matches('/').to_string())
}

/// Whether `name` matches `pat`, where a `*` in `pat` matches any run of characters.
fn glob_match(pat: &str, name: &str) -> bool {
    match pat.split_once('*') {
        None => pat == name,
        Some((pre, post)) => {
            name.len() >= pre.len() + post.len() && name.starts_with(pre) && name.ends_with(post) && !post.contains('*')
        }
    }
}

/// Whether `crate/feature` names a Cargo feature of a workspace crate (`fabric/ofi`), which
/// reads like a path but is not one.
fn is_feature(word: &str) -> bool {
    let Some((krate, feature)) = word.split_once('/') else { return false };
    let Ok(manifest) = std::fs::read_to_string(root().join(krate).join("Cargo.toml")) else { return false };
    let Some(features) = manifest.split("\n[features]\n").nth(1) else { return false };
    let section = features.split("\n[").next().unwrap_or("");
    section.lines().any(|l| l.split('=').next().map(str::trim) == Some(feature))
}

/// Whether `path` (relative to the repo root) exists; a `*` in its last segment matches any
/// run of characters, and at least one entry must match.
fn exists(path: &str) -> bool {
    let p = root().join(path);
    if !path.contains('*') {
        return p.exists();
    }
    let (dir, pat) = path.rsplit_once('/').unwrap_or(("", path));
    if dir.contains('*') {
        return false;
    }
    std::fs::read_dir(root().join(dir))
        .is_ok_and(|rd| rd.flatten().any(|e| glob_match(pat, &e.file_name().to_string_lossy())))
}

/// Every path the markdown names: link targets (relative to the file) and code-span words that
/// look like repository paths (relative to the repo root, or to the file's folder; a bare file
/// name must be the name of some file in the repo).
fn named_paths(file: &Path, text: &str, tops: &BTreeSet<String>) -> Vec<(usize, String, bool)> {
    let mut found = Vec::new();
    let mut in_fence = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        // Links: `](target)`.
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or("");
            let target = target.split('#').next().unwrap_or("");
            if !target.is_empty() && !target.contains("://") && !target.starts_with("mailto:") {
                let rel = file.parent().expect("dir").join(target);
                let ok = rel.exists();
                found.push((n + 1, target.to_string(), ok));
            }
            rest = &after[end..];
        }
        // Code spans: `…`.
        for (k, span) in line.split('`').enumerate() {
            if k % 2 == 0 {
                continue;
            }
            for word in span.split(|c: char| c.is_whitespace() || c == ',') {
                let Some(p) = as_repo_path(word, tops) else { continue };
                let ok = exists(&p)
                    || file.parent().expect("dir").join(&p).exists()
                    || is_feature(&p)
                    || (!p.contains('/') && all_file_names().iter().any(|n| glob_match(&p, n)));
                found.push((n + 1, p, ok));
            }
        }
    }
    found
}

#[test]
fn every_repo_path_the_docs_name_exists() {
    let tops = top_folders();
    let mut missing = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).expect("read markdown");
        let rel = file.strip_prefix(root()).unwrap_or(&file).display().to_string();
        for (line, path, ok) in named_paths(&file, &text, &tops) {
            checked += 1;
            if !ok {
                missing.push(format!("{rel}:{line}: `{path}`"));
            }
        }
    }
    assert!(checked >= 100, "only {checked} paths found in the docs: the scanner is broken");
    assert!(missing.is_empty(), "paths named in the docs that do not exist:\n{}", missing.join("\n"));
    println!("{checked} paths named in the docs, all present");
}

/// The scanner on made-up lines: what counts as a path and what does not.
#[test]
fn the_path_scanner_takes_paths_and_leaves_the_rest() {
    let tops: BTreeSet<String> = ["hal", "docs", "scripts"].iter().map(|s| s.to_string()).collect();
    let takes = |w: &str| as_repo_path(w, &tops);
    assert_eq!(takes("hal/src/seq.rs:120").as_deref(), Some("hal/src/seq.rs"));
    assert_eq!(takes("hal/src/").as_deref(), Some("hal/src"));
    assert_eq!(takes("scripts/x.sh,").as_deref(), Some("scripts/x.sh"));
    assert_eq!(takes("build.rs").as_deref(), Some("build.rs"));
    assert_eq!(takes("(.cargo/config.toml").as_deref(), Some(".cargo/config.toml"));
    assert_eq!(takes("docs/a.md#section").as_deref(), Some("docs/a.md"));
    for not in [
        "hal::seq::Stream",
        "sim:cayman",
        "/dev/vfio/vfio",
        "https://x/y.md",
        "nrt/nrt.h",
        "<dir>/x.rs",
        "--flag",
        "a=b/c.rs",
    ] {
        assert_eq!(takes(not), None, "{not}");
    }
    let doc = root().join("docs/README.md");
    let found = named_paths(
        &doc,
        "see `hal/src/nope.rs` and [x](architecture.md), `x` `y`\n```\n`hal/src/fenced.rs`\n```\n",
        &tops,
    );
    let got: Vec<(&str, bool)> = found.iter().map(|(_, p, ok)| (p.as_str(), *ok)).collect();
    assert_eq!(got, [("architecture.md", true), ("hal/src/nope.rs", false)]);
    assert!(exists("csr-maps/blocks/*.toml") && !exists("csr-maps/blocks/*.nope"));
    assert!(glob_match("nc_intc*.toml", "nc_intc_g0.toml") && !glob_match("nc_intc*.toml", "nc_intc.rs"));
    assert!(is_feature("fabric/ofi") && !is_feature("fabric/src") && !is_feature("fabric/nope"));
}
