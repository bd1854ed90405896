//! The device allocator: a caching, stream-aware allocator over a device's heap
//! (the `cudaMalloc` underneath plus PyTorch's CUDA caching allocator on top).
//!
//! - **Segments** are carved from the heap (`[HEAP_START, capacity)`, see
//!   `layout.rs`) first-fit: 2 MiB segments for small requests (up to 1 MiB),
//!   and segments rounded up to 2 MiB for large ones. A segment serves one
//!   stream and one size class.
//! - **Blocks** split segments. Sizes are rounded up to 512 bytes, so every block
//!   is 512-byte aligned. A freed block is coalesced with free neighbours and
//!   cached for the next request on the same stream; work on that stream is
//!   ordered after the free, so reuse is safe without waiting.
//! - **Stream-aware reuse:** a block also used on other streams
//!   (`record_stream`) becomes *pending* at free time, with the ticket each of
//!   those streams had reached in its queue; it is reused only once every one
//!   of them has completed past that ticket.
//! - When the heap has no room for a new segment, cached wholly free segments are
//!   returned to it (a "cache flush") and the request retried; only then does it
//!   fail with out-of-memory. `empty_cache` returns them on demand.
//! - **Returning segments** waits first for the work queued on the device
//!   ([`Device::drain`], as `cudaFree` synchronizes): a block freed while its
//!   stream's queued work still used it is reusable by that stream at once, but
//!   its segment must not reach another stream, or the operating system, before
//!   that work is done. The wait also lets frees pending on other streams
//!   complete, so a flush before out-of-memory sees them. Then the segments'
//!   pages go back to the operating system ([`Device::discard`]).
//!
//! The allocator holds only metadata: it never touches device bytes itself.

use std::collections::{BTreeMap, BTreeSet};

use crate::abi::MemoryStats;
use crate::error::{Error, Result};

/// Every block size is a multiple of this, so every block is aligned to it.
pub(crate) const BLOCK_ALIGN: u64 = 512;
/// Requests up to this size come from small segments.
pub(crate) const SMALL_REQUEST: u64 = 1 << 20;
/// The size of a small segment.
pub(crate) const SMALL_SEGMENT: u64 = 2 << 20;
/// Large segments are rounded up to a multiple of this.
pub(crate) const LARGE_SEGMENT_ROUND: u64 = 2 << 20;

/// A stream id on the allocator's device.
pub(crate) type StreamId = u32;

/// What the allocator asks of its device.
pub(crate) trait Device {
    /// Whether `stream` has completed its first `ticket` tasks.
    fn completed(&self, stream: StreamId, ticket: u64) -> bool;
    /// Waits until the work queued on the device so far has run.
    fn drain(&self) {}
    /// Gives the pages of `[start, start + len)`, released by the allocator,
    /// back to the operating system.
    fn discard(&self, _start: u64, _len: u64) {}
}

/// A completion test alone is a device with nothing to drain or discard (tests).
impl<F: Fn(StreamId, u64) -> bool + ?Sized> Device for F {
    fn completed(&self, stream: StreamId, ticket: u64) -> bool {
        self(stream, ticket)
    }
}

#[derive(Debug)]
enum State {
    Free,
    Allocated {
        also_used_on: Vec<StreamId>,
    },
    /// Freed, waiting until each `(stream, ticket)` has completed.
    Pending {
        waits: Vec<(StreamId, u64)>,
    },
}

#[derive(Debug)]
struct Block {
    size: u64,
    segment: u64,
    stream: StreamId,
    small: bool,
    state: State,
}

#[derive(Debug)]
struct Segment {
    len: u64,
    stream: StreamId,
    small: bool,
}

/// Allocator state for one device.
#[derive(Debug)]
pub(crate) struct Allocator {
    device: u32,
    heap: (u64, u64),
    /// Heap ranges not in any segment: start -> length, coalesced.
    arena: BTreeMap<u64, u64>,
    segments: BTreeMap<u64, Segment>,
    blocks: BTreeMap<u64, Block>,
    /// Free blocks, ordered for best fit: (stream, small, size, address).
    free: BTreeSet<(StreamId, bool, u64, u64)>,
    pending: Vec<u64>,
    stats: MemoryStats,
}

