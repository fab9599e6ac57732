//! Stack expansion shared by every format: resolves a sample's thread and
//! stack, collapses kernel runs into `[kernel]` when asked, stands in
//! `[unknown]` for empty stacks, and expands locations into frames. Also the
//! identity and text of a frame in tree and flat reports ([`LineKey`],
//! [`Lines`]).
//!
//! Everything is interned once per report, so that the formats work on small
//! integers instead of strings: each distinct site (a location of the
//! profile, or a marker) gets a [`SiteId`], each of its frames a [`FrameId`],
//! and each distinct stack of the profile is expanded once, however many
//! threads it was sampled in. [`Lines`] maps frames to the ids of their
//! [`LineKey`]s, numbered in `LineKey` order.
//!
//! It must not lay out, order or filter a report: that is each format's
//! job (lines are numbered in `LineKey` order only so that formats can
//! compare ids instead of keys).

use std::borrow::Cow;

use super::ReportError;
use super::sequences::Sequences;
use crate::profile::{Frame, Location, LocationKind, Profile, ThreadInfo};

/// The frame that stands for a run of kernel frames when `kernel == false`.
pub(super) const KERNEL_MARKER: &str = "[kernel]";
/// The frame that stands for an empty stack, or a location without frames.
pub(super) const UNKNOWN_MARKER: &str = "[unknown]";

/// Index of a distinct site in [`Expansion::sites`].
pub(super) type SiteId = u32;
/// Index of a distinct frame in [`Expansion::frames`].
pub(super) type FrameId = u32;
/// Index of a distinct stack of an [`Expansion`].
pub(super) type StackId = u32;
/// Index of a distinct [`LineKey`] in [`Lines`].
pub(super) type LineId = u32;

/// The samples of a profile with their stacks resolved and interned.
pub(super) struct Expansion<'a> {
    /// Every sample with a non-zero count, in profile order.
    /// The profile's own when its stacks are not expanded.
    pub samples: Cow<'a, [StackSample]>,
    /// The samples of each stack, all threads together: what a report of
    /// the whole profile needs without a pass over every sample.
    pub stack_counts: Vec<u64>,
    /// The profile's threads, which samples refer to.
    threads: &'a [ThreadInfo],
    /// The distinct sites the stacks use, in order of first use.
    pub sites: Vec<SiteEntry<'a>>,
    /// The frames of every site, a site's frames one after another,
    /// outermost first.
    pub frames: Vec<FrameView<'a>>,
    /// The sites of every distinct stack, root first.
    stacks: Sequences,
}

/// One profile sample with its stack resolved: its `thread` an index in
/// [`Profile::threads`] (see [`Expansion::thread`]), its `stack` an
/// expansion's (or, without sites, the profile's), never empty.
pub(super) type StackSample = crate::profile::Sample;

/// A distinct site and where its frames are in [`Expansion::frames`].
pub(super) struct SiteEntry<'a> {
    pub site: Site<'a>,
    /// `frames[first_frame..end_frame]`; at least one.
    pub first_frame: FrameId,
    pub end_frame: FrameId,
}

