//! Where a function's sampled instructions are in its binary, as objdump
//! numbers them: the daemon reports a user frame's address as its offset
//! in the binary's file (pprof's mappings carry no load address), objdump
//! disassembles by ELF virtual address. An offset is turned into one
//! through the program header that loads it (for a position-independent
//! executable or a library linked by GNU ld the two are often equal, for a
//! fixed-address executable or lld's layout they are not), and the function
//! symbol (symbol table, else the dynamic one) holding the hottest of them
//! gives the range to disassemble.
//!
//! Reads the binary's headers and symbols only (not its code), as the user
//! who runs profilerctl; it must not run anything.

use std::{collections::BTreeMap, fs::File, path::Path};

use object::{Object as _, ObjectSegment as _, ObjectSymbol, SymbolKind};

/// A loadable segment: the file's bytes `file_offset..file_offset +
/// file_size` at the virtual address `address`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub file_offset: u64,
    pub file_size: u64,
    pub address: u64,
}

/// The virtual address of the byte at `offset` in the file, if a loadable
/// segment holds it.
pub fn virtual_address(segments: &[Segment], offset: u64) -> Option<u64> {
    segments.iter().find_map(|segment| {
        let into = offset.checked_sub(segment.file_offset)?;
        (into < segment.file_size).then(|| segment.address.saturating_add(into))
    })
}

/// A function symbol: its name and the addresses `start..end` it spans.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionSymbol {
    pub name: String,
    pub start: u64,
    pub end: u64,
}

/// The smallest of `symbols` (name, address, size) that holds `address`:
/// an alias of the same range is as good as another, and a symbol of size
/// 0 holds nothing.
pub fn holding<'a>(
    symbols: impl IntoIterator<Item = (&'a str, u64, u64)>,
    address: u64,
) -> Option<FunctionSymbol> {
    symbols
        .into_iter()
        .filter(|&(_, start, size)| size > 0 && start <= address && address - start < size)
        .min_by_key(|&(name, _, size)| (size, name.len()))
        .map(|(name, start, size)| FunctionSymbol {
            name: name.to_owned(),
            start,
            end: start.saturating_add(size),
        })
}

/// The function's sampled addresses in one binary, placed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Placed {
    /// Virtual address -> samples.
    pub addresses: BTreeMap<u64, u64>,
    /// Samples at offsets no loadable segment holds (a binary replaced
    /// since it was sampled).
    pub unplaced: u64,
    /// The function symbol holding the hottest address, when there is one.
    pub symbol: Option<FunctionSymbol>,
}

/// Places the samples at file `offsets` (offset -> samples) of the binary
/// at `path`; why not, when it cannot be read as an ELF file.
pub fn place(path: &Path, offsets: &BTreeMap<u64, u64>) -> Result<Placed, String> {
    let file = File::open(path).map_err(|err| format!("cannot open {}: {err}", path.display()))?;
    // Only the headers and symbol tables are read, not the whole file.
    let cache = object::ReadCache::new(file);
    let binary = object::File::parse(&cache).map_err(|err| {
        format!(
            "{} is not an ELF file profilerctl reads: {err}",
            path.display()
        )
    })?;
    let segments: Vec<Segment> = binary
        .segments()
        .map(|segment| {
            let (file_offset, file_size) = segment.file_range();
            Segment {
                file_offset,
                file_size,
                address: segment.address(),
            }
        })
        .collect();
    let mut placed = Placed::default();
    for (&offset, &count) in offsets {
        match virtual_address(&segments, offset) {
            Some(address) => *placed.addresses.entry(address).or_default() += count,
            None => placed.unplaced += count,
        }
    }
    let hottest = (placed.addresses.iter())
        .max_by_key(|&(&address, &count)| (count, std::cmp::Reverse(address)))
        .map(|(&address, _)| address);
    if let Some(hottest) = hottest {
        placed.symbol = holding(text_symbols(binary.symbols()), hottest)
            .or_else(|| holding(text_symbols(binary.dynamic_symbols()), hottest));
    }
    Ok(placed)
}

/// The functions among `symbols`, as (name, address, size).
fn text_symbols<'data>(
    symbols: impl Iterator<Item = impl ObjectSymbol<'data>>,
) -> impl Iterator<Item = (&'data str, u64, u64)> {
    symbols
        .filter(|symbol| symbol.kind() == SymbolKind::Text)
        .filter_map(|symbol| Some((symbol.name().ok()?, symbol.address(), symbol.size())))
}

/// The file mapped at `address` in this process and the offset in it, as
/// the daemon reports a frame there (from /proc/self/maps).
#[cfg(test)]
pub(super) fn mapped_offset(address: u64) -> (std::path::PathBuf, u64) {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    maps.lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (start, end) = fields.first()?.split_once('-')?;
            let hex = |text: &str| u64::from_str_radix(text, 16).ok();
            let (start, end, offset) = (hex(start)?, hex(end)?, hex(fields.get(2)?)?);
            (start <= address && address < end)
                .then(|| Some((fields.get(5)?.into(), address - start + offset)))?
        })
        .unwrap_or_else(|| panic!("{address:#x} is not in a mapping of a file"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_become_the_addresses_of_their_segment() {
        // A fixed-address executable (text loaded at 0x400000) and a
        // library whose code is loaded a page above its file offset.
        let segments = [
            Segment {
                file_offset: 0,
                file_size: 0x1000,
                address: 0x40_0000,
            },
            Segment {
                file_offset: 0x1000,
                file_size: 0x500,
                address: 0x2000,
            },
        ];
        assert_eq!(virtual_address(&segments, 0x123), Some(0x40_0123));
        assert_eq!(virtual_address(&segments, 0x1004), Some(0x2004));
        assert_eq!(virtual_address(&segments, 0x14ff), Some(0x24ff));
        assert_eq!(virtual_address(&segments, 0x1500), None);
        assert_eq!(virtual_address(&[], 0x10), None);
    }

    #[test]
    fn the_smallest_symbol_holding_an_address_is_its_function() {
        let symbols = [
            ("whole_text", 0x1000, 0x1000),
            ("hot", 0x1181, 0x31),
            ("cold", 0x11b2, 0x31),
            ("marker", 0x1190, 0),
        ];
        let hot = holding(symbols, 0x1199).expect("a symbol");
        assert_eq!(
            hot,
            FunctionSymbol {
                name: "hot".into(),
                start: 0x1181,
                end: 0x11b2
            }
        );
        assert_eq!(
            holding(symbols, 0x11b2).map(|s| s.name),
            Some("cold".into())
        );
        assert_eq!(holding(symbols, 0x2000), None);
    }

    /// The whole chain on a real library: malloc's address in this
    /// process, as the file offset the daemon would report, placed in
    /// the C library's file, is in a symbol of malloc (by one of its
    /// names).
    #[test]
    fn malloc_s_file_offset_is_placed_in_malloc() {
        let (path, offset) = mapped_offset(libc::malloc as *const () as u64);
        let placed = place(&path, &BTreeMap::from([(offset, 3)])).expect("placed");
        assert_eq!(placed.unplaced, 0, "{placed:?}");
        assert_eq!(placed.addresses.values().sum::<u64>(), 3);
        let symbol = placed.symbol.expect("malloc's symbol");
        assert!(
            profilerd_words::FunctionName::new("malloc").matches(&symbol.name),
            "{}: {symbol:?}",
            path.display()
        );
        let (&placed_at, _) = placed.addresses.iter().next().expect("an address");
        assert_eq!(
            placed_at, symbol.start,
            "malloc's address is its symbol's start"
        );
    }
}
