//! The house rules of every crate's `src/` (the root's, `crates/dsp/src/`,
//! `crates/decode/src/`), checked on the source text (docs/CONVENTIONS.md,
//! "The house test"). What crosses crates Cargo checks: the recipes and the
//! decoders cannot import the daemon's layers, which are not their
//! dependencies.
//!
//! * **no import circles between files of one crate** — a loop of files
//!   that import each other means a type sits in the wrong room;
//! * **no file over 800 lines**;
//! * **no public function returning `Result<_, String>`**, and **no public
//!   error enum with a `(String)` variant** — an error crossing a boundary is
//!   a `thiserror` enum whose variants say what was wrong, so it can be
//!   matched and counted;
//! * **no file outside `app/` and `cli/` imports `crate::app`** — lower
//!   layers (and their tests) never reach up into the commands;
//! * **at most five non-test functions over 80 lines**, each listed in
//!   `LONG_FNS` with its reason — a function is a screen of steps.
//!
//! How the file graph is built (a pragmatic reading of Rust, not a compiler;
//! std only, so it runs everywhere the tests run):
//!
//! * Every `.rs` file under a crate's `src/` except `main.rs` (the binary,
//!   which sees the library only as `melforge::`) is a node. Its module path
//!   comes from its place in its crate (`a/b.rs` and `a/b/mod.rs` are
//!   `a::b`), or from a
//!   `#[path = "x.rs"] mod name;` in the file that declares it.
//! * Comments, string and char literals are blanked first, so a path in a
//!   doc comment or a message is no edge.
//! * Every path that starts with `crate::`, `super::` or `self::` (use trees
//!   with `{…}` groups expanded), and every path whose first segment names a
//!   child module of the current file (`pub use outcome::RejectKind;` in a
//!   `mod.rs`) is resolved to an absolute module path; `super` and `self`
//!   count the inline `mod name { … }` blocks they sit in (a `mod tests`
//!   block's `use super::*` is its own file).
//! * A path is an edge to the file of its longest prefix that is a file
//!   module: `crate::compute::RejectKind` is an edge to `compute/mod.rs`, and
//!   a `mod.rs` that re-exports (`pub use`) from a child has an edge to that
//!   child. Paths into inline modules (`crate::config::defaults::io::X`) land
//!   on the file holding them. A file's edges to itself are ignored, and so
//!   are macros' `$crate::` paths.
//! * A file's edges to the files of its own ancestor modules are not
//!   counted: a module is one room whose `mod.rs` is its door, and a child
//!   using what its parent owns (`super::Error`, the parent's config) while
//!   the parent re-exports the child is Rust's module idiom, not a loop
//!   between rooms. Every other edge counts, re-exports included: a file
//!   outside `compute` that names `crate::compute::RejectKind` depends on
//!   `compute/mod.rs`, and through its `pub use` on `compute/outcome.rs`.
//! * A cycle is a strongly connected component of two or more files; the
//!   test prints each with one loop through it.
//!
//! What it does not see: paths built by macros, glob imports that name no
//! module (`use super::*` is an edge to the parent's file, not to what the
//! glob brings), and item names shadowing a child module's name.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Longest file allowed under `src/` (docs/CONVENTIONS.md, "The house test").
const MAX_LINES: usize = 800;

/// One source file of a library: where it is (from the repository's root),
/// its crate's `src/`, which module it is, its text with comments and
/// literals blanked, and its raw line count.
struct SourceFile {
    rel: String,
    krate: &'static str,
    module: Vec<String>,
    code: String,
    lines: usize,
}

