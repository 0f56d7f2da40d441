//! Device-properties entry points and the two `hipDeviceProp_t` layouts, declared by hand.
//!
//! From ROCm 6.0 the header maps `hipGetDeviceProperties` to `hipGetDevicePropertiesR0600`, which
//! fills a larger struct (1472 bytes); the library still exports the plain
//! `hipGetDeviceProperties` (and `hipGetDevicePropertiesR0000`) with the pre-6.0 layout (792
//! bytes). Only the architecture name (`gcnArchName`, e.g. `gfx90a:sramecc+:xnack-`) is read
//! from these structs; every number comes from `hipDeviceGetAttribute`, whose values did not
//! change between ROCm 5.2 and 7.x.
//!
//! Layout facts (x86_64 Linux), checked against the ROCm 6.0 and current `hip_runtime_api.h`
//! (R0600) and by compiling Debian's ROCm 5.2 header (R0000, which bindgen also checks below):
//!
//! | struct | `sizeof` | `gcnArchName` offset |
//! |---|---|---|
//! | `hipDeviceProp_tR0600` | 1472 | 1160 |
//! | `hipDeviceProp_tR0000` (= ROCm 5 `hipDeviceProp_t`) | 792 | 396 |

use std::ffi::{c_int, c_void};

use crate::bindings::hip::{hipDeviceProp_t, hipError_t};
use crate::table::api_table;

/// `sizeof(hipDeviceProp_tR0600)`.
pub const R0600_SIZE: usize = 1472;
/// Offset of `gcnArchName` (`char[256]`) in `hipDeviceProp_tR0600`.
pub const R0600_GCN_ARCH_NAME_OFFSET: usize = 1160;
/// `sizeof(hipDeviceProp_tR0000)`.
pub const R0000_SIZE: usize = std::mem::size_of::<hipDeviceProp_t>();
/// Offset of `gcnArchName` in the pre-6.0 layout.
pub const R0000_GCN_ARCH_NAME_OFFSET: usize = std::mem::offset_of!(hipDeviceProp_t, gcnArchName);
/// Length of `gcnArchName`.
pub const GCN_ARCH_NAME_LEN: usize = 256;
/// Size of the zeroed buffer handed to any properties entry point: larger than every known
/// layout, so a runtime that writes a bigger struct than documented cannot overrun it.
pub const PROPS_BUFFER_SIZE: usize = 4096;

const _: () = assert!(R0000_SIZE == 792 && R0000_GCN_ARCH_NAME_OFFSET == 396);
const _: () = assert!(R0600_GCN_ARCH_NAME_OFFSET + GCN_ARCH_NAME_LEN <= R0600_SIZE);
const _: () = assert!(R0600_SIZE <= PROPS_BUFFER_SIZE && R0000_SIZE <= PROPS_BUFFER_SIZE);

api_table! {
    /// The device-properties entry points; which ones exist depends on the ROCm release.
    pub struct PropsApi;
    required extern "C" {
    }
    optional extern "C" {
        pub fn hipGetDevicePropertiesR0600(prop: *mut c_void, device: c_int) -> hipError_t;
        pub fn hipGetDevicePropertiesR0000(prop: *mut c_void, device: c_int) -> hipError_t;
        pub fn hipGetDeviceProperties(prop: *mut c_void, device: c_int) -> hipError_t;
    }
}

/// Which entry point and layout to use for the architecture name.
#[derive(Clone, Copy, Debug)]
pub struct PropsEntry {
    /// The function to call with a [`PROPS_BUFFER_SIZE`]-byte zeroed buffer.
    pub func: unsafe extern "C" fn(*mut c_void, c_int) -> hipError_t,
    /// Where `gcnArchName` sits in what it writes.
    pub arch_name_offset: usize,
}

impl PropsApi {
    /// Picks the entry point: R0600 when exported, else the explicit R0000 name, else the plain
    /// name, which only pre-6.0 runtimes (where it is the only one) and 6.x+ runtimes (where it
    /// is the R0000 compatibility entry) export, in both cases with the R0000 layout.
    pub fn arch_name_entry(&self) -> Option<PropsEntry> {
        if let Some(func) = self.hipGetDevicePropertiesR0600 {
            return Some(PropsEntry {
                func,
                arch_name_offset: R0600_GCN_ARCH_NAME_OFFSET,
            });
        }
        self.hipGetDevicePropertiesR0000
            .or(self.hipGetDeviceProperties)
            .map(|func| PropsEntry {
                func,
                arch_name_offset: R0000_GCN_ARCH_NAME_OFFSET,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe extern "C" fn fake(_: *mut c_void, _: c_int) -> hipError_t {
        hipError_t::hipSuccess
    }

    #[test]
    fn prefers_r0600_then_r0000() {
        let none = PropsApi {
            hipGetDevicePropertiesR0600: None,
            hipGetDevicePropertiesR0000: None,
            hipGetDeviceProperties: None,
        };
        assert!(none.arch_name_entry().is_none());
        let old = PropsApi {
            hipGetDeviceProperties: Some(fake),
            ..none
        };
        assert_eq!(old.arch_name_entry().map(|e| e.arch_name_offset), Some(396));
        let new = PropsApi {
            hipGetDevicePropertiesR0600: Some(fake),
            ..old
        };
        assert_eq!(
            new.arch_name_entry().map(|e| e.arch_name_offset),
            Some(1160)
        );
    }
}
