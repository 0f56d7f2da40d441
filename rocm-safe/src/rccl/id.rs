//! [`UniqueId`]: the 128 bytes rank 0 creates and every rank passes to `ncclCommInitRank`.

use std::fmt;
use std::str::FromStr;

use rocm_sys::rccl::{ncclUniqueId, NCCL_UNIQUE_ID_BYTES};

use crate::error::{Result, RocmError};
use crate::rendezvous::Rendezvous;
use crate::runtime::Runtime;

use super::error::RcclError;

/// An RCCL unique id (`ncclUniqueId`): created once by rank 0 with [`UniqueId::new`], shared
/// with every rank (as bytes, as 256 hex digits in an environment variable, or through
/// [`crate::rendezvous`]), then passed to [`super::Communicator::init_rank`].
///
/// It holds the address of rank 0's bootstrap socket; it is not a secret, but anyone holding it
/// can join the communicator while it is being created.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct UniqueId([u8; NCCL_UNIQUE_ID_BYTES]);

impl UniqueId {
    /// Size of an id in bytes (128).
    pub const BYTES: usize = NCCL_UNIQUE_ID_BYTES;

    /// Asks RCCL for a new id (`ncclGetUniqueId`). Call it on one rank only.
    ///
    /// RCCL opens its bootstrap listening socket here; `NCCL_SOCKET_IFNAME` picks the network
    /// interface other hosts reach it on.
    pub fn new(rt: &Runtime) -> Result<UniqueId> {
        let rccl = rt.rccl()?;
        let mut raw = ncclUniqueId::default();
        // SAFETY: `raw` is a valid, writable ncclUniqueId (128 bytes) for the call to fill.
        let code = unsafe { (rccl.ncclGetUniqueId)(&mut raw) };
        if !code.is_success() {
            return Err(RcclError::call(&rccl, "ncclGetUniqueId", -1, code, None).into());
        }
        Ok(UniqueId::from_raw(&raw))
    }

    /// Shares an id through a rendezvous: rank 0 creates it with [`UniqueId::new`] and
    /// publishes it under `key`; the other ranks wait for it (up to the rendezvous timeout).
    pub fn exchange(rt: &Runtime, rdzv: &Rendezvous, key: &str) -> Result<UniqueId> {
        let bytes = rdzv.share::<RocmError>(key, || Ok(UniqueId::new(rt)?.to_bytes().to_vec()))?;
        UniqueId::from_bytes(&bytes)
    }

    /// The id's 128 bytes.
    pub fn to_bytes(&self) -> [u8; NCCL_UNIQUE_ID_BYTES] {
        self.0
    }

    /// The id's bytes, borrowed.
    pub fn as_bytes(&self) -> &[u8; NCCL_UNIQUE_ID_BYTES] {
        &self.0
    }

    /// Rebuilds an id from exactly 128 bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<UniqueId> {
        let array: [u8; NCCL_UNIQUE_ID_BYTES] =
            bytes.try_into().map_err(|_| RcclError::BadUniqueId {
                detail: format!(
                    "got {} bytes, an id has {NCCL_UNIQUE_ID_BYTES}",
                    bytes.len()
                ),
            })?;
        Ok(UniqueId(array))
    }

    /// The id as 256 lowercase hex digits (for an environment variable or a command line).
    pub fn to_hex(&self) -> String {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut s = String::with_capacity(2 * NCCL_UNIQUE_ID_BYTES);
        for b in self.0 {
            s.push(char::from(DIGITS[usize::from(b >> 4)]));
            s.push(char::from(DIGITS[usize::from(b & 0xf)]));
        }
        s
    }

    /// Parses 256 hex digits (either case, surrounding whitespace ignored).
    pub fn from_hex(text: &str) -> Result<UniqueId> {
        let text = text.trim();
        let bad = |detail: String| RocmError::from(RcclError::BadUniqueId { detail });
        if text.len() != 2 * NCCL_UNIQUE_ID_BYTES {
            return Err(bad(format!(
                "got {} characters, an id is {} hex digits",
                text.len(),
                2 * NCCL_UNIQUE_ID_BYTES
            )));
        }
        let mut out = [0u8; NCCL_UNIQUE_ID_BYTES];
        for (i, pair) in text.as_bytes().chunks_exact(2).enumerate() {
            let digit = |c: u8| {
                char::from(c).to_digit(16).ok_or_else(|| {
                    bad(format!(
                        "{:?} at offset {} is not a hex digit",
                        char::from(c),
                        2 * i
                    ))
                })
            };
            let value = digit(pair[0])? * 16 + digit(pair[1])?;
            out[i] = u8::try_from(value).map_err(|_| bad("digit out of range".into()))?;
        }
        Ok(UniqueId(out))
    }

    /// Reads the id from an environment variable holding its hex form.
    pub fn from_env(var: &str) -> Result<UniqueId> {
        match std::env::var(var) {
            Ok(text) => Self::from_hex(&text),
            Err(e) => Err(RcclError::BadUniqueId {
                detail: format!("${var} is not usable ({e})"),
            }
            .into()),
        }
    }

    /// Converts from the C type.
    pub fn from_raw(raw: &ncclUniqueId) -> UniqueId {
        // `c_char` is `i8` or `u8` depending on the target: reinterpret each byte.
        UniqueId(raw.internal.map(|c| c as u8))
    }

    /// Converts to the C type.
    pub fn to_raw(&self) -> ncclUniqueId {
        ncclUniqueId {
            internal: self.0.map(|b| b as std::ffi::c_char),
        }
    }
}