/// The `src/` of every crate of the product, from the repository's root.
const CRATES: [&str; 3] = ["src", "crates/dsp/src", "crates/decode/src"];

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// The module path a file has by its place under `src/`.
fn module_by_place(rel: &str) -> Vec<String> {
    let stem = rel.strip_suffix(".rs").expect("a .rs file");
    let mut parts: Vec<String> = stem.split('/').map(str::to_owned).collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// Replaces comments, string literals and char literals with spaces
/// (newlines kept), so that only code is left to scan.
fn blank_non_code(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = b[i..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(b.len(), |p| i + p);
                blank(&mut out, i, end);
                i = end;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let (mut depth, mut j) = (1, i + 2);
                while j < b.len() && depth > 0 {
                    if b[j] == b'/' && b.get(j + 1) == Some(&b'*') {
                        depth += 1;
                        j += 2;
                    } else if b[j] == b'*' && b.get(j + 1) == Some(&b'/') {
                        depth -= 1;
                        j += 2;
                    } else {
                        j += 1;
                    }
                }
                blank(&mut out, i, j);
                i = j;
            }
            b'r' if (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
                && (i == 0
                    || !is_ident(b[i - 1])
                    || (b[i - 1] == b'b' && (i < 2 || !is_ident(b[i - 2])))) =>
            {
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let mut close = vec![b'"'];
                close.extend(std::iter::repeat_n(b'#', hashes));
                let start = i + 2 + hashes;
                let end = b[start..]
                    .windows(close.len())
                    .position(|w| w == close.as_slice())
                    .map_or(b.len(), |p| start + p + close.len());
                blank(&mut out, i, end);
                i = end;
            }
            b'"' => {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                let end = (j + 1).min(b.len());
                blank(&mut out, i, end);
                i = end;
            }
            b'\'' => {
                // A char literal ('x', '\n', '\u{..}'), or a lifetime ('a).
                let end = if b.get(i + 1) == Some(&b'\\') {
                    b[i + 2..]
                        .iter()
                        .position(|&c| c == b'\'')
                        .map(|p| i + 2 + p + 1)
                } else if b.get(i + 2) == Some(&b'\'') {
                    Some(i + 3)
                } else {
                    // A multi-byte UTF-8 char literal, else a lifetime.
                    let len = std::str::from_utf8(&b[i + 1..(i + 5).min(b.len())])
                        .or_else(|e| std::str::from_utf8(&b[i + 1..i + 1 + e.valid_up_to()]))
                        .ok()
                        .and_then(|s| s.chars().next())
                        .map_or(1, char::len_utf8);
                    (b.get(i + 1 + len) == Some(&b'\'')).then_some(i + 2 + len)
                };
                match end {
                    Some(end) => {
                        blank(&mut out, i, end);
                        i = end;
                    }
                    None => i += 1,
                }
            }
            _ => i += 1,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// A token of the blanked code: an identifier, `::`, or one punctuation byte.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Path,
    Punct(u8),
}

fn tokens(code: &str) -> Vec<Tok> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if is_ident(c) {
            let start = i;
            while i < b.len() && is_ident(b[i]) {
                i += 1;
            }
            out.push(Tok::Ident(code[start..i].to_owned()));
        } else if c == b':' && b.get(i + 1) == Some(&b':') {
            out.push(Tok::Path);
            i += 2;
        } else {
            out.push(Tok::Punct(c));
            i += 1;
        }
    }
    out
}

/// Parses a path (or a use tree) starting at `toks[i]`, an identifier;
/// pushes every full path it names into `out` and returns the index after it.
fn parse_tree(toks: &[Tok], mut i: usize, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix.to_vec();
    loop {
        match toks.get(i) {
            Some(Tok::Ident(s)) => {
                path.push(s.clone());
                i += 1;
            }
            Some(Tok::Punct(b'*')) => {
                i += 1;
                break;
            }
            Some(Tok::Punct(b'{')) => {
                i += 1;
                loop {
                    match toks.get(i) {
                        Some(Tok::Punct(b'}')) => return i + 1,
                        Some(Tok::Punct(b',')) => i += 1,
                        Some(Tok::Ident(_)) | Some(Tok::Punct(b'*')) | Some(Tok::Punct(b'{')) => {
                            i = parse_tree(toks, i, &path, out);
                        }
                        _ => return i,
                    }
                }
            }
            _ => break,
        }
        if toks.get(i) == Some(&Tok::Path) {
            i += 1;
        } else {
            break;
        }
    }
    // `a::b::{self, C}` names `a::b`; drop the trailing `self`.
    if path.last().is_some_and(|s| s == "self") && path.len() > 1 {
        path.pop();
    }
    out.push(path);
    i
}