impl<'a> Expansion<'a> {
    /// Resolves every sample with a non-zero count, in profile order.
    ///
    /// The stacks the samples use are expanded in the profile's order, not
    /// the samples': reading a large profile's stacks front to back costs a
    /// fraction of reading them in the order samples refer to them.
    pub fn new(profile: &'a Profile, kernel: bool) -> Result<Self, ReportError> {
        let mut expansion = Expansion {
            samples: Cow::Borrowed(&[]),
            stack_counts: Vec::new(),
            threads: &profile.threads,
            sites: Vec::new(),
            frames: Vec::new(),
            stacks: Sequences::with_capacity(profile.stacks.len(), profile.stacks.location_count()),
        };
        let mut interner = SiteInterner {
            location_sites: vec![None; profile.locations.len()],
            kernel_marker: None,
            unknown_marker: None,
        };
        // The expansion of each profile stack: first whether a sample uses
        // it, then its id.
        const UNUSED: StackId = StackId::MAX;
        const USED: StackId = 0;
        let mut stack_ids: Vec<StackId> = vec![UNUSED; profile.stacks.len()];
        let mut valid = true;
        for sample in profile.samples.iter().filter(|sample| sample.count > 0) {
            match stack_ids.get_mut(sample.stack as usize) {
                Some(id) if (sample.thread as usize) < profile.threads.len() => *id = USED,
                _ => valid = false,
            }
        }
        // The first location of each stack that is not in the profile.
        let mut dangling: Vec<Option<u32>> = Vec::new();
        for (stack, id) in (0..).zip(&mut stack_ids) {
            if *id == UNUSED {
                continue;
            }
            for &index in profile.stacks.get(stack).unwrap_or_default() {
                let Some(location) = profile.locations.get(index as usize) else {
                    dangling.resize(profile.stacks.len(), None);
                    dangling[stack as usize].get_or_insert(index);
                    valid = false;
                    continue;
                };
                let site = if !kernel && location.kind == LocationKind::Kernel {
                    let marker = interner.marker(&mut expansion, KERNEL_MARKER)?;
                    if expansion.stacks.current().last() == Some(&marker) {
                        continue;
                    }
                    marker
                } else {
                    interner.location(&mut expansion, index, location)?
                };
                expansion.stacks.push(site);
            }
            if expansion.stacks.current().is_empty() {
                let marker = interner.marker(&mut expansion, UNKNOWN_MARKER)?;
                expansion.stacks.push(marker);
            }
            *id = expansion.stacks.finish()?;
        }
        if !valid {
            return Err(first_dangling_index(profile, &dangling));
        }
        let mut stack_counts = vec![0_u64; expansion.stacks.len()];
        // Every stack used, in order, and no sample empty (as a window read
        // from the store has them): the samples are the profile's own.
        let unchanged = (0..).zip(&stack_ids).all(|(stack, &id)| id == stack)
            && profile.samples.iter().all(|sample| sample.count > 0);
        if unchanged {
            for sample in &profile.samples {
                let total = &mut stack_counts[sample.stack as usize];
                *total = total.saturating_add(sample.count);
            }
            expansion.samples = Cow::Borrowed(&profile.samples);
            expansion.stack_counts = stack_counts;
            return Ok(expansion);
        }
        let samples = profile.samples.iter().filter(|sample| sample.count > 0);
        let samples = samples.map(|sample| {
            let stack = stack_ids[sample.stack as usize];
            let total = &mut stack_counts[stack as usize];
            *total = total.saturating_add(sample.count);
            StackSample { stack, ..*sample }
        });
        // Reserved whole: a window's samples may be a million.
        let mut owned = Vec::with_capacity(profile.samples.len());
        owned.extend(samples);
        expansion.samples = Cow::Owned(owned);
        expansion.stack_counts = stack_counts;
        Ok(expansion)
    }

    /// The samples of a profile with a non-zero count, their stacks not
    /// expanded: a sample's stack stays its id below `stacks`, for a report
    /// whose stacks come from elsewhere (a [`super::stack_index::StackIndex`]).
    pub fn without_sites(profile: &'a Profile, stacks: usize) -> Result<Self, ReportError> {
        let mut stack_counts = vec![0_u64; stacks];
        let mut empty = 0;
        for (number, sample) in profile.samples.iter().enumerate() {
            if sample.count == 0 {
                empty += 1;
                continue;
            }
            if sample.thread as usize >= profile.threads.len() {
                let threads = profile.threads.len();
                return Err(refers_past(number, "thread", sample.thread, threads));
            }
            let total = stack_counts
                .get_mut(sample.stack as usize)
                .ok_or_else(|| refers_past(number, "stack", sample.stack, stacks))?;
            *total = total.saturating_add(sample.count);
        }
        // The profile's samples as they are (a store's have counts), not
        // copied: a window's may be a million.
        let samples = match empty {
            0 => Cow::Borrowed(&profile.samples[..]),
            _ => Cow::Owned(
                profile
                    .samples
                    .iter()
                    .filter(|sample| sample.count > 0)
                    .copied()
                    .collect(),
            ),
        };
        Ok(Expansion {
            samples,
            stack_counts,
            threads: &profile.threads,
            sites: Vec::new(),
            frames: Vec::new(),
            stacks: Sequences::with_capacity(0, 0),
        })
    }

