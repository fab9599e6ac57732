//! The frames of an expansion as tree and flat reports see them: a frame's
//! identity there ([`LineKey`]: file, function, line, and module and
//! address unless `combine`), its text, and the frames numbered in key
//! order ([`Lines`]).

use super::super::ReportError;
use super::super::sequences::Sequences;
use super::{Expansion, FrameView, LineId, SiteId, small_id};
use crate::profile::LocationKind;

/// A frame's identity in tree and flat reports. The derived order is Julia's
/// file, function, line order, then module and address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(in crate::report) struct LineKey<'a> {
    /// The source file; the module's basename without one; "" for markers.
    pub file: &'a str,
    pub function: &'a str,
    /// Source line, 0 when unknown.
    pub line: u32,
    /// Module and address, when `combine` is off (never for markers).
    pub address: Option<(&'a str, u64)>,
    pub marker: bool,
}

impl<'a> LineKey<'a> {
    pub fn new(frame: FrameView<'a>, combine: bool) -> Self {
        let marker = frame.kind == LocationKind::Marker;
        // A kernel address of 0 is one hidden from the asker.
        let hidden = frame.kind == LocationKind::Kernel && frame.address == 0;
        let file = match frame.file {
            _ if marker => "",
            Some(file) => file,
            None => frame.module.rsplit('/').next().unwrap_or(frame.module),
        };
        Self {
            file,
            function: frame.function,
            line: frame.line,
            address: (!combine && !marker && !hidden).then_some((frame.module, frame.address)),
            marker,
        }
    }

    /// The line column: the number, `?` when unknown, empty for markers.
    pub fn line_text(&self) -> String {
        match (self.marker, self.line) {
            (true, _) => String::new(),
            (false, 0) => "?".to_owned(),
            (false, line) => line.to_string(),
        }
    }

    /// The function, with ` @0x<address>` when addresses are told apart.
    pub fn function_text(&self) -> String {
        match self.address {
            Some((_, address)) => format!("{} @{address:#x}", self.function),
            None => self.function.to_owned(),
        }
    }

    /// `file:line; function`, or a marker's name.
    pub fn text(&self) -> String {
        if self.marker {
            self.function.to_owned()
        } else {
            format!(
                "{}:{}; {}",
                self.file,
                self.line_text(),
                self.function_text()
            )
        }
    }
}

/// The frames of an [`Expansion`] as tree and flat see them: [`LineId`]s,
/// numbered in [`LineKey`] order (so comparing two ids compares their keys).
pub(in crate::report) struct Lines<'a> {
    /// The distinct keys, sorted: line `l` is `keys[l]`.
    keys: Vec<LineKey<'a>>,
    /// The line of each frame of the expansion.
    frame_lines: Vec<LineId>,
}

impl<'a> Lines<'a> {
    pub fn new(expansion: &Expansion<'a>, combine: bool) -> Result<Self, ReportError> {
        let frame_keys: Vec<LineKey<'a>> = expansion
            .frames
            .iter()
            .map(|&frame| LineKey::new(frame, combine))
            .collect();
        let mut keys = frame_keys.clone();
        keys.sort_unstable();
        keys.dedup();
        small_id(keys.len(), "lines")?;
        // Every frame's key is among `keys`, and their number fits in a
        // `LineId`.
        let frame_lines = frame_keys
            .iter()
            .map(|key| keys.binary_search(key).unwrap_or_else(|at| at) as LineId)
            .collect();
        Ok(Self { keys, frame_lines })
    }

    /// The distinct keys; a [`LineId`] indexes them.
    pub fn keys(&self) -> &[LineKey<'a>] {
        &self.keys
    }

    /// The lines of a site's frames, outermost first; at least one.
    pub fn of_site(&self, expansion: &Expansion<'_>, site: SiteId) -> &[LineId] {
        // A site's frames are contiguous, so are their lines.
        let frames = expansion.site_frames(site);
        &self.frame_lines[frames.start as usize..frames.end as usize]
    }

    /// The lines of every stack of the expansion, root first, numbered as
    /// in the expansion.
    pub fn of_stacks(&self, expansion: &Expansion<'_>) -> Result<Sequences, ReportError> {
        // Where each site's lines are in `frame_lines`.
        let site_lines: Vec<(usize, usize)> = expansion
            .sites
            .iter()
            .map(|entry| (entry.first_frame as usize, entry.end_frame as usize))
            .collect();
        // A line per site but for inlined frames: a little more.
        let values = expansion.stacks.value_count();
        let mut stacks = Sequences::with_capacity(expansion.stack_count(), values + values / 8);
        for sites in expansion.stacks.iter() {
            for &site in sites {
                let (first, end) = site_lines[site as usize];
                // Mostly one line.
                if end == first + 1 {
                    stacks.push(self.frame_lines[first]);
                } else {
                    stacks.extend_from_slice(&self.frame_lines[first..end]);
                }
            }
            stacks.finish()?;
        }
        Ok(stacks)
    }
}
