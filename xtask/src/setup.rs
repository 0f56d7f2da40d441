//! The set-up step of `cargo xtask test`: what the tests need besides Rust, checked first and
//! installed when it can be.
//!
//! - The Debian 12 packages of [`PACKAGES`] (checked with `dpkg-query`);
//! - the kernel toolchain `kernels/install-toolchain.sh` installs ([`TOOLCHAIN`]), unless
//!   `ROCM_PATH` names a ROCm install, whose `llvm/bin/clang++` the tests then use instead;
//! - the rustup components of [`COMPONENTS`] (`cargo fmt`, `cargo clippy`).
//!
//! Missing packages are installed with `apt-get` when xtask runs as root or `sudo -n true`
//! succeeds, missing components with `rustup component add`. Otherwise nothing is installed and
//! the command fails before building anything, printing the one command line that installs
//! everything missing. `cargo xtask test --no-setup` skips this step.

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

/// The Debian packages the tests need, each with what for.
const PACKAGES: &[(&str, &str)] = &[
    (
        "libamdhip64-5",
        "Debian's ROCm 5.2 HIP runtime: the loader tests and the no-device paths",
    ),
    (
        "libamdhip64-dev",
        "the HIP headers, for the check that the generated bindings are current",
    ),
    ("libclang-dev", "libclang, for that check (bindgen)"),
    ("clang", "clang's own headers, for that check"),
    ("gcc", "the C compiler and linker of build scripts"),
];

/// What `kernels/install-toolchain.sh` installs (a test keeps the two lists equal): clang-19
/// and the AMD device libraries, with which the kernels crate's tests compile our headers for
/// host-side checks and `cargo xtask kernels` compiles the code objects.
const TOOLCHAIN: &[&str] = &["clang-19", "lld-19", "llvm-19", "rocm-device-libs"];

/// The rustup components `.ci/run` uses, each with the cargo subcommand it provides.
const COMPONENTS: &[(&str, &str)] = &[("rustfmt", "fmt"), ("clippy", "clippy")];

/// What the set-up found missing.
#[derive(Debug, Default, PartialEq)]
struct Missing {
    /// Debian packages.
    packages: Vec<&'static str>,
    /// rustup components.
    components: Vec<&'static str>,
}

impl Missing {
    /// Whether nothing is missing.
    fn is_empty(&self) -> bool {
        self.packages.is_empty() && self.components.is_empty()
    }

    /// The missing things in one line, for messages.
    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.packages.is_empty() {
            parts.push(format!("Debian packages {}", self.packages.join(" ")));
        }
        if !self.components.is_empty() {
            parts.push(format!("rustup components {}", self.components.join(" ")));
        }
        parts.join("; ")
    }
}

/// How packages can be installed.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Privilege {
    /// xtask runs as root.
    Root,
    /// `sudo -n true` succeeds.
    Sudo,
    /// Neither.
    None,
}

/// What to do about [`Missing`] things.
#[derive(Debug, PartialEq)]
enum Plan {
    /// Run these commands (program and arguments), in order.
    Run(Vec<Vec<String>>),
    /// Install nothing and stop, telling the user this.
    Stop(String),
}

/// Checks what the tests need and installs what is missing, or fails (before building
/// anything) with the command that installs it.
pub fn ensure(root: &Path) -> Result<()> {
    let missing = find_missing()?;
    if missing.is_empty() {
        eprintln!("== set-up: everything the tests need is installed");
        return Ok(());
    }
    eprintln!("== set-up: missing {}", missing.describe());
    let privilege = if missing.packages.is_empty() {
        Privilege::None
    } else {
        privilege()?
    };
    let steps = match plan(&missing, privilege, found("rustup")) {
        Plan::Run(steps) => steps,
        Plan::Stop(why) => bail!("{why}"),
    };
    for argv in steps {
        let line = argv.join(" ");
        eprintln!("== {line}");
        let Some((program, args)) = argv.split_first() else {
            continue;
        };
        let status = Command::new(program)
            .args(args)
            .current_dir(root)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .with_context(|| format!("running {line}"))?;
        if !status.success() {
            bail!("{line} failed ({status})");
        }
    }
    let left = find_missing()?;
    if !left.is_empty() {
        bail!(
            "still missing after installing: {} (pass --no-setup to skip this check)",
            left.describe()
        );
    }
    Ok(())
}