fn round_up(value: u64, to: u64) -> Option<u64> {
    value.checked_add(to - 1).map(|v| v / to * to)
}

impl Allocator {
    /// An allocator owning `[heap_start, heap_end)` of `device`'s memory.
    pub(crate) fn new(device: u32, heap_start: u64, heap_end: u64) -> Allocator {
        assert!(heap_start.is_multiple_of(BLOCK_ALIGN) && heap_start < heap_end);
        Allocator {
            device,
            heap: (heap_start, heap_end),
            arena: BTreeMap::from([(heap_start, heap_end - heap_start)]),
            segments: BTreeMap::new(),
            blocks: BTreeMap::new(),
            free: BTreeSet::new(),
            pending: Vec::new(),
            stats: MemoryStats {
                allocated_bytes: 0,
                allocated_bytes_total: 0,
                freed_bytes_total: 0,
                peak_allocated_bytes: 0,
                reserved_bytes: 0,
                peak_reserved_bytes: 0,
                active_blocks: 0,
                peak_active_blocks: 0,
                segments: 0,
                peak_segments: 0,
                allocations: 0,
                frees: 0,
                ooms: 0,
                cache_flushes: 0,
            },
        }
    }

    /// Bytes the allocator can ever hold.
    pub(crate) fn total(&self) -> u64 {
        self.heap.1 - self.heap.0
    }

    /// Current statistics.
    pub(crate) fn stats(&self) -> MemoryStats {
        self.stats
    }

    /// Sets the peaks to the current values.
    pub(crate) fn reset_peaks(&mut self) {
        let s = &mut self.stats;
        s.peak_allocated_bytes = s.allocated_bytes;
        s.peak_reserved_bytes = s.reserved_bytes;
        s.peak_active_blocks = s.active_blocks;
        s.peak_segments = s.segments;
    }

    /// Sets the running totals to zero.
    pub(crate) fn reset_accumulated(&mut self) {
        let s = &mut self.stats;
        (s.allocated_bytes_total, s.freed_bytes_total, s.allocations, s.frees, s.ooms, s.cache_flushes) =
            (0, 0, 0, 0, 0, 0);
    }

    /// Allocates `size` (> 0) bytes for `stream`; returns the block's offset.
    pub(crate) fn allocate(&mut self, size: u64, stream: StreamId, device: &(impl Device + ?Sized)) -> Result<u64> {
        debug_assert!(size > 0);
        let rounded = round_up(size, BLOCK_ALIGN).filter(|&r| r <= self.total());
        let Some(rounded) = rounded else {
            return Err(self.out_of_memory(size));
        };
        self.process_pending(device);
        let small = rounded <= SMALL_REQUEST;
        let addr = match self.take_free(stream, small, rounded) {
            Some(addr) => addr,
            None => self.new_segment(rounded, stream, small, size, device)?,
        };
        self.split(addr, rounded);
        let block = self.blocks.get_mut(&addr).expect("chosen block exists");
        block.state = State::Allocated { also_used_on: Vec::new() };
        let stats = &mut self.stats;
        stats.allocated_bytes += block.size;
        stats.allocated_bytes_total += block.size;
        stats.peak_allocated_bytes = stats.peak_allocated_bytes.max(stats.allocated_bytes);
        stats.active_blocks += 1;
        stats.peak_active_blocks = stats.peak_active_blocks.max(stats.active_blocks);
        stats.allocations += 1;
        Ok(addr)
    }

    /// Frees the block at `addr`. `ticket(stream)` gives a stream's current
    /// enqueue ticket, for blocks also used on other streams.
    pub(crate) fn free(&mut self, addr: u64, ticket: &dyn Fn(StreamId) -> u64) -> Result<()> {
        let block = match self.blocks.get_mut(&addr) {
            Some(b) if matches!(b.state, State::Allocated { .. }) => b,
            _ => {
                return Err(Error::InvalidPointer {
                    ptr: addr,
                    reason: "not the start of an allocated block (freed twice, or never allocated)",
                })
            }
        };
        let State::Allocated { also_used_on } = std::mem::replace(&mut block.state, State::Free) else {
            unreachable!("checked above")
        };
        self.stats.allocated_bytes -= block.size;
        self.stats.freed_bytes_total += block.size;
        self.stats.active_blocks -= 1;
        self.stats.frees += 1;
        if also_used_on.is_empty() {
            self.make_free(addr);
        } else {
            let waits = also_used_on.into_iter().map(|s| (s, ticket(s))).collect();
            block.state = State::Pending { waits };
            self.pending.push(addr);
        }
        Ok(())
    }

