//! `structure-lint [WORKSPACE]`: checks the structure rules of `nrllm_lint` on the workspace's
//! packages (the root package and every `crates/*`), crate by crate: each library, binary, bench
//! and example. Prints every breach and exits 1 if there is any.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use nrllm_lint::circles::{circles, edges, Edges};
use nrllm_lint::modules::{load, CrateTree};
use nrllm_lint::sizes::measure;
use nrllm_lint::{MAX_FILE_LINES, MAX_FN_LINES};

/// The app's modules that sit above all the others: the Leptos app and the router that mounts it,
/// its pages, and its components (the approval and budget panels and the islands among them). No other module
/// of the app may import from them.
const APP_TOP: &[&str] = &[
    "app",
    "pages",
    "components",
    "islands",
    "approval",
    "budget",
    "question",
    "server::routes",
];

fn main() -> ExitCode {
    let workspace = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    let mut breaches = Vec::new();
    let mut crates = 0;
    for package in packages(&workspace) {
        for root in crate_roots(&package) {
            crates += 1;
            match load(&root) {
                Ok(tree) => {
                    let is_app_lib = package == workspace && root.ends_with("src/lib.rs");
                    check(&tree, &workspace, is_app_lib, &mut breaches);
                }
                Err(e) => breaches.push(e.to_string()),
            }
        }
    }
    for breach in &breaches {
        eprintln!("structure-lint: {breach}");
    }
    if breaches.is_empty() {
        println!(
            "structure-lint: {crates} crates: no file over {MAX_FILE_LINES} lines, no function over \
             {MAX_FN_LINES}, no import circle"
        );
        ExitCode::SUCCESS
    } else {
        eprintln!("structure-lint: {} breaches", breaches.len());
        ExitCode::FAILURE
    }
}

/// The root package and each folder of `crates/` that holds a `Cargo.toml`, sorted.
fn packages(workspace: &Path) -> Vec<PathBuf> {
    let mut found = vec![workspace.to_path_buf()];
    if let Ok(entries) = std::fs::read_dir(workspace.join("crates")) {
        let mut crates: Vec<_> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.join("Cargo.toml").is_file())
            .collect();
        crates.sort();
        found.extend(crates);
    }
    found
}

/// The files a package's crates start from: `src/lib.rs`, `src/main.rs`, and each file (or
/// folder's `main.rs`) of `src/bin`, `benches` and `examples`.
fn crate_roots(package: &Path) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = ["src/lib.rs", "src/main.rs"]
        .iter()
        .map(|file| package.join(file))
        .filter(|path| path.is_file())
        .collect();
    for dir in ["src/bin", "benches", "examples"] {
        let Ok(entries) = std::fs::read_dir(package.join(dir)) else {
            continue;
        };
        let mut found: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter_map(|path| {
                if path.extension().is_some_and(|ext| ext == "rs") {
                    Some(path)
                } else {
                    Some(path.join("main.rs")).filter(|main| main.is_file())
                }
            })
            .collect();
        found.sort();
        roots.extend(found);
    }
    roots
}

fn check(tree: &CrateTree, workspace: &Path, is_app_lib: bool, breaches: &mut Vec<String>) {
    let shown = |index: usize| {
        let path = &tree.files[index].path;
        path.strip_prefix(workspace)
            .unwrap_or(path)
            .display()
            .to_string()
    };
    for (index, file) in tree.files.iter().enumerate() {
        let size = measure(&file.ast, file.text.lines().count());
        if size.lines > MAX_FILE_LINES {
            breaches.push(format!(
                "{}: {} lines outside tests (at most {MAX_FILE_LINES}): split it along its jobs",
                shown(index),
                size.lines
            ));
        }
        for function in size.functions.iter().filter(|f| f.lines > MAX_FN_LINES) {
            breaches.push(format!(
                "{}:{}: fn {} spans {} lines (at most {MAX_FN_LINES})",
                shown(index),
                function.line,
                function.name,
                function.lines
            ));
        }
    }
    let all = edges(tree);
    for group in circles(tree.files.len(), &all) {
        let ties = ties_within(&group, &all, &shown);
        let files: Vec<_> = group.iter().map(|&f| shown(f)).collect();
        breaches.push(format!(
            "import circle of {} files: {} ({})",
            files.len(),
            files.join(", "),
            ties.join("; ")
        ));
    }
    if is_app_lib {
        layers(tree, &all, &shown, breaches);
    }
}

/// The imports among one circle's files, as `a -> b: Names`.
fn ties_within(group: &[usize], all: &Edges, shown: &impl Fn(usize) -> String) -> Vec<String> {
    let members: BTreeSet<usize> = group.iter().copied().collect();
    all.iter()
        .filter(|((from, to), _)| members.contains(from) && members.contains(to))
        .map(|((from, to), names)| {
            let names: Vec<_> = names.iter().map(String::as_str).collect();
            format!("{} -> {}: {}", shown(*from), shown(*to), names.join(", "))
        })
        .collect()
}

/// No module of the app below its pages and components imports from them.
fn layers(
    tree: &CrateTree,
    all: &Edges,
    shown: &impl Fn(usize) -> String,
    breaches: &mut Vec<String>,
) {
    let is_top = |index: usize| {
        let module = tree.files[index].module.join("::");
        APP_TOP.iter().any(|top| {
            module == *top
                || module
                    .strip_prefix(top)
                    .is_some_and(|rest| rest.starts_with("::"))
        })
    };
    for ((from, to), names) in all {
        if !is_top(*from) && !tree.files[*from].module.is_empty() && is_top(*to) {
            let names: Vec<_> = names.iter().map(String::as_str).collect();
            breaches.push(format!(
                "{} imports {} from {}, a page or component above it",
                shown(*from),
                names.join(", "),
                shown(*to)
            ));
        }
    }
}
