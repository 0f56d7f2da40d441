//! How MIOpen operations are planned: the keys plans are cached under, the policy that picks a
//! convolution's algorithm (immediate mode or find, and the most workspace it may take), and
//! the host-only choice among the library's candidates, with the fallback to a smaller
//! workspace when memory is short. Tested without a GPU.
//!
//! MIOpen facts used (miopen.h): immediate mode's `miopenConvolution*GetSolution` returns the
//! applicable solutions "sorted in the order of decreasing performance", from the find-db or
//! heuristics, without running anything; each names the workspace it needs. Find
//! (`miopenFindConvolution*Algorithm`) runs the candidates on the device, which on an AMD GPU
//! also compiles their kernels: seconds per new shape unless the user's find-db has it, so it
//! runs only when asked ([`Search::Find`]).

use rocm_sys::miopen::miopenDataType_t;

use super::config::{Conv2dConfig, ConvTranspose2dConfig, MiopenType, Pool2dConfig};
use crate::error::Result;

/// Most plans a handle caches; past it the cache is emptied (a model uses a bounded set of
/// shapes, so this only bounds pathological callers).
pub const MAX_CACHED_PLANS: usize = 4096;

/// How a convolution's algorithm is chosen the first time its key is seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Search {
    /// MIOpen's immediate mode: its own ranking (find-db, else heuristics), nothing timed; the
    /// default. Falls back to [`Search::Find`] where the library lacks the immediate-mode entry
    /// points.
    Immediate,
    /// `miopenFindConvolution*Algorithm` (non-exhaustive): times the candidates on the device.
    Find,
}

/// The default bound on one convolution's workspace: 1 GiB (the fast algorithms of the model
/// shapes we measure need at most a few hundred MiB).
pub const DEFAULT_WORKSPACE_LIMIT: usize = 1 << 30;

/// What a handle's convolution plans may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PlanPolicy {
    /// Immediate mode or find.
    pub search: Search,
    /// The most workspace bytes one convolution may take; candidates needing more are skipped.
    pub workspace_limit: usize,
}

impl Default for PlanPolicy {
    fn default() -> Self {
        PlanPolicy {
            search: Search::Immediate,
            workspace_limit: DEFAULT_WORKSPACE_LIMIT,
        }
    }
}

/// What a convolution's execution call is given: an immediate-mode solution id, or a find
/// result's algorithm (a `miopenConvFwdAlgorithm_t` / `miopenConvBwdDataAlgorithm_t` value).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algo {
    /// `miopenConvolution*Immediate` with this solution id.
    Solution(u64),
    /// `miopenConvolutionForward` / `miopenConvolutionBackwardData` with this algorithm.
    Legacy(u32),
}

/// One way to run a convolution, as the library ranked it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    /// What the execution call takes.
    pub algo: Algo,
    /// Workspace bytes it needs.
    pub workspace: usize,
    /// The library's time for it in milliseconds (measured by find, else an estimate).
    pub time_ms: f32,
}

/// The candidates to try, in the library's order (fastest expected first): those within
/// `limit` bytes of workspace, each algorithm once.
pub fn usable(ranked: impl IntoIterator<Item = Candidate>, limit: usize) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = Vec::new();
    for c in ranked {
        if c.workspace <= limit && !out.iter().any(|o| o.algo == c.algo) {
            out.push(c);
        }
    }
    out
}

/// After candidate `failed` could not get its workspace, the next one to try: the first later
/// candidate (so the fastest remaining) that needs less workspace; `None` when none does.
pub fn smaller_workspace(cands: &[Candidate], failed: usize) -> Option<usize> {
    let need = cands.get(failed)?.workspace;
    (failed + 1..cands.len()).find(|&i| cands[i].workspace < need)
}

/// Which MIOpen convolution entry points a plan uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConvDirection {
    /// `miopenConvolutionForward`: a convolution.
    Forward,
    /// `miopenConvolutionBackwardData`: a transposed convolution.
    BackwardData,
}

/// The key a convolution plan (descriptors, algorithm, workspace size) is cached under:
/// direction, element type, and the forward convolution problem (shapes and parameters). A
/// transposed convolution is keyed by the convolution it transposes, whose input height and
/// width carry its output padding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvKey {
    /// Forward or backward data.
    pub direction: ConvDirection,
    /// The MIOpen element type.
    pub dtype: miopenDataType_t,
    /// The forward convolution problem.
    pub problem: Conv2dConfig,
}

impl ConvKey {
    /// The key of a convolution of `T`s.
    pub fn forward<T: MiopenType>(cfg: &Conv2dConfig) -> Self {
        ConvKey {
            direction: ConvDirection::Forward,
            dtype: T::DATATYPE,
            problem: *cfg,
        }
    }

    /// The key of a transposed convolution of `T`s.
    pub fn transpose<T: MiopenType>(cfg: &ConvTranspose2dConfig) -> Result<Self> {
        Ok(ConvKey {
            direction: ConvDirection::BackwardData,
            dtype: T::DATATYPE,
            problem: cfg.as_forward()?,
        })
    }
}

/// The key a pooling plan is cached under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PoolKey {
    /// The MIOpen element type.
    pub dtype: miopenDataType_t,
    /// Shapes and parameters.
    pub cfg: Pool2dConfig,
}

