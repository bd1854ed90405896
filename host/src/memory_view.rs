//! The host's view of a device's linear memory: the one place where the
//! runtime touches device bytes from Rust.
//!
//! A wasmtime memory created with a full-size reservation and
//! `memory_may_move(false)` keeps its base for its whole life (crate docs,
//! "Device addresses"). A [`MemoryView`] records that base and length. Every
//! method checks its byte range against the length; the `unsafe` ones also take
//! host pointers whose validity only the caller can promise.
//!
//! Data races: every task that touches a device's memory (a kernel, a copy)
//! runs while holding that device's execution lock (`device.rs`), so a copy
//! never races a kernel of its own device. A peer copy runs on the executor of
//! the stream it was queued on and holds the execution locks of both devices
//! (taken in device order), so it never races the other device's kernels or
//! copies either. Ordering it after the other device's queued work is the
//! caller's job (events), as in CUDA.

use crate::error::{Error, Result};

/// A host pointer carried to an executor thread inside a queued copy.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HostPtr(pub(crate) *mut u8);

// SAFETY: a HostPtr is only dereferenced by a copy whose enqueuer promised
// (through an `unsafe` API, or by blocking until the copy is done) that the
// pointee stays valid and unshared until the copy has run.
unsafe impl Send for HostPtr {}

/// Base and length of one device's linear memory.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MemoryView {
    base: *mut u8,
    len: u64,
    device: u32,
}

// SAFETY: the view is an address and a length; access through it is governed
// by the method contracts above, not by which thread holds the view.
unsafe impl Send for MemoryView {}
// SAFETY: as for Send.
unsafe impl Sync for MemoryView {}

impl MemoryView {
    /// # Safety
    /// `base..base + len` must be the linear memory of a wasmtime memory that
    /// never moves and that outlives every use of this view.
    pub(crate) unsafe fn new(base: *mut u8, len: u64, device: u32) -> MemoryView {
        MemoryView { base, len, device }
    }

