//! Where the kernel keeps the fields the eBPF programs read (the signal
//! guard's signal handlers, the sampler's task credentials, the fork
//! tracepoint's program layout), from the kernel's own type information
//! (BTF, `/sys/kernel/btf/vmlinux`): aya's eBPF programs have no CO-RE
//! relocations, so the daemon finds the offsets ([`FoundLayout`]) and
//! hands them to the programs as one global, a [`KernelLayout`].
//!
//! Owns a minimal BTF reader (structs, unions and their members); it must
//! not load or attach anything.

use std::collections::HashMap;

use profiler_common::{KernelLayout, cred_ids};

/// Byte offsets the signal guard needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SignalLayout {
    /// `task_struct.tgid`.
    pub task_tgid: u32,
    /// `task_struct.pid` (the thread id).
    pub task_pid: u32,
    /// `task_struct.sighand` (a pointer).
    pub task_sighand: u32,
    /// `sighand_struct.action` (an array of `k_sigaction`).
    pub sighand_action: u32,
    /// `sizeof(struct k_sigaction)`.
    pub k_sigaction_size: u32,
    /// `k_sigaction.sa.sa_handler`.
    pub handler: u32,
    /// `task_struct.signal` (a pointer).
    pub task_signal: u32,
    /// `signal_struct.group_exit_code`.
    pub group_exit_code: u32,
}

/// Byte offsets the sampler needs to tell who may see a sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CredentialLayout {
    /// `task_struct.real_cred` (a pointer): the task's objective
    /// credentials, those `ptrace_may_access` checks.
    pub task_real_cred: u32,
    /// `cred.uid`, the first of the six ids of [`cred_ids::FIELDS`].
    pub cred_ids: u32,
    /// `task_struct.mm` (a pointer).
    pub task_mm: u32,
    /// `mm_struct.flags` (its first word holds the dumpability bits).
    pub mm_flags: u32,
}

