//! The difference of two profiles as one pprof profile: the target's
//! samples as they are and the base's negated and labelled `pprof::base` =
//! `true`, as `go tool pprof -diff_base` merges them, so that any pprof
//! reader shows the target minus the base. With `normalize`, the base's
//! values are first scaled to the target's sample total (pprof's
//! `-normalize`), so windows of different lengths compare.
//!
//! Built from the two pprof reports, decoded, merged and encoded again:
//! diffs are rare and far smaller than the reports the pprof writer is made
//! for. It must not change the pprof report's own encoding.

use std::{collections::HashMap, io::Read as _, io::Write as _};

use flate2::{Compression, read::GzDecoder, write::GzEncoder};
use prost::Message as _;

use super::{ReportError, pprof};
use crate::pprof as pb;
use crate::profile::{Profile, ReportOptions};

/// The label pprof marks a merged base's samples with.
const BASE_LABEL: &str = "pprof::base";

/// `target` minus `base`, as a gzipped profile.proto.
pub(super) fn render(
    base: &Profile,
    target: &Profile,
    options: &ReportOptions,
    normalize: bool,
) -> Result<Vec<u8>, ReportError> {
    let (base, target) = (decode(base, options)?, decode(target, options)?);
    let merged = subtract(base, target, normalize);
    let mut gzip = GzEncoder::new(Vec::new(), Compression::fast());
    gzip.write_all(&merged.encode_to_vec())?;
    Ok(gzip.finish()?)
}

fn decode(profile: &Profile, options: &ReportOptions) -> Result<pb::Profile, ReportError> {
    let gzipped = pprof::render(profile, options)?;
    let mut raw = Vec::new();
    GzDecoder::new(&gzipped[..]).read_to_end(&mut raw)?;
    pb::Profile::decode(&raw[..]).map_err(|err| {
        ReportError::InvalidProfile(format!("cannot read back a pprof report: {err}"))
    })
}

/// Appends `base`'s tables and negated samples to `target`.
fn subtract(base: pb::Profile, mut target: pb::Profile, normalize: bool) -> pb::Profile {
    let total = |profile: &pb::Profile| -> i64 {
        profile
            .sample
            .iter()
            .filter_map(|sample| sample.value.first())
            .sum()
    };
    let scale = match (normalize, total(&base)) {
        (true, base_total) if base_total > 0 => total(&target) as f64 / base_total as f64,
        _ => 1.0,
    };
    let mut strings = Strings::new(&mut target.string_table);
    let mut string = |id: i64| strings.id(&base.string_table[id as usize]);

    let next_id = |ids: &mut dyn Iterator<Item = u64>| ids.max().unwrap_or(0);
    let mapping_offset = next_id(&mut target.mapping.iter().map(|m| m.id));
    let function_offset = next_id(&mut target.function.iter().map(|f| f.id));
    let location_offset = next_id(&mut target.location.iter().map(|l| l.id));
    for mapping in base.mapping {
        target.mapping.push(pb::Mapping {
            id: mapping.id + mapping_offset,
            filename: string(mapping.filename),
            build_id: string(mapping.build_id),
            ..mapping
        });
    }
    for function in base.function {
        target.function.push(pb::Function {
            id: function.id + function_offset,
            name: string(function.name),
            system_name: string(function.system_name),
            filename: string(function.filename),
            ..function
        });
    }
    for location in base.location {
        target.location.push(pb::Location {
            id: location.id + location_offset,
            mapping_id: match location.mapping_id {
                0 => 0,
                id => id + mapping_offset,
            },
            line: location
                .line
                .into_iter()
                .map(|line| pb::Line {
                    function_id: line.function_id + function_offset,
                    ..line
                })
                .collect(),
            ..location
        });
    }
    let (base_key, yes) = (strings.id(BASE_LABEL), strings.id("true"));
    let mut string = |id: i64| strings.id(&base.string_table[id as usize]);
    for sample in base.sample {
        let mut label: Vec<pb::Label> = sample
            .label
            .into_iter()
            .map(|label| pb::Label {
                key: string(label.key),
                str: string(label.str),
                num_unit: string(label.num_unit),
                ..label
            })
            .collect();
        label.push(pb::Label {
            key: base_key,
            str: yes,
            ..Default::default()
        });
        target.sample.push(pb::Sample {
            location_id: sample
                .location_id
                .into_iter()
                .map(|id| id + location_offset)
                .collect(),
            value: sample
                .value
                .into_iter()
                .map(|value| -((value as f64 * scale).round() as i64))
                .collect(),
            label,
        });
    }
    let comment = strings.id(if normalize {
        "profilerd diff: target minus base (base normalized to the target's samples)"
    } else {
        "profilerd diff: target minus base"
    });
    target.comment.push(comment);
    target
}

