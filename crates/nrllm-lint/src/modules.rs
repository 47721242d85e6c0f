//! A crate's module tree, read from its root file through `mod name;` declarations, and the paths
//! each file names (in `use` items, in code and in macro calls).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;
use syn::{Item, ItemMod, UseTree};

use crate::cfg::is_test_only;

/// A module path from the crate root, such as `["server", "views"]`.
pub type ModPath = Vec<String>;

/// One file of a crate.
pub struct FileModule {
    pub path: PathBuf,
    pub module: ModPath,
    pub text: String,
    pub ast: syn::File,
}

/// A path a file names, with the module it is named in (a `mod x { … }` block is a module).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub file: usize,
    pub scope: ModPath,
    pub segments: Vec<String>,
}

/// A crate: its files, which file holds each module, what each module imports by name, and the
/// paths each file names.
#[derive(Default)]
pub struct CrateTree {
    pub files: Vec<FileModule>,
    /// Every module, those written as `mod x { … }` included, to the file that holds it.
    pub modules: HashMap<ModPath, usize>,
    /// For each module, the names its `use` items bring in, to the path they name.
    pub uses: HashMap<ModPath, HashMap<String, Vec<String>>>,
    /// For each module, the paths of its glob imports (`use path::*`).
    pub globs: HashMap<ModPath, Vec<Vec<String>>>,
    /// For each module, the names of the items it defines.
    pub defines: HashMap<ModPath, HashSet<String>>,
    pub references: Vec<Reference>,
}

#[derive(Debug)]
pub enum LoadError {
    Read(PathBuf, std::io::Error),
    Parse(PathBuf, syn::Error),
    Missing { module: String, from: PathBuf },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Read(path, e) => write!(f, "{}: cannot read: {e}", path.display()),
            LoadError::Parse(path, e) => {
                let at = e.span().start();
                write!(f, "{}:{}: cannot parse: {e}", path.display(), at.line)
            }
            LoadError::Missing { module, from } => {
                write!(f, "{}: module `{module}` has no file", from.display())
            }
        }
    }
}

impl std::error::Error for LoadError {}

/// Reads the crate whose root file is `root`, following every `mod name;` that is not test-only.
pub fn load(root: &Path) -> Result<CrateTree, LoadError> {
    let mut tree = CrateTree::default();
    let mut pending = vec![(root.to_path_buf(), ModPath::new())];
    while let Some((path, module)) = pending.pop() {
        let text = std::fs::read_to_string(&path).map_err(|e| LoadError::Read(path.clone(), e))?;
        let ast = syn::parse_file(&text).map_err(|e| LoadError::Parse(path.clone(), e))?;
        let index = tree.files.len();
        let dir = child_dir(&path, module.is_empty());
        for (child, child_module) in declared_files(&ast.items, &dir, &module) {
            let found = [child.with_extension("rs"), child.join("mod.rs")]
                .into_iter()
                .find(|candidate| candidate.is_file())
                .ok_or_else(|| LoadError::Missing {
                    module: child_module.join("::"),
                    from: path.clone(),
                })?;
            pending.push((found, child_module));
        }
        let mut collector = Collector {
            file: index,
            scope: module.clone(),
            tree: &mut tree,
        };
        collector.tree.modules.insert(module.clone(), index);
        collector.visit_file(&ast);
        tree.files.push(FileModule {
            path,
            module,
            text,
            ast,
        });
    }
    Ok(tree)
}

/// The folder where the files of a file's child modules live: a crate root's and a `mod.rs`'s own
/// folder, else the folder named for the file.
fn child_dir(file: &Path, is_root: bool) -> PathBuf {
    let parent = file.parent().unwrap_or(Path::new("")).to_path_buf();
    match file.file_stem().and_then(|s| s.to_str()) {
        Some(stem) if !is_root && stem != "mod" => parent.join(stem),
        _ => parent,
    }
}

/// The `mod name;` declarations among `items` (inside `mod x { … }` blocks too), as the path of
/// their file without its extension and their module path.
fn declared_files(items: &[Item], dir: &Path, module: &ModPath) -> Vec<(PathBuf, ModPath)> {
    let mut found = Vec::new();
    for item in items {
        let Item::Mod(m) = item else { continue };
        if is_test_only(&m.attrs) {
            continue;
        }
        let mut child_module = module.clone();
        child_module.push(m.ident.to_string());
        let child = match path_attr(m) {
            Some(explicit) => dir.join(explicit).with_extension(""),
            None => dir.join(m.ident.to_string()),
        };
        match &m.content {
            None => found.push((child, child_module)),
            Some((_, inner)) => found.extend(declared_files(inner, &child, &child_module)),
        }
    }
    found
}