#[derive(Clone, Debug, thiserror::Error)]
pub enum BtfError {
    #[error("cannot read the kernel's BTF ({path}): {source}")]
    Read {
        path: &'static str,
        source: std::sync::Arc<std::io::Error>,
    },
    #[error("the kernel's BTF is malformed: {0}")]
    Malformed(&'static str),
    #[error("the kernel's BTF has no {0}")]
    Missing(String),
    #[error("the kernel's {0} is not laid out as the eBPF programs read it")]
    Layout(&'static str),
}

const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";
const BTF_MAGIC: u16 = 0xeb9f;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;

/// The running kernel's types, as its BTF describes them.
pub struct KernelTypes(Btf);

impl KernelTypes {
    /// Reads `/sys/kernel/btf/vmlinux`.
    pub fn read() -> Result<Self, BtfError> {
        let data = std::fs::read(VMLINUX_BTF).map_err(|source| BtfError::Read {
            path: VMLINUX_BTF,
            source: source.into(),
        })?;
        Ok(Self(Btf::parse(&data)?))
    }

    pub fn signal_layout(&self) -> Result<SignalLayout, BtfError> {
        SignalLayout::from_btf(&self.0)
    }

    pub fn credential_layout(&self) -> Result<CredentialLayout, BtfError> {
        CredentialLayout::from_btf(&self.0)
    }

    pub fn program_layout(&self) -> Result<ProgramLayout, BtfError> {
        ProgramLayout::from_btf(&self.0)
    }

    /// Offset of `mm_struct.start_stack`: the top of the main thread's
    /// frames (just below its arguments and environment).
    pub fn mm_start_stack(&self) -> Result<u32, BtfError> {
        self.0
            .member_offset(self.0.struct_named("mm_struct")?, "start_stack")
    }
}

/// Byte offsets the fork tracepoint needs to record where a new process's
/// program is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProgramLayout {
    /// `mm_struct.start_code`.
    pub mm_start_code: u32,
    /// `mm_struct.end_code`.
    pub mm_end_code: u32,
}

impl ProgramLayout {
    fn from_btf(btf: &Btf) -> Result<Self, BtfError> {
        let mm = btf.struct_named("mm_struct")?;
        Ok(Self {
            mm_start_code: btf.member_offset(mm, "start_code")?,
            mm_end_code: btf.member_offset(mm, "end_code")?,
        })
    }
}

impl CredentialLayout {
    fn from_btf(btf: &Btf) -> Result<Self, BtfError> {
        let task = btf.struct_named("task_struct")?;
        let cred = btf.struct_named("cred")?;
        let ids = cred_ids::FIELDS
            .iter()
            .map(|field| btf.member_offset(cred, field))
            .collect::<Result<Vec<u32>, _>>()?;
        let consecutive = ids.windows(2).all(|pair| pair[1] == pair[0] + 4);
        if !consecutive {
            return Err(BtfError::Layout("struct cred"));
        }
        Ok(Self {
            task_real_cred: btf.member_offset(task, "real_cred")?,
            cred_ids: ids[0],
            task_mm: btf.member_offset(task, "mm")?,
            mm_flags: btf.member_offset(btf.struct_named("mm_struct")?, "flags")?,
        })
    }
}

impl SignalLayout {
    fn from_btf(btf: &Btf) -> Result<Self, BtfError> {
        let k_sigaction = btf.struct_named("k_sigaction")?;
        let sa = btf.member_offset(k_sigaction, "sa")?;
        let sigaction = btf.struct_named("sigaction")?;
        Ok(Self {
            task_tgid: btf.member_offset(btf.struct_named("task_struct")?, "tgid")?,
            task_pid: btf.member_offset(btf.struct_named("task_struct")?, "pid")?,
            task_sighand: btf.member_offset(btf.struct_named("task_struct")?, "sighand")?,
            sighand_action: btf.member_offset(btf.struct_named("sighand_struct")?, "action")?,
            k_sigaction_size: k_sigaction.size,
            handler: sa + btf.member_offset(sigaction, "sa_handler")?,
            task_signal: btf.member_offset(btf.struct_named("task_struct")?, "signal")?,
            group_exit_code: btf
                .member_offset(btf.struct_named("signal_struct")?, "group_exit_code")?,
        })
    }
}

/// The kernel's layout as the programs are handed it, and why each part
/// left 0 in it (which the programs then do without) was not found.
#[derive(Debug)]
pub struct FoundLayout {
    pub layout: KernelLayout,
    /// The signal programs' fields, and the task's process and thread ids
    /// (the fork follower and lineages, off-CPU recording read those too).
    pub signals: Result<(), BtfError>,
    /// Who may see a sample: the task's credentials and dumpability
    /// (without them every sample is protected).
    pub credentials: Result<(), BtfError>,
    /// Where main threads' frames end (without it their stack copies are
    /// not trimmed).
    pub start_stack: Result<(), BtfError>,
    /// Where a process's program lies (without it fork lineages are not
    /// recorded).
    pub program: Result<(), BtfError>,
}

impl FoundLayout {
    /// Reads the running kernel's BTF.
    pub fn read() -> Self {
        Self::from_types(KernelTypes::read())
    }

    fn from_types(types: Result<KernelTypes, BtfError>) -> Self {
        let types = types.as_ref().map_err(BtfError::clone);
        let mut layout = KernelLayout::UNKNOWN;
        let signals = types
            .clone()
            .and_then(KernelTypes::signal_layout)
            .map(|found| {
                layout.task_tgid = found.task_tgid;
                layout.task_pid = found.task_pid;
                layout.task_sighand = found.task_sighand;
                layout.sighand_action = found.sighand_action;
                layout.k_sigaction_size = found.k_sigaction_size;
                layout.handler = found.handler;
                layout.task_signal = found.task_signal;
                layout.group_exit_code = found.group_exit_code;
            });
        let credentials = types
            .clone()
            .and_then(KernelTypes::credential_layout)
            .map(|found| {
                layout.task_real_cred = found.task_real_cred;
                layout.cred_ids = found.cred_ids;
                layout.task_mm = found.task_mm;
                layout.mm_flags = found.mm_flags;
            });
        let start_stack = types
            .clone()
            .and_then(KernelTypes::mm_start_stack)
            .map(|offset| layout.mm_start_stack = offset);
        let program = types.and_then(KernelTypes::program_layout).map(|found| {
            layout.mm_start_code = found.mm_start_code;
            layout.mm_end_code = found.mm_end_code;
        });
        Self {
            layout,
            signals,
            credentials,
            start_stack,
            program,
        }
    }

