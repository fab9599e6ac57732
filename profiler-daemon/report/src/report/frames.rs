//! Stack expansion shared by every format: resolves a sample's thread and
//! stack, collapses kernel runs into `[kernel]` when asked, stands in
//! `[unknown]` for empty stacks, and expands locations into frames. Also,
//! in `lines`, the identity and text of a frame in tree and flat reports
//! ([`LineKey`], [`Lines`]).
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
    /// [`Profile::unread_stacks`] with a non-zero count, their stacks
    /// resolved as the samples' (not in `stack_counts`).
    pub unread_stacks: Vec<StackSample>,
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
            unread_stacks: Vec::new(),
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
        let used = profile.samples.iter().chain(&profile.unread_stacks);
        for sample in used.filter(|sample| sample.count > 0) {
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
        expansion.unread_stacks = (profile.unread_stacks.iter())
            .filter(|sample| sample.count > 0)
            .map(|sample| StackSample {
                stack: stack_ids[sample.stack as usize],
                ..*sample
            })
            .collect();
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
        let mut unread_stacks = Vec::new();
        for (number, sample) in profile.unread_stacks.iter().enumerate() {
            if sample.stack as usize >= stacks {
                return Err(refers_past(number, "stack", sample.stack, stacks));
            }
            if sample.count > 0 {
                unread_stacks.push(*sample);
            }
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
            unread_stacks,
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

mod lines;
#[cfg(test)]
mod tests;

pub(super) use lines::{LineKey, Lines};
