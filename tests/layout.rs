//! The layout rules of `src/` that a reader relies on (docs/architecture.md, "Checking the
//! layout"):
//!
//! - imports run one way: among the modules of any one parent (the top-level modules of the
//!   crate, the files of `domain/`, …) no module imports, directly or through others, one that
//!   imports it back;
//! - no file is over [`MAX_CODE_LINES`] lines of code (blank lines, comments and test modules
//!   apart).
//!
//! The check reads the sources as text: a module's imports are the `crate::…` and `super::…`
//! paths in its code outside comments and test modules.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Longest file, in lines of code, before it should be split.
const MAX_CODE_LINES: usize = 600;

/// One source file: its module path (`["domain", "call"]`) and its code, without comments and
/// test modules.
struct Source {
    module: Vec<String>,
    file: PathBuf,
    code: Vec<String>,
}

fn sources() -> Vec<Source> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    collect(&src, &mut files);
    // Files that are test modules themselves (`#[cfg(test)] mod tests;`).
    let mut test_files = BTreeSet::new();
    for file in &files {
        let text = fs::read_to_string(file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for pair in lines.windows(2) {
            if pair[0].trim() == "#[cfg(test)]"
                && let Some(name) = pair[1]
                    .trim()
                    .strip_prefix("mod ")
                    .and_then(|rest| rest.strip_suffix(';'))
            {
                let dir = module_dir(&src, file);
                test_files.insert(dir.join(format!("{name}.rs")));
                test_files.insert(dir.join(name).join("mod.rs"));
            }
        }
    }
    files
        .into_iter()
        .filter(|file| !test_files.contains(file))
        .filter(|file| !file.ends_with("main.rs") && !file.ends_with("lib.rs"))
        .map(|file| {
            let text = fs::read_to_string(&file).unwrap();
            Source {
                module: module_of(&src, &file),
                code: code_lines(&text),
                file,
            }
        })
        .collect()
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// The directory a file's child modules live in.
fn module_dir(src: &Path, file: &Path) -> PathBuf {
    let stem = file.file_stem().unwrap();
    let parent = file.parent().unwrap();
    if stem == "mod" || (parent == src && (stem == "lib" || stem == "main")) {
        parent.to_path_buf()
    } else {
        parent.join(stem)
    }
}

fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap().with_extension("");
    let mut module: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if module.last().is_some_and(|m| m == "mod") {
        module.pop();
    }
    module
}

/// The file's lines of code: no blank lines, no comment lines, nothing from the first inline
/// test module on (test modules close their files).
fn code_lines(text: &str) -> Vec<String> {
    let mut code = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim();
        if trimmed == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|next| next.trim().starts_with("mod ") && next.trim().ends_with('{'))
        {
            break;
        }
        if trimmed.is_empty() || trimmed.starts_with("//") {
            continue;
        }
        let without_comment = match trimmed.find(" // ") {
            Some(at) => &trimmed[..at],
            None => trimmed,
        };
        code.push(without_comment.to_owned());
    }
    code
}

/// Every module path a file's code names: `crate::a::b` and `super::c` resolved from `module`.
/// Grouped imports (`crate::{a, b::c}`) name each of theirs.
fn named_modules(source: &Source) -> BTreeSet<Vec<String>> {
    let text = source.code.join("\n");
    let mut named = BTreeSet::new();
    for (at, _) in text
        .match_indices("crate::")
        .chain(text.match_indices("super::"))
    {
        if at > 0 {
            let before = text.as_bytes()[at - 1];
            if before.is_ascii_alphanumeric() || before == b'_' || before == b':' {
                continue;
            }
        }
        let (mut base, rest) = if text[at..].starts_with("crate::") {
            (Vec::new(), &text[at + "crate::".len()..])
        } else {
            // `super` of `a::b` (a file `a/b.rs`) is `a`; of `a/b/mod.rs`, also `a`.
            let mut base = source.module.clone();
            base.pop();
            (base, &text[at + "super::".len()..])
        };
        let mut rest = rest;
        while let Some(tail) = rest.strip_prefix("super::") {
            base.pop();
            rest = tail;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for part in group[..end].split(',') {
                named.insert(path_of(&base, part.trim()));
            }
        } else {
            named.insert(path_of(&base, rest));
        }
    }
    named
}

