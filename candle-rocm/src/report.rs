//! What ROCm this process can use: loaded libraries, devices, and whether their architecture
//! has kernels. Built by [`Report::collect`], printed by `rocm-info`.

use std::fmt;

use candle_rocm_kernels::{Module, KERNELS_DIR_VAR};

use crate::registry::{self, hip_version_string, Choice, KernelError, SelectionInput};
use rocm_safe::{Device, DeviceInfo, RocmError, Runtime};

/// One visible device and how it would get kernels.
#[derive(Debug)]
pub struct DeviceEntry {
    /// What the runtime reports.
    pub info: DeviceInfo,
    /// Free device memory in bytes, when it could be read.
    pub free_mem: Option<usize>,
    /// Where the device's kernels would come from (the registry's choice for one module), or
    /// why there are none.
    pub kernels: Result<Choice, KernelError>,
}

impl DeviceEntry {
    /// Whether candle-rocm can run on this device.
    pub fn usable(&self) -> bool {
        self.kernels.is_ok()
    }
}

/// The overall verdict, with a process exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// At least one device is usable.
    Usable,
    /// The HIP runtime could not be loaded.
    NoLibrary,
    /// The runtime loaded but reports no device.
    NoDevice,
    /// Devices exist but none has kernels for its architecture.
    UnsupportedArch,
    /// Something else failed (a HIP call while querying a device).
    Error,
}

impl Verdict {
    /// The exit code `rocm-info` uses: 0 usable, 2 no library, 3 no device, 4 unsupported
    /// architecture, 1 any other error.
    pub fn exit_code(self) -> u8 {
        match self {
            Verdict::Usable => 0,
            Verdict::Error => 1,
            Verdict::NoLibrary => 2,
            Verdict::NoDevice => 3,
            Verdict::UnsupportedArch => 4,
        }
    }
}

/// Everything `rocm-info` prints.
#[derive(Debug)]
pub struct Report {
    /// Path and version of the HIP runtime, when loaded.
    pub hip: Option<(String, String)>,
    /// A warning about the runtime's version, if any.
    pub warning: Option<String>,
    /// rocBLAS path and version, or why it is unavailable.
    pub rocblas: Result<(String, String), String>,
    /// MIOpen path and version, `Ok(None)` when absent (it is optional).
    pub miopen: Result<Option<(String, String)>, String>,
    /// RCCL path and version, or why it is unavailable. Optional (only several GPUs need it):
    /// it never changes the verdict or the exit code.
    pub rccl: Result<(String, String), String>,
    /// Driver version, when readable.
    pub driver: Option<String>,
    /// Visible devices.
    pub devices: Vec<DeviceEntry>,
    /// Whether the kernel override directory variable is set.
    pub kernels_dir: Option<String>,
    /// The verdict and the reason behind it.
    pub verdict: Verdict,
    /// Why there is no usable device (empty when usable).
    pub reason: String,
}

/// The oldest HIP runtime candle-rocm supports: ROCm 5.7.
pub const MIN_RUNTIME_VERSION: i32 = 50_700_000;

/// A warning for runtimes older than [`MIN_RUNTIME_VERSION`], `None` otherwise.
pub fn runtime_warning(version: i32) -> Option<String> {
    (version > 0 && version < MIN_RUNTIME_VERSION).then(|| {
        format!(
            "HIP runtime {} is older than ROCm 5.7, the oldest supported release: devices may \
             work, but kernels may fail to load. To fix: install ROCm 5.7 or newer",
            hip_version_string(version)
        )
    })
}

fn gib(bytes: usize) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