    /// Marks the block at `addr` as used on `stream` as well.
    pub(crate) fn record_stream(&mut self, addr: u64, stream: StreamId) -> Result<()> {
        match self.blocks.get_mut(&addr) {
            Some(Block { stream: own, state: State::Allocated { also_used_on }, .. }) => {
                if *own != stream && !also_used_on.contains(&stream) {
                    also_used_on.push(stream);
                }
                Ok(())
            }
            _ => Err(Error::InvalidPointer { ptr: addr, reason: "not the start of an allocated block" }),
        }
    }

    /// The size of the allocated block at `addr`, if there is one.
    #[cfg(test)]
    pub(crate) fn block_size(&self, addr: u64) -> Option<u64> {
        match self.blocks.get(&addr) {
            Some(b) if matches!(b.state, State::Allocated { .. }) => Some(b.size),
            _ => None,
        }
    }

    /// Returns every wholly free segment to the heap; returns how many.
    pub(crate) fn empty_cache(&mut self, device: &(impl Device + ?Sized)) -> usize {
        self.release_cached(device)
    }

    fn out_of_memory(&mut self, requested: u64) -> Error {
        self.stats.ooms += 1;
        Error::OutOfMemory {
            device: self.device,
            requested,
            allocated: self.stats.allocated_bytes,
            reserved: self.stats.reserved_bytes,
            total: self.total(),
        }
    }

    fn take_free(&mut self, stream: StreamId, small: bool, size: u64) -> Option<u64> {
        let key = *self.free.range((stream, small, size, 0)..=(stream, small, u64::MAX, u64::MAX)).next()?;
        self.free.remove(&key);
        Some(key.3)
    }

    fn new_segment(
        &mut self,
        rounded: u64,
        stream: StreamId,
        small: bool,
        requested: u64,
        device: &(impl Device + ?Sized),
    ) -> Result<u64> {
        let len = if small { SMALL_SEGMENT } else { round_up(rounded, LARGE_SEGMENT_ROUND).unwrap_or(u64::MAX) };
        let start = match self.take_arena(len) {
            Some(start) => start,
            None => {
                if self.release_cached(device) > 0 {
                    self.stats.cache_flushes += 1;
                }
                match self.take_arena(len) {
                    Some(start) => start,
                    None => return Err(self.out_of_memory(requested)),
                }
            }
        };
        self.segments.insert(start, Segment { len, stream, small });
        self.blocks.insert(start, Block { size: len, segment: start, stream, small, state: State::Free });
        let stats = &mut self.stats;
        stats.reserved_bytes += len;
        stats.peak_reserved_bytes = stats.peak_reserved_bytes.max(stats.reserved_bytes);
        stats.segments += 1;
        stats.peak_segments = stats.peak_segments.max(stats.segments);
        Ok(start)
    }

    /// Splits the (unlisted, free) block at `addr` so that it is `size` bytes,
    /// if the remainder is worth keeping as a block of its own.
    fn split(&mut self, addr: u64, size: u64) {
        let block = self.blocks.get_mut(&addr).expect("block exists");
        let rest = block.size - size;
        let worth = if block.small { rest >= BLOCK_ALIGN } else { rest > SMALL_REQUEST };
        if !worth {
            return;
        }
        block.size = size;
        let tail =
            Block { size: rest, segment: block.segment, stream: block.stream, small: block.small, state: State::Free };
        self.free.insert((tail.stream, tail.small, rest, addr + size));
        self.blocks.insert(addr + size, tail);
    }

