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
}

impl SampleSource for QueuedSource {
    fn name(&self) -> &'static str {
        "queued samples"
    }

    fn drain(&mut self) -> Result<RawBatch, SourceError> {
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