    /// Checks that `offset..offset + len` lies inside the memory.
    pub(crate) fn check(&self, offset: u64, len: u64) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::OutOfBounds { device: self.device, offset, len, start: 0, end: self.len }),
        }
    }

    fn at(&self, offset: u64, len: u64) -> Result<*mut u8> {
        self.check(offset, len)?;
        // SAFETY: offset + len <= self.len, so the result stays inside the memory.
        Ok(unsafe { self.base.add(offset as usize) })
    }

    /// Copies `len` host bytes from `src` to `offset`.
    ///
    /// # Safety
    /// `src` must be valid for `len` reads and must not point into this memory.
    /// Only the device's executor may call this.
    pub(crate) unsafe fn write(&self, offset: u64, src: *const u8, len: u64) -> Result<()> {
        let dst = self.at(offset, len)?;
        // SAFETY: dst is in bounds (checked), src is valid by the caller's promise,
        // and the two do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len as usize) };
        Ok(())
    }

    /// Copies `len` bytes at `offset` to the host buffer `dst`.
    ///
    /// # Safety
    /// `dst` must be valid for `len` writes, unaliased, and not point into this memory.
    /// Only the device's executor may call this.
    pub(crate) unsafe fn read(&self, offset: u64, dst: *mut u8, len: u64) -> Result<()> {
        let src = self.at(offset, len)?;
        // SAFETY: src is in bounds (checked), dst is valid by the caller's promise.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len as usize) };
        Ok(())
    }

    /// Copies `len` bytes from `src` to `dst` inside this memory (overlap allowed).
    ///
    /// # Safety
    /// Only the device's executor may call this (no kernel may run concurrently).
    pub(crate) unsafe fn copy_within(&self, dst: u64, src: u64, len: u64) -> Result<()> {
        let from = self.at(src, len)?;
        let to = self.at(dst, len)?;
        // SAFETY: both ranges are in bounds (checked); `copy` allows overlap.
        unsafe { std::ptr::copy(from, to, len as usize) };
        Ok(())
    }

    /// Copies `len` bytes at `src` in this memory to `dst` in `peer`'s memory.
    ///
    /// # Safety
    /// Only the executor of one of the two devices may call this, and `peer`
    /// must be another device's memory (the two never overlap).
    pub(crate) unsafe fn copy_to_peer(&self, src: u64, peer: &MemoryView, dst: u64, len: u64) -> Result<()> {
        let from = self.at(src, len)?;
        let to = peer.at(dst, len)?;
        // SAFETY: both ranges are in bounds of two distinct memories.
        unsafe { std::ptr::copy_nonoverlapping(from, to, len as usize) };
        Ok(())
    }

    /// Whether `offset..offset + len` holds only zeros; if not, zeros it.
    /// `offset` and `len` are multiples of 8. It runs after every kernel, so
    /// it ORs whole words without branching (the compiler vectorizes it).
    ///
    /// # Safety
    /// Only the device's executor may call this (no kernel may run concurrently).
    pub(crate) unsafe fn clear_if_dirty(&self, offset: u64, len: u64) -> Result<bool> {
        assert!(offset.is_multiple_of(8) && len.is_multiple_of(8));
        let at = self.at(offset, len)?;
        // SAFETY: in bounds (checked) and 8-byte aligned (the base is
        // page-aligned, the offset a multiple of 8); no kernel or copy touches
        // the memory now (caller's promise), so we may view it as words.
        let words = unsafe { std::slice::from_raw_parts_mut(at.cast::<u64>(), (len / 8) as usize) };
        let dirty = words.iter().fold(0, |acc, &w| acc | w) != 0;
        if dirty {
            words.fill(0);
        }
        Ok(dirty)
    }

    /// Gives the whole pages inside `offset..offset + len` back to the
    /// operating system: they stop counting as resident memory and read as
    /// zeros (on Linux; elsewhere their contents become undefined) the next
    /// time they are touched. The allocator calls this for segments it
    /// releases, which no work uses any more.
    pub(crate) fn discard(&self, offset: u64, len: u64) -> Result<()> {
        self.check(offset, len)?;
        let start = (self.base as u64 + offset).next_multiple_of(sys::PAGE);
        let end = (self.base as u64 + offset + len) / sys::PAGE * sys::PAGE;
        if end > start {
            // SAFETY: [start, end) lies inside this memory (checked above), is
            // page-aligned, and holds no data anyone still needs: the caller
            // releases it. The host holds no references into device memory.
            unsafe { sys::discard(start as *mut u8, (end - start) as usize) };
        }
        Ok(())
    }
}

mod sys {
    pub(super) const PAGE: u64 = 4096;

    /// # Safety
    /// `ptr..ptr + len` must be page-aligned pages of a live device memory whose contents may be lost.
    #[cfg(unix)]
    pub(super) unsafe fn discard(ptr: *mut u8, len: usize) {
        #[cfg(target_os = "linux")]
        const ADVICE: libc::c_int = libc::MADV_DONTNEED;
        #[cfg(not(target_os = "linux"))]
        const ADVICE: libc::c_int = libc::MADV_FREE;
        // SAFETY: by the caller's promise; the advice only drops page contents.
        // A failure leaves the pages resident, which is harmless.
        unsafe { libc::madvise(ptr.cast(), len, ADVICE) };
    }

    /// # Safety
    /// As above.
    #[cfg(windows)]
    pub(super) unsafe fn discard(ptr: *mut u8, len: usize) {
        use windows_sys::Win32::System::Memory::{VirtualAlloc, MEM_RESET, PAGE_READWRITE};
        // SAFETY: by the caller's promise; MEM_RESET keeps the pages committed
        // and only tells the system their contents are no longer needed.
        unsafe { VirtualAlloc(ptr.cast(), len, MEM_RESET, PAGE_READWRITE) };
    }
}