    /// Why the fork tracepoint cannot record where a process's program
    /// lies (the task's memory descriptor and the program's layout in it),
    /// if it cannot.
    pub fn process_error(&self) -> Option<&BtfError> {
        self.program
            .as_ref()
            .err()
            .or(self.start_stack.as_ref().err())
            .or(self.credentials.as_ref().err())
    }
}

/// A struct or union of the BTF.
#[derive(Clone, Debug)]
struct Composite {
    size: u32,
    /// (name, type id, bit offset); anonymous members have an empty name.
    members: Vec<(String, u32, u32)>,
}

/// The structs and unions of a BTF blob, by type id and by name.
struct Btf {
    composites: HashMap<u32, Composite>,
    by_name: HashMap<String, u32>,
}

impl Btf {
    fn parse(data: &[u8]) -> Result<Self, BtfError> {
        let u16_at = |at: usize| -> Option<u16> {
            Some(u16::from_le_bytes(data.get(at..at + 2)?.try_into().ok()?))
        };
        let u32_at = |at: usize| -> Option<u32> {
            Some(u32::from_le_bytes(data.get(at..at + 4)?.try_into().ok()?))
        };
        if u16_at(0) != Some(BTF_MAGIC) {
            return Err(BtfError::Malformed("no BTF magic (or not little-endian)"));
        }
        let header = |index: usize| {
            u32_at(4 + index * 4)
                .map(|value| value as usize)
                .ok_or(BtfError::Malformed("truncated header"))
        };
        let (header_len, type_off, type_len, str_off, str_len) =
            (header(0)?, header(1)?, header(2)?, header(3)?, header(4)?);
        let types = header_len + type_off;
        let strings = header_len + str_off;
        if data.len() < types + type_len || data.len() < strings + str_len {
            return Err(BtfError::Malformed("sections beyond the end of the data"));
        }
        let name_at = |offset: u32| -> String {
            let start = strings + offset as usize;
            let bytes = data.get(start..strings + str_len).unwrap_or_default();
            let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
            String::from_utf8_lossy(&bytes[..end]).into_owned()
        };

        let mut composites = HashMap::new();
        let mut by_name = HashMap::new();
        let mut at = types;
        let mut id = 1_u32;
        while at < types + type_len {
            let (Some(name_off), Some(info), Some(size)) =
                (u32_at(at), u32_at(at + 4), u32_at(at + 8))
            else {
                return Err(BtfError::Malformed("truncated type"));
            };
            let (kind, vlen, kind_flag) = ((info >> 24) & 0x1f, info & 0xffff, info >> 31);
            at += 12;
            let extra = match kind {
                1 | 14 | 17 => 4,
                3 => 12,
                KIND_STRUCT | KIND_UNION | 15 | 19 => 12 * vlen as usize,
                6 | 13 => 8 * vlen as usize,
                2 | 7..=12 | 16 | 18 => 0,
                _ => return Err(BtfError::Malformed("unknown type kind")),
            };
            if kind == KIND_STRUCT || kind == KIND_UNION {
                let mut members = Vec::with_capacity(vlen as usize);
                for index in 0..vlen as usize {
                    let member = at + index * 12;
                    let (Some(name), Some(member_type), Some(offset)) =
                        (u32_at(member), u32_at(member + 4), u32_at(member + 8))
                    else {
                        return Err(BtfError::Malformed("truncated member"));
                    };
                    // With kind_flag, the top 8 bits are a bitfield's size.
                    let bit_offset = if kind_flag == 1 {
                        offset & 0x00ff_ffff
                    } else {
                        offset
                    };
                    members.push((name_at(name), member_type, bit_offset));
                }
                let name = name_at(name_off);
                if kind == KIND_STRUCT && !name.is_empty() {
                    by_name.entry(name).or_insert(id);
                }
                composites.insert(id, Composite { size, members });
            }
            at += extra;
            id += 1;
        }
        Ok(Self {
            composites,
            by_name,
        })
    }

