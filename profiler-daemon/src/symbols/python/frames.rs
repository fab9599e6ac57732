//! Python frames among a stack's native addresses. The sampling programs
//! read a thread's Python frames beside its native stack; here they take
//! the place of the evaluation loop's native frames (each call of
//! `_PyEval_EvalFrameDefault` runs the Python frames of one activation),
//! each one carried to naming as a [`PythonFrameAddress`]: two words no
//! user address is, holding its code object's address, its instruction's
//! index and its code object's check.
//!
//! Owns that encoding and the merge; it must not read process memory.

use std::ops::Range;

use profiler_common::python::{MAX_PYTHON_SLOTS, PythonFrameSlot};

use super::code_objects::CodeLayout;

/// A Python frame written as two stack addresses. The first: bit 63 set
/// and 62 clear (no user address, nor the signal frame's `u64::MAX`), its
/// instruction's index plus one in bits 44 to 61 (0: unknown), its code
/// object's address over 8 in bits 0 to 43. The second: bits 63 and 62
/// set, the code object's check in bits 1 to 61 (bit 0 clear: never the
/// signal frame's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PythonFrameAddress {
    /// The code object's address.
    pub code: u64,
    /// The instruction's index in its code (2-byte code units), when the
    /// frame's instruction pointer was inside it.
    pub unit: Option<u32>,
    /// Its check ([`profiler_common::python::code_check`], 61 bits of it).
    pub check: u64,
}

const TAG: u64 = 1 << 63;
const CHECK_TAG: u64 = 0b11 << 62;

/// A check as a frame's address carries it (61 bits).
pub fn carried_check(check: u64) -> u64 {
    ((check << 1) & CHECK_MASK) >> 1
}

/// A frame the interpreter's state adds to a stack, written as a stack
/// address: bits 63 and 62 set, as a check's, but bit 0 set (a check's
/// never is; nor is this the signal frame's `u64::MAX`). Why the Python
/// frames read stop short of the outermost one (rootward of the last one
/// read), or that the garbage collector ran (leafward of the innermost).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PythonMarker {
    /// More frames than the programs read ([`MAX_PYTHON_SLOTS`]).
    TooDeep,
    /// A frame's memory could not be read.
    Unreadable,
    /// The thread held the GIL while the garbage collector ran: `<GC>`.
    Collecting,
}

impl PythonMarker {
    const TOO_DEEP: u64 = CHECK_TAG | 1;
    const UNREADABLE: u64 = CHECK_TAG | 3;
    const COLLECTING: u64 = CHECK_TAG | 5;

    /// Why the frames stop short, as a sample's Python status says it
    /// (none when whole, or none read).
    pub fn cut_of_status(status: u32) -> Option<Self> {
        use profiler_common::python::status;
        match status::outcome(status) {
            status::CUT => Some(Self::TooDeep),
            status::UNREADABLE => Some(Self::Unreadable),
            _ => None,
        }
    }

    pub fn encode(self) -> u64 {
        match self {
            Self::TooDeep => Self::TOO_DEEP,
            Self::Unreadable => Self::UNREADABLE,
            Self::Collecting => Self::COLLECTING,
        }
    }

    pub fn decode(word: u64) -> Option<Self> {
        match word {
            Self::TOO_DEEP => Some(Self::TooDeep),
            Self::UNREADABLE => Some(Self::Unreadable),
            Self::COLLECTING => Some(Self::Collecting),
            _ => None,
        }
    }

    /// The marker frame that says so.
    pub fn marker(self) -> String {
        match self {
            Self::TooDeep => format!("[python frames cut: more than {MAX_PYTHON_SLOTS} read]"),
            Self::Unreadable => "[python frames cut: memory unreadable]".to_owned(),
            Self::Collecting => "<GC>".to_owned(),
        }
    }
}
const TAG_MASK: u64 = 0b11 << 62;
const CHECK_MASK: u64 = ((1 << 61) - 1) << 1;
const UNIT_SHIFT: u32 = 44;
const UNIT_BITS: u32 = 18;
const CODE_MASK: u64 = (1 << UNIT_SHIFT) - 1;