/// Every path of a file, made absolute (`crate`-rooted, without `crate`).
fn paths_of(file: &SourceFile, child_modules: &BTreeSet<String>) -> Vec<Vec<String>> {
    let toks = tokens(&file.code);
    let mut absolute = Vec::new();
    // Inline `mod name {` blocks the scan is in: (name, brace depth inside).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        match &toks[i] {
            Tok::Punct(b'{') => {
                depth += 1;
                i += 1;
                continue;
            }
            Tok::Punct(b'}') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
                continue;
            }
            Tok::Ident(kw) if kw == "mod" => {
                if let (Some(Tok::Ident(name)), Some(Tok::Punct(b'{'))) =
                    (toks.get(i + 1), toks.get(i + 2))
                {
                    inline.push((name.clone(), depth + 1));
                }
                i += 1;
                continue;
            }
            _ => {}
        }
        let Tok::Ident(first) = &toks[i] else {
            i += 1;
            continue;
        };
        let starts_path = toks.get(i + 1) == Some(&Tok::Path);
        let after_path_sep = i > 0 && toks[i - 1] == Tok::Path;
        let after_dollar = i > 0 && toks[i - 1] == Tok::Punct(b'$');
        let rooted = matches!(first.as_str(), "crate" | "super" | "self");
        let child = inline.is_empty() && child_modules.contains(first.as_str());
        // A use tree's first segment also counts without `::` after it
        // (`use crate::{a, b};` parses from `crate`).
        if after_path_sep || after_dollar || !(rooted || child) || !starts_path {
            i += 1;
            continue;
        }
        let mut found = Vec::new();
        let next = parse_tree(&toks, i, &[], &mut found);
        // The module the scan stands in: the file's, plus inline blocks.
        let mut here = file.module.clone();
        here.extend(inline.iter().map(|(n, _)| n.clone()));
        for p in found {
            let mut abs = if p[0] == "crate" {
                Vec::new()
            } else {
                here.clone()
            };
            let mut rest = if p[0] == "crate" || p[0] == "self" {
                &p[1..]
            } else {
                &p[..]
            };
            while rest.first().is_some_and(|s| s == "super") {
                abs.pop();
                rest = &rest[1..];
            }
            if rest.first().is_some_and(|s| s == "self") {
                rest = &rest[1..];
            }
            abs.extend(rest.iter().cloned());
            absolute.push(abs);
        }
        i = next.max(i + 1);
    }
    absolute
}

/// Reads every library file of every crate.
fn read_sources() -> Vec<SourceFile> {
    CRATES.into_iter().flat_map(read_crate).collect()
}

/// Reads every library file under `krate` (a crate's `src/`).
fn read_crate(krate: &'static str) -> Vec<SourceFile> {
    let root = repo_root();
    let src = root.join(krate);
    let mut paths = Vec::new();
    walk(&src, &mut paths);
    let mut files: Vec<SourceFile> = paths
        .iter()
        .map(|p| {
            let in_crate = p
                .strip_prefix(&src)
                .expect("under the crate's src")
                .to_string_lossy()
                .replace('\\', "/");
            let rel = format!("{krate}/{in_crate}");
            let text = fs::read_to_string(p).unwrap_or_else(|e| panic!("cannot read {rel}: {e}"));
            SourceFile {
                module: module_by_place(&in_crate),
                lines: text.lines().count(),
                code: blank_non_code(&text),
                rel,
                krate,
            }
        })
        .filter(|f| f.rel != "src/main.rs")
        .collect();
    assert!(
        !files.is_empty(),
        "{krate}/ holds no .rs file: CRATES is stale"
    );
    // `#[path = "x.rs"] mod name;` gives x.rs the module `<declarer>::name`.
    let mut renames = Vec::new();
    for f in &files {
        let text = fs::read_to_string(root.join(&f.rel)).expect("read again");
        for (n, line) in text.lines().enumerate() {
            let Some(rest) = line.trim().strip_prefix("#[path = \"") else {
                continue;
            };
            let target = rest.split('"').next().expect("a quoted path");
            let decl = text
                .lines()
                .skip(n + 1)
                .find(|l| !l.trim().starts_with("#["));
            let name = decl
                .and_then(|l| l.split("mod ").nth(1))
                .map(|s| s.trim_end_matches(';').trim().to_owned())
                .expect("#[path] before a `mod name;`");
            let dir = Path::new(&f.rel)
                .parent()
                .map(|d| d.to_string_lossy().into_owned())
                .unwrap_or_default();
            // Outside inline blocks, `#[path]` is relative to the declaring
            // file's own directory.
            let rel = if dir.is_empty() {
                target.to_owned()
            } else {
                format!("{dir}/{target}")
            };
            let mut module = f.module.clone();
            module.push(name);
            renames.push((rel, module));
        }
    }
    for (rel, module) in renames {
        if let Some(f) = files.iter_mut().find(|f| f.rel == rel) {
            f.module = module;
        }
    }
    files
}

