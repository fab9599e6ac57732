//! The vDSO's function names (`__vdso_clock_gettime`, …): the kernel maps
//! one image into every 64-bit process, which has no file to symbolize
//! from, so its dynamic symbols are read once from the daemon's own copy.
//!
//! Owns that table; it must not read other processes' memory.

use std::sync::{Arc, OnceLock};

use object::{Object as _, ObjectSegment as _, ObjectSymbol as _, SymbolKind};

/// Functions of the vDSO by offset in its image: (start, end, name),
/// sorted by start.
struct VdsoFunctions(Vec<(u64, u64, Arc<str>)>);

impl VdsoFunctions {
    fn of(image: &[u8]) -> Self {
        let Ok(file) = object::File::parse(image) else {
            return Self(Vec::new());
        };
        // Symbol values are addresses in the image as linked: offsets once
        // its first loadable segment's address is taken off.
        let base = file
            .segments()
            .next()
            .map_or(0, |segment| segment.address());
        let mut functions: Vec<(u64, u64, Arc<str>)> = file
            .dynamic_symbols()
            .chain(file.symbols())
            .filter(|symbol| symbol.kind() == SymbolKind::Text && symbol.size() > 0)
            .filter_map(|symbol| {
                let start = symbol.address().checked_sub(base)?;
                let name = symbol.name().ok()?;
                Some((start, start + symbol.size(), Arc::from(name)))
            })
            .collect();
        // Aliases (`clock_gettime` and `__vdso_clock_gettime`): the
        // `__vdso_` name, as perf shows it, first.
        functions.sort_by(|a, b| {
            (a.0, !a.2.starts_with("__vdso_"), &a.2).cmp(&(b.0, !b.2.starts_with("__vdso_"), &b.2))
        });
        functions.dedup_by_key(|function| function.0);
        Self(functions)
    }

    fn at(&self, offset: u64) -> Option<&Arc<str>> {
        let after = self.0.partition_point(|&(start, ..)| start <= offset);
        let (_, end, name) = self.0.get(after.checked_sub(1)?)?;
        (offset < *end).then_some(name)
    }
}

/// The vDSO function at `offset` from the start of its mapping, if any.
pub fn function_at(offset: u64) -> Option<Arc<str>> {
    static FUNCTIONS: OnceLock<VdsoFunctions> = OnceLock::new();
    FUNCTIONS
        .get_or_init(|| VdsoFunctions::of(crate::unwind::own_vdso_image().unwrap_or_default()))
        .at(offset)
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_gettime_is_named_as_perf_names_it() {
        let image = crate::unwind::own_vdso_image().expect("the vDSO is readable");
        let functions = VdsoFunctions::of(image);
        let (start, end, name) = functions
            .0
            .iter()
            .find(|(.., name)| name.ends_with("clock_gettime"))
            .expect("the vDSO has clock_gettime")
            .clone();
        assert_eq!(&*name, "__vdso_clock_gettime");
        assert_eq!(function_at(start).as_deref(), Some("__vdso_clock_gettime"));
        assert_eq!(
            function_at(end - 1).as_deref(),
            Some("__vdso_clock_gettime")
        );
        assert_ne!(function_at(end).as_deref(), Some("__vdso_clock_gettime"));
        assert_eq!(function_at(0), None, "the ELF header is no function");
    }
}
