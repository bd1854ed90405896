//! Device addresses: the host address range that stands for device memory.
//!
//! See the crate docs ("Device addresses") for the invariant. The runtime
//! reserves one range of host address space, `span` bytes per device, with no
//! access rights and no backing memory. Device `d`'s byte at offset `o` has the
//! device address `base + d * span + o`. Nothing is ever mapped there, so a host
//! dereference of a device address faults at once; only the runtime's copy and
//! launch paths turn an address back into an offset in the device's wasm memory.

use crate::error::{Error, Result};

/// A reserved, inaccessible host address range divided among the devices.
#[derive(Debug)]
pub(crate) struct AddressSpace {
    base: u64,
    span: u64,
    devices: u32,
}

impl AddressSpace {
    /// Reserves `devices * span` bytes of inaccessible host address space.
    pub(crate) fn reserve(devices: u32, span: u64) -> Result<AddressSpace> {
        let len = span.checked_mul(u64::from(devices)).ok_or_else(|| Error::Config {
            var: "OPENREG_DEVICE_MEMORY",
            value: span.to_string(),
            reason: "device address space does not fit the host".into(),
        })?;
        let base = sys::reserve(len).map_err(|reason| Error::DeviceLost {
            device: 0,
            reason: format!("cannot reserve {len} bytes of host address space for device addresses: {reason}"),
        })?;
        Ok(AddressSpace { base, span, devices })
    }

    /// The device address of `offset` in `device`'s memory.
    pub(crate) fn address(&self, device: u32, offset: u64) -> u64 {
        debug_assert!(device < self.devices && offset < self.span);
        self.base + u64::from(device) * self.span + offset
    }

    /// The device and offset an address stands for, if it is a device address.
    pub(crate) fn decode(&self, address: u64) -> Option<(u32, u64)> {
        let rel = address.checked_sub(self.base)?;
        let device = rel / self.span;
        if device >= u64::from(self.devices) {
            return None;
        }
        Some((device as u32, rel % self.span))
    }
}

impl Drop for AddressSpace {
    fn drop(&mut self) {
        sys::release(self.base, self.span * u64::from(self.devices));
    }
}

#[cfg(unix)]
mod sys {
    pub(super) fn reserve(len: u64) -> Result<u64, String> {
        let len = usize::try_from(len).map_err(|e| e.to_string())?;
        // SAFETY: an anonymous PROT_NONE mapping at an address of the kernel's
        // choosing touches no existing memory; the result is checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error().to_string());
        }
        Ok(ptr as u64)
    }

    pub(super) fn release(base: u64, len: u64) {
        // SAFETY: `base..base+len` is exactly the mapping made by `reserve`, and
        // nothing was ever mapped inside it or handed out as a host pointer.
        unsafe {
            libc::munmap(base as *mut libc::c_void, len as usize);
        }
    }
}

#[cfg(windows)]
mod sys {
    use windows_sys::Win32::System::Memory::{VirtualAlloc, VirtualFree, MEM_RELEASE, MEM_RESERVE, PAGE_NOACCESS};

    pub(super) fn reserve(len: u64) -> Result<u64, String> {
        let len = usize::try_from(len).map_err(|e| e.to_string())?;
        // SAFETY: reserving (not committing) fresh address space touches no memory.
        let ptr = unsafe { VirtualAlloc(std::ptr::null(), len, MEM_RESERVE, PAGE_NOACCESS) };
        if ptr.is_null() {
            return Err(std::io::Error::last_os_error().to_string());
        }
        Ok(ptr as u64)
    }

    pub(super) fn release(base: u64, _len: u64) {
        // SAFETY: `base` is the start of the reservation made by `reserve`.
        unsafe {
            VirtualFree(base as *mut core::ffi::c_void, 0, MEM_RELEASE);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip_and_name_their_device() {
        let space = AddressSpace::reserve(3, 1 << 30).unwrap();
        let a = space.address(2, 12345);
        assert_eq!(space.decode(a), Some((2, 12345)));
        assert_eq!(space.decode(space.address(0, 0)), Some((0, 0)));
        assert_eq!(space.decode(0), None);
        assert_eq!(space.decode(space.address(2, (1 << 30) - 1) + 1), None);
    }
}