/// The file graph: for each file (by index), the files it imports, each
/// with the first path (as written, made absolute) that imports it.
fn file_graph(files: &[SourceFile]) -> Vec<BTreeMap<usize, String>> {
    let by_module: BTreeMap<Vec<String>, usize> = files
        .iter()
        .enumerate()
        .map(|(i, f)| (f.module.clone(), i))
        .collect();
    files
        .iter()
        .enumerate()
        .map(|(me, f)| {
            let children: BTreeSet<String> = files
                .iter()
                .filter(|c| c.module.len() == f.module.len() + 1 && c.module.starts_with(&f.module))
                .map(|c| c.module.last().expect("a child has a name").clone())
                .collect();
            let mut edges = BTreeMap::new();
            for p in paths_of(f, &children) {
                let Some(to) = (0..=p.len())
                    .rev()
                    .find_map(|n| by_module.get(&p[..n]).copied())
                else {
                    continue;
                };
                if to != me && !is_ancestor(&files[to].module, &f.module) {
                    edges
                        .entry(to)
                        .or_insert_with(|| format!("crate::{}", p.join("::")));
                }
            }
            edges
        })
        .collect()
}

/// Whether module `a` is a proper ancestor of module `b`.
fn is_ancestor(a: &[String], b: &[String]) -> bool {
    a.len() < b.len() && b.starts_with(a)
}

/// Strongly connected components with two or more files (Tarjan).
fn cycles<E>(graph: &[BTreeMap<usize, E>]) -> Vec<Vec<usize>> {
    struct State<'g, E> {
        graph: &'g [BTreeMap<usize, E>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit<E>(s: &mut State<E>, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in s.graph[v].keys() {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = s.stack.pop().expect("v is on the stack");
                s.on_stack[w] = false;
                comp.push(w);
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let n = graph.len();
    let mut s = State {
        graph,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(&mut s, v);
        }
    }
    s.out
}

/// One loop through a component: the shortest way from its first file back
/// to itself (breadth-first inside the component).
fn one_loop<E>(graph: &[BTreeMap<usize, E>], comp: &[usize]) -> Vec<usize> {
    let start = comp[0];
    let inside: BTreeSet<usize> = comp.iter().copied().collect();
    let mut prev: BTreeMap<usize, usize> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for &w in graph[v].keys() {
            if !inside.contains(&w) {
                continue;
            }
            if w == start {
                let mut path = vec![v];
                let mut at = v;
                while at != start {
                    at = prev[&at];
                    path.push(at);
                }
                path.reverse();
                path.push(start);
                return path;
            }
            if let std::collections::btree_map::Entry::Vacant(e) = prev.entry(w) {
                e.insert(v);
                queue.push_back(w);
            }
        }
    }
    comp.to_vec()
}

#[test]
fn no_import_cycles_between_files_of_a_crate() {
    for krate in CRATES {
        no_import_cycles_in(krate);
    }
}

fn no_import_cycles_in(krate: &'static str) {
    let files = read_crate(krate);
    let graph = file_graph(&files);
    let found = cycles(&graph);
    let report: Vec<String> = found
        .iter()
        .map(|comp| {
            let names: Vec<&str> = comp.iter().map(|&i| files[i].rel.as_str()).collect();
            let hops = one_loop(&graph, comp);
            let path: Vec<String> = hops
                .windows(2)
                .map(|w| {
                    format!(
                        "{} → {} ({})",
                        files[w[0]].rel, files[w[1]].rel, graph[w[0]][&w[1]]
                    )
                })
                .collect();
            let inside: Vec<String> = comp
                .iter()
                .flat_map(|&a| comp.iter().map(move |&b| (a, b)))
                .filter_map(|(a, b)| Some((a, b, graph[a].get(&b)?)))
                .map(|(a, b, why)| format!("{} → {} ({why})", files[a].rel, files[b].rel))
                .collect();
            format!(
                "  {} files: {}\n    loop: {}\n    every edge inside: {}",
                comp.len(),
                names.join(", "),
                path.join("\n          "),
                inside.join("\n          ")
            )
        })
        .collect();
    assert!(
        report.is_empty(),
        "{} import cycle(s) between files of {krate}/:\n{}",
        report.len(),
        report.join("\n")
    );
}

