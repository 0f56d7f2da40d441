//! The command line of `cargo xtask`: every subcommand and flag, declared with clap's derive.
//!
//! `main.rs` matches on [`Command`]; each variant's fields are what the command's module reads.
//! `cargo xtask --help` and `cargo xtask <command> --help` print the doc comments below.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Project automation for candle-rocm.
#[derive(Debug, Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    // As the hand-written parser did: a flag given twice keeps its last value.
    args_override_self = true
)]
pub struct Cli {
    /// The command to run; without one, this help is printed.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Regenerate rocm-sys/src/bindings/hip.rs from the HIP headers (Debian's libamdhip64-dev,
    /// or $ROCM_PATH/include).
    Bindgen(Check),
    /// Compile the kernel modules for the AMD targets into kernels/ (compressed code objects,
    /// manifest.json and src/objects.rs).
    Kernels(Kernels),
    /// Materialise the patched candle-core/candle-nn/candle-transformers into .candle/ and
    /// candle-core's test suite into tests/candle-suite/.
    Candle(Check),
    /// Regenerate the patched Candle if stale, then run the README demo (release build): BERT
    /// sentence embeddings, then text generation, on the GPU or the CPU.
    Demo(Demo),
    /// Install what the tests need if missing (Debian packages, kernel toolchain, rustfmt,
    /// clippy), cargo test in the root workspace, then `candle` if stale, then cargo test in the
    /// tests/ workspace.
    Test(Test),
    /// Build the GPU test binaries for tests/hip-on-cuda/run.sh into .device-bundle/ and print
    /// the device call.
    DeviceBundle,
    /// Build ours, Candle CUDA (nvcc 13 from PyPI) and the launch benchmark into .bench-bundle/
    /// and print the device call (tests/hip-on-cuda/bench.sh: one table with PyTorch eager too).
    Bench(Bench),
    /// Download llama.cpp's source (the PyPI sdist of llama-cpp-python, sha256-pinned), trim it
    /// to what llama-bench needs with the CUDA and CPU backends, and pack it into
    /// .bench-bundle/llama.cpp.tar.xz (`bench` does this too) for tests/hip-on-cuda/llamacpp.sh.
    Llamacpp,
}

/// The flag of the generators (`bindgen`, `candle`).
#[derive(Debug, Args)]
pub struct Check {
    /// Fail if the checked-in or generated output is stale instead of writing it.
    #[arg(long)]
    pub check: bool,
}

/// Options of `cargo xtask kernels`. `--check` wins over `--report`, which wins over a build.
#[derive(Debug, Default, Args)]
pub struct Kernels {
    /// Only compare sources and flags with the manifest (no compiler needed).
    #[arg(long)]
    pub check: bool,
    /// Rebuild everything (in a fresh cache) and fail unless each object is byte-identical to
    /// the committed one, instead of updating them.
    #[arg(long)]
    pub verify: bool,
    /// Print the resource table of the committed objects (VGPR/AGPR/SGPR/LDS/scratch, waves).
    #[arg(long)]
    pub report: bool,
    /// With --report: one row per kernel instead of per module and target.
    #[arg(long = "kernels")]
    pub per_kernel: bool,
    /// Restrict the build to these targets (comma-separated).
    #[arg(long = "arch", value_name = "A,B")]
    pub arch: Option<String>,
    /// Restrict the build to these modules (comma-separated).
    #[arg(long = "module", value_name = "M,N")]
    pub module: Option<String>,
    /// Write plain objects named <module>.<arch>.co to DIR (for CANDLE_ROCM_KERNELS_DIR)
    /// instead of updating the committed set.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

impl Kernels {
    /// The targets of `--arch`; empty for all.
    pub fn archs(&self) -> Vec<String> {
        split(self.arch.as_deref())
    }

