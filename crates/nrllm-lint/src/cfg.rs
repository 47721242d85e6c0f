//! Which items exist only in tests.

use syn::{Attribute, Meta};

/// Whether the attributes hold `#[cfg(test)]` or `#[cfg(all(test, …))]`: the item is compiled only
/// for tests. (`cfg(any(test, …))` is not test-only: some build without tests compiles it.)
pub fn is_test_only(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|attr| {
        let Meta::List(list) = &attr.meta else {
            return false;
        };
        if !list.path.is_ident("cfg") {
            return false;
        }
        let tokens = list.tokens.to_string();
        let tokens = tokens.trim();
        tokens == "test"
            || (tokens.starts_with("all")
                && tokens
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .any(|word| word == "test"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(source: &str) -> Vec<Attribute> {
        syn::parse_str::<syn::ItemFn>(&format!("{source} fn f() {{}}"))
            .unwrap()
            .attrs
    }

    #[test]
    fn test_only_forms() {
        assert!(is_test_only(&attrs("#[cfg(test)]")));
        assert!(is_test_only(&attrs("#[cfg(all(test, feature = \"x\"))]")));
        assert!(!is_test_only(&attrs(
            "#[cfg(any(test, feature = \"testing\"))]"
        )));
        assert!(!is_test_only(&attrs("#[cfg(feature = \"ssr\")]")));
        assert!(!is_test_only(&attrs("#[cfg(all(feature = \"tests\"))]")));
        assert!(!is_test_only(&attrs("#[inline]")));
    }
}