    /// The sample's thread.
    /// The profile's threads, which samples refer to by index.
    pub fn threads(&self) -> &'a [ThreadInfo] {
        self.threads
    }

    pub fn thread(&self, sample: &StackSample) -> &'a ThreadInfo {
        // Checked when the sample was resolved.
        &self.threads[sample.thread as usize]
    }

    /// Whether these indexes of samples (distinct, as a section's are) are
    /// all the samples, so that [`Expansion::stack_counts`] are theirs.
    pub fn is_every_sample(&self, indexes: &[u32]) -> bool {
        indexes.len() == self.samples.len()
    }

    /// Number of distinct stacks.
    pub fn stack_count(&self) -> usize {
        self.stacks.len()
    }

    /// Number of sites of all distinct stacks.
    pub fn site_count(&self) -> usize {
        self.stacks.value_count()
    }

    /// The sites of a stack, root first; never empty.
    pub fn sites_of(&self, stack: StackId) -> &[SiteId] {
        self.stacks.get(stack)
    }

    /// The frames of a site, outermost first; at least one.
    pub fn site_frames(&self, site: SiteId) -> std::ops::Range<FrameId> {
        let entry = &self.sites[site as usize];
        entry.first_frame..entry.end_frame
    }

    /// All frames of a stack, root first, inlined frames outermost first.
    #[cfg(test)]
    pub fn frames_of(&self, stack: StackId) -> impl Iterator<Item = FrameId> + '_ {
        self.sites_of(stack)
            .iter()
            .flat_map(|&site| self.site_frames(site))
    }
}

/// The error of the first sample (with a non-zero count) that refers to a
/// thread, stack or location the profile does not hold; `dangling` holds
/// each stack's first dangling location, or is empty.
fn first_dangling_index(profile: &Profile, dangling: &[Option<u32>]) -> ReportError {
    for (number, sample) in profile.samples.iter().enumerate() {
        if sample.count == 0 {
            continue;
        }
        if sample.thread as usize >= profile.threads.len() {
            return refers_past(number, "thread", sample.thread, profile.threads.len());
        }
        if sample.stack as usize >= profile.stacks.len() {
            return refers_past(number, "stack", sample.stack, profile.stacks.len());
        }
        if let Some(&Some(location)) = dangling.get(sample.stack as usize) {
            return refers_past(number, "location", location, profile.locations.len());
        }
    }
    ReportError::InvalidProfile("a sample refers to what the profile does not hold".to_owned())
}

/// Gives sites their ids on first use.
struct SiteInterner {
    /// The site of each location of the profile, once used.
    location_sites: Vec<Option<SiteId>>,
    kernel_marker: Option<SiteId>,
    unknown_marker: Option<SiteId>,
}

impl SiteInterner {
    fn location<'a>(
        &mut self,
        expansion: &mut Expansion<'a>,
        index: u32,
        location: &'a Location,
    ) -> Result<SiteId, ReportError> {
        // The caller checked the index.
        match self.location_sites[index as usize] {
            Some(site) => Ok(site),
            None => {
                let site = add_site(expansion, Site::Location(location))?;
                self.location_sites[index as usize] = Some(site);
                Ok(site)
            }
        }
    }

    fn marker(
        &mut self,
        expansion: &mut Expansion<'_>,
        name: &'static str,
    ) -> Result<SiteId, ReportError> {
        let slot = if name == KERNEL_MARKER {
            &mut self.kernel_marker
        } else {
            &mut self.unknown_marker
        };
        match *slot {
            Some(site) => Ok(site),
            None => {
                let site = add_site(expansion, Site::Marker(name))?;
                *slot = Some(site);
                Ok(site)
            }
        }
    }
}

