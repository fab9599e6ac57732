//! Stack expansion shared by every format: resolves a sample's thread and
//! stack, collapses kernel runs into `[kernel]` when asked, stands in
//! `[unknown]` for empty stacks, and expands locations into frames. Also the
//! identity and text of a frame in tree and flat reports ([`LineKey`]).
//!
//! It must not lay out, sort or filter anything: that is each format's job.

use super::ReportError;
use crate::profile::{Frame, Location, LocationKind, Profile, ThreadInfo};

/// The frame that stands for a run of kernel frames when `kernel == false`.
pub(super) const KERNEL_MARKER: &str = "[kernel]";
/// The frame that stands for an empty stack, or a location without frames.
pub(super) const UNKNOWN_MARKER: &str = "[unknown]";

/// One profile sample with its thread and stack resolved.
pub(super) struct StackSample<'a> {
    pub thread: &'a ThreadInfo,
    pub count: u64,
    pub weight_ns: u64,
    /// Root first; never empty.
    pub sites: Vec<Site<'a>>,
}

impl<'a> StackSample<'a> {
    /// All frames of the stack, root first, inlined frames outermost first.
    pub fn frames(&self) -> impl Iterator<Item = FrameView<'a>> + '_ {
        self.sites.iter().flat_map(|site| site.frames())
    }
}

/// One entry of a resolved stack.
#[derive(Clone, Copy, Debug)]
pub(super) enum Site<'a> {
    /// `profile.locations[index]`.
    Location { index: u32, location: &'a Location },
    /// A stand-in that is no location of the profile: [`KERNEL_MARKER`] or
    /// [`UNKNOWN_MARKER`].
    Marker(&'static str),
}

impl<'a> Site<'a> {
    /// The module the site's code lives in (a marker's own name).
    pub fn module(self) -> &'a str {
        match self {
            Site::Location { location, .. } => &location.module,
            Site::Marker(name) => name,
        }
    }

    pub fn address(self) -> u64 {
        match self {
            Site::Location { location, .. } => location.address,
            Site::Marker(_) => 0,
        }
    }

    /// The site's frames, outermost first; at least one.
    pub fn frames(self) -> impl Iterator<Item = FrameView<'a>> {
        let (location, stand_in) = match self {
            Site::Location { location, .. } => (
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

/// Resolves every sample with a non-zero count, in profile order.
pub(super) fn expand(profile: &Profile, kernel: bool) -> Result<Vec<StackSample<'_>>, ReportError> {
    let mut samples = Vec::with_capacity(profile.samples.len());
    for (number, sample) in profile.samples.iter().enumerate() {
        if sample.count == 0 {
            continue;
        }
        let invalid = |what: &str, index: u32, len: usize| {
            ReportError::InvalidProfile(format!(
                "sample {number} refers to {what} {index} of {len}"
            ))
        };
        let thread = profile
            .threads
            .get(sample.thread as usize)
            .ok_or_else(|| invalid("thread", sample.thread, profile.threads.len()))?;
        let stack = profile
            .stacks
            .get(sample.stack as usize)
            .ok_or_else(|| invalid("stack", sample.stack, profile.stacks.len()))?;
        let mut sites = Vec::with_capacity(stack.locations.len());
        for &index in &stack.locations {
            let location = profile
                .locations
                .get(index as usize)
                .ok_or_else(|| invalid("location", index, profile.locations.len()))?;
            if !kernel && location.kind == LocationKind::Kernel {
                if !matches!(sites.last(), Some(Site::Marker(KERNEL_MARKER))) {
                    sites.push(Site::Marker(KERNEL_MARKER));
                }
            } else {
                sites.push(Site::Location { index, location });
            }
        }
        if sites.is_empty() {
            sites.push(Site::Marker(UNKNOWN_MARKER));
        }
        samples.push(StackSample {
            thread,
            count: sample.count,
            weight_ns: sample.weight_ns,
            sites,
        });
    }
    Ok(samples)
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
        let file = match frame.file {
            _ if marker => "",
            Some(file) => file,
            None => frame.module.rsplit('/').next().unwrap_or(frame.module),
        };
        Self {
            file,
            function: frame.function,
            line: frame.line,
            address: (!combine && !marker).then_some((frame.module, frame.address)),
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

#[cfg(test)]
mod tests {
    use super::super::test_support::{Builder, frame, location};
    use super::*;

    fn texts(sample: &StackSample<'_>, combine: bool) -> Vec<String> {
        sample
            .frames()
            .map(|frame| LineKey::new(frame, combine).text())
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
        let samples = expand(&p, false).expect("valid");
        assert_eq!(
            texts(&samples[0], true),
            ["app.c:10; main", "[kernel]", "app.c:10; cb", "[kernel]"]
        );
        let samples = expand(&p, true).expect("valid");
        assert_eq!(
            texts(&samples[0], true),
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
        let samples = expand(&p, false).expect("valid");
        assert_eq!(texts(&samples[0], true), ["[unknown]"]);
        assert_eq!(texts(&samples[1], true), ["[kernel]"]);
    }

    #[test]
    fn zero_count_samples_are_dropped() {
        let mut b = Builder::new();
        b.stacks(0, &[(&["a"], 0), (&["b"], 1)]);
        let p = b.build();
        let samples = expand(&p, true).expect("valid");
        assert_eq!(samples.len(), 1);
        assert_eq!(texts(&samples[0], true), ["app.c:10; b"]);
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
        let samples = expand(&p, true).expect("valid");
        assert_eq!(
            texts(&samples[0], true),
            ["libc.so.6:?; __libc_write", "x:?; [unknown]"]
        );
        assert_eq!(
            texts(&samples[0], false),
            ["libc.so.6:?; __libc_write @0x1a2b", "x:?; [unknown] @0x10"]
        );
    }
}