impl PythonFrameAddress {
    /// The words standing for this frame; none when its code object's
    /// address does not fit (above 47 bits, or not 8-byte aligned).
    pub fn encode(self) -> Option<[u64; 2]> {
        if self.code & 7 != 0 || (self.code >> 3) & !CODE_MASK != 0 {
            return None;
        }
        let unit = self
            .unit
            .map(|unit| u64::from(unit) + 1)
            .filter(|unit| *unit < 1 << UNIT_BITS)
            .unwrap_or(0);
        Some([
            TAG | unit << UNIT_SHIFT | self.code >> 3,
            CHECK_TAG | (self.check << 1) & CHECK_MASK,
        ])
    }

    /// The frame the first words of `words` stand for, when they stand
    /// for one.
    pub fn decode(words: &[u64]) -> Option<Self> {
        let [word, check, ..] = *words else {
            return None;
        };
        if word & TAG_MASK != TAG || check & TAG_MASK != CHECK_TAG || check & 1 != 0 {
            return None;
        }
        let unit = (word >> UNIT_SHIFT) & ((1 << UNIT_BITS) - 1);
        Some(Self {
            code: (word & CODE_MASK) << 3,
            unit: unit.checked_sub(1).map(|unit| unit as u32),
            check: (check & CHECK_MASK) >> 1,
        })
    }
}