    /// Makes the block at `addr` free, merging it with free neighbours in its
    /// segment, and lists the result for reuse.
    fn make_free(&mut self, mut addr: u64) {
        let (segment, mut size) = {
            let b = self.blocks.get_mut(&addr).expect("block exists");
            b.state = State::Free;
            (b.segment, b.size)
        };
        if let Some((&prev, p)) = self.blocks.range(..addr).next_back() {
            if p.segment == segment && matches!(p.state, State::Free) && prev + p.size == addr {
                self.free.remove(&(p.stream, p.small, p.size, prev));
                size += p.size;
                self.blocks.remove(&addr);
                addr = prev;
            }
        }
        let next = addr + size;
        if let Some(n) = self.blocks.get(&next) {
            if n.segment == segment && matches!(n.state, State::Free) {
                self.free.remove(&(n.stream, n.small, n.size, next));
                size += n.size;
                self.blocks.remove(&next);
            }
        }
        let b = self.blocks.get_mut(&addr).expect("merged block exists");
        b.size = size;
        self.free.insert((b.stream, b.small, size, addr));
    }

    fn process_pending(&mut self, device: &(impl Device + ?Sized)) {
        let mut i = 0;
        while i < self.pending.len() {
            let addr = self.pending[i];
            let done = match &self.blocks[&addr].state {
                State::Pending { waits } => waits.iter().all(|&(s, t)| device.completed(s, t)),
                _ => unreachable!("pending list holds pending blocks"),
            };
            if done {
                self.pending.swap_remove(i);
                self.make_free(addr);
            } else {
                i += 1;
            }
        }
    }

    /// Returns the wholly free segments to the heap, after the device has
    /// drained its queued work (which may still use them, and whose end
    /// completes pending frees) and then discarded their pages.
    fn release_cached(&mut self, device: &(impl Device + ?Sized)) -> usize {
        if self.segments.is_empty() {
            return 0;
        }
        device.drain();
        self.process_pending(device);
        let idle: Vec<u64> = self
            .segments
            .iter()
            .filter(|(start, seg)| {
                let b = &self.blocks[start];
                matches!(b.state, State::Free) && b.size == seg.len
            })
            .map(|(&start, _)| start)
            .collect();
        for &start in &idle {
            let seg = self.segments.remove(&start).expect("segment exists");
            self.blocks.remove(&start);
            self.free.remove(&(seg.stream, seg.small, seg.len, start));
            device.discard(start, seg.len);
            self.give_arena(start, seg.len);
            self.stats.reserved_bytes -= seg.len;
            self.stats.segments -= 1;
        }
        idle.len()
    }

    fn take_arena(&mut self, len: u64) -> Option<u64> {
        let (&start, &have) = self.arena.iter().find(|(_, &have)| have >= len)?;
        self.arena.remove(&start);
        if have > len {
            self.arena.insert(start + len, have - len);
        }
        Some(start)
    }

    fn give_arena(&mut self, mut start: u64, mut len: u64) {
        if let Some((&prev, &plen)) = self.arena.range(..start).next_back() {
            if prev + plen == start {
                self.arena.remove(&prev);
                start = prev;
                len += plen;
            }
        }
        if let Some(next_len) = self.arena.remove(&(start + len)) {
            len += next_len;
        }
        self.arena.insert(start, len);
    }

