//! Lines of a file outside its tests, and lines of each function.

use proc_macro2::Span;
use syn::visit::Visit;
use syn::{Attribute, Block, ImplItem, Item, Signature, TraitItem};

use crate::cfg::is_test_only;

/// A function and the lines it spans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FnSize {
    pub name: String,
    /// The line of its `fn` keyword (1-based).
    pub line: usize,
    pub lines: usize,
}

/// What the size rules read of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSize {
    /// Lines of the file outside `#[cfg(test)]` items.
    pub lines: usize,
    pub functions: Vec<FnSize>,
}

/// Measures a parsed file whose text has `total_lines` lines.
pub fn measure(file: &syn::File, total_lines: usize) -> FileSize {
    let mut walker = Walker::default();
    walker.visit_file(file);
    FileSize {
        lines: total_lines.saturating_sub(walker.test_lines),
        functions: walker.functions,
    }
}

#[derive(Default)]
struct Walker {
    test_lines: usize,
    functions: Vec<FnSize>,
}

impl Walker {
    /// Whether the item is test-only; if so its lines are counted out and it is not walked.
    fn skip(&mut self, attrs: &[Attribute], end: Span) -> bool {
        if !is_test_only(attrs) {
            return false;
        }
        let start = attrs
            .iter()
            .map(|attr| attr.pound_token.span.start().line)
            .min()
            .unwrap_or(end.start().line);
        self.test_lines += end.end().line + 1 - start;
        true
    }

    fn function(&mut self, sig: &Signature, block: &Block) {
        let line = sig.fn_token.span.start().line;
        let end = block.brace_token.span.close().end().line;
        self.functions.push(FnSize {
            name: sig.ident.to_string(),
            line,
            lines: end + 1 - line,
        });
    }
}

fn item_end(item: &Item) -> Option<Span> {
    Some(match item {
        Item::Fn(f) => f.block.brace_token.span.close(),
        Item::Mod(m) => match &m.content {
            Some((brace, _)) => brace.span.close(),
            None => m.semi.as_ref()?.span,
        },
        Item::Impl(i) => i.brace_token.span.close(),
        Item::Use(u) => u.semi_token.span,
        Item::Const(c) => c.semi_token.span,
        Item::Static(s) => s.semi_token.span,
        Item::Struct(s) => match &s.fields {
            syn::Fields::Named(named) => named.brace_token.span.close(),
            _ => s.semi_token.as_ref()?.span,
        },
        Item::Enum(e) => e.brace_token.span.close(),
        Item::Trait(t) => t.brace_token.span.close(),
        Item::Macro(m) => match &m.mac.delimiter {
            syn::MacroDelimiter::Brace(b) => b.span.close(),
            syn::MacroDelimiter::Paren(p) => p.span.close(),
            syn::MacroDelimiter::Bracket(b) => b.span.close(),
        },
        Item::Type(t) => t.semi_token.span,
        _ => return None,
    })
}

fn item_attrs(item: &Item) -> &[Attribute] {
    match item {
        Item::Fn(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        Item::Const(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        _ => &[],
    }
}

impl<'ast> Visit<'ast> for Walker {
    fn visit_item(&mut self, item: &'ast Item) {
        if let Some(end) = item_end(item) {
            if self.skip(item_attrs(item), end) {
                return;
            }
        }
        syn::visit::visit_item(self, item);
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        self.function(&f.sig, &f.block);
        syn::visit::visit_item_fn(self, f);
    }

    fn visit_impl_item(&mut self, item: &'ast ImplItem) {
        if let ImplItem::Fn(f) = item {
            if self.skip(&f.attrs, f.block.brace_token.span.close()) {
                return;
            }
            self.function(&f.sig, &f.block);
        }
        syn::visit::visit_impl_item(self, item);
    }

    fn visit_trait_item(&mut self, item: &'ast TraitItem) {
        if let TraitItem::Fn(f) = item {
            if let Some(block) = &f.default {
                if self.skip(&f.attrs, block.brace_token.span.close()) {
                    return;
                }
                self.function(&f.sig, block);
            }
        }
        syn::visit::visit_trait_item(self, item);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(source: &str) -> FileSize {
        measure(&syn::parse_file(source).unwrap(), source.lines().count())
    }

    #[test]
    fn test_modules_and_test_functions_are_counted_out() {
        let source =
            "fn a() {\n    1;\n}\n\n#[cfg(test)]\nmod tests {\n    fn long() {\n\n\n    }\n}\n";
        let size = sizes(source);
        assert_eq!(size.lines, 4);
        assert_eq!(
            size.functions,
            vec![FnSize {
                name: "a".into(),
                line: 1,
                lines: 3
            }]
        );
    }

    #[test]
    fn methods_nested_functions_and_trait_defaults_count() {
        let source = "struct S;\nimpl S {\n    /// doc\n    pub fn m(&self) {\n        fn inner() {}\n    }\n    #[cfg(test)]\n    fn t() {}\n}\ntrait T {\n    fn d() {\n    }\n    fn no_body();\n}\n";
        let size = sizes(source);
        let names: Vec<_> = size
            .functions
            .iter()
            .map(|f| (f.name.as_str(), f.line, f.lines))
            .collect();
        assert_eq!(names, vec![("m", 4, 3), ("inner", 5, 1), ("d", 11, 2)]);
        assert_eq!(size.lines, 12);
    }

    #[test]
    fn macro_lines_count_as_lines_of_the_function() {
        let source = "fn page() {\n    view! {\n        <p>\n        </p>\n    }\n}\n";
        assert_eq!(sizes(source).functions[0].lines, 6);
    }
}