/// `native` (leaf first) with each evaluation loop frame (an address in
/// `eval_loop`) replaced by the Python frames of its activation, taken
/// from `slots` (leaf first, activations ended by a slot with code 0) in
/// order. Activations left over when the native frames end (their
/// unwinding stopped short of them) go at the root end. Frames `cut` short
/// of the outermost have its reason rootward of the last one; a sample
/// taken while the garbage collector ran (`status`'s `IN_GC`) has `<GC>`
/// leafward of the innermost.
pub fn merge(
    native: &[u64],
    eval_loop: &[Range<u64>],
    slots: &[PythonFrameSlot],
    layout: &CodeLayout,
    status: u32,
) -> Vec<u64> {
    let cut = PythonMarker::cut_of_status(status);
    let collecting = status & profiler_common::python::status::IN_GC != 0;
    let mut activations = slots
        .split(|slot| slot.code == 0)
        .filter(|activation| !activation.is_empty());
    let encode = |slot: &PythonFrameSlot| {
        let start = layout.instructions_of(slot.code);
        let unit = slot
            .instruction
            .checked_sub(start)
            .and_then(|bytes| u32::try_from(bytes / 2).ok());
        PythonFrameAddress {
            code: slot.code,
            unit,
            check: slot.check,
        }
        .encode()
    };
    let mut merged = Vec::with_capacity(native.len() + 2 * slots.len() + 2);
    // Where the first Python frame placed starts, and the last ends.
    let mut python_start = None;
    let mut python_end = None;
    for (depth, &address) in native.iter().enumerate() {
        // A return address may be just past its call, at the function's end.
        let looked_up = if depth > 0 {
            address.wrapping_sub(1)
        } else {
            address
        };
        let in_eval_loop = eval_loop.iter().any(|range| range.contains(&looked_up));
        match in_eval_loop.then(|| activations.next()).flatten() {
            Some(activation) => {
                python_start.get_or_insert(merged.len());
                merged.extend(activation.iter().filter_map(encode).flatten());
                python_end = Some(merged.len());
            }
            None => merged.push(address),
        }
    }
    for activation in activations {
        python_start.get_or_insert(merged.len());
        merged.extend(activation.iter().filter_map(encode).flatten());
        python_end = Some(merged.len());
    }
    if let (Some(cut), Some(end)) = (cut, python_end) {
        merged.insert(end, cut.encode());
    }
    if let (true, Some(start)) = (collecting, python_start) {
        merged.insert(start, PythonMarker::Collecting.encode());
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbols::python::PythonVersion;

    #[test]
    fn a_frame_address_decodes_to_itself_and_no_user_address_is_one() {
        for frame in [
            PythonFrameAddress {
                code: 0x7f12_3456_7890,
                unit: Some(17),
                check: 0x1234,
            },
            PythonFrameAddress {
                code: 0x5555_0000_0008,
                unit: None,
                check: (1 << 61) - 1,
            },
        ] {
            let words = frame.encode().unwrap();
            assert_eq!(PythonFrameAddress::decode(&words), Some(frame));
            assert!(words.iter().all(|&word| word != u64::MAX));
        }
        for user in [0, 0x40_1000, 0x7fff_ffff_f000, u64::MAX] {
            assert_eq!(PythonFrameAddress::decode(&[user, user]), None);
            assert_eq!(PythonMarker::decode(user), None);
        }
        // No check word is a cut's.
        let check = PythonFrameAddress {
            code: 0x1000,
            unit: None,
            check: u64::MAX,
        };
        let [_, check] = check.encode().unwrap();
        assert_eq!(PythonMarker::decode(check), None);
        // Not aligned, or too high: not written.
        let odd = PythonFrameAddress {
            code: 0x7f00_0000_0004,
            unit: None,
            check: 0,
        };
        assert_eq!(odd.encode(), None);
    }

    #[test]
    fn each_evaluation_loop_frame_takes_its_activation_s_python_frames() {
        let layout = CodeLayout::of(PythonVersion {
            major: 3,
            minor: 12,
            micro: 0,
        })
        .unwrap();
        let slot = |code: u64, unit: u64| PythonFrameSlot {
            code,
            instruction: layout.instructions_of(code) + 2 * unit,
            check: code / 16,
        };
        let end = PythonFrameSlot::default();
        // c and b run in the inner loop, a in the outer one, called from C.
        let slots = [slot(0x1000, 3), slot(0x2000, 5), end, slot(0x3000, 7), end];
        // The loop and its `.cold` part.
        let eval = [0x50_0000..0x50_1000, 0x60_0000..0x60_0100];
        // leaf, eval loop, a C function between them, eval loop, main.
        let native = [0x40_0010, 0x50_0100, 0x40_2000, 0x50_0200, 0x40_3000];
        let decoded = |merged: &[u64]| {
            let mut decoded = Vec::new();
            let mut at = 0;
            while at < merged.len() {
                match PythonFrameAddress::decode(&merged[at..]) {
                    Some(frame) => {
                        assert_eq!(frame.check, frame.code / 16);
                        decoded.push(Err((frame.code, frame.unit)));
                        at += 2;
                    }
                    None => {
                        decoded.push(Ok(merged[at]));
                        at += 1;
                    }
                }
            }
            decoded
        };
        use profiler_common::python::status;
        let merged = merge(&native, &eval, &slots, &layout, status::READ);
        assert_eq!(
            decoded(&merged),
            [
                Ok(0x40_0010),
                Err((0x1000, Some(3))),
                Err((0x2000, Some(5))),
                Ok(0x40_2000),
                Err((0x3000, Some(7))),
                Ok(0x40_3000)
            ]
        );
        // Native frames cut short of the outer loop: its frames at the root.
        let merged = merge(&native[..2], &eval, &slots, &layout, status::READ);
        assert_eq!(
            decoded(&merged),
            [
                Ok(0x40_0010),
                Err((0x1000, Some(3))),
                Err((0x2000, Some(5))),
                Err((0x3000, Some(7)))
            ]
        );
        // Cut short (the outer loop's frames not read): said rootward of
        // the last one read, the outer loop's native frame kept.
        let merged = merge(&native, &eval, &slots[..2], &layout, status::CUT);
        let too_deep = PythonMarker::TooDeep.encode();
        assert_eq!(
            decoded(&merged),
            [
                Ok(0x40_0010),
                Err((0x1000, Some(3))),
                Err((0x2000, Some(5))),
                Ok(too_deep),
                Ok(0x40_2000),
                Ok(0x50_0200),
                Ok(0x40_3000)
            ]
        );
        assert_eq!(PythonMarker::decode(too_deep), Some(PythonMarker::TooDeep));
        // The garbage collector running: <GC> leafward of the innermost
        // Python frame, with the cut too.
        let merged = merge(
            &native,
            &eval,
            &slots[..2],
            &layout,
            status::CUT | status::IN_GC,
        );
        let collecting = PythonMarker::Collecting.encode();
        assert_eq!(
            decoded(&merged),
            [
                Ok(0x40_0010),
                Ok(collecting),
                Err((0x1000, Some(3))),
                Err((0x2000, Some(5))),
                Ok(too_deep),
                Ok(0x40_2000),
                Ok(0x50_0200),
                Ok(0x40_3000)
            ]
        );
        assert_eq!(
            PythonMarker::decode(collecting),
            Some(PythonMarker::Collecting)
        );
        // None read: nothing said.
        let merged = merge(&native, &eval, &[], &layout, status::CUT | status::IN_GC);
        assert_eq!(merged, native);
    }
}