fn add_site<'a>(expansion: &mut Expansion<'a>, site: Site<'a>) -> Result<SiteId, ReportError> {
    let id = small_id(expansion.sites.len(), "sites")?;
    let first_frame = small_id(expansion.frames.len(), "frames")?;
    expansion.frames.extend(site.frames());
    let end_frame = small_id(expansion.frames.len(), "frames")?;
    expansion.sites.push(SiteEntry {
        site,
        first_frame,
        end_frame,
    });
    Ok(id)
}

/// The error of sample `number` referring to `what` `index` of only `len`.
fn refers_past(number: usize, what: &str, index: u32, len: usize) -> ReportError {
    ReportError::InvalidProfile(format!("sample {number} refers to {what} {index} of {len}"))
}

/// `index` as a 32-bit id. Profiles never come near 2³² distinct sites,
/// frames or stacks; one that did could not be reported.
pub(super) fn small_id(index: usize, what: &str) -> Result<u32, ReportError> {
    u32::try_from(index)
        .map_err(|_| ReportError::InvalidProfile(format!("more than {} {what}", u32::MAX)))
}

/// One entry of a resolved stack.
#[derive(Clone, Copy, Debug)]
pub(super) enum Site<'a> {
    /// A location of the profile.
    Location(&'a Location),
    /// A stand-in that is no location of the profile: [`KERNEL_MARKER`] or
    /// [`UNKNOWN_MARKER`].
    Marker(&'static str),
}

impl<'a> Site<'a> {
    /// The module the site's code lives in (a marker's own name).
    pub fn module(self) -> &'a str {
        match self {
            Site::Location(location) => &location.module,
            Site::Marker(name) => name,
        }
    }

    pub fn address(self) -> u64 {
        match self {
            Site::Location(location) => location.address,
            Site::Marker(_) => 0,
        }
    }

    /// The site's frames, outermost first; at least one.
    pub fn frames(self) -> impl Iterator<Item = FrameView<'a>> {
        let (location, stand_in) = match self {
            Site::Location(location) => (
                Some(location),
                location
                    .frames
                    .is_empty()
                    .then(|| FrameView::unknown_in(location)),
            ),
            Site::Marker(name) => (None, Some(FrameView::marker(name))),
        };
        location
            .into_iter()
            .flat_map(|location| {
                location
                    .frames
                    .iter()
                    .map(move |frame| FrameView::new(location, frame))
            })
            .chain(stand_in)
    }
}

/// A frame with what every format needs to know about its location.
#[derive(Clone, Copy, Debug)]
pub(super) struct FrameView<'a> {
    pub kind: LocationKind,
    pub function: &'a str,
    pub file: Option<&'a str>,
    /// Source line, 0 when unknown.
    pub line: u32,
    pub module: &'a str,
    pub address: u64,
    pub inlined: bool,
}

impl<'a> FrameView<'a> {
    fn new(location: &'a Location, frame: &'a Frame) -> Self {
        Self {
            kind: location.kind,
            function: &frame.function,
            file: frame.file.as_deref(),
            line: frame.line,
            module: &location.module,
            address: location.address,
            inlined: frame.inlined,
        }
    }

    fn unknown_in(location: &'a Location) -> Self {
        Self {
            kind: location.kind,
            function: UNKNOWN_MARKER,
            file: None,
            line: 0,
            module: &location.module,
            address: location.address,
            inlined: false,
        }
    }

    fn marker(name: &'static str) -> Self {
        Self {
            kind: LocationKind::Marker,
            function: name,
            file: None,
            line: 0,
            module: name,
            address: 0,
            inlined: false,
        }
    }
}

/// A frame's identity in tree and flat reports. The derived order is Julia's
/// file, function, line order, then module and address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct LineKey<'a> {
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
pub(super) struct Lines<'a> {
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

#[cfg(test)]
mod tests {
    use super::super::test_support::{Builder, frame, hot_at, location};
    use super::*;
    use crate::profile::Stacks;

    fn texts(expansion: &Expansion<'_>, sample: usize, combine: bool) -> Vec<String> {
        expansion
            .frames_of(expansion.samples[sample].stack)
            .map(|frame| LineKey::new(expansion.frames[frame as usize], combine).text())
            .collect()
    }