/// What any plan of a handle is cached under: one cache holds the convolutions (forward and
/// backward data) and the pools.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PlanKey {
    /// A convolution or transposed convolution.
    Conv(ConvKey),
    /// A pooling.
    Pool(PoolKey),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::miopen::config::PoolMode;
    use half::{bf16, f16};
    use std::collections::HashSet;

    fn conv() -> Conv2dConfig {
        Conv2dConfig {
            batch: 2,
            in_channels: 4,
            in_h: 9,
            in_w: 7,
            out_channels: 6,
            kernel_h: 3,
            kernel_w: 2,
            groups: 2,
            padding: [1, 0],
            stride: [2, 1],
            dilation: [1, 2],
        }
    }

    fn cand(id: u64, workspace: usize) -> Candidate {
        Candidate {
            algo: Algo::Solution(id),
            workspace,
            time_ms: id as f32,
        }
    }

    #[test]
    fn usable_keeps_the_library_order_within_the_limit() {
        let ranked = [
            cand(1, 900),
            cand(2, 0),
            cand(3, 100),
            cand(2, 0),
            cand(4, 50),
        ];
        let u = usable(ranked, 500);
        let ids: Vec<_> = u.iter().map(|c| c.algo).collect();
        assert_eq!(
            ids,
            [Algo::Solution(2), Algo::Solution(3), Algo::Solution(4)],
            "the 900-byte one is over the limit, the repeated one kept once"
        );
        assert!(usable(ranked, 0).iter().all(|c| c.workspace == 0));
        assert!(usable([], 1 << 30).is_empty());
        assert_eq!(PlanPolicy::default().search, Search::Immediate);
        assert_eq!(
            PlanPolicy::default().workspace_limit,
            DEFAULT_WORKSPACE_LIMIT
        );
    }

    #[test]
    fn short_memory_falls_back_to_a_smaller_workspace() {
        let c = [cand(1, 800), cand(2, 800), cand(3, 300), cand(4, 0)];
        assert_eq!(smaller_workspace(&c, 0), Some(2), "not the same-size one");
        assert_eq!(smaller_workspace(&c, 2), Some(3));
        assert_eq!(
            smaller_workspace(&c, 3),
            None,
            "nothing needs less than none"
        );
        assert_eq!(smaller_workspace(&c, 9), None);
        let legacy = Candidate {
            algo: Algo::Legacy(5),
            workspace: 0,
            time_ms: 0.1,
        };
        assert_ne!(
            legacy.algo,
            Algo::Solution(5),
            "ids and algorithms never mix"
        );
    }

    #[test]
    fn cache_keys_separate_every_parameter() {
        let base = conv();
        let mut keys = HashSet::new();
        keys.insert(ConvKey::forward::<f32>(&base));
        assert!(!keys.insert(ConvKey::forward::<f32>(&base)), "same key");
        let variants = [
            Conv2dConfig { batch: 3, ..base },
            Conv2dConfig { in_w: 8, ..base },
            Conv2dConfig {
                padding: [0, 0],
                ..base
            },
            Conv2dConfig {
                stride: [1, 1],
                ..base
            },
            Conv2dConfig {
                dilation: [1, 1],
                ..base
            },
            Conv2dConfig { groups: 1, ..base },
        ];
        for v in variants {
            assert!(keys.insert(ConvKey::forward::<f32>(&v)), "{v:?}");
        }
        assert!(keys.insert(ConvKey::forward::<f16>(&base)), "dtype");
        assert!(keys.insert(ConvKey::forward::<bf16>(&base)), "dtype");
        let t = ConvTranspose2dConfig {
            batch: 1,
            in_channels: 4,
            in_h: 3,
            in_w: 3,
            out_channels: 2,
            kernel_h: 3,
            kernel_w: 3,
            groups: 1,
            padding: [0, 0],
            output_padding: [0, 0],
            stride: [2, 2],
            dilation: [1, 1],
        };
        let k0 = ConvKey::transpose::<f32>(&t).unwrap();
        let k1 = ConvKey::transpose::<f32>(&ConvTranspose2dConfig {
            output_padding: [1, 1],
            ..t
        })
        .unwrap();
        assert_ne!(k0, k1, "output padding changes the key");
        assert_eq!(k0.direction, ConvDirection::BackwardData);
        let fwd_same_problem = ConvKey {
            direction: ConvDirection::Forward,
            ..k0
        };
        assert_ne!(k0, fwd_same_problem, "direction is part of the key");
        let pk = PoolKey {
            dtype: f32::DATATYPE,
            cfg: Pool2dConfig {
                batch: 1,
                channels: 1,
                in_h: 4,
                in_w: 4,
                kernel: [2, 2],
                stride: [2, 2],
                padding: [0, 0],
                mode: PoolMode::Max,
            },
        };
        let avg = PoolKey {
            cfg: Pool2dConfig {
                mode: PoolMode::Average,
                ..pk.cfg
            },
            ..pk
        };
        assert_ne!(pk, avg);
        assert_ne!(PlanKey::Conv(k0), PlanKey::Conv(k1));
        assert_ne!(PlanKey::Pool(pk), PlanKey::Pool(avg));
    }
}
