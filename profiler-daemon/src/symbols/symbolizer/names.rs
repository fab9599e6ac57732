//! Interned names: the many frames of one function share one string.
//!
//! Owns the strings; it must not symbolize.

use std::sync::Arc;

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
            function: self.get(&sym.name),
            file,
            line,
            inlined: false,
        });
        for inlined in &sym.inlined {
            let (file, line) = self.code_info(inlined.code_info.as_ref());
            frames.push(Frame {
                function: self.get(&inlined.name),
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
