//! The formats drawn from the folded stacks: a flame graph as SVG (with
//! inferno, the Rust port of flamegraph.pl) and speedscope's JSON file
//! format (one "sampled" profile, every folded line a sample weighted by
//! its count).
//!
//! Owns only the conversion from folded lines; which frames a stack has and
//! how they are named is the folded report's (`groupby`, `maxdepth`,
//! `mincount` and `kernel` apply as there).

use serde::Serialize;

use super::stack_index::StackIndex;
use super::{ReportError, folded};
use crate::profile::{Profile, ReportOptions};

/// The flame graph of the profile, as an SVG document.
pub(super) fn svg(
    profile: &Profile,
    options: &ReportOptions,
    index: Option<&StackIndex>,
) -> Result<Vec<u8>, ReportError> {
    let mut flamegraph = inferno::flamegraph::Options::default();
    // Frames narrower than min_width (a share of the samples in percent)
    // are not drawn, nor need lines of their own. The lines are merged in
    // the order given: a flame chart's, which inferno takes reversed.
    let folded = folded::render_drawn(profile, options, index, flamegraph.min_width)?;
    flamegraph.flame_chart = true;
    // Colours by name: a function has the same colour in every graph.
    flamegraph.hash = true;
    flamegraph.title = if profile.mode.is_memory() {
        format!(
            "profilerd: {} over {:.1} s",
            profile.mode.name(),
            profile.duration_secs()
        )
    } else {
        format!(
            "profilerd: {:.1} s at {} Hz",
            profile.duration_secs(),
            profile.frequency_hz
        )
    };
    flamegraph.count_name = super::counted_unit(profile).to_owned();
    if folded.is_empty() {
        return Ok(empty_svg(&flamegraph.title));
    }
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(&mut flamegraph, folded.lines().rev(), &mut svg)
        .map_err(|err| ReportError::Flamegraph(err.to_string()))?;
    Ok(svg)
}

/// The folded lines [`svg`] draws from, as text (see
/// [`crate::profile::Format::DrawnFolded`]).
pub(super) fn drawn_folded(
    profile: &Profile,
    options: &ReportOptions,
    index: Option<&StackIndex>,
) -> Result<Vec<u8>, ReportError> {
    let min_width = inferno::flamegraph::Options::default().min_width;
    folded::render_drawn(profile, options, index, min_width).map(String::into_bytes)
}

/// A differential flame graph: the target's stacks, each frame coloured by
/// how its samples changed from the base's (red: more, blue: fewer), as
/// Brendan Gregg's difffolded.pl and flamegraph.pl draw it. With
/// `normalize`, the base is first scaled to the target's sample total.
pub(super) fn diff_svg(
    base: &Profile,
    target: &Profile,
    options: &ReportOptions,
    normalize: bool,
) -> Result<Vec<u8>, ReportError> {
    let (base_folded, target_folded) = (
        folded::render(base, options, None)?,
        folded::render(target, options, None)?,
    );
    let mut both = Vec::new();
    inferno::differential::from_readers(
        inferno::differential::Options {
            normalize,
            strip_hex: false,
        },
        base_folded.as_bytes(),
        target_folded.as_bytes(),
        &mut both,
    )?;
    let mut flamegraph = inferno::flamegraph::Options::default();
    flamegraph.title = format!(
        "profilerd diff: {:.1} s against a base of {:.1} s{}",
        target.duration_secs(),
        base.duration_secs(),
        if normalize { " (normalized)" } else { "" }
    );
    flamegraph.subtitle = Some("red: more samples than in the base, blue: fewer".to_owned());
    flamegraph.count_name = "samples".to_owned();
    let both = String::from_utf8_lossy(&both);
    if both.trim().is_empty() {
        return Ok(empty_svg(&flamegraph.title));
    }
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(&mut flamegraph, both.lines(), &mut svg)
        .map_err(|err| ReportError::Flamegraph(err.to_string()))?;
    Ok(svg)
}

/// An SVG that says the window had no samples (inferno refuses an empty
/// input).
fn empty_svg(title: &str) -> Vec<u8> {
    format!(
        "<?xml version=\"1.0\" standalone=\"no\"?>\n\
         <svg version=\"1.1\" width=\"1200\" height=\"60\" \
         xmlns=\"http://www.w3.org/2000/svg\"><text x=\"10\" y=\"30\">{title}: no samples \
         in this window</text></svg>\n"
    )
    .into_bytes()
}