impl Report {
    /// Loads the runtime (if possible) and queries every device.
    pub fn collect() -> Report {
        let kernels_dir = crate::settings::kernels_dir().map(|d| d.display().to_string());
        let mut report = Report {
            hip: None,
            warning: None,
            rocblas: Err("not probed".into()),
            miopen: Ok(None),
            rccl: Err("not probed".into()),
            driver: None,
            devices: Vec::new(),
            kernels_dir,
            verdict: Verdict::Error,
            reason: String::new(),
        };
        let rt = match Runtime::get() {
            Ok(rt) => rt,
            Err(e) => {
                report.verdict = match e {
                    RocmError::Load(_) => Verdict::NoLibrary,
                    _ => Verdict::Error,
                };
                report.reason = e.to_string();
                return report;
            }
        };
        let raw_version = rt.runtime_version();
        report.warning = raw_version.as_ref().ok().and_then(|v| runtime_warning(*v));
        let version = raw_version
            .map(hip_version_string)
            .unwrap_or_else(|e| format!("unknown ({e})"));
        report.hip = Some((rt.hip().path().display().to_string(), version));
        report.driver = rt.driver_version().ok().map(hip_version_string);
        report.rocblas = rt
            .rocblas()
            .and_then(|lib| Ok((lib.path().display().to_string(), rt.rocblas_version()?)))
            .map_err(|e| e.to_string());
        report.miopen = rt
            .miopen()
            .and_then(|lib| match lib {
                None => Ok(None),
                Some(lib) => Ok(Some((
                    lib.path().display().to_string(),
                    rt.miopen_version()?.unwrap_or_default(),
                ))),
            })
            .map_err(|e| e.to_string());
        report.rccl = rt
            .rccl()
            .and_then(|lib| Ok((lib.path().display().to_string(), rt.rccl_version()?)))
            .map_err(|e| e.to_string());

        let count = match rt.device_count() {
            Ok(n) => n,
            Err(e) => {
                report.verdict = match e {
                    RocmError::NoDevice { .. } => Verdict::NoDevice,
                    _ => Verdict::Error,
                };
                report.reason = e.to_string();
                return report;
            }
        };
        let mut errors = Vec::new();
        let runtime_version = rt.runtime_version().unwrap_or(0);
        let dir = report.kernels_dir.as_ref().map(std::path::PathBuf::from);
        for ordinal in 0..count {
            match Device::with_runtime(rt.clone(), ordinal) {
                Ok(dev) => {
                    let input = SelectionInput {
                        arch: &dev.info().arch,
                        runtime_version,
                        embedded: &registry::is_embedded,
                        dir: dir.as_deref(),
                    };
                    report.devices.push(DeviceEntry {
                        kernels: registry::select(Module::Affine, &input),
                        free_mem: dev.mem_info().ok().map(|(free, _)| free),
                        info: dev.info().clone(),
                    });
                }
                Err(e) => errors.push(format!("device {ordinal}: {e}")),
            }
        }
        if report.devices.iter().any(DeviceEntry::usable) {
            report.verdict = Verdict::Usable;
        } else if let Some(Err(e)) = report.devices.first().map(|d| &d.kernels) {
            report.verdict = Verdict::UnsupportedArch;
            report.reason = e.to_string();
        } else {
            report.verdict = Verdict::Error;
            report.reason = errors.join("; ");
        }
        report
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "rocm-info {}", env!("CARGO_PKG_VERSION"))?;
        match &self.hip {
            Some((path, version)) => {
                writeln!(f, "HIP runtime : {path} (version {version})")?;
                if let Some(w) = &self.warning {
                    writeln!(f, "warning     : {w}")?;
                }
                if let Some(d) = &self.driver {
                    writeln!(f, "driver      : version {d}")?;
                }
                match &self.rocblas {
                    Ok((path, version)) => writeln!(f, "rocBLAS     : {path} (version {version})")?,
                    Err(e) => writeln!(f, "rocBLAS     : unavailable: {e}")?,
                }
                match &self.miopen {
                    Ok(Some((path, version))) => {
                        writeln!(f, "MIOpen      : {path} (version {version})")?
                    }
                    Ok(None) => writeln!(f, "MIOpen      : not found (optional)")?,
                    Err(e) => writeln!(f, "MIOpen      : unavailable: {e}")?,
                }
                match &self.rccl {
                    Ok((path, version)) => writeln!(f, "RCCL        : {path} (version {version})")?,
                    Err(e) => writeln!(
                        f,
                        "RCCL        : not available (optional: only needed for several GPUs): \
                         {}",
                        e.replace('\n', "\n              ")
                    )?,
                }
            }
            None => writeln!(f, "HIP runtime : not loaded")?,
        }
        if let Some(dir) = &self.kernels_dir {
            writeln!(f, "kernels dir : {dir} (from ${KERNELS_DIR_VAR})")?;
        }
        if !self.devices.is_empty() {
            writeln!(f, "devices     : {}", self.devices.len())?;
        }
        for d in &self.devices {
            let i = &d.info;
            let kernels = match &d.kernels {
                Ok(Choice::Exact(t)) => format!("kernels for {t}"),
                Ok(Choice::Generic(t)) => format!("kernels via {t}"),
                Ok(Choice::File(p)) => format!("kernels from {}", p.display()),
                Err(_) => "no kernels".to_string(),
            };
            writeln!(
                f,
                "  [{}] {} | {} | wave{} | {} CUs | {} ({} free) | LDS/block {} KiB | {}",
                i.ordinal,
                i.name,
                i.arch,
                i.warp_size,
                i.compute_units,
                gib(i.total_mem),
                d.free_mem.map_or_else(|| "?".to_string(), gib),
                i.max_shared_mem_per_block / 1024,
                kernels
            )?;
        }
        match self.verdict {
            Verdict::Usable => write!(f, "status      : usable GPU found"),
            _ => write!(
                f,
                "status      : no usable GPU\nreason      : {}",
                self.reason
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_format() {
        assert_eq!(hip_version_string(50_221_153), "5.2.21153");
        assert_eq!(hip_version_string(60_342_134), "6.3.42134");
    }

    #[test]
    fn old_runtimes_are_flagged() {
        assert!(runtime_warning(50_221_153).unwrap().contains("5.2.21153"));
        assert!(runtime_warning(50_700_000).is_none());
        assert!(runtime_warning(60_342_134).is_none());
        assert!(
            runtime_warning(0).is_none(),
            "unknown versions are not flagged"
        );
    }

    #[test]
    fn exit_codes_are_distinct() {
        let all = [
            Verdict::Usable,
            Verdict::NoLibrary,
            Verdict::NoDevice,
            Verdict::UnsupportedArch,
            Verdict::Error,
        ];
        let mut codes: Vec<_> = all.iter().map(|v| v.exit_code()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), all.len());
        assert_eq!(Verdict::Usable.exit_code(), 0);
    }
}