    /// Checks every invariant of the allocator's bookkeeping; panics on a breach.
    #[cfg(test)]
    pub(crate) fn assert_valid(&self) {
        let (heap_start, heap_end) = self.heap;
        // The heap is exactly tiled by arena ranges and segments.
        let mut ranges: Vec<(u64, u64, bool)> = self.arena.iter().map(|(&s, &l)| (s, l, false)).collect();
        ranges.extend(self.segments.iter().map(|(&s, seg)| (s, seg.len, true)));
        ranges.sort();
        let mut at = heap_start;
        let mut prev_arena = false;
        for &(start, len, is_segment) in &ranges {
            assert_eq!(start, at, "heap tiling has a gap or overlap at {start:#x}");
            assert!(len > 0);
            assert!(is_segment || !prev_arena, "arena ranges not coalesced at {start:#x}");
            prev_arena = !is_segment;
            at = start + len;
        }
        assert_eq!(at, heap_end, "heap tiling does not end at the heap's end");

        // Blocks tile each segment, share its stream and class, and free blocks are coalesced.
        let mut allocated = 0;
        let mut active = 0;
        let mut free_blocks = BTreeSet::new();
        let mut pending = BTreeSet::new();
        for (&start, seg) in &self.segments {
            let mut at = start;
            let mut prev_free = false;
            for (&addr, b) in self.blocks.range(start..start + seg.len) {
                assert_eq!(addr, at, "blocks of segment {start:#x} have a gap at {addr:#x}");
                assert_eq!(addr % BLOCK_ALIGN, 0);
                assert_eq!(b.segment, start);
                assert_eq!((b.stream, b.small), (seg.stream, seg.small));
                let is_free = matches!(b.state, State::Free);
                assert!(!(is_free && prev_free), "adjacent free blocks at {addr:#x}");
                prev_free = is_free;
                match b.state {
                    State::Free => {
                        free_blocks.insert((b.stream, b.small, b.size, addr));
                    }
                    State::Allocated { .. } => {
                        allocated += b.size;
                        active += 1;
                    }
                    State::Pending { .. } => {
                        pending.insert(addr);
                    }
                }
                at = addr + b.size;
            }
            assert_eq!(at, start + seg.len, "blocks do not fill segment {start:#x}");
        }
        let block_count: usize =
            self.segments.keys().map(|&s| self.blocks.range(s..s + self.segments[&s].len).count()).sum();
        assert_eq!(block_count, self.blocks.len(), "a block lies outside every segment");
        assert_eq!(free_blocks, self.free, "free list differs from the free blocks");
        assert_eq!(pending, self.pending.iter().copied().collect(), "pending list differs");
        assert_eq!(self.stats.allocated_bytes, allocated);
        assert_eq!(self.stats.active_blocks, active);
        assert_eq!(self.stats.reserved_bytes, self.segments.values().map(|s| s.len).sum::<u64>());
        assert_eq!(self.stats.segments, self.segments.len() as u64);
        assert!(self.stats.peak_allocated_bytes >= self.stats.allocated_bytes);
        assert!(self.stats.peak_reserved_bytes >= self.stats.reserved_bytes);
        assert!(self.stats.peak_active_blocks >= self.stats.active_blocks);
        assert!(self.stats.peak_segments >= self.stats.segments);
        assert!(self.stats.allocated_bytes_total >= self.stats.freed_bytes_total);
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use proptest::prelude::*;

    use super::*;

    const HEAP: (u64, u64) = (16 << 20, 48 << 20);
    const DONE: &dyn Fn(StreamId, u64) -> bool = &|_, _| true;
    const NO_TICKET: &dyn Fn(StreamId) -> u64 = &|_| 0;

    fn allocator() -> Allocator {
        Allocator::new(3, HEAP.0, HEAP.1)
    }

    #[test]
    fn blocks_are_aligned_and_freed_blocks_are_reused() {
        let mut a = allocator();
        let x = a.allocate(100, 0, DONE).unwrap();
        let y = a.allocate(1000, 0, DONE).unwrap();
        assert_eq!(x % BLOCK_ALIGN, 0);
        assert_eq!(y % BLOCK_ALIGN, 0);
        assert_eq!(a.block_size(y), Some(1024));
        a.free(y, NO_TICKET).unwrap();
        assert_eq!(a.allocate(1000, 0, DONE).unwrap(), y, "the cached block is handed out again");
        assert_eq!(a.stats().segments, 1);
        a.assert_valid();
    }

    #[test]
    fn a_freed_block_is_not_reused_by_another_stream() {
        let mut a = allocator();
        let x = a.allocate(4096, 0, DONE).unwrap();
        a.free(x, NO_TICKET).unwrap();
        let y = a.allocate(4096, 1, DONE).unwrap();
        assert_ne!(x, y);
        assert_eq!(a.stats().segments, 2);
        a.assert_valid();
    }

    #[test]
    fn a_block_used_on_another_stream_waits_for_that_stream() {
        let mut a = allocator();
        let x = a.allocate(4096, 0, DONE).unwrap();
        a.record_stream(x, 1).unwrap();
        a.free(x, &|s| if s == 1 { 7 } else { 0 }).unwrap();
        let stream1_done = Cell::new(false);
        let progress = |s: StreamId, t: u64| s != 1 || (stream1_done.get() && t <= 7);
        let y = a.allocate(4096, 0, &progress).unwrap();
        assert_ne!(x, y, "reused while stream 1 may still use it");
        a.assert_valid();
        stream1_done.set(true);
        let z = a.allocate(4096, 0, &progress).unwrap();
        assert_eq!(z, x, "reused once stream 1 has passed the free");
        a.assert_valid();
    }

    /// A device that records what the allocator asked of it.
    #[derive(Default)]
    struct Recorder {
        drained: Cell<u32>,
        discarded: std::cell::RefCell<Vec<(u64, u64)>>,
    }

    impl Device for Recorder {
        fn completed(&self, _: StreamId, _: u64) -> bool {
            true
        }
        fn drain(&self) {
            self.drained.set(self.drained.get() + 1);
        }
        fn discard(&self, start: u64, len: u64) {
            assert!(self.drained.get() > 0, "pages discarded before the device drained its queued work");
            self.discarded.borrow_mut().push((start, len));
        }
    }

    #[test]
    fn released_segments_are_drained_then_discarded() {
        let mut a = allocator();
        let device = Recorder::default();
        let x = a.allocate(3 << 20, 0, &device).unwrap();
        let y = a.allocate(100, 1, &device).unwrap();
        a.free(x, NO_TICKET).unwrap();
        assert_eq!(a.empty_cache(&device), 1, "only the wholly free segment goes");
        assert_eq!(*device.discarded.borrow(), vec![(x, 4 << 20)]);
        a.free(y, NO_TICKET).unwrap();
        // A request that only fits after a flush drains and discards too.
        let big = a.allocate(30 << 20, 0, &device).unwrap();
        assert_eq!(device.discarded.borrow().len(), 2);
        assert_eq!(device.drained.get(), 2);
        assert_eq!(a.stats().cache_flushes, 1);
        a.free(big, NO_TICKET).unwrap();
        a.assert_valid();
    }

    #[test]
    fn running_totals_and_count_peaks_are_kept_and_reset() {
        let mut a = allocator();
        let blocks: Vec<u64> = (0..4).map(|_| a.allocate(1000, 0, DONE).unwrap()).collect();
        for &b in &blocks[1..] {
            a.free(b, NO_TICKET).unwrap();
        }
        let s = a.stats();
        assert_eq!((s.allocated_bytes_total, s.freed_bytes_total), (4 * 1024, 3 * 1024));
        assert_eq!((s.active_blocks, s.peak_active_blocks, s.peak_segments), (1, 4, 1));
        a.reset_peaks();
        assert_eq!(a.stats().peak_active_blocks, 1);
        a.reset_accumulated();
        let s = a.stats();
        assert_eq!((s.allocated_bytes_total, s.freed_bytes_total, s.allocations, s.frees), (0, 0, 0, 0));
        assert_eq!(s.allocated_bytes, 1024, "current values are not running totals");
        a.assert_valid();
    }

    #[test]
    fn double_free_is_an_error() {
        let mut a = allocator();
        let x = a.allocate(10, 0, DONE).unwrap();
        a.free(x, NO_TICKET).unwrap();
        assert!(matches!(a.free(x, NO_TICKET), Err(Error::InvalidPointer { .. })));
        assert!(matches!(a.free(x + 512, NO_TICKET), Err(Error::InvalidPointer { .. })));
    }

    #[test]
    fn empty_cache_returns_segments_and_stats_return_to_baseline() {
        let mut a = allocator();
        let blocks: Vec<u64> = (0..20).map(|i| a.allocate(1 + i * 50_000, i as u32 % 2, DONE).unwrap()).collect();
        assert!(a.stats().peak_allocated_bytes > 0);
        for b in blocks {
            a.free(b, NO_TICKET).unwrap();
        }
        assert_eq!(a.stats().allocated_bytes, 0);
        assert!(a.stats().reserved_bytes > 0, "freed blocks stay cached");
        a.empty_cache(DONE);
        let s = a.stats();
        assert_eq!((s.reserved_bytes, s.segments, s.active_blocks), (0, 0, 0));
        assert_eq!((s.allocations, s.frees), (20, 20));
        a.reset_peaks();
        assert_eq!(a.stats().peak_reserved_bytes, 0);
        a.assert_valid();
    }

    #[test]
    fn out_of_memory_flushes_the_cache_first_then_reports_the_numbers() {
        let mut a = allocator();
        let x = a.allocate(20 << 20, 0, DONE).unwrap();
        a.free(x, NO_TICKET).unwrap();
        // 20 MiB is cached for stream 0; stream 1 needs it back.
        let y = a.allocate(24 << 20, 1, DONE).unwrap();
        assert_eq!(a.stats().cache_flushes, 1);
        let err = a.allocate(16 << 20, 1, DONE).unwrap_err();
        assert_eq!(
            err.to_string(),
            "out of memory on openreg:3: tried to allocate 16.0 MiB; 24.0 MiB of 32.0 MiB reserved (24.0 MiB allocated, 8.0 MiB free)"
        );
        assert_eq!(a.stats().ooms, 1);
        a.free(y, NO_TICKET).unwrap();
        a.allocate(16 << 20, 1, DONE).unwrap();
        a.assert_valid();
    }

    #[derive(Debug, Clone)]
    enum Op {
        Alloc { size: u64, stream: StreamId },
        Free { pick: usize },
        Record { pick: usize, stream: StreamId },
        Progress,
        EmptyCache,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (1u64..3_000_000, 0u32..3).prop_map(|(size, stream)| Op::Alloc { size, stream }),
            3 => any::<usize>().prop_map(|pick| Op::Free { pick }),
            1 => (any::<usize>(), 0u32..3).prop_map(|(pick, stream)| Op::Record { pick, stream }),
            1 => Just(Op::Progress),
            1 => Just(Op::EmptyCache),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Random alloc/free/record/empty-cache sequences keep every invariant,
        /// never hand out overlapping live blocks, and never reuse a pending block early.
        #[test]
        fn random_sequences_keep_the_allocator_valid(ops in proptest::collection::vec(op(), 1..200)) {
            let mut a = allocator();
            // (address, size, stream, used on another stream too)
            let mut live: Vec<(u64, u64, StreamId, bool)> = Vec::new();
            // Freed blocks another stream may still use: (address, size, ticket).
            let mut pending: Vec<(u64, u64, u64)> = Vec::new();
            let ticket = Cell::new(1u64);
            let completed = Cell::new(0u64);
            for op in ops {
                let progress = |_: StreamId, t: u64| t <= completed.get();
                match op {
                    Op::Alloc { size, stream } => match a.allocate(size, stream, &progress) {
                        Ok(addr) => {
                            prop_assert!(addr >= HEAP.0 && addr + size <= HEAP.1);
                            for &(other, len, _, _) in &live {
                                prop_assert!(addr + size <= other || other + len <= addr, "overlap");
                            }
                            for &(other, len, _) in &pending {
                                prop_assert!(addr + size <= other || other + len <= addr, "pending block reused early");
                            }
                            live.push((addr, size, stream, false));
                        }
                        Err(Error::OutOfMemory { requested, .. }) => prop_assert_eq!(requested, size),
                        Err(e) => prop_assert!(false, "unexpected error {e}"),
                    },
                    Op::Free { pick } if !live.is_empty() => {
                        let (addr, size, _, shared) = live.swap_remove(pick % live.len());
                        ticket.set(ticket.get() + 1);
                        a.free(addr, &|_| ticket.get()).unwrap();
                        if shared {
                            pending.push((addr, size, ticket.get()));
                        }
                    }
                    Op::Record { pick, stream } if !live.is_empty() => {
                        let block = pick % live.len();
                        a.record_stream(live[block].0, stream).unwrap();
                        live[block].3 |= stream != live[block].2;
                    }
                    Op::Progress => {
                        completed.set(ticket.get());
                        pending.clear();
                    }
                    Op::EmptyCache => {
                        a.empty_cache(&progress);
                    }
                    _ => {}
                }
                a.assert_valid();
            }
        }
    }
}
