//! The formats drawn from the folded stacks: a flame graph as SVG (with
//! inferno, the Rust port of flamegraph.pl) and speedscope's JSON file
//! format (one "sampled" profile, every folded line a sample weighted by
//! its count).
//!
//! Owns only the conversion from folded lines; which frames a stack has and
//! how they are named is the folded report's (`groupby`, `maxdepth`,
//! `mincount` and `kernel` apply as there).

use serde_json::json;

use super::{ReportError, folded};
use crate::profile::{Profile, ReportOptions};

/// The flame graph of the profile, as an SVG document.
pub(super) fn svg(profile: &Profile, options: &ReportOptions) -> Result<Vec<u8>, ReportError> {
    let folded = folded::render(profile, options)?;
    let mut flamegraph = inferno::flamegraph::Options::default();
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
    inferno::flamegraph::from_lines(&mut flamegraph, folded.lines(), &mut svg)
        .map_err(|err| ReportError::Flamegraph(err.to_string()))?;
    Ok(svg)
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
        folded::render(base, options)?,
        folded::render(target, options)?,
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
) -> Result<Vec<u8>, ReportError> {
    let folded = folded::render(profile, options)?;
    let mut frames: Vec<&str> = Vec::new();
    let mut frame_ids: rustc_hash::FxHashMap<&str, usize> = Default::default();
    let mut samples: Vec<Vec<usize>> = Vec::new();
    let mut weights: Vec<u64> = Vec::new();
    for line in folded.lines() {
        let Some((stack, count)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(count) = count.parse::<u64>() else {
            continue;
        };
        samples.push(
            stack
                .split(';')
                .map(|name| {
                    *frame_ids.entry(name).or_insert_with(|| {
                        frames.push(name);
                        frames.len() - 1
                    })
                })
                .collect(),
        );
        weights.push(count);
    }
    let total: u64 = weights.iter().sum();
    let document = json!({
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "exporter": concat!("profilerd ", env!("CARGO_PKG_VERSION")),
        "name": format!("profilerd: {:.1} s at {} Hz", profile.duration_secs(), profile.frequency_hz),
        "activeProfileIndex": 0,
        "shared": {
            "frames": frames.iter().map(|name| json!({ "name": name })).collect::<Vec<_>>(),
        },
        "profiles": [{
            "type": "sampled",
            "name": "on-CPU samples",
            "unit": "none",
            "startValue": 0,
            "endValue": total,
            "samples": samples,
            "weights": weights,
        }],
    });
    serde_json::to_vec(&document).map_err(|err| ReportError::Flamegraph(err.to_string()))
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
            String::from_utf8(svg(&profile, &options(Format::Flamegraph)).unwrap()).unwrap();
        assert!(drawn.contains("<svg"), "{drawn}");
        assert!(drawn.contains("hot") && drawn.contains("cold"));
        let empty = make_profile(&[]);
        let drawn = String::from_utf8(svg(&empty, &options(Format::Flamegraph)).unwrap()).unwrap();
        assert!(drawn.contains("no samples"));
    }

    #[test]
    fn speedscope_weights_each_stack_by_its_count() {
        let profile = make_profile(&[(&["main", "hot"], 30), (&["main", "cold"], 10)]);
        let json: serde_json::Value =
            serde_json::from_slice(&speedscope(&profile, &options(Format::Speedscope)).unwrap())
                .unwrap();
        let frames: Vec<&str> = json["shared"]["frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|frame| frame["name"].as_str().unwrap())
            .collect();
        assert!(frames.contains(&"hot") && frames.contains(&"main"));
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