#[test]
fn no_file_of_src_is_over_800_lines() {
    let long: Vec<String> = read_sources()
        .iter()
        .filter(|f| f.lines > MAX_LINES)
        .map(|f| format!("  {} ({} lines)", f.rel, f.lines))
        .collect();
    assert!(
        long.is_empty(),
        "files over {MAX_LINES} lines:\n{}",
        long.join("\n")
    );
}

#[test]
fn no_public_fn_returns_a_string_error() {
    let mut found = Vec::new();
    for f in read_sources() {
        let code = &f.code;
        let mut from = 0;
        while let Some(at) = code[from..].find("pub fn ").map(|p| from + p) {
            from = at + 7;
            // The signature runs to the body's `{` or a trait method's `;`.
            let end = code[at..].find(['{', ';']).map_or(code.len(), |p| at + p);
            let sig: String = code[at..end]
                .split_whitespace()
                .collect::<Vec<_>>()
                .join("");
            let Some(ret) = sig.split("->").nth(1) else {
                continue;
            };
            let ret = ret.split("where").next().unwrap_or(ret);
            if ret.starts_with("Result<") && ret.ends_with(",String>") {
                let line = code[..at].lines().count() + 1;
                found.push(format!(
                    "  {}:{line}: {}",
                    f.rel,
                    code[at..end].lines().next().unwrap_or("").trim()
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "public functions returning Result<_, String>:\n{}",
        found.join("\n")
    );
}

/// The checker itself on small inputs, so that a green run means the rules
/// held, not that the parser saw nothing.
#[test]
fn the_checker_sees_paths_through_comments_groups_and_inline_modules() {
    let code = blank_non_code(
        "// use crate::a::Hidden;\n\
         use crate::{a::{B, c::D}, e};\n\
         pub use child::X;\n\
         fn f() { let s = \"crate::z::Q\"; let c = '{'; super::g(); }\n\
         mod tests { use super::*; use super::super::h::I; }\n",
    );
    let file = SourceFile {
        rel: "src/m/n.rs".into(),
        krate: "src",
        module: vec!["m".into(), "n".into()],
        code,
        lines: 5,
    };
    let children = BTreeSet::from(["child".to_owned()]);
    let got: BTreeSet<String> = paths_of(&file, &children)
        .into_iter()
        .map(|p| p.join("::"))
        .collect();
    let want: BTreeSet<String> = [
        "a::B",
        "a::c::D",
        "e",
        "m::n::child::X",
        "m::g",
        "m::n",
        "m::h::I",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(got, want);
    // A two-file loop and a chain without one.
    let graph = vec![
        BTreeMap::from([(1, ())]),
        BTreeMap::from([(0, ()), (2, ())]),
        BTreeMap::new(),
    ];
    assert_eq!(cycles(&graph), vec![vec![0, 1]]);
    assert_eq!(one_loop(&graph, &[0, 1]), vec![0, 1, 0]);
    assert!(
        cycles(&[
            BTreeMap::from([(1, ())]),
            BTreeMap::from([(2, ())]),
            BTreeMap::new()
        ])
        .is_empty()
    );
}

/// Files outside `app/` and `cli/` that name `crate::app`: a lower layer
/// reaching up into the commands (its tests included — test support such
/// as the synthetic corpus lives low, `crate::synth`).
fn lower_layers_importing_app(files: &[SourceFile]) -> Vec<String> {
    let mut found = Vec::new();
    for f in files {
        if f.krate != "src" || f.rel.starts_with("src/app/") || f.rel.starts_with("src/cli/") {
            continue;
        }
        let children: BTreeSet<String> = files
            .iter()
            .filter(|c| c.module.len() == f.module.len() + 1 && c.module.starts_with(&f.module))
            .map(|c| c.module.last().expect("a child has a name").clone())
            .collect();
        if let Some(p) = paths_of(f, &children)
            .into_iter()
            .find(|p| p.first().is_some_and(|s| s == "app"))
        {
            found.push(format!("  {} → crate::{}", f.rel, p.join("::")));
        }
    }
    found
}

#[test]
fn no_lower_layer_imports_app() {
    let found = lower_layers_importing_app(&read_sources());
    assert!(
        found.is_empty(),
        "files outside src/app and src/cli that import crate::app (move what they use \
         down, e.g. next to crate::synth):\n{}",
        found.join("\n")
    );
}

/// The index of the token closing the group opened at `toks[open]`
/// (`(`, `[`, `{` or `<`), or the last index.
fn closing(toks: &[Tok], open: usize) -> usize {
    let Tok::Punct(o) = toks[open] else {
        return open;
    };
    let c = match o {
        b'(' => b')',
        b'[' => b']',
        b'{' => b'}',
        _ => b'>',
    };
    let mut depth = 0usize;
    for (i, t) in toks.iter().enumerate().skip(open) {
        match t {
            Tok::Punct(x) if *x == o => depth += 1,
            Tok::Punct(x) if *x == c => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    toks.len() - 1
}

/// Public error enums with a tuple variant holding a bare `String`:
/// `(file, enum, variant)`. An error enum is a `pub enum` whose name ends
/// in `Error` or that derives `Error` (thiserror).
fn string_variants(code: &str) -> Vec<(String, String)> {
    let toks = tokens(code);
    let mut found = Vec::new();
    for i in 0..toks.len() {
        let (Tok::Ident(kw), Some(Tok::Ident(name))) = (&toks[i], toks.get(i + 1)) else {
            continue;
        };
        if kw != "enum" {
            continue;
        }
        // Visibility and attributes: back to the previous item's end.
        let start = toks[..i]
            .iter()
            .rposition(|t| matches!(t, Tok::Punct(b';') | Tok::Punct(b'}')))
            .map_or(0, |p| p + 1);
        let head = &toks[start..i];
        let public = head.contains(&Tok::Ident("pub".into()));
        let derives_error = head.contains(&Tok::Ident("Error".into()));
        if !public || !(name.ends_with("Error") || derives_error) {
            continue;
        }
        let Some(open) = (i + 2..toks.len()).find(|&j| toks[j] == Tok::Punct(b'{')) else {
            continue;
        };
        let close = closing(&toks, open);
        let mut j = open + 1;
        while j < close {
            match (&toks[j], toks.get(j + 1)) {
                (Tok::Punct(b'#'), _) => j = closing(&toks, j + 1) + 1,
                (Tok::Ident(variant), Some(Tok::Punct(b'('))) => {
                    let end = closing(&toks, j + 1);
                    let fields = split_fields(&toks[j + 2..end]);
                    if fields.iter().any(|f| is_string(f)) {
                        found.push((name.clone(), variant.clone()));
                    }
                    j = end + 1;
                }
                (Tok::Ident(_), Some(Tok::Punct(b'{'))) => j = closing(&toks, j + 1) + 1,
                _ => j += 1,
            }
        }
    }
    found
}

/// The fields of a tuple variant, attributes dropped.
fn split_fields(toks: &[Tok]) -> Vec<Vec<Tok>> {
    let mut fields = vec![Vec::new()];
    let mut depth = 0i32;
    let mut i = 0;
    while i < toks.len() {
        match &toks[i] {
            Tok::Punct(b'#') if depth == 0 => {
                i = closing(toks, i + 1) + 1;
                continue;
            }
            Tok::Punct(b'<' | b'(' | b'[') => depth += 1,
            Tok::Punct(b'>' | b')' | b']') => depth -= 1,
            Tok::Punct(b',') if depth == 0 => {
                fields.push(Vec::new());
                i += 1;
                continue;
            }
            _ => {}
        }
        fields
            .last_mut()
            .expect("one field at least")
            .push(toks[i].clone());
        i += 1;
    }
    fields
}

fn is_string(field: &[Tok]) -> bool {
    let idents: Vec<&str> = field
        .iter()
        .filter_map(|t| match t {
            Tok::Ident(s) => Some(s.as_str()),
            _ => None,
        })
        .collect();
    let path_only = field.iter().all(|t| matches!(t, Tok::Ident(_) | Tok::Path));
    path_only && idents.last() == Some(&"String")
}

#[test]
fn no_public_error_enum_has_a_string_variant() {
    let mut found = Vec::new();
    for f in read_sources() {
        for (e, v) in string_variants(&f.code) {
            found.push(format!("  {}: {e}::{v}(String)", f.rel));
        }
    }
    assert!(
        found.is_empty(),
        "public error enums with a (String) variant (give the variant typed fields — \
         what was wrong, where, what was expected — or an enum of causes):\n{}",
        found.join("\n")
    );
}

/// Longest function body allowed outside tests, in lines from `fn` to its
/// closing brace (about a screen and a half: "Functions about a screen long").
const MAX_FN_LINES: usize = 80;

/// Functions allowed over [`MAX_FN_LINES`], at most five, each with why:
/// (file, function, reason). An entry that is no longer long fails the test,
/// so the list only shrinks.
const LONG_FNS: &[(&str, &str, &str)] = &[
    (
        "src/app/serve/journal/compact.rs",
        "compact_with",
        "crash-safe compaction: one sequence of write, fsync and rename steps \
         whose order is the invariant (compaction_survives_a_crash_at_every_step \
         crashes at each); owned by serve's restructure",
    ),
    (
        "src/writer/append/mod.rs",
        "open",
        "recovery, label table and SWMR start in the order the undo log arms \
         and commits them; the append path is being unified under one Sink \
         beside this change",
    ),
    (
        "src/config/serve.rs",
        "validate",
        "a flat list of independent [serve] checks, each one error; it gains \
         serve.max_queued_files beside this change",
    ),
];

/// Non-test functions of a file over `max` lines: (name, first line, lines).
/// Test code is left out: `#[test]` functions and whatever a `#[cfg(test)]`
/// item holds (a `mod tests { … }` block).
fn long_functions(code: &str, max: usize) -> Vec<(String, usize, usize)> {
    let toks = tokens(code);
    // Token index → line, through the positions of identifiers and punctuation.
    let lines = token_lines(code);
    let mut skip_to = 0;
    let mut found = Vec::new();
    for i in 0..toks.len() {
        if i < skip_to {
            continue;
        }
        if toks[i] == Tok::Punct(b'#') && is_test_attr(&toks, i) {
            // Skip the item the attribute is on: to its block's end, or `;`.
            let mut j = closing(&toks, i + 1) + 1;
            while j < toks.len() && !matches!(toks[j], Tok::Punct(b'{') | Tok::Punct(b';')) {
                if toks[j] == Tok::Punct(b'#') {
                    j = closing(&toks, j + 1);
                }
                j += 1;
            }
            skip_to = if toks.get(j) == Some(&Tok::Punct(b'{')) {
                closing(&toks, j) + 1
            } else {
                j + 1
            };
            continue;
        }
        let (Tok::Ident(kw), Some(Tok::Ident(name))) = (&toks[i], toks.get(i + 1)) else {
            continue;
        };
        if kw != "fn" {
            continue;
        }
        // The body's `{`, or `;` for a declaration (brackets skipped: `[u8; 4]`).
        let mut j = i + 2;
        while j < toks.len() {
            match toks[j] {
                Tok::Punct(b'[') | Tok::Punct(b'(') => j = closing(&toks, j),
                Tok::Punct(b'{') | Tok::Punct(b';') => break,
                _ => {}
            }
            j += 1;
        }
        if toks.get(j) != Some(&Tok::Punct(b'{')) {
            continue;
        }
        let n = lines[closing(&toks, j)] - lines[i] + 1;
        if n > max {
            found.push((name.clone(), lines[i], n));
        }
    }
    found
}

/// Whether the attribute at `toks[i]` (`#`) is `#[test]` or `#[cfg(test)]`.
fn is_test_attr(toks: &[Tok], i: usize) -> bool {
    let body: Vec<&Tok> = toks[i + 1..=closing(toks, i + 1).min(toks.len() - 1)]
        .iter()
        .collect();
    let word = |s: &str| Tok::Ident(s.into());
    body == [&Tok::Punct(b'['), &word("test"), &Tok::Punct(b']')]
        || body
            == [
                &Tok::Punct(b'['),
                &word("cfg"),
                &Tok::Punct(b'('),
                &word("test"),
                &Tok::Punct(b')'),
                &Tok::Punct(b']'),
            ]
}

/// The 1-based line of each token of [`tokens`]`(code)`.
fn token_lines(code: &str) -> Vec<usize> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line += 1;
            i += 1;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else if is_ident(c) {
            while i < b.len() && is_ident(b[i]) {
                i += 1;
            }
            out.push(line);
        } else if c == b':' && b.get(i + 1) == Some(&b':') {
            out.push(line);
            i += 2;
        } else {
            out.push(line);
            i += 1;
        }
    }
    out
}

/// Files that are test code as a whole: modules declared under
/// `#[cfg(test)]` or the test harness's feature (`host-kernels`), and every
/// file below them.
fn test_modules(files: &[SourceFile]) -> BTreeSet<(&'static str, Vec<String>)> {
    let root = repo_root();
    let mut out = BTreeSet::new();
    for f in files {
        let text = fs::read_to_string(root.join(&f.rel)).expect("read again");
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        for (n, line) in lines.iter().enumerate() {
            if *line != "#[cfg(test)]" && *line != "#[cfg(feature = \"host-kernels\")]" {
                continue;
            }
            let Some(decl) = lines[n + 1..].iter().find(|l| !l.starts_with("#[")) else {
                continue;
            };
            let decl = decl
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ");
            if let Some(name) = decl.strip_prefix("mod ").and_then(|d| d.strip_suffix(';')) {
                let mut m = f.module.clone();
                m.push(name.trim().to_owned());
                out.insert((f.krate, m));
            }
        }
    }
    out
}

#[test]
fn at_most_five_functions_outside_tests_are_over_80_lines() {
    assert!(LONG_FNS.len() <= 5, "LONG_FNS holds more than five");
    let files = read_sources();
    let tests = test_modules(&files);
    let mut found = Vec::new();
    let mut listed_and_long = Vec::new();
    for f in &files {
        if tests
            .iter()
            .any(|(k, t)| *k == f.krate && f.module.starts_with(t))
        {
            continue;
        }
        for (name, line, n) in long_functions(&f.code, MAX_FN_LINES) {
            if LONG_FNS.iter().any(|l| l.0 == f.rel && l.1 == name) {
                listed_and_long.push((f.rel.clone(), name));
            } else {
                found.push(format!("  {}:{line}: fn {name} ({n} lines)", f.rel));
            }
        }
    }
    for (rel, name, _) in LONG_FNS {
        assert!(
            listed_and_long.iter().any(|(r, n)| r == rel && n == name),
            "LONG_FNS lists {rel}: fn {name}, which is no longer over {MAX_FN_LINES} \
             lines (or is gone): drop the entry"
        );
    }
    assert!(
        found.is_empty(),
        "functions over {MAX_FN_LINES} lines outside tests (split them into steps, or \
         add at most five to LONG_FNS with the reason):\n{}",
        found.join("\n")
    );
}

/// The three checkers on small inputs: each sees what it must and nothing
/// in tests, comments or strings.
#[test]
fn the_checkers_see_app_imports_string_variants_and_long_functions() {
    let file = |rel: &str, module: &[&str], text: &str| SourceFile {
        rel: format!("src/{rel}"),
        krate: "src",
        module: module.iter().map(|s| (*s).to_owned()).collect(),
        code: blank_non_code(text),
        lines: text.lines().count(),
    };
    let files = [
        file(
            "plan/x.rs",
            &["plan", "x"],
            "// crate::app::no\nuse crate::app::synth::clip;\n",
        ),
        file("app/y.rs", &["app", "y"], "use crate::app::build;\n"),
        file(
            "cli/z.rs",
            &["cli", "z"],
            "fn f() { crate::app::serve::run(); }\n",
        ),
    ];
    let up = lower_layers_importing_app(&files);
    assert_eq!(up.len(), 1, "{up:?}");
    assert!(up[0].contains("src/plan/x.rs"), "{up:?}");

    let code = blank_non_code(
        "#[derive(Debug, thiserror::Error)]\n\
         pub enum Error {\n\
             #[error(\"{0}\")] Plan(String),\n\
             Named { why: String },\n\
             Typed(#[from] std::io::Error),\n\
             Wrapped(#[source] std::string::String, usize),\n\
             Static(&'static str),\n\
         }\n\
         pub enum Value { Str(String) }\n\
         enum PrivateError { Text(String) }\n",
    );
    let got = string_variants(&code);
    let want = [("Error", "Plan"), ("Error", "Wrapped")]
        .map(|(e, v)| (e.to_owned(), v.to_owned()))
        .to_vec();
    assert_eq!(got, want);

    let body = "    let x = 1;\n".repeat(80);
    let code = blank_non_code(&format!(
        "fn long() {{\n{body}}}\n\
         fn short(a: [u8; 4]) -> u8 {{ a[0] }}\n\
         trait T {{ fn decl(&self); }}\n\
         #[test]\nfn a_long_test() {{\n{body}}}\n\
         #[cfg(test)]\nmod tests {{\n    fn helper() {{\n{body}    }}\n}}\n\
         fn exactly_80() {{\n{}}}\n",
        "    let x = 1;\n".repeat(78)
    ));
    assert_eq!(long_functions(&code, 80), vec![("long".to_owned(), 1, 82)]);
}
