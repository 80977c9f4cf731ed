//! The shape of the code, read from its source: no two modules of a crate import each other,
//! directly or through others (module by module at each level of the tree: a module's files
//! count as one), and no production file (tests apart) holds more than [`MAX_CODE_LINES`]
//! lines of code. What a module imports is what its paths name: `crate::a::b`, `super::c`, and
//! the names the crate root re-exports from a module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The most lines of code (not blank, not comments) a production file may hold.
const MAX_CODE_LINES: usize = 600;

type ModulePath = Vec<String>;

/// A crate's modules: each file's module path and its text without comments and tests.
fn modules(src: &Path) -> BTreeMap<ModulePath, String> {
    let mut modules = BTreeMap::new();
    for file in rust_files(src) {
        let relative = file.strip_prefix(src).expect("under src");
        let mut path: ModulePath = relative
            .with_extension("")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if matches!(
            path.last().map(String::as_str),
            Some("mod" | "lib" | "main")
        ) {
            path.pop();
        }
        let text = std::fs::read_to_string(&file).expect("a readable source file");
        modules.insert(path, production(&strip_comments(&text)));
    }
    modules
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("a readable directory") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// The text without comments (line comments, and block comments).
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("/*") {
        out.push_str(&rest[..start]);
        rest = rest[start..]
            .split_once("*/")
            .map_or("", |(_, after)| after);
    }
    out.push_str(rest);
    out.lines()
        .map(|line| match line.find("//") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The text before its test module (`#[cfg(test)] mod ... {`), which sits last.
fn production(text: &str) -> String {
    let mut kept = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod ") && next.ends_with('{'))
        {
            break;
        }
        kept.push(line);
    }
    kept.join("\n")
}

/// The paths a module's text names: `crate::…`, `super::…` and `self::…`, resolved to
/// absolute paths, and the items of `crate::{…}` lists.
fn references(module: &[String], text: &str) -> BTreeSet<ModulePath> {
    let is_path = |c: char| c.is_alphanumeric() || c == '_' || c == ':';
    let mut found = BTreeSet::new();
    for head in ["crate::", "super::", "self::"] {
        for (start, _) in text.match_indices(head) {
            // A path's first segment: not inside a longer identifier or path.
            if text[..start].ends_with(|c: char| is_path(c)) {
                continue;
            }
            let end = text[start..]
                .find(|c: char| !is_path(c))
                .map_or(text.len(), |i| start + i);
            let mut segments = text[start..end].split("::").filter(|s| !s.is_empty());
            let mut base: ModulePath = match segments.next() {
                Some("crate") => Vec::new(),
                Some("super") => module[..module.len().saturating_sub(1)].to_vec(),
                _ => module.to_vec(),
            };
            for segment in segments {
                if segment == "super" {
                    base.pop();
                } else {
                    base.push(segment.to_owned());
                }
            }
            found.insert(base.clone());
            // `crate::{a, b::c}` and `super::x::{y, z}`: each listed path.
            if let Some(list) = text[end..].strip_prefix('{')
                && let Some(close) = list.find('}')
            {
                for item in list[..close].split(',') {
                    let item = item.split(" as ").next().unwrap_or_default().trim();
                    if item.is_empty() || item == "self" {
                        continue;
                    }
                    let mut listed = base.clone();
                    listed.extend(item.split("::").map(str::to_owned));
                    found.insert(listed);
                }
            }
        }
    }
    found
}

/// Names re-exported by a module from one of its children (`pub use child::{A, B}`), as
/// the path they are reached by → the child they live in.
fn aliases(modules: &BTreeMap<ModulePath, String>) -> BTreeMap<ModulePath, ModulePath> {
    let mut aliases = BTreeMap::new();
    for (module, text) in modules {
        for statement in text.split(';') {
            let statement = statement.trim();
            let Some(rest) = statement
                .strip_prefix("pub use ")
                .or_else(|| statement.strip_prefix("pub(crate) use "))
            else {
                continue;
            };
            let Some((child, names)) = rest.split_once("::") else {
                continue;
            };
            let mut target = module.clone();
            target.push(child.to_owned());
            if !modules.contains_key(&target) {
                continue;
            }
            let names = names.trim_start_matches('{').trim_end_matches('}');
            for name in names.split(',') {
                let name = name.trim().rsplit("::").next().unwrap_or_default();
                let name = name.split(" as ").last().unwrap_or_default().trim();
                if !name.is_empty() {
                    let mut alias = module.clone();
                    alias.push(name.to_owned());
                    aliases.insert(alias, target.clone());
                }
            }
        }
    }
    aliases
}

/// The circles among the modules of one crate, each as the modules in it.
fn circles(src: &Path) -> Vec<Vec<String>> {
    let modules = modules(src);
    let aliases = aliases(&modules);
    let mut edges: BTreeMap<ModulePath, BTreeSet<ModulePath>> = BTreeMap::new();
    for (module, text) in &modules {
        for reference in references(module, text) {
            let target = (1..=reference.len()).rev().find_map(|n| {
                let prefix = &reference[..n];
                aliases
                    .get(prefix)
                    .cloned()
                    .or_else(|| modules.contains_key(prefix).then(|| prefix.to_vec()))
            });
            if let Some(target) = target.filter(|t| t != module) {
                edges.entry(module.clone()).or_default().insert(target);
            }
        }
    }
    let mut found = Vec::new();
    let parents: BTreeSet<ModulePath> = modules
        .keys()
        .filter(|m| !m.is_empty())
        .map(|m| m[..m.len() - 1].to_vec())
        .collect();
    for parent in parents {
        let child_of = |m: &ModulePath| {
            (m.len() > parent.len() && m.starts_with(&parent)).then(|| m[..=parent.len()].to_vec())
        };
        let mut graph: BTreeMap<ModulePath, BTreeSet<ModulePath>> = BTreeMap::new();
        for (from, tos) in &edges {
            let Some(from) = child_of(from) else { continue };
            for to in tos {
                if let Some(to) = child_of(to).filter(|to| *to != from) {
                    graph.entry(from.clone()).or_default().insert(to);
                }
            }
        }
        for component in strongly_connected(&graph) {
            found.push(component.iter().map(|m| m.join("::")).collect());
        }
    }
    found
}

/// The components of more than one node (Tarjan).
fn strongly_connected(graph: &BTreeMap<ModulePath, BTreeSet<ModulePath>>) -> Vec<Vec<ModulePath>> {
    struct State<'g> {
        graph: &'g BTreeMap<ModulePath, BTreeSet<ModulePath>>,
        index: BTreeMap<ModulePath, usize>,
        low: BTreeMap<ModulePath, usize>,
        stack: Vec<ModulePath>,
        on_stack: BTreeSet<ModulePath>,
        found: Vec<Vec<ModulePath>>,
    }
    fn visit(state: &mut State<'_>, node: &ModulePath) {
        let n = state.index.len();
        state.index.insert(node.clone(), n);
        state.low.insert(node.clone(), n);
        state.stack.push(node.clone());
        state.on_stack.insert(node.clone());
        for next in state.graph.get(node).into_iter().flatten() {
            if !state.index.contains_key(next) {
                visit(state, next);
                let low = state.low[next].min(state.low[node]);
                state.low.insert(node.clone(), low);
            } else if state.on_stack.contains(next) {
                let low = state.index[next].min(state.low[node]);
                state.low.insert(node.clone(), low);
            }
        }
        if state.low[node] == state.index[node] {
            let mut component = Vec::new();
            while let Some(member) = state.stack.pop() {
                state.on_stack.remove(&member);
                let done = member == *node;
                component.push(member);
                if done {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                state.found.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !state.index.contains_key(node) {
            visit(&mut state, node);
        }
    }
    state.found
}

fn crates() -> Vec<PathBuf> {
    let host = flowbox_tests::root().join("host");
    let mut crates: Vec<PathBuf> = std::fs::read_dir(&host)
        .expect("the host crates")
        .map(|entry| entry.expect("an entry").path().join("src"))
        .filter(|src| src.is_dir())
        .collect();
    crates.sort();
    crates
}

#[test]
fn no_two_modules_of_a_crate_import_each_other() {
    let mut report = Vec::new();
    for src in crates() {
        for circle in circles(&src) {
            report.push(format!("{}: {}", src.display(), circle.join(" <-> ")));
        }
    }
    assert!(report.is_empty(), "import circles:\n{}", report.join("\n"));
}

#[test]
fn no_production_file_is_longer_than_the_limit() {
    let mut report = Vec::new();
    for src in crates() {
        for file in rust_files(&src) {
            let text = std::fs::read_to_string(&file).expect("a readable source file");
            // A file of tests (a module's `tests.rs`) is all test.
            if file.file_name().is_some_and(|name| name == "tests.rs") {
                continue;
            }
            let code = production(&strip_comments(&text))
                .lines()
                .filter(|line| !line.trim().is_empty())
                .count();
            if code > MAX_CODE_LINES {
                report.push(format!("{}: {code} lines of code", file.display()));
            }
        }
    }
    assert!(
        report.is_empty(),
        "over {MAX_CODE_LINES} lines of code:\n{}",
        report.join("\n")
    );
}

#[test]
fn a_circle_is_found_where_there_is_one() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::write(
        src.join("lib.rs"),
        "mod a;\nmod b;\nmod c;\npub use c::Thing;\n",
    )
    .unwrap();
    std::fs::write(src.join("a.rs"), "use crate::b::B;\npub struct A;\n").unwrap();
    std::fs::write(src.join("b.rs"), "use crate::Thing;\npub struct B;\n").unwrap();
    std::fs::write(
        src.join("c.rs"),
        "// crate::a::A in a comment is no import\npub struct Thing(crate::a::A);\n",
    )
    .unwrap();
    assert_eq!(circles(src), vec![vec!["a", "b", "c"]]);
    std::fs::write(src.join("c.rs"), "pub struct Thing;\n").unwrap();
    assert!(circles(src).is_empty());
}
