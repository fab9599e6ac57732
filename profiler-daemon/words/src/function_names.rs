//! Which frames a function named by a person matches: wherever a user
//! types a function's name (`callers`, `annotate`, `diff --function`, the
//! gRPC requests that carry one, the web view's search and sandwich), a
//! frame is that function when its name is the name typed, ends with `::`
//! and it (`spin` finds `app::spin`, `server::spin` finds
//! `app::server::spin`), or is the same C library function under another of
//! its names: without a symbol version (`malloc@@GLIBC_2.2.5`) and the C
//! library's alias prefixes (`__GI___libc_malloc`, `__libc_malloc`), both
//! name `malloc`, whichever of its names is typed.
//!
//! Owns the rule; it must not decide what a frame's name is (the
//! symbolizer does) nor how names are shown. The web view's
//! `web/names.js` mirrors it line for line, and a test of the daemon holds
//! the two to the same answers.

/// The C library's prefixes of internal aliases of a public function,
/// longest first: glibc names `malloc`'s own code `__GI___libc_malloc`, and
/// a symbol table may name it `__libc_malloc`.
const ALIAS_PREFIXES: &[&str] = &["__GI___libc_", "__GI___", "__GI_", "__libc_"];

/// The public name `name` is an alias of: without a symbol version
/// (`@@GLIBC_2.2.5`, `@GLIBC_2.2.5`) and an alias prefix; `name` itself
/// otherwise (a prefix alone, `__libc_`, is a name of its own).
pub fn alias_of(name: &str) -> &str {
    let name = name.split_once('@').map_or(name, |(name, _)| name);
    ALIAS_PREFIXES
        .iter()
        .find_map(|prefix| name.strip_prefix(prefix))
        .filter(|rest| !rest.is_empty())
        .unwrap_or(name)
}

/// A function as a person named it, ready to be held against frames'
/// names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FunctionName<'a> {
    /// The name as typed.
    asked: &'a str,
    /// Its public name (see [`alias_of`]).
    public: &'a str,
}

impl<'a> FunctionName<'a> {
    pub fn new(asked: &'a str) -> Self {
        Self {
            asked,
            public: alias_of(asked),
        }
    }

    /// The name as typed.
    pub fn asked(&self) -> &'a str {
        self.asked
    }

    /// Whether a frame whose function is `name` is this function: the
    /// same name, one that ends with `::` and it, or the same public name
    /// once versions and the C library's alias prefixes are taken off
    /// both. An empty name matches nothing.
    pub fn matches(&self, name: &str) -> bool {
        !self.asked.is_empty()
            && (name == self.asked
                || name
                    .strip_suffix(self.asked)
                    .is_some_and(|head| head.ends_with("::"))
                || alias_of(name) == self.public)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(name: &str, asked: &str) -> bool {
        FunctionName::new(asked).matches(name)
    }

    #[test]
    fn a_function_is_its_name_or_its_last_qualified_parts() {
        assert!(matches("hot", "hot"));
        assert!(matches("app::server::hot", "hot"));
        assert!(matches("app::server::hot", "server::hot"));
        assert!(matches("<app::Server as Handler>::hot", "hot"));
        assert!(!matches("hotter", "hot"));
        assert!(!matches("app::hotter", "hot"));
        assert!(!matches("xhot", "hot"));
        assert!(!matches("app::server::hot", "app::hot"));
        assert!(!matches("hot", "app::hot"));
        assert!(!matches("", ""));
        assert!(!matches("hot", ""));
    }

    /// `malloc` finds glibc's own names of it, and any of them finds the
    /// others; not another function.
    #[test]
    fn c_library_aliases_are_the_function() {
        for name in [
            "malloc",
            "__GI___libc_malloc",
            "__libc_malloc",
            "malloc@@GLIBC_2.2.5",
            "malloc@GLIBC_2.2.5",
            "__GI___malloc",
            "__GI_malloc",
        ] {
            assert!(matches(name, "malloc"), "{name}");
            assert!(matches("malloc", name), "{name}");
            assert!(matches(name, "__GI___libc_malloc"), "{name}");
        }
        for name in ["xmalloc", "malloc_consolidate", "_int_malloc", "__libc_"] {
            assert!(!matches(name, "malloc"), "{name}");
        }
        assert_eq!(alias_of("__GI_memcpy"), "memcpy");
        assert_eq!(alias_of("memcpy@@GLIBC_2.14"), "memcpy");
        assert_eq!(alias_of("__libc_"), "__libc_");
        assert_eq!(alias_of("spin"), "spin");
        assert!(matches("__libc_", "__libc_"));
        assert!(!matches("__libc_free", "__libc_"));
    }
}