fn path_attr(m: &ItemMod) -> Option<String> {
    m.attrs.iter().find_map(|attr| match &attr.meta {
        syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

struct Collector<'t> {
    file: usize,
    scope: ModPath,
    tree: &'t mut CrateTree,
}

impl Collector<'_> {
    fn refer(&mut self, segments: Vec<String>) {
        self.tree.references.push(Reference {
            file: self.file,
            scope: self.scope.clone(),
            segments,
        });
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &UseTree) {
        match tree {
            UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            UseTree::Name(n) => self.bring(prefix, &n.ident.to_string(), n.ident.to_string()),
            UseTree::Rename(r) => self.bring(prefix, &r.ident.to_string(), r.rename.to_string()),
            UseTree::Glob(_) => {
                self.tree
                    .globs
                    .entry(self.scope.clone())
                    .or_default()
                    .push(prefix.clone());
                self.refer(prefix.clone());
            }
            UseTree::Group(g) => {
                for item in &g.items {
                    self.use_tree(prefix, item);
                }
            }
        }
    }

    /// `use prefix::name as alias;` (`self` in a group names the prefix itself).
    fn bring(&mut self, prefix: &[String], name: &str, alias: String) {
        let mut segments = prefix.to_vec();
        if name != "self" {
            segments.push(name.to_string());
        }
        let alias = if alias == "self" {
            segments.last().cloned().unwrap_or_default()
        } else {
            alias
        };
        self.tree
            .uses
            .entry(self.scope.clone())
            .or_default()
            .insert(alias, segments.clone());
        self.refer(segments);
    }

    /// Paths of two or more segments in a macro's tokens (`a::b`, `crate::a::B`).
    fn tokens(&mut self, tokens: TokenStream) {
        let mut current: Vec<String> = Vec::new();
        let mut colons = 0;
        for token in tokens {
            match token {
                TokenTree::Ident(ident) if colons == 2 || current.is_empty() => {
                    current.push(ident.to_string());
                    colons = 0;
                }
                TokenTree::Punct(p) if p.as_char() == ':' && !current.is_empty() && colons < 2 => {
                    colons += 1;
                }
                other => {
                    self.flush(&mut current);
                    colons = 0;
                    match other {
                        TokenTree::Group(group) => self.tokens(group.stream()),
                        TokenTree::Ident(ident) => current.push(ident.to_string()),
                        _ => {}
                    }
                }
            }
        }
        self.flush(&mut current);
    }

    fn flush(&mut self, current: &mut Vec<String>) {
        if current.len() >= 2 {
            self.refer(std::mem::take(current));
        }
        current.clear();
    }
}

impl<'ast> Visit<'ast> for Collector<'_> {
    fn visit_item(&mut self, item: &'ast Item) {
        let name = match item {
            Item::Fn(i) => Some(&i.sig.ident),
            Item::Struct(i) => Some(&i.ident),
            Item::Enum(i) => Some(&i.ident),
            Item::Const(i) => Some(&i.ident),
            Item::Static(i) => Some(&i.ident),
            Item::Type(i) => Some(&i.ident),
            Item::Trait(i) => Some(&i.ident),
            Item::Union(i) => Some(&i.ident),
            Item::Macro(i) => i.ident.as_ref(),
            _ => None,
        };
        if let Some(name) = name {
            self.tree
                .defines
                .entry(self.scope.clone())
                .or_default()
                .insert(name.to_string());
        }
        syn::visit::visit_item(self, item);
    }

    fn visit_item_mod(&mut self, m: &'ast ItemMod) {
        if is_test_only(&m.attrs) {
            return;
        }
        if let Some((_, items)) = &m.content {
            self.scope.push(m.ident.to_string());
            self.tree.modules.insert(self.scope.clone(), self.file);
            for item in items {
                self.visit_item(item);
            }
            self.scope.pop();
        }
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if !is_test_only(&f.attrs) {
            syn::visit::visit_item_fn(self, f);
        }
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if !is_test_only(&i.attrs) {
            syn::visit::visit_item_impl(self, i);
        }
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_test_only(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        if !is_test_only(&u.attrs) {
            self.use_tree(&mut Vec::new(), &u.tree);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.segments.len() >= 2 {
            let segments = path.segments.iter().map(|s| s.ident.to_string()).collect();
            self.refer(segments);
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.tokens(mac.tokens.clone());
        syn::visit::visit_macro(self, mac);
    }

    fn visit_attribute(&mut self, attr: &'ast syn::Attribute) {
        // Paths inside attributes (derives, cfgs, lints) name no module of ours worth a circle.
        let _ = attr;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::crate_dir;

    #[test]
    fn follows_declarations_to_files_and_skips_test_modules() {
        let dir = crate_dir(
            "tree",
            &[
                ("lib.rs", "mod a;\nmod b;\n#[cfg(test)]\nmod tests;\n"),
                (
                    "a.rs",
                    "mod inner { mod deep; }\nuse crate::b::Thing as T;\n",
                ),
                ("a/inner/deep.rs", "fn f() { crate::b::g(); }\n"),
                ("b/mod.rs", "pub struct Thing;\npub fn g() {}\n"),
            ],
        );
        let tree = load(&dir.join("lib.rs")).unwrap();
        let mut paths: Vec<_> = tree
            .files
            .iter()
            .map(|f| f.path.strip_prefix(&dir).unwrap().display().to_string())
            .collect();
        paths.sort();
        assert_eq!(paths, ["a.rs", "a/inner/deep.rs", "b/mod.rs", "lib.rs"]);
        let a = ModPath::from(["a".to_string()]);
        assert_eq!(tree.uses[&a]["T"], ["crate", "b", "Thing"]);
        assert!(tree
            .references
            .iter()
            .any(|r| r.segments == ["crate", "b", "g"] && r.scope == ["a", "inner", "deep"]));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_module_file_is_an_error_naming_it() {
        let dir = crate_dir("missing", &[("lib.rs", "mod gone;\n")]);
        let error = load(&dir.join("lib.rs")).err().unwrap().to_string();
        assert!(error.contains("module `gone` has no file"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn macro_tokens_yield_paths() {
        let dir = crate_dir(
            "macro",
            &[(
                "lib.rs",
                "fn f() { view! { <crate::pages::Run id=x::y/> }; }\n",
            )],
        );
        let tree = load(&dir.join("lib.rs")).unwrap();
        let found: Vec<_> = tree
            .references
            .iter()
            .map(|r| r.segments.join("::"))
            .collect();
        assert!(
            found.contains(&"crate::pages::Run".to_string()),
            "{found:?}"
        );
        assert!(found.contains(&"x::y".to_string()), "{found:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