/// A string table that finds the ids of the strings it holds.
struct Strings<'t> {
    table: &'t mut Vec<String>,
    ids: HashMap<String, i64>,
}

impl<'t> Strings<'t> {
    fn new(table: &'t mut Vec<String>) -> Self {
        let ids = (0..)
            .zip(table.iter())
            .map(|(id, s)| (s.clone(), id))
            .collect();
        Self { table, ids }
    }

    fn id(&mut self, s: &str) -> i64 {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.table.len() as i64;
        self.table.push(s.to_owned());
        self.ids.insert(s.to_owned(), id);
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Format;
    use crate::report::test_support::profile;

    fn options() -> ReportOptions {
        ReportOptions {
            format: Format::Pprof,
            ..ReportOptions::default()
        }
    }

    /// Net samples per leaf function of a decoded profile.
    fn net_by_leaf(profile: &pb::Profile) -> HashMap<String, i64> {
        let name_of = |location_id: u64| {
            let location = profile
                .location
                .iter()
                .find(|l| l.id == location_id)
                .unwrap();
            let function = profile
                .function
                .iter()
                .find(|f| f.id == location.line[0].function_id)
                .unwrap();
            profile.string_table[function.name as usize].clone()
        };
        let mut net = HashMap::new();
        for sample in &profile.sample {
            *net.entry(name_of(sample.location_id[0])).or_default() += sample.value[0];
        }
        net
    }

    #[test]
    fn the_base_is_subtracted_and_labelled() {
        let base = profile(&[(&["main", "a"], 30), (&["main", "gone"], 10)]);
        let target = profile(&[(&["main", "a"], 50), (&["main", "new"], 20)]);
        let bytes = render(&base, &target, &options(), false).unwrap();
        let mut raw = Vec::new();
        GzDecoder::new(&bytes[..]).read_to_end(&mut raw).unwrap();
        let merged = pb::Profile::decode(&raw[..]).unwrap();
        let net = net_by_leaf(&merged);
        assert_eq!(net["a"], 20);
        assert_eq!(net["gone"], -10);
        assert_eq!(net["new"], 20);
        let s = |id: i64| merged.string_table[id as usize].as_str();
        let base_samples = merged
            .sample
            .iter()
            .filter(|sample| {
                sample
                    .label
                    .iter()
                    .any(|label| s(label.key) == BASE_LABEL && s(label.str) == "true")
            })
            .count();
        assert_eq!(base_samples, 2);
        // The base's labels survive with its strings.
        assert!(merged.sample.iter().all(|sample| {
            sample
                .label
                .iter()
                .any(|label| s(label.key) == "comm" && s(label.str) == "server")
        }));
        assert!(s(merged.comment[0]).contains("target minus base"));

        let normalized = subtract(
            decode(&base, &options()).unwrap(),
            decode(&target, &options()).unwrap(),
            true,
        );
        // The base's 40 samples scaled to the target's 70.
        let net = net_by_leaf(&normalized);
        assert_eq!(net["a"], 50 - (30.0_f64 * 70.0 / 40.0).round() as i64);
        assert_eq!(net["gone"], -((10.0_f64 * 70.0 / 40.0).round() as i64));
    }
}