    #[test]
    fn kernel_runs_collapse_into_one_marker_each() {
        let mut b = Builder::new();
        b.stacks(
            0,
            &[(&["main", "k:sys_read", "k:vfs_read", "cb", "k:irq"], 1)],
        );
        let p = b.build();
        let samples = Expansion::new(&p, false).expect("valid");
        assert_eq!(
            texts(&samples, 0, true),
            ["app.c:10; main", "[kernel]", "app.c:10; cb", "[kernel]"]
        );
        let samples = Expansion::new(&p, true).expect("valid");
        assert_eq!(
            texts(&samples, 0, true),
            [
                "app.c:10; main",
                "[kernel]:?; sys_read",
                "[kernel]:?; vfs_read",
                "app.c:10; cb",
                "[kernel]:?; irq"
            ]
        );
    }

    #[test]
    fn empty_and_all_kernel_stacks_get_one_stand_in() {
        let mut b = Builder::new();
        b.stacks(0, &[(&[], 2), (&["k:a", "k:b"], 3)]);
        let p = b.build();
        let samples = Expansion::new(&p, false).expect("valid");
        assert_eq!(texts(&samples, 0, true), ["[unknown]"]);
        assert_eq!(texts(&samples, 1, true), ["[kernel]"]);
    }

    #[test]
    fn the_first_sample_with_a_dangling_index_is_reported() {
        let error = |p: &Profile| match Expansion::new(p, true) {
            Err(error) => error.to_string(),
            Ok(_) => "no error".to_owned(),
        };
        let mut b = Builder::new();
        b.stacks(0, &[(&["main"], 1), (&["a"], 1), (&["b"], 1), (&["c"], 0)]);
        let valid = b.build();
        let mut p = valid.clone();
        p.stacks = Stacks::default();
        for locations in [vec![0], vec![1, 9], vec![2, 8], vec![5]] {
            p.stacks.push(locations);
        }
        p.samples[2].thread = 4;
        assert_eq!(
            error(&p),
            "inconsistent profile: sample 1 refers to location 9 of 4"
        );
        p.samples[1].stack = 0;
        assert_eq!(
            error(&p),
            "inconsistent profile: sample 2 refers to thread 4 of 1"
        );
        // Samples with a count of 0 are not looked at.
        let mut p = valid;
        p.samples[3].stack = 40;
        assert!(Expansion::new(&p, true).is_ok());
        p.samples[2].stack = 40;
        assert_eq!(
            error(&p),
            "inconsistent profile: sample 2 refers to stack 40 of 4"
        );
    }

    #[test]
    fn zero_count_samples_are_dropped() {
        let mut b = Builder::new();
        b.stacks(0, &[(&["a"], 0), (&["b"], 1)]);
        let p = b.build();
        let samples = Expansion::new(&p, true).expect("valid");
        assert_eq!(samples.samples.len(), 1);
        assert_eq!(texts(&samples, 0, true), ["app.c:10; b"]);
    }

    #[test]
    fn a_profile_using_every_stack_lends_its_samples() {
        let mut b = Builder::new();
        b.stacks(0, &[(&["a"], 2), (&["b"], 3), (&["a"], 4)]);
        let p = b.build();
        let expansion = Expansion::new(&p, true).expect("valid");
        assert!(matches!(expansion.samples, Cow::Borrowed(_)));
        assert_eq!(*expansion.samples, *p.samples);
        let counts: Vec<u64> = (0..p.stacks.len() as StackId)
            .map(|stack| expansion.stack_counts[stack as usize])
            .collect();
        let mut expected = vec![0; p.stacks.len()];
        for sample in &p.samples {
            expected[sample.stack as usize] += sample.count;
        }
        assert_eq!(counts, expected);

        // A stack no sample uses: the others are renumbered, the samples
        // copied.
        let mut shifted = Profile {
            stacks: Stacks::default(),
            ..p.clone()
        };
        shifted.stacks.push(vec![0]);
        for stack in p.stacks.iter() {
            shifted.stacks.push(stack.to_vec());
        }
        shifted
            .samples
            .iter_mut()
            .for_each(|sample| sample.stack += 1);
        let expansion = Expansion::new(&shifted, true).expect("valid");
        assert!(matches!(expansion.samples, Cow::Owned(_)));
        let stacks: Vec<StackId> = expansion.samples.iter().map(|s| s.stack).collect();
        let original: Vec<StackId> = p.samples.iter().map(|s| s.stack).collect();
        assert_eq!(stacks, original, "renumbered past the unused stack");
    }

