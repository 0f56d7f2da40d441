//! `rocm-info`: which ROCm libraries this process loads and which GPUs candle-rocm can use.
//!
//! Exit code 0 when a GPU is usable; otherwise 2 (no HIP runtime found), 3 (no device),
//! 4 (no kernels for the device's architecture) or 1 (another error). Never panics.

use std::process::ExitCode;

fn main() -> ExitCode {
    let report = candle_rocm::report::Report::collect();
    println!("{report}");
    ExitCode::from(report.verdict.exit_code())
}
