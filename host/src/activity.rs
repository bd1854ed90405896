//! Device activity recording (the `activity` interface of the ABI): the
//! executor stamps each launch and copy it runs with wall-clock start and end
//! times and keeps a record while recording is on.
//!
//! The state is process-wide, as the profilers that read it are. When
//! recording is off the cost is one relaxed atomic load per queued task.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::abi::{ActivityApi, ActivityKind, ActivityRecord};
use crate::device::lock;
use crate::runtime::Runtime;

static RECORDING: AtomicBool = AtomicBool::new(false);
static RECORDS: Mutex<Vec<ActivityRecord>> = Mutex::new(Vec::new());

thread_local! {
    static CORRELATION: Cell<u64> = const { Cell::new(0) };
}

/// What a queued task carries while recording is on: the queueing thread's
/// correlation id.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tag {
    pub(crate) correlation: u64,
}

/// The tag for a task queued now, or `None` when recording is off.
pub(crate) fn tag() -> Option<Tag> {
    RECORDING.load(Ordering::Relaxed).then(|| Tag { correlation: CORRELATION.with(Cell::get) })
}

/// Nanoseconds since the Unix epoch (`CLOCK_REALTIME`).
pub(crate) fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// What ran, as the record names it.
pub(crate) struct Work {
    pub(crate) kind: ActivityKind,
    pub(crate) name: String,
    pub(crate) op: Option<String>,
    pub(crate) stream_id: u32,
    pub(crate) bytes: u64,
    pub(crate) workers: u32,
}

/// Keeps the record of finished work, unless recording stopped meanwhile.
pub(crate) fn push(tag: Tag, device: u32, work: Work, start_ns: u64, end_ns: u64) {
    if !RECORDING.load(Ordering::Relaxed) {
        return;
    }
    lock(&RECORDS).push(ActivityRecord {
        kind: work.kind,
        name: work.name,
        op: work.op,
        device,
        stream_id: work.stream_id,
        start_ns,
        end_ns,
        correlation: tag.correlation,
        bytes: work.bytes,
        workers: work.workers,
    });
}

impl ActivityApi for Runtime {
    fn set_activity_recording(&self, enabled: bool) {
        let mut records = lock(&RECORDS);
        if enabled {
            records.clear();
        }
        RECORDING.store(enabled, Ordering::Relaxed);
    }

    fn set_correlation(&self, id: u64) {
        CORRELATION.with(|c| c.set(id));
    }

    fn take_activity(&self) -> Vec<ActivityRecord> {
        let mut records = std::mem::take(&mut *lock(&RECORDS));
        records.sort_by_key(|r| r.start_ns);
        records
    }
}
