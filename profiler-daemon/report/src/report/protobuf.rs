//! Protobuf wire encoding by hand, for the pprof report's samples: a
//! profile has hundreds of thousands of them, and building a message of
//! each for prost to size and encode takes longer than compressing them.
//!
//! Writes exactly what prost writes (proto3: fields in number order,
//! scalar fields equal to 0 and empty repeated fields left out, repeated
//! scalars packed), so the bytes do not depend on which encoded them. It
//! must not know what the fields mean.

/// Wire type of varint fields.
const VARINT: u8 = 0;
/// Wire type of length-delimited fields (messages, packed repeated fields).
const LENGTH_DELIMITED: u8 = 2;

/// Appends `value` as a varint.
pub(super) fn push_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Bytes of `value` as a varint.
pub(super) fn varint_len(value: u64) -> usize {
    // 7 bits a byte; 0 takes one byte too.
    (u64::BITS - (value | 1).leading_zeros()).div_ceil(7) as usize
}

fn push_key(out: &mut Vec<u8>, field: u32, wire_type: u8) {
    push_varint(out, u64::from(field << 3 | u32::from(wire_type)));
}

/// Appends an `int64` or `uint64` field, unless it is 0. (Negative
/// `int64`s take ten bytes, as their two's complement.)
pub(super) fn push_int_field(out: &mut Vec<u8>, field: u32, value: u64) {
    if value != 0 {
        push_key(out, field, VARINT);
        push_varint(out, value);
    }
}

/// Appends the key and length of a length-delimited field of `len` bytes;
/// its bytes follow.
pub(super) fn push_length_delimited(out: &mut Vec<u8>, field: u32, len: usize) {
    push_key(out, field, LENGTH_DELIMITED);
    push_varint(out, len as u64);
}

/// Bytes of a length-delimited field of `len` bytes, key and length
/// included.
pub(super) fn length_delimited_len(field: u32, len: usize) -> usize {
    varint_len(u64::from(field << 3)) + varint_len(len as u64) + len
}

/// Appends a packed repeated `int64` or `uint64` field, unless it is empty.
pub(super) fn push_packed(out: &mut Vec<u8>, field: u32, values: &[u64]) {
    if values.is_empty() {
        return;
    }
    let len = values.iter().map(|&value| varint_len(value)).sum();
    push_length_delimited(out, field, len);
    for &value in values {
        push_varint(out, value);
    }
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;
    use crate::pprof as pb;

    #[test]
    fn varints_match_prost() {
        for value in [
            0,
            1,
            127,
            128,
            300,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut ours = Vec::new();
            push_varint(&mut ours, value);
            let mut theirs = Vec::new();
            prost::encoding::encode_varint(value, &mut theirs);
            assert_eq!(ours, theirs, "{value}");
            assert_eq!(varint_len(value), theirs.len(), "{value}");
        }
    }

    #[test]
    fn fields_match_prost() {
        let label = pb::Label {
            key: 3,
            str: 0,
            num: -2,
            num_unit: 0,
        };
        let sample = pb::Sample {
            location_id: vec![1, 200, 70_000],
            value: vec![0, 5],
            label: vec![label, pb::Label::default()],
        };
        let profile = pb::Profile {
            sample: vec![sample, pb::Sample::default()],
            ..Default::default()
        };
        let mut labels = Vec::new();
        let mut content = Vec::new();
        push_int_field(&mut content, 1, 3);
        push_int_field(&mut content, 2, 0);
        push_int_field(&mut content, 3, -2_i64 as u64);
        push_length_delimited(&mut labels, 3, content.len());
        labels.extend(&content);
        push_length_delimited(&mut labels, 3, 0);
        let mut sample = Vec::new();
        push_packed(&mut sample, 1, &[1, 200, 70_000]);
        push_packed(&mut sample, 2, &[0, 5]);
        sample.extend(&labels);
        let mut ours = Vec::new();
        push_length_delimited(&mut ours, 2, sample.len());
        ours.extend(&sample);
        assert_eq!(length_delimited_len(2, sample.len()), ours.len());
        push_length_delimited(&mut ours, 2, 0);
        assert_eq!(ours, profile.encode_to_vec());
    }
}