/// `base` followed by the leading `a::b::` segments of `text` (lower-case: module names).
fn path_of(base: &[String], text: &str) -> Vec<String> {
    let mut path = base.to_vec();
    let mut rest = text;
    loop {
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let segment = &rest[..end];
        if segment.is_empty() || !segment.starts_with(|c: char| c.is_ascii_lowercase()) {
            break;
        }
        path.push(segment.to_owned());
        match rest[end..].strip_prefix("::") {
            Some(tail) => rest = tail,
            None => break,
        }
    }
    path
}

/// For each parent module, the imports among its children: `child -> children it names`.
fn sibling_graphs(sources: &[Source]) -> BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> {
    let mut graphs: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for source in sources {
        for named in named_modules(source) {
            // The deepest common parent of the two modules, and the child of it on each side.
            let common = source
                .module
                .iter()
                .zip(&named)
                .take_while(|(a, b)| a == b)
                .count();
            if common >= source.module.len() || common >= named.len() {
                // A module naming itself, its own descendants or one of its ancestors.
                continue;
            }
            let parent = source.module[..common].to_vec();
            graphs
                .entry(parent)
                .or_default()
                .entry(source.module[common].clone())
                .or_default()
                .insert(named[common].clone());
        }
    }
    graphs
}

/// A cycle in `graph`, if there is one, as the modules along it.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeSet<String>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, done, path) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut done, &mut Vec::new()))
}

#[test]
fn imports_run_one_way_among_the_modules_of_each_parent() {
    let sources = sources();
    let mut circles = Vec::new();
    for (parent, graph) in sibling_graphs(&sources) {
        if let Some(cycle) = find_cycle(&graph) {
            let parent = if parent.is_empty() {
                "the crate".to_owned()
            } else {
                parent.join("::")
            };
            circles.push(format!("in {parent}: {}", cycle.join(" -> ")));
        }
    }
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_check_finds_a_circle_and_reads_grouped_and_relative_imports() {
    let source = |module: &str, code: &str| Source {
        module: module.split("::").map(str::to_owned).collect(),
        file: PathBuf::from(format!("{}.rs", module.replace("::", "/"))),
        code: code.lines().map(str::to_owned).collect(),
    };
    let sources = [
        source("domain::call", "use super::arguments::Parameters;"),
        source(
            "domain::arguments",
            "use crate::{domain::call::ToolCall, events};",
        ),
        source("events", "use crate::domain::tool::ToolSpec;"),
    ];
    let graphs = sibling_graphs(&sources);
    let domain = &graphs[&vec!["domain".to_owned()]];
    assert_eq!(
        find_cycle(domain),
        Some(vec!["arguments".into(), "call".into(), "arguments".into()])
    );
    let top = &graphs[&Vec::new()];
    assert_eq!(top["domain"], BTreeSet::from(["events".to_owned()]));
    assert_eq!(
        find_cycle(top),
        Some(vec!["domain".into(), "events".into(), "domain".into()])
    );
}

#[test]
fn no_source_file_is_over_the_line_limit() {
    let long: Vec<String> = sources()
        .iter()
        .filter(|s| s.code.len() > MAX_CODE_LINES)
        .map(|s| {
            let file = s
                .file
                .strip_prefix(env!("CARGO_MANIFEST_DIR"))
                .unwrap_or(&s.file);
            format!("{} ({} lines of code)", file.display(), s.code.len())
        })
        .collect();
    assert!(
        long.is_empty(),
        "files over {MAX_CODE_LINES} lines of code: {}",
        long.join(", ")
    );
}