/// Everything of [`PACKAGES`], [`TOOLCHAIN`] and [`COMPONENTS`] that is not installed.
fn find_missing() -> Result<Missing> {
    let mut missing = Missing::default();
    let toolchain: &[&str] = match std::env::var_os("ROCM_PATH").filter(|v| !v.is_empty()) {
        Some(rocm) => {
            let clang = Path::new(&rocm).join("llvm/bin/clang++");
            if !clang.is_file() {
                bail!(
                    "ROCM_PATH is set but {} does not exist: unset ROCM_PATH to use Debian's \
                     clang-19 (installed by this set-up), or point it at a ROCm install",
                    clang.display()
                );
            }
            &[]
        }
        None => TOOLCHAIN,
    };
    for name in PACKAGES
        .iter()
        .map(|(name, _)| *name)
        .chain(toolchain.iter().copied())
    {
        if !dpkg_installed(name)? {
            missing.packages.push(name);
        }
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    for (component, subcommand) in COMPONENTS {
        let works = Command::new(&cargo)
            .args([subcommand, "--version"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !works {
            missing.components.push(component);
        }
    }
    Ok(missing)
}

/// Whether dpkg lists `name` as installed (`dpkg-query -W -f='${Status}'` says `… installed`).
fn dpkg_installed(name: &str) -> Result<bool> {
    let out = match Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", name])
        .stderr(Stdio::null())
        .output()
    {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "dpkg-query not found: the set-up of `cargo xtask test` knows Debian 12 only. Install \
             the equivalents of {} yourself, then run `cargo xtask test --no-setup`",
            PACKAGES
                .iter()
                .map(|(name, _)| *name)
                .chain(TOOLCHAIN.iter().copied())
                .collect::<Vec<_>>()
                .join(" ")
        ),
        Err(e) => return Err(e).context("running dpkg-query"),
    };
    // Not known to dpkg at all: exit status 1 and no output.
    let status = String::from_utf8_lossy(&out.stdout);
    Ok(out.status.success() && status.split_whitespace().nth(2) == Some("installed"))
}

/// Whether xtask may install packages: as root, or through `sudo -n`.
fn privilege() -> Result<Privilege> {
    let id = Command::new("id")
        .arg("-u")
        .output()
        .context("running id -u")?;
    if String::from_utf8_lossy(&id.stdout).trim() == "0" {
        return Ok(Privilege::Root);
    }
    let sudo = Command::new("sudo")
        .args(["-n", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    Ok(if sudo {
        Privilege::Sudo
    } else {
        Privilege::None
    })
}

/// Whether `program` is on `PATH`.
fn found(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// The commands that install `missing`; or, when some of it cannot be installed, nothing and
/// the one command line the user should run instead.
fn plan(missing: &Missing, privilege: Privilege, rustup: bool) -> Plan {
    let mut steps: Vec<Vec<String>> = Vec::new();
    // What the user runs when xtask cannot, and why xtask cannot.
    let (mut manual, mut blocked): (Vec<String>, Vec<&str>) = (Vec::new(), Vec::new());
    if !missing.packages.is_empty() {
        let prefix: &[&str] = match privilege {
            Privilege::Root => &[],
            Privilege::Sudo => &["sudo", "-n", "env", "DEBIAN_FRONTEND=noninteractive"],
            Privilege::None => {
                blocked
                    .push("it installs packages only as root or with sudo (`sudo -n true` failed)");
                &[]
            }
        };
        let command = |args: &[&str]| -> Vec<String> {
            prefix.iter().chain(args).map(|s| s.to_string()).collect()
        };
        let mut install = command(&["apt-get", "install", "-y", "-qq", "--no-install-recommends"]);
        install.extend(missing.packages.iter().map(|p| p.to_string()));
        steps.push(command(&["apt-get", "update", "-qq"]));
        steps.push(install);
        let sudo = if privilege == Privilege::Root {
            ""
        } else {
            "sudo "
        };
        manual.push(format!(
            "{sudo}apt-get update && {sudo}apt-get install -y --no-install-recommends {}",
            missing.packages.join(" ")
        ));
    }
    if !missing.components.is_empty() {
        let add: Vec<String> = ["rustup", "component", "add"]
            .into_iter()
            .chain(missing.components.iter().copied())
            .map(str::to_string)
            .collect();
        if rustup {
            manual.push(add.join(" "));
            steps.push(add);
        } else {
            blocked.push("rustup is not on PATH");
        }
    }
    if blocked.is_empty() {
        return Plan::Run(steps);
    }
    let mut why = format!(
        "xtask cannot install what is missing: {}.",
        blocked.join("; ")
    );
    if !manual.is_empty() {
        write!(why, " Install it with:\n\n  {}\n", manual.join(" && ")).ok();
    }
    let rerun = "rerun `cargo xtask test` (or pass --no-setup to skip this check)";
    if !rustup && !missing.components.is_empty() {
        let components = missing.components.join(" and ");
        write!(
            why,
            "\nInstall {components} with your Rust toolchain, then {rerun}."
        )
        .ok();
    } else {
        write!(why, "\nThen {rerun}.").ok();
    }
    Plan::Stop(why)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::project_root;

    /// The toolchain list is the one `kernels/install-toolchain.sh` installs.
    #[test]
    fn toolchain_matches_the_install_script() {
        let script = std::fs::read_to_string(project_root().join("kernels/install-toolchain.sh"))
            .expect("kernels/install-toolchain.sh");
        let line = script
            .lines()
            .find(|l| l.contains("apt-get install"))
            .expect("an apt-get install line");
        let packages: Vec<&str> = line
            .split_whitespace()
            .skip_while(|w| *w != "install")
            .skip(1)
            .filter(|w| !w.starts_with('-'))
            .collect();
        assert_eq!(packages, TOOLCHAIN);
    }

    fn argv(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn plans() {
        let both = Missing {
            packages: vec!["clang", "clang-19"],
            components: vec!["clippy"],
        };
        assert_eq!(
            plan(&both, Privilege::Root, true),
            Plan::Run(vec![
                argv("apt-get update -qq"),
                argv("apt-get install -y -qq --no-install-recommends clang clang-19"),
                argv("rustup component add clippy"),
            ])
        );
        let Plan::Run(steps) = plan(&both, Privilege::Sudo, true) else {
            panic!("sudo can install");
        };
        assert_eq!(
            steps[1],
            argv(
                "sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
                 --no-install-recommends clang clang-19"
            )
        );
        let Plan::Stop(why) = plan(&both, Privilege::None, true) else {
            panic!("nothing to install with");
        };
        assert!(
            why.contains(
                "\n  sudo apt-get update && sudo apt-get install -y --no-install-recommends clang \
                 clang-19 && rustup component add clippy\n"
            ),
            "{why}"
        );
        // Nothing is installed when something cannot be.
        let Plan::Stop(why) = plan(&both, Privilege::Root, false) else {
            panic!("no rustup");
        };
        assert!(
            why.contains("\n  apt-get update && apt-get install"),
            "{why}"
        );
        assert!(
            why.contains("Install clippy with your Rust toolchain"),
            "{why}"
        );

        let components = Missing {
            packages: vec![],
            components: vec!["rustfmt"],
        };
        assert_eq!(
            plan(&components, Privilege::None, true),
            Plan::Run(vec![argv("rustup component add rustfmt")])
        );
        assert_eq!(
            plan(&Missing::default(), Privilege::None, false),
            Plan::Run(vec![])
        );
    }
}
