//! Events: markers in a stream's work (`cudaEvent_t`).
//!
//! Recording an event bumps its *generation* and queues a marker carrying that
//! generation (both under the recording stream's scheduler lock, so no wait can
//! slip between them); when a stream's executor reaches the marker, that
//! generation is complete (and, with timing, the time is taken). Generations
//! can complete out of order when an event is recorded on several streams, so
//! each is tracked on its own. A query or wait concerns the generation recorded
//! most recently at the time of the call, which is CUDA's "most recent record"
//! rule. An event never recorded has generation 0 and counts as complete.

use std::collections::BTreeSet;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Instant;

#[cfg(doc)]
use crate::device::wake_all;
use crate::device::{interrupted, lock, DeviceShared, INTERRUPT_POLL};
use crate::error::{Error, Result};

#[derive(Default)]
struct State {
    recorded: u64,
    /// The device of the most recent record.
    device: Option<u32>,
    /// Generations recorded but not yet reached by their stream.
    pending: BTreeSet<u64>,
    completed_at: Option<Instant>,
    /// Devices with a stream that may be waiting for this event.
    waiters: Vec<Weak<DeviceShared>>,
}

/// The shared state of one event.
pub(crate) struct EventInner {
    pub(crate) id: u64,
    timing: bool,
    state: Mutex<State>,
    cv: Condvar,
}

impl EventInner {
    pub(crate) fn new(id: u64, timing: bool) -> Arc<EventInner> {
        Arc::new(EventInner { id, timing, state: Mutex::new(State::default()), cv: Condvar::new() })
    }

    /// Starts a new record on `device`; returns the generation the marker must
    /// carry. Called with the recording stream's scheduler lock held.
    pub(crate) fn begin_record(&self, device: u32) -> u64 {
        let mut s = lock(&self.state);
        s.recorded += 1;
        s.device = Some(device);
        let generation = s.recorded;
        s.pending.insert(generation);
        generation
    }

    /// The generation a wait issued now must wait for (0: nothing to wait for),
    /// registering `device` to be woken when the event completes.
    pub(crate) fn wait_target(&self, device: &Arc<DeviceShared>) -> u64 {
        let mut s = lock(&self.state);
        if !s.pending.is_empty() && !s.waiters.iter().any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(device))) {
            s.waiters.push(Arc::downgrade(device));
        }
        s.recorded
    }

    /// Whether the record of `generation` has completed (0: never recorded).
    pub(crate) fn is_complete(&self, generation: u64) -> bool {
        !lock(&self.state).pending.contains(&generation)
    }

    /// Called by an executor when it reaches the marker of `generation`;
    /// returns the devices to wake (with [`wake_all`]) once the caller has
    /// released its scheduler lock.
    pub(crate) fn complete(&self, generation: u64) -> Vec<Weak<DeviceShared>> {
        let mut s = lock(&self.state);
        s.pending.remove(&generation);
        if generation == s.recorded {
            s.completed_at = self.timing.then(Instant::now);
        }
        self.cv.notify_all();
        if s.pending.is_empty() {
            std::mem::take(&mut s.waiters)
        } else {
            s.waiters.clone()
        }
    }

    pub(crate) fn query(&self) -> bool {
        let s = lock(&self.state);
        !s.pending.contains(&s.recorded)
    }

    /// The device of the most recent record, if it was recorded.
    pub(crate) fn device(&self) -> Option<u32> {
        lock(&self.state).device
    }

    /// Waits for the most recent record; gives up if the waiting thread is
    /// interrupted (`device::set_interrupt_check`).
    pub(crate) fn synchronize(&self) -> Result<()> {
        let mut s = lock(&self.state);
        let target = s.recorded;
        while s.pending.contains(&target) {
            if interrupted() {
                return Err(Error::Interrupted { device: s.device.unwrap_or(0), what: "an event" });
            }
            s = self.cv.wait_timeout(s, INTERRUPT_POLL).unwrap_or_else(|e| e.into_inner()).0;
        }
        Ok(())
    }

    /// Milliseconds from this event's completion to `end`'s; both most
    /// recent records must be on one device, as CUDA requires.
    pub(crate) fn elapsed_ms(&self, end: &EventInner) -> Result<f32> {
        let (here, there) = (lock(&self.state).device, lock(&end.state).device);
        if let (Some(a), Some(b)) = (here, there) {
            if a != b {
                return Err(Error::InvalidArgument(format!(
                    "events {} and {} were recorded on different devices (openreg:{a} and openreg:{b}); \
                     elapsed time needs both on one device",
                    self.id, end.id
                )));
            }
        }
        let time = |e: &EventInner| -> Result<Instant> {
            let s = lock(&e.state);
            if !e.timing {
                return Err(Error::InvalidEvent { event: e.id, reason: "was created without timing enabled" });
            }
            if s.recorded == 0 {
                return Err(Error::InvalidEvent { event: e.id, reason: "has not been recorded" });
            }
            if s.pending.contains(&s.recorded) {
                return Err(Error::InvalidEvent { event: e.id, reason: "has not completed yet" });
            }
            s.completed_at.ok_or(Error::InvalidEvent { event: e.id, reason: "has no timestamp" })
        };
        let (start, stop) = (time(self)?, time(end)?);
        Ok(match stop.checked_duration_since(start) {
            Some(d) => d.as_secs_f64() * 1e3,
            None => -(start.duration_since(stop).as_secs_f64() * 1e3),
        } as f32)
    }
}
