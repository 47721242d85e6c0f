//! Which file of a crate each named path leads to, and the circles those imports make.

use std::collections::{BTreeMap, BTreeSet};

use crate::modules::{CrateTree, ModPath, Reference};

/// An import of one file from another, with the names it takes (as far as they are seen).
pub type Edges = BTreeMap<(usize, usize), BTreeSet<String>>;

/// Every file-to-file import of the crate.
pub fn edges(tree: &CrateTree) -> Edges {
    let mut edges = Edges::new();
    for reference in &tree.references {
        if let Some((target, name)) = resolve(tree, reference) {
            if target != reference.file {
                edges
                    .entry((reference.file, target))
                    .or_default()
                    .insert(name);
            }
        }
    }
    edges
}

/// The file a reference leads to and the name it takes there, or `None` for a path outside the
/// crate (another crate, the standard library, a local name).
pub fn resolve(tree: &CrateTree, reference: &Reference) -> Option<(usize, String)> {
    resolve_in(tree, &reference.scope, &reference.segments, 0)
}

fn resolve_in(
    tree: &CrateTree,
    scope: &ModPath,
    segments: &[String],
    depth: usize,
) -> Option<(usize, String)> {
    let first = segments.first()?;
    if depth > 8 {
        return None;
    }
    let (mut module, mut rest) = match first.as_str() {
        "crate" => (ModPath::new(), &segments[1..]),
        "self" => (scope.clone(), &segments[1..]),
        "super" => {
            let ups = segments.iter().take_while(|s| *s == "super").count();
            let keep = scope.len().checked_sub(ups)?;
            (scope[..keep].to_vec(), &segments[ups..])
        }
        _ if tree.modules.contains_key(&child(scope, first)) => (scope.clone(), segments),
        _ => {
            // A name brought in by `use`: go on from what it stands for.
            let imported = tree.uses.get(scope)?.get(first)?;
            let mut whole = imported.clone();
            whole.extend(segments[1..].iter().cloned());
            return resolve_in(tree, scope, &whole, depth + 1);
        }
    };
    while let Some(next) = rest.first() {
        let deeper = child(&module, next);
        if !tree.modules.contains_key(&deeper) {
            break;
        }
        module = deeper;
        rest = &rest[1..];
    }
    let file = *tree.modules.get(&module)?;
    let Some(name) = rest.first() else {
        return Some((file, module.last().cloned().unwrap_or_default()));
    };
    if tree
        .defines
        .get(&module)
        .is_some_and(|names| names.contains(name))
    {
        return Some((file, name.clone()));
    }
    // A name the module only imports leads on to where it is defined (a re-export); one it
    // imports from outside the crate leads nowhere in it.
    if let Some(imported) = tree.uses.get(&module).and_then(|uses| uses.get(name)) {
        let mut onward = imported.clone();
        onward.extend(rest[1..].iter().cloned());
        return resolve_in(tree, &module, &onward, depth + 1);
    }
    // A name brought in by a glob (`pub use part::*`) leads to the part that has it.
    for glob in tree.globs.get(&module).into_iter().flatten() {
        let mut onward = glob.clone();
        onward.extend(rest.iter().cloned());
        if let Some(found) = resolve_in(tree, &module, &onward, depth + 1) {
            if found.0 != file && names_it(tree, found.0, name) {
                return Some(found);
            }
        }
    }
    Some((file, name.clone()))
}

/// Whether the file defines or imports `name` in one of its modules.
fn names_it(tree: &CrateTree, file: usize, name: &str) -> bool {
    tree.modules
        .iter()
        .filter(|(_, &f)| f == file)
        .any(|(module, _)| {
            tree.defines.get(module).is_some_and(|n| n.contains(name))
                || tree.uses.get(module).is_some_and(|u| u.contains_key(name))
        })
}

fn child(module: &ModPath, name: &str) -> ModPath {
    let mut child = module.clone();
    child.push(name.to_string());
    child
}

/// The groups of two or more files that import each other round a loop (Tarjan's strongly
/// connected components), each sorted, in a stable order.
pub fn circles(files: usize, edges: &Edges) -> Vec<Vec<usize>> {
    let mut next: Vec<Vec<usize>> = vec![Vec::new(); files];
    for &(from, to) in edges.keys() {
        next[from].push(to);
    }
    let mut state = Tarjan {
        next,
        index: vec![None; files],
        low: vec![0; files],
        on_stack: vec![false; files],
        stack: Vec::new(),
        counter: 0,
        found: Vec::new(),
    };
    for node in 0..files {
        if state.index[node].is_none() {
            state.connect(node);
        }
    }
    let mut found: Vec<Vec<usize>> = state
        .found
        .into_iter()
        .filter(|group| group.len() > 1)
        .map(|mut group| {
            group.sort_unstable();
            group
        })
        .collect();
    found.sort();
    found
}

struct Tarjan {
    next: Vec<Vec<usize>>,
    index: Vec<Option<usize>>,
    low: Vec<usize>,
    on_stack: Vec<bool>,
    stack: Vec<usize>,
    counter: usize,
    found: Vec<Vec<usize>>,
}