    #[test]
    fn frames_without_file_use_module_basename_and_address_when_not_combined() {
        let mut b = Builder::new();
        let write = b.location(location(
            LocationKind::User,
            "/usr/lib/libc.so.6",
            0x1a2b,
            vec![frame("__libc_write", None, 0, false)],
        ));
        let empty = b.location(location(LocationKind::User, "/opt/x", 0x10, vec![]));
        b.sample(0, vec![write, empty], 1);
        let p = b.build();
        let samples = Expansion::new(&p, true).expect("valid");
        assert_eq!(
            texts(&samples, 0, true),
            ["libc.so.6:?; __libc_write", "x:?; [unknown]"]
        );
        assert_eq!(
            texts(&samples, 0, false),
            ["libc.so.6:?; __libc_write @0x1a2b", "x:?; [unknown] @0x10"]
        );
    }

    #[test]
    fn sites_frames_and_stacks_are_interned_once() {
        let mut b = Builder::new();
        let other = b.thread(1230, 1235, "io", "server");
        let both = b.deflate_inlining_fill_window(None, 0);
        b.stacks(0, &[(&["main", "a", "main"], 2), (&["main", "k:x"], 1)]);
        b.stacks(other, &[(&["main", "a", "main"], 5)]);
        let main = b.named("main");
        b.sample(other, vec![main, both], 1);
        let p = b.build();
        let expansion = Expansion::new(&p, false).expect("valid");
        // main, a, [kernel] and libz's location.
        assert_eq!(expansion.sites.len(), 4);
        assert_eq!(expansion.frames.len(), 5);
        assert_eq!(expansion.stack_count(), 3);
        let stacks: Vec<StackId> = expansion.samples.iter().map(|s| s.stack).collect();
        assert_eq!(stacks, [0, 1, 0, 2]);
        assert_eq!(expansion.sites_of(0), [0, 1, 0]);
        assert_eq!(expansion.frames_of(2).collect::<Vec<_>>(), [0, 3, 4]);

        // Lines are numbered in key order: the marker (file "") <
        // app.c:10; a < app.c:10; main < deflate.c < libz.so.1.
        let lines = Lines::new(&expansion, true).expect("valid");
        let texts: Vec<String> = lines.keys().iter().map(LineKey::text).collect();
        assert_eq!(
            texts,
            [
                "[kernel]",
                "app.c:10; a",
                "app.c:10; main",
                "deflate.c:100; deflate",
                "libz.so.1:?; fill_window"
            ]
        );
        let stacks = lines.of_stacks(&expansion).expect("valid");
        assert_eq!(stacks.get(0), [2, 1, 2]);
        assert_eq!(stacks.get(1), [2, 0]);
        assert_eq!(stacks.get(2), [2, 3, 4]);
        assert_eq!(lines.of_site(&expansion, 3), [3, 4]);
    }

    #[test]
    fn combine_merges_frames_of_one_source_line() {
        let mut b = Builder::new();
        let (first, second) = (hot_at(&mut b, 0x10), hot_at(&mut b, 0x20));
        b.sample(0, vec![first], 1);
        b.sample(0, vec![second], 1);
        let p = b.build();
        let expansion = Expansion::new(&p, true).expect("valid");
        let combined = Lines::new(&expansion, true).expect("valid");
        assert_eq!(combined.keys().len(), 1);
        assert_eq!(
            combined.of_site(&expansion, 0),
            combined.of_site(&expansion, 1)
        );
        let apart = Lines::new(&expansion, false).expect("valid");
        assert_eq!(apart.keys().len(), 2);
        assert_eq!(
            (apart.of_site(&expansion, 0), apart.of_site(&expansion, 1)),
            (&[0][..], &[1][..])
        );
    }
}