    /// The modules of `--module`; empty for all.
    pub fn modules(&self) -> Vec<String> {
        split(self.module.as_deref())
    }
}

/// A comma-separated list, empty entries left out.
fn split(v: Option<&str>) -> Vec<String> {
    v.unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// Arguments of `cargo xtask demo`.
#[derive(Debug, Args)]
pub struct Demo {
    /// Passed to the demo: [--cpu] [--model DIR] [--dtype f32|f16|bf16] [--no-decoder]
    /// [--decoder-model DIR | --gguf [FILE]] [--prompt TEXT] [--max-tokens N] [SENTENCES...]
    /// (`cargo xtask demo -- --help` prints the demo's own help).
    #[arg(
        value_name = "ARGS",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub args: Vec<String>,
}

/// Options of `cargo xtask test`.
#[derive(Debug, Args)]
pub struct Test {
    /// Skip the set-up: do not check for (or install) the Debian packages, the kernel
    /// toolchain, rustfmt and clippy.
    #[arg(long, conflicts_with = "setup_only")]
    pub no_setup: bool,
    /// Only the set-up: check for what the tests need, install what is missing, and stop.
    #[arg(long)]
    pub setup_only: bool,
    /// Passed to libtest in both test runs, after `--` (e.g. `-- --include-ignored`).
    #[arg(last = true, value_name = "ARGS")]
    pub args: Vec<String>,
}

/// Options of `cargo xtask bench`.
#[derive(Debug, Args)]
pub struct Bench {
    /// Skip the Candle CUDA builds.
    #[arg(long)]
    pub no_cuda: bool,
    /// Leave llama.cpp (the llama-bench peer) out of the bundle.
    #[arg(long)]
    pub no_llamacpp: bool,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("xtask").chain(args.iter().copied()))
    }

    #[test]
    fn arguments_parse_as_before() {
        let Ok(Cli {
            command: Some(Command::Kernels(k)),
        }) = parse(&[
            "kernels",
            "--report",
            "--kernels",
            "--arch",
            "a,,b",
            "--arch",
            "c",
        ])
        else {
            panic!("kernels did not parse");
        };
        assert!(k.report && k.per_kernel && !k.check);
        assert_eq!(k.archs(), ["c"]);
        assert!(k.modules().is_empty());

        let Ok(Cli {
            command: Some(Command::Demo(d)),
        }) = parse(&["demo", "--cpu", "--max-tokens", "16", "hello world"])
        else {
            panic!("demo did not parse");
        };
        assert_eq!(d.args, ["--cpu", "--max-tokens", "16", "hello world"]);
        for (args, forwarded) in [
            (&["demo", "--", "--help"][..], &["--help"][..]),
            (&["demo", "--cpu", "--help"], &["--cpu", "--help"]),
            (&["demo", "--gguf", "--", "x"], &["--gguf", "--", "x"]),
        ] {
            let Ok(Cli {
                command: Some(Command::Demo(d)),
            }) = parse(args)
            else {
                panic!("{args:?} did not parse");
            };
            assert_eq!(d.args, forwarded, "{args:?}");
        }

        let Ok(Cli {
            command: Some(Command::Test(t)),
        }) = parse(&["test", "--", "--include-ignored", "--help"])
        else {
            panic!("test did not parse");
        };
        assert_eq!(t.args, ["--include-ignored", "--help"]);
        assert!(!t.no_setup && !t.setup_only);
        assert!(parse(&["test", "--no-setup", "--setup-only"]).is_err());

        assert!(parse(&["test", "foo"]).is_err());
        assert!(parse(&["bench", "--cuda"]).is_err());
        assert!(parse(&["device-bundle", "x"]).is_err());
        assert!(matches!(
            parse(&["bench", "--no-llamacpp"]),
            Ok(Cli {
                command: Some(Command::Bench(Bench {
                    no_cuda: false,
                    no_llamacpp: true
                }))
            })
        ));
        assert!(matches!(
            parse(&["llamacpp"]),
            Ok(Cli {
                command: Some(Command::Llamacpp)
            })
        ));
        assert!(matches!(parse(&[]), Ok(Cli { command: None })));
    }
}
