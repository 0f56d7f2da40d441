//! GPU architecture names as the HIP runtime reports them, e.g. `gfx90a:sramecc+:xnack-`.

use std::fmt;

/// A parsed `gcnArchName`: the processor (`gfx90a`) plus its target features.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GfxArch {
    /// The processor name, e.g. `gfx1100`. On the HIP-on-CUDA test double this is `sm_90`.
    pub processor: String,
    /// Target features in the order reported, e.g. `[("sramecc", true), ("xnack", false)]`.
    pub features: Vec<(String, bool)>,
}

/// The hardware family of an AMD processor, deciding wave size and generic targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArchFamily {
    /// GCN and CDNA (gfx8xx, gfx9xx): wave64.
    Gfx9,
    /// RDNA1 (gfx101x): wave32 native.
    Gfx10_1,
    /// RDNA2 (gfx103x).
    Gfx10_3,
    /// RDNA3 / 3.5 (gfx11xx).
    Gfx11,
    /// RDNA4 (gfx12xx).
    Gfx12,
    /// Not an AMD `gfx` name (e.g. the test double's `sm_90`) or a family this crate does not know.
    Other,
}

/// Why an architecture string could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{input}` is not a GPU architecture name ({why}); expected e.g. `gfx90a:sramecc+:xnack-`")]
pub struct ArchParseError {
    /// The input.
    pub input: String,
    /// What was wrong.
    pub why: &'static str,
}

impl GfxArch {
    /// Parses `processor[:feature(+|-)]*`.
    pub fn parse(s: &str) -> Result<Self, ArchParseError> {
        let err = |why| ArchParseError {
            input: s.to_string(),
            why,
        };
        let s_trim = s.trim_end_matches('\0').trim();
        let mut parts = s_trim.split(':');
        let processor = parts.next().unwrap_or_default();
        if processor.is_empty() {
            return Err(err("empty processor name"));
        }
        if !processor
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(err(
                "processor name has characters other than [A-Za-z0-9_-]",
            ));
        }
        let mut features = Vec::new();
        for f in parts {
            let (name, on) = match (f.strip_suffix('+'), f.strip_suffix('-')) {
                (Some(n), _) => (n, true),
                (_, Some(n)) => (n, false),
                _ => return Err(err("a target feature lacks its trailing + or -")),
            };
            if name.is_empty() {
                return Err(err("empty target feature name"));
            }
            features.push((name.to_string(), on));
        }
        Ok(GfxArch {
            processor: processor.to_string(),
            features,
        })
    }

    /// The value of a target feature (`xnack`, `sramecc`), `None` when not reported.
    pub fn feature(&self, name: &str) -> Option<bool> {
        self.features
            .iter()
            .find(|(n, _)| n == name)
            .map(|&(_, on)| on)
    }

    /// The hardware family, from the processor name.
    pub fn family(&self) -> ArchFamily {
        let Some(digits) = self.processor.strip_prefix("gfx") else {
            return ArchFamily::Other;
        };
        // gfx names are decimal major plus two hex-ish digits: gfx90a, gfx1100, gfx1201.
        match digits.len() {
            3 if digits.starts_with('8') || digits.starts_with('9') => ArchFamily::Gfx9,
            4 if digits.starts_with("101") => ArchFamily::Gfx10_1,
            4 if digits.starts_with("103") => ArchFamily::Gfx10_3,
            4 if digits.starts_with("11") => ArchFamily::Gfx11,
            4 if digits.starts_with("12") => ArchFamily::Gfx12,
            _ => ArchFamily::Other,
        }
    }

    /// The wave size this family's compute kernels use by default (64 on GCN/CDNA, 32 on
    /// RDNA). Always prefer the runtime's `hipDeviceAttributeWarpSize`; this is for offline
    /// decisions such as which code object to pick.
    pub fn default_wave_size(&self) -> Option<u32> {
        match self.family() {
            ArchFamily::Gfx9 => Some(64),
            ArchFamily::Gfx10_1 | ArchFamily::Gfx10_3 | ArchFamily::Gfx11 | ArchFamily::Gfx12 => {
                Some(32)
            }
            ArchFamily::Other => None,
        }
    }

    /// The LLVM generic target that can run on this processor, where one exists
    /// (`gfx11-generic` for every gfx11xx, ...). Loading a generic code object also needs a
    /// runtime that supports them (ROCm 6.4 and newer).
    pub fn generic_target(&self) -> Option<&'static str> {
        let p = self.processor.as_str();
        match self.family() {
            ArchFamily::Gfx9 => match p {
                "gfx900" | "gfx902" | "gfx904" | "gfx906" | "gfx909" | "gfx90c" => {
                    Some("gfx9-generic")
                }
                "gfx940" | "gfx941" | "gfx942" | "gfx950" => Some("gfx9-4-generic"),
                _ => None,
            },
            ArchFamily::Gfx10_1 => Some("gfx10-1-generic"),
            ArchFamily::Gfx10_3 => Some("gfx10-3-generic"),
            ArchFamily::Gfx11 => Some("gfx11-generic"),
            ArchFamily::Gfx12 => Some("gfx12-generic"),
            ArchFamily::Other => None,
        }
    }
}

impl fmt::Display for GfxArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.processor)?;
        for (name, on) in &self.features {
            write!(f, ":{name}{}", if *on { '+' } else { '-' })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_features() {
        let a = GfxArch::parse("gfx90a:sramecc+:xnack-").unwrap();
        assert_eq!(a.processor, "gfx90a");
        assert_eq!(a.feature("sramecc"), Some(true));
        assert_eq!(a.feature("xnack"), Some(false));
        assert_eq!(a.feature("tgsplit"), None);
        assert_eq!(a.to_string(), "gfx90a:sramecc+:xnack-");
        assert_eq!(a.family(), ArchFamily::Gfx9);
        assert_eq!(a.default_wave_size(), Some(64));
    }

    #[test]
    fn plain_and_padded_names() {
        let a = GfxArch::parse("gfx1100\0\0").unwrap();
        assert_eq!(a.processor, "gfx1100");
        assert!(a.features.is_empty());
        assert_eq!(a.family(), ArchFamily::Gfx11);
        assert_eq!(a.default_wave_size(), Some(32));
        assert_eq!(a.generic_target(), Some("gfx11-generic"));
    }

    #[test]
    fn families_and_generic_targets() {
        let g = |s: &str| GfxArch::parse(s).unwrap();
        assert_eq!(g("gfx1103").generic_target(), Some("gfx11-generic"));
        assert_eq!(g("gfx1151").family(), ArchFamily::Gfx11);
        assert_eq!(g("gfx1030").generic_target(), Some("gfx10-3-generic"));
        assert_eq!(g("gfx1201").generic_target(), Some("gfx12-generic"));
        assert_eq!(
            g("gfx942:sramecc+:xnack-").generic_target(),
            Some("gfx9-4-generic")
        );
        assert_eq!(g("gfx90a").generic_target(), None);
        assert_eq!(g("gfx906").generic_target(), Some("gfx9-generic"));
        assert_eq!(g("sm_90").family(), ArchFamily::Other);
        assert_eq!(g("sm_90").default_wave_size(), None);
    }

    #[test]
    fn rejects_garbage() {
        assert!(GfxArch::parse("").is_err());
        assert!(GfxArch::parse("gfx90a:xnack").is_err());
        assert!(GfxArch::parse("gfx90a::").is_err());
        assert!(GfxArch::parse("gfx 90a").is_err());
        let e = GfxArch::parse(":+").unwrap_err();
        assert!(e.to_string().contains("expected e.g."));
    }
}