/// The profile in speedscope's file format
/// (<https://www.speedscope.app/file-format-schema.json>).
pub(super) fn speedscope(
    profile: &Profile,
    options: &ReportOptions,
    index: Option<&StackIndex>,
) -> Result<Vec<u8>, ReportError> {
    let folded = folded::render_frames(profile, options, index)?;
    // Keys in string order, as a JSON object of serde_json lists them.
    #[derive(Serialize)]
    struct Document {
        #[serde(rename = "$schema")]
        schema: &'static str,
        #[serde(rename = "activeProfileIndex")]
        active_profile_index: usize,
        exporter: &'static str,
        name: String,
        profiles: Vec<Sampled>,
        shared: Shared,
    }
    #[derive(Serialize)]
    struct Sampled {
        #[serde(rename = "endValue")]
        end_value: u64,
        name: String,
        samples: Vec<Vec<u32>>,
        #[serde(rename = "startValue")]
        start_value: u64,
        #[serde(rename = "type")]
        kind: &'static str,
        unit: &'static str,
        weights: Vec<u64>,
    }
    #[derive(Serialize)]
    struct Shared {
        frames: Vec<Frame>,
    }
    #[derive(Serialize)]
    struct Frame {
        #[serde(skip_serializing_if = "Option::is_none")]
        file: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        line: Option<u32>,
        name: String,
    }
    // One profile per group (thread, process or command), its frames
    // below the group's.
    let mut profiles: Vec<Sampled> = folded
        .groups
        .iter()
        .map(|frames| Sampled {
            end_value: 0,
            name: match frames.is_empty() {
                true => "on-CPU samples".to_owned(),
                false => frames.join(" / "),
            },
            samples: Vec::new(),
            start_value: 0,
            kind: "sampled",
            unit: "none",
            weights: Vec::new(),
        })
        .collect();
    for ((stack, &count), &group) in folded
        .stacks
        .iter()
        .zip(&folded.counts)
        .zip(&folded.line_groups)
    {
        let depth = folded.groups[group as usize].len();
        let sampled = &mut profiles[group as usize];
        sampled
            .samples
            .push(stack[depth.min(stack.len())..].to_vec());
        sampled.weights.push(count);
        sampled.end_value = sampled.end_value.saturating_add(count);
    }
    profiles.retain(|sampled| !sampled.samples.is_empty());
    let busiest = (0..profiles.len())
        .max_by_key(|&at| (profiles[at].end_value, std::cmp::Reverse(at)))
        .unwrap_or(0);
    let sources = function_sources(profile);
    let document = Document {
        schema: "https://www.speedscope.app/file-format-schema.json",
        active_profile_index: busiest,
        exporter: concat!("profilerd ", env!("CARGO_PKG_VERSION")),
        name: format!(
            "profilerd: {:.1} s at {} Hz",
            profile.duration_secs(),
            profile.frequency_hz
        ),
        profiles,
        shared: Shared {
            frames: folded
                .names
                .into_iter()
                .map(|name| {
                    let bare = name.trim_end_matches("_[k]").trim_end_matches("_[i]");
                    let (file, line) = match sources.get(bare) {
                        Some(&(file, line)) => (Some(file.to_owned()), (line > 0).then_some(line)),
                        None => (None, None),
                    };
                    Frame { file, line, name }
                })
                .collect(),
        },
    };
    serde_json::to_vec(&document).map_err(|err| ReportError::Flamegraph(err.to_string()))
}