    fn struct_named(&self, name: &str) -> Result<&Composite, BtfError> {
        self.by_name
            .get(name)
            .and_then(|id| self.composites.get(id))
            .ok_or_else(|| BtfError::Missing(format!("struct {name}")))
    }

    /// The byte offset of `name` in `composite`, looking into anonymous
    /// struct and union members too.
    fn member_offset(&self, composite: &Composite, name: &str) -> Result<u32, BtfError> {
        self.find_member(composite, name, 0)
            .ok_or_else(|| BtfError::Missing(format!("member {name}")))
    }

    fn find_member(&self, composite: &Composite, name: &str, depth: u32) -> Option<u32> {
        for (member, member_type, bit_offset) in &composite.members {
            if member == name {
                return Some(bit_offset / 8);
            }
            if member.is_empty()
                && depth < 8
                && let Some(inner) = self.composites.get(member_type)
                && let Some(offset) = self.find_member(inner, name, depth + 1)
            {
                return Some(bit_offset / 8 + offset);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_running_kernel_has_the_credential_fields() {
        let types = KernelTypes::read().expect("the kernel has BTF");
        let layout = types
            .credential_layout()
            .expect("the kernel's BTF describes the credential fields");
        assert!(
            layout.task_real_cred > 0 && layout.task_mm > 0,
            "{layout:?}"
        );
        assert_eq!(layout.task_real_cred % 8, 0, "a pointer: {layout:?}");
        // `usage` comes first.
        assert!(layout.cred_ids >= 4, "{layout:?}");
    }

    #[test]
    fn the_running_kernel_has_the_fields() {
        let layout = KernelTypes::read()
            .and_then(|types| types.signal_layout())
            .expect("the kernel's BTF describes the signal fields");
        assert!(layout.k_sigaction_size >= 16, "{layout:?}");
        assert!(layout.handler < layout.k_sigaction_size, "{layout:?}");
        assert!(
            layout.task_tgid > 0 && layout.task_sighand > 0,
            "{layout:?}"
        );
        assert_eq!(
            layout.task_sighand % 8,
            0,
            "a pointer is aligned: {layout:?}"
        );
    }

    #[test]
    fn the_running_kernel_has_the_program_layout_fields() {
        let layout = KernelTypes::read()
            .and_then(|types| types.program_layout())
            .expect("the kernel's BTF describes the code fields");
        // `end_code` follows `start_code` (both unsigned longs).
        assert_eq!(layout.mm_end_code, layout.mm_start_code + 8, "{layout:?}");
    }

    #[test]
    fn the_running_kernel_has_the_whole_layout() {
        let found = FoundLayout::read();
        assert!(
            found.signals.is_ok()
                && found.credentials.is_ok()
                && found.start_stack.is_ok()
                && found.program.is_ok(),
            "{found:?}"
        );
        assert!(found.process_error().is_none());
        let layout = found.layout;
        assert!(
            layout.task_pid > 0 && layout.mm_start_stack > 0,
            "{layout:?}"
        );
        assert_ne!(layout.task_pid, layout.task_tgid, "{layout:?}");
    }

    #[test]
    fn without_btf_the_layout_is_unknown_and_says_why() {
        let missing = BtfError::Missing("struct task_struct".to_owned());
        let found = FoundLayout::from_types(Err(missing));
        assert_eq!(found.layout, KernelLayout::UNKNOWN);
        assert!(found.signals.is_err() && found.credentials.is_err());
        assert!(matches!(found.process_error(), Some(BtfError::Missing(_))));
    }

    #[test]
    fn garbage_is_refused() {
        assert!(matches!(
            Btf::parse(b"not btf at all"),
            Err(BtfError::Malformed(_))
        ));
        assert!(matches!(Btf::parse(&[]), Err(BtfError::Malformed(_))));
        let mut header = vec![0x9f, 0xeb, 1, 0];
        header.extend_from_slice(&24_u32.to_le_bytes());
        header.extend_from_slice(&[0xff; 16]);
        assert!(matches!(Btf::parse(&header), Err(BtfError::Malformed(_))));
    }
}