impl FromStr for UniqueId {
    type Err = RocmError;
    fn from_str(s: &str) -> Result<Self> {
        Self::from_hex(s)
    }
}

impl fmt::Display for UniqueId {
    /// The hex form, as [`UniqueId::to_hex`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex = self.to_hex();
        write!(f, "UniqueId({}..)", &hex[..16])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn sample() -> UniqueId {
        let mut bytes = [0u8; 128];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(37).wrapping_add(200);
        }
        UniqueId::from_bytes(&bytes).unwrap()
    }

    #[test]
    fn bytes_round_trip() {
        let id = sample();
        assert_eq!(UniqueId::from_bytes(&id.to_bytes()).unwrap(), id);
        assert_eq!(id.as_bytes().len(), UniqueId::BYTES);
        for len in [0, 127, 129] {
            let e = UniqueId::from_bytes(&vec![0; len]).unwrap_err();
            assert!(e.to_string().contains(&format!("got {len} bytes")), "{e}");
        }
    }

    #[test]
    fn hex_round_trip() {
        let id = sample();
        let hex = id.to_hex();
        assert_eq!(hex.len(), 256);
        assert!(hex.starts_with("c8ed12"), "{hex}");
        assert_eq!(UniqueId::from_hex(&hex).unwrap(), id);
        assert_eq!(
            UniqueId::from_hex(&format!(" {}\n", hex.to_uppercase())).unwrap(),
            id
        );
        assert_eq!(hex.parse::<UniqueId>().unwrap(), id);
        assert_eq!(id.to_string(), hex);
        assert_eq!(format!("{id:?}"), format!("UniqueId({}..)", &hex[..16]));
    }

    #[test]
    fn bad_hex_is_a_typed_error() {
        let e = UniqueId::from_hex("abc").unwrap_err();
        assert!(e.to_string().contains("got 3 characters"), "{e}");
        let mut hex = sample().to_hex();
        hex.replace_range(10..11, "g");
        let e = UniqueId::from_hex(&hex).unwrap_err();
        assert!(
            matches!(&e, RocmError::Rccl(RcclError::BadUniqueId { detail }) if detail.contains("offset 10")),
            "{e}"
        );
        let e = UniqueId::from_hex(&"é".repeat(128)).unwrap_err();
        assert!(e.to_string().contains("not a hex digit"), "{e}");
        let e = UniqueId::from_env("ROCM_SAFE_TEST_SURELY_UNSET_VARIABLE").unwrap_err();
        assert!(
            e.to_string()
                .contains("$ROCM_SAFE_TEST_SURELY_UNSET_VARIABLE"),
            "{e}"
        );
    }

    #[test]
    fn raw_round_trip() {
        let id = sample();
        let raw = id.to_raw();
        assert_eq!(UniqueId::from_raw(&raw), id);
        assert_eq!(std::mem::size_of_val(&raw), UniqueId::BYTES);
    }
}