impl Tarjan {
    fn connect(&mut self, node: usize) {
        self.index[node] = Some(self.counter);
        self.low[node] = self.counter;
        self.counter += 1;
        self.stack.push(node);
        self.on_stack[node] = true;
        for i in 0..self.next[node].len() {
            let to = self.next[node][i];
            match self.index[to] {
                None => {
                    self.connect(to);
                    self.low[node] = self.low[node].min(self.low[to]);
                }
                Some(index) if self.on_stack[to] => self.low[node] = self.low[node].min(index),
                Some(_) => {}
            }
        }
        if Some(self.low[node]) == self.index[node] {
            let mut group = Vec::new();
            while let Some(top) = self.stack.pop() {
                self.on_stack[top] = false;
                group.push(top);
                if top == node {
                    break;
                }
            }
            self.found.push(group);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::crate_dir;
    use crate::modules::load;

    fn crate_of(name: &str, files: &[(&str, &str)]) -> CrateTree {
        let dir = crate_dir(&format!("c-{name}"), files);
        let tree = load(&dir.join("lib.rs")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        tree
    }

    fn named(tree: &CrateTree, group: &[usize]) -> Vec<String> {
        let mut names: Vec<_> = group
            .iter()
            .map(|&f| tree.files[f].module.join("::"))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_loop_of_three_is_one_circle() {
        let tree = crate_of(
            "three",
            &[
                ("lib.rs", "mod a;\nmod b;\nmod c;\nmod d;\n"),
                ("a.rs", "use crate::b::B;\npub struct A;\n"),
                ("b.rs", "pub struct B;\nfn f() { super::c::go(); }\n"),
                ("c.rs", "pub fn go() { let _ = crate::a::A; }\n"),
                ("d.rs", "use crate::a::A;\n"),
            ],
        );
        let found = circles(tree.files.len(), &edges(&tree));
        assert_eq!(found.len(), 1);
        assert_eq!(named(&tree, &found[0]), ["a", "b", "c"]);
    }

    #[test]
    fn re_exports_through_the_root_lead_to_the_defining_file() {
        // `a` uses `crate::B`, which the root re-exports from `b`: the import is of `b`, so the
        // root's own `pub use` of `b` makes no circle with `a`.
        let tree = crate_of(
            "reexport",
            &[
                ("lib.rs", "mod a;\nmod b;\npub use b::B;\npub use a::A;\n"),
                ("a.rs", "use crate::B;\npub struct A;\n"),
                ("b.rs", "pub struct B;\n"),
            ],
        );
        let all = edges(&tree);
        let a = tree.modules[&vec!["a".to_string()]];
        let b = tree.modules[&vec!["b".to_string()]];
        assert_eq!(all[&(a, b)], BTreeSet::from(["B".to_string()]));
        assert!(circles(tree.files.len(), &all).is_empty());
    }

    #[test]
    fn a_child_that_uses_its_parent_and_a_parent_that_uses_it_are_a_circle() {
        let tree = crate_of(
            "parent",
            &[
                ("lib.rs", "mod p;\n"),
                (
                    "p/mod.rs",
                    "mod child;\nuse child::Helper;\npub struct Parent;\n",
                ),
                ("p/child.rs", "use super::Parent;\npub struct Helper;\n"),
            ],
        );
        assert_eq!(circles(tree.files.len(), &edges(&tree)).len(), 1);
        // Without the parent's import, the child's impl blocks on its parent are no circle.
        let tree = crate_of(
            "parent-ok",
            &[
                ("lib.rs", "mod p;\n"),
                ("p/mod.rs", "mod child;\npub struct Parent;\n"),
                (
                    "p/child.rs",
                    "use super::Parent;\nimpl Parent { fn go(&self) {} }\n",
                ),
            ],
        );
        assert!(circles(tree.files.len(), &edges(&tree)).is_empty());
    }

    #[test]
    fn a_name_re_exported_by_a_glob_leads_to_the_part_that_defines_it() {
        let tree = crate_of(
            "glob",
            &[
                ("lib.rs", "mod server;\nmod user;\n"),
                (
                    "server/mod.rs",
                    "mod part;\npub use part::*;\npub struct State;\n",
                ),
                ("server/part.rs", "use super::State;\npub struct Hub;\n"),
                ("user.rs", "use crate::server::Hub;\n"),
            ],
        );
        let all = edges(&tree);
        let user = tree.modules[&vec!["user".to_string()]];
        let part = tree.modules[&vec!["server".to_string(), "part".to_string()]];
        assert_eq!(all[&(user, part)], BTreeSet::from(["Hub".to_string()]));
        // The facade re-exports its part and the part uses the facade's own item: a circle.
        assert_eq!(circles(tree.files.len(), &all).len(), 1);
    }

    #[test]
    fn outside_paths_and_test_code_make_no_edge() {
        let tree = crate_of(
            "outside",
            &[
                ("lib.rs", "mod a;\nmod b;\n"),
                ("a.rs", "use std::sync::Arc;\nuse serde::Serialize;\npub struct A;\n"),
                (
                    "b.rs",
                    "#[cfg(test)]\nmod tests { use crate::a::A; }\n#[cfg(test)]\nfn t() { crate::a::A; }\n",
                ),
            ],
        );
        assert!(edges(&tree).is_empty());
    }

    #[test]
    fn inline_modules_belong_to_their_file() {
        let tree = crate_of(
            "inline",
            &[
                ("lib.rs", "mod api;\nmod rules;\n"),
                (
                    "api.rs",
                    "pub mod ssr { pub fn parse() {} }\nfn f() { crate::rules::ssr::go(); }\n",
                ),
                (
                    "rules.rs",
                    "pub mod ssr { pub fn go() { super::super::api::ssr::parse(); } }\n",
                ),
            ],
        );
        let found = circles(tree.files.len(), &edges(&tree));
        assert_eq!(named(&tree, &found[0]), ["api", "rules"]);
    }
}
