//! Interned names: the many frames of one function share one string.
//! Names mangled as C++ or Rust are demangled here, and only those.
//!
//! Owns the strings; it must not symbolize.

use std::{borrow::Cow, sync::Arc};

use rustc_hash::FxHashMap as HashMap;

use crate::profile::Frame;

/// What a name costs besides its text: the map's entry and the shared
/// string's header.
const NAME_OVERHEAD: u64 = 64;

/// Interned strings, so the many frames of one function share their name.
#[derive(Default)]
pub(super) struct Names {
    names: HashMap<Box<str>, Arc<str>>,
    /// Bytes of the strings held (twice: key and name).
    bytes: u64,
}

impl Names {
    pub fn get(&mut self, text: &str) -> Arc<str> {
        if let Some(name) = self.names.get(text) {
            return name.clone();
        }
        let name: Arc<str> = Arc::from(text);
        self.names.insert(Box::from(text), name.clone());
        self.bytes += 2 * text.len() as u64 + NAME_OVERHEAD;
        name
    }

    /// Bytes held, roughly.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn clear(&mut self) {
        self.names.clear();
        self.bytes = 0;
    }

    /// The frames of a symbol, outermost first: the function, then the
    /// functions inlined into it, each at its own line.
    pub fn frames(&mut self, sym: &blazesym::symbolize::Sym<'_>) -> Vec<Frame> {
        let mut frames = Vec::with_capacity(1 + sym.inlined.len());
        let (file, line) = self.code_info(sym.code_info.as_deref());
        frames.push(Frame {
            function: self.get(&demangled(&sym.name)),
            file,
            line,
            inlined: false,
        });
        for inlined in &sym.inlined {
            let (file, line) = self.code_info(inlined.code_info.as_ref());
            frames.push(Frame {
                function: self.get(&demangled(&inlined.name)),
                file,
                line,
                inlined: true,
            });
        }
        frames
    }

    fn code_info(
        &mut self,
        code_info: Option<&blazesym::symbolize::CodeInfo<'_>>,
    ) -> (Option<Arc<str>>, u32) {
        match code_info {
            Some(info) => (
                Some(self.get(&info.to_path().to_string_lossy())),
                info.line.unwrap_or(0),
            ),
            None => (None, 0),
        }
    }

    /// A frame for an address without symbols.
    pub fn unknown_frame(&mut self, name: &str) -> Frame {
        Frame {
            function: self.get(name),
            file: None,
            line: 0,
            inlined: false,
        }
    }
}

/// `name` demangled when it is mangled: C++ (Itanium ABI, `_Z…`) or Rust
/// (`_R…`, or the legacy `_ZN…17h<hash>E`, shown without its hash). Any
/// other name is left as it is: a short C name such as `rd` would
/// otherwise parse as a mangled type (`double restrict`).
pub(super) fn demangled(name: &str) -> Cow<'_, str> {
    if !(name.starts_with("_Z") || name.starts_with("_R")) {
        return Cow::Borrowed(name);
    }
    if let Ok(rust) = rustc_demangle::try_demangle(name) {
        return Cow::Owned(format!("{rust:#}"));
    }
    cpp_demangle::Symbol::new(name)
        .ok()
        .and_then(|symbol| symbol.demangle().ok())
        .map_or(Cow::Borrowed(name), Cow::Owned)
}

#[cfg(test)]
mod tests {
    use super::demangled;

    #[test]
    fn only_mangled_names_are_demangled() {
        // C names that parse as mangled types stay as they are.
        for plain in ["rd", "main", "Dv", "St", "i", "frobnicate"] {
            assert_eq!(demangled(plain), plain);
        }
        assert_eq!(
            demangled("_ZN4core9panicking9panic_fmt17h5f1a6fd39197ad62E"),
            "core::panicking::panic_fmt"
        );
        assert_eq!(demangled("_RNvCs1234_7mycrate4main"), "mycrate::main");
        assert_eq!(demangled("_Z3fooi"), "foo(int)");
        assert_eq!(
            demangled("_ZNSt6vectorIiSaIiEE9push_backERKi"),
            "std::vector<int, std::allocator<int> >::push_back(int const&)"
        );
        // Mangled-looking but not valid: left as it is.
        assert_eq!(demangled("_Zgarbage"), "_Zgarbage");
    }
}
