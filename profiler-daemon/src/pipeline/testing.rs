//! A sample source the tests fill themselves, for the pipeline and the
//! service without the kernel.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
    time::SystemTime,
};

use profiler_common::COUNTER_COUNT;

use crate::kernel::{
    drain::{RawBatch, RawSample},
    sources::{SampleSource, SourceError},
};

/// Hands out the samples queued in it, one queued list per drain.
#[derive(Clone, Default)]
pub struct QueuedSource {
    pub queue: Arc<Mutex<VecDeque<Vec<RawSample>>>>,
    last: Arc<Mutex<Option<SystemTime>>>,
    /// How long the next drain takes (once), as a slow pass would.
    pub next_drain_takes: Arc<Mutex<std::time::Duration>>,
}

impl SampleSource for QueuedSource {
    fn name(&self) -> &'static str {
        "queued samples"
    }

    fn drain(&mut self) -> Result<RawBatch, SourceError> {
        std::thread::sleep(std::mem::take(&mut *crate::lock(&self.next_drain_takes)));
        let end = SystemTime::now();
        let start = crate::lock(&self.last).replace(end).unwrap_or(end);
        Ok(RawBatch {
            start,
            end,
            samples: crate::lock(&self.queue).pop_front().unwrap_or_default(),
            counters: [0; COUNTER_COUNT as usize],
        })
    }
}