/// Each function's source file and the first of its lines with samples,
/// for the frames that have them.
fn function_sources(profile: &Profile) -> std::collections::HashMap<&str, (&str, u32)> {
    let mut sources: std::collections::HashMap<&str, (&str, u32)> = Default::default();
    for frame in profile
        .locations
        .iter()
        .flat_map(|location| location.frames.iter())
    {
        let Some(file) = frame.file.as_deref() else {
            continue;
        };
        let entry = sources.entry(&frame.function).or_insert((file, frame.line));
        if entry.0 == file && frame.line > 0 && (entry.1 == 0 || frame.line < entry.1) {
            entry.1 = frame.line;
        }
    }
    sources
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{profile::Format, report::test_support::profile as make_profile};

    fn options(format: Format) -> ReportOptions {
        ReportOptions {
            format,
            ..ReportOptions::default()
        }
    }

    #[test]
    fn the_flame_graph_is_svg_with_the_functions() {
        let profile = make_profile(&[(&["main", "hot"], 30), (&["main", "cold"], 10)]);
        let drawn =
            String::from_utf8(svg(&profile, &options(Format::Flamegraph), None).unwrap()).unwrap();
        assert!(drawn.contains("<svg"), "{drawn}");
        assert!(drawn.contains("hot") && drawn.contains("cold"));
        let empty = make_profile(&[]);
        let drawn =
            String::from_utf8(svg(&empty, &options(Format::Flamegraph), None).unwrap()).unwrap();
        assert!(drawn.contains("no samples"));
    }

    /// The flame graph inferno draws from every folded line, sorted by
    /// inferno: what `svg` must draw from fewer.
    fn drawn_from_every_line(profile: &Profile, options: &ReportOptions) -> String {
        let mut flamegraph = inferno::flamegraph::Options::default();
        flamegraph.title = format!(
            "profilerd: {:.1} s at {} Hz",
            profile.duration_secs(),
            profile.frequency_hz
        );
        flamegraph.count_name = "samples".to_owned();
        flamegraph.hash = true;
        let folded = folded::render(profile, options, None).unwrap();
        let mut drawn = Vec::new();
        inferno::flamegraph::from_lines(&mut flamegraph, folded.lines(), &mut drawn).unwrap();
        String::from_utf8(drawn).unwrap()
    }

    #[test]
    fn frames_too_narrow_to_draw_change_nothing_drawn() {
        use crate::profile::{GroupBy, LocationKind};
        use crate::report::test_support::{Builder, Random, frame, location};
        let mut random = Random::new(0x2545_f491_4f6c_dd1d);
        let mut b = Builder::new();
        let threads: Vec<u32> = (0..6)
            .map(|index| {
                let pid = 100 + index / 2;
                b.thread(
                    pid,
                    1000 + index,
                    &format!("t{}", index % 2),
                    &format!("p{pid}"),
                )
            })
            .collect();
        let mut sites: Vec<u32> = ["a", "b", "c", "k:d", "k:e", "f", "f b"]
            .iter()
            .map(|name| b.named(name))
            .collect();
        // An inlined frame, and one name at two addresses.
        sites.push(b.deflate_inlining_fill_window(None, 0));
        sites.push(b.location(location(
            LocationKind::User,
            "/usr/bin/app",
            0x9000,
            vec![frame("a", Some("app.c"), 11, false)],
        )));
        // Mostly a sample or two, some wide ones.
        b.random_samples(&mut random, (&threads, &sites), 3000, (100, 50_000));
        let p = b.build();
        let mut narrowed = 0;
        for groupby in [GroupBy::None, GroupBy::Process, GroupBy::Thread] {
            for (maxdepth, mincount) in [(None, 0), (Some(3), 0), (None, 2)] {
                let options = ReportOptions {
                    format: Format::Flamegraph,
                    groupby,
                    maxdepth,
                    mincount,
                    ..ReportOptions::default()
                };
                let drawn = String::from_utf8(svg(&p, &options, None).unwrap()).unwrap();
                assert_eq!(drawn, drawn_from_every_line(&p, &options), "{options:?}");
                let every = folded::render(&p, &options, None).unwrap().lines().count();
                let kept = folded::render_drawn(&p, &options, None, 0.01)
                    .unwrap()
                    .lines()
                    .count();
                assert!(kept <= every);
                narrowed += usize::from(kept < every);
            }
        }
        // Most layouts had lines to merge (with maxdepth 3 lines merge
        // before, leaving fewer narrow frames): the comparison is not idle.
        assert!(
            narrowed >= 7,
            "only {narrowed} layouts had frames too narrow to draw"
        );
    }

    /// Speedscope's file as read back from the folded text (`depth`: the
    /// group frames each line starts with, one profile per group): what
    /// `speedscope` must write without that text.
    fn speedscope_from_folded_text(
        profile: &Profile,
        options: &ReportOptions,
        depth: usize,
    ) -> Vec<u8> {
        use serde_json::json;
        let folded = folded::render(profile, options, None).unwrap();
        let mut frames: Vec<&str> = Vec::new();
        let mut frame_ids = std::collections::HashMap::new();
        // Groups in the order of their lines.
        let mut groups: Vec<(String, Vec<Vec<usize>>, Vec<u64>)> = Vec::new();
        for line in folded.lines() {
            let (stack, count) = line.rsplit_once(' ').unwrap();
            let names: Vec<&str> = stack.split(';').collect();
            let stack: Vec<usize> = names
                .iter()
                .map(|name| {
                    *frame_ids.entry(*name).or_insert_with(|| {
                        frames.push(name);
                        frames.len() - 1
                    })
                })
                .collect();
            let group = match depth {
                0 => "on-CPU samples".to_owned(),
                _ => names[..depth].join(" / "),
            };
            if groups.last().is_none_or(|(last, _, _)| *last != group) {
                groups.push((group, Vec::new(), Vec::new()));
            }
            let (_, samples, weights) = groups.last_mut().unwrap();
            samples.push(stack[depth..].to_vec());
            weights.push(count.parse::<u64>().unwrap());
        }
        let totals: Vec<u64> = groups
            .iter()
            .map(|(_, _, weights)| weights.iter().sum())
            .collect();
        let busiest = (0..totals.len())
            .max_by_key(|&at| (totals[at], std::cmp::Reverse(at)))
            .unwrap_or(0);
        let sources = function_sources(profile);
        serde_json::to_vec(&json!({
            "$schema": "https://www.speedscope.app/file-format-schema.json",
            "exporter": concat!("profilerd ", env!("CARGO_PKG_VERSION")),
            "name": format!("profilerd: {:.1} s at {} Hz", profile.duration_secs(), profile.frequency_hz),
            "activeProfileIndex": busiest,
            "shared": {
                "frames": frames.iter().map(|name| {
                    match sources.get(name.trim_end_matches("_[k]").trim_end_matches("_[i]")) {
                        Some((file, line)) => json!({ "file": file, "line": line, "name": name }),
                        None => json!({ "name": name }),
                    }
                }).collect::<Vec<_>>(),
            },
            "profiles": groups.iter().zip(&totals).map(|((name, samples, weights), total)| json!({
                "type": "sampled",
                "name": name,
                "unit": "none",
                "startValue": 0,
                "endValue": total,
                "samples": samples,
                "weights": weights,
            })).collect::<Vec<_>>(),
        }))
        .unwrap()
    }

    #[test]
    fn speedscope_numbers_frames_as_its_folded_text_reads() {
        use crate::profile::GroupBy;
        use crate::report::test_support::{Builder, Random};
        let mut random = Random::new(0x5bd1_e995);
        let mut b = Builder::new();
        // A process named like a function, and a function like a process
        // frame: one frame each, as in the text.
        let threads = [
            b.thread(7, 7, "main", "main"),
            b.thread(8, 9, "w\"x", "p q"),
        ];
        let sites: Vec<u32> = ["main", "main-7", "k:read", "a b", "\"quoted\""]
            .iter()
            .map(|name| b.named(name))
            .collect();
        for _ in 0..200 {
            let stack = (0..1 + random.below(6))
                .map(|_| sites[random.below(sites.len())])
                .collect();
            b.sample(threads[random.below(2)], stack, 1 + random.below(9) as u64);
        }
        let p = b.build();
        // By default, one profile per command (there are two).
        for (groupby, depth) in [
            (GroupBy::None, 0),
            (GroupBy::Auto, 1),
            (GroupBy::Process, 1),
            (GroupBy::Thread, 2),
        ] {
            for maxdepth in [None, Some(2)] {
                let options = ReportOptions {
                    format: Format::Speedscope,
                    groupby,
                    maxdepth,
                    ..ReportOptions::default()
                };
                let folded_options = ReportOptions {
                    format: Format::Folded,
                    ..options.clone()
                };
                assert_eq!(
                    String::from_utf8(speedscope(&p, &options, None).unwrap()).unwrap(),
                    String::from_utf8(speedscope_from_folded_text(&p, &folded_options, depth))
                        .unwrap(),
                    "{options:?}"
                );
            }
        }
    }

    #[test]
    fn speedscope_weights_each_stack_by_its_count() {
        let profile = make_profile(&[(&["main", "hot"], 30), (&["main", "cold"], 10)]);
        let json: serde_json::Value = serde_json::from_slice(
            &speedscope(&profile, &options(Format::Speedscope), None).unwrap(),
        )
        .unwrap();
        let frames: Vec<&str> = json["shared"]["frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|frame| frame["name"].as_str().unwrap())
            .collect();
        assert!(frames.contains(&"hot") && frames.contains(&"main"));
        // With its source file and the first of its lines with samples.
        assert_eq!(json["shared"]["frames"][0]["file"], "app.c");
        assert_eq!(json["shared"]["frames"][0]["line"], 10);
        let profile = &json["profiles"][0];
        assert_eq!(profile["type"], "sampled");
        assert_eq!(profile["endValue"], 40);
        let weights: Vec<u64> = profile["weights"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_u64().unwrap())
            .collect();
        assert_eq!(weights.iter().sum::<u64>(), 40);
    }
}
