//! One of candle-core's test files rewritten for the suite: its `test_device` import replaced
//! by a local macro that runs each test on the CPU, the ROCm device and candle's CPU behind the
//! backend slot.

use anyhow::{anyhow, bail, Result};

/// The macro that replaces candle's `test_device!` in the copied tests. `Result` and `Device`
/// are the test file's own, as with candle's macro (some files use `anyhow::Result`).
const TEST_DEVICE_MACRO: &str = r#"macro_rules! test_device {
    ($fn_name: ident, $test_cpu: ident, $test_cuda: ident, $test_metal: ident) => {
        #[test]
        fn $test_cpu() -> Result<()> {
            $fn_name(&Device::Cpu)
        }

        mod $fn_name {
            #[test]
            #[ignore = "needs a HIP device"]
            fn rocm() -> super::Result<()> {
                let device = candle_rocm::device(0).map_err(candle_core::Error::wrap)?;
                super::$fn_name(&device)
            }

            #[test]
            fn ext_cpu() -> super::Result<()> {
                super::$fn_name(&candle_ext_cpu::ext_cpu_device())
            }
        }
    };
}
"#;

/// The macro for the files of [`Q8_NUMERICS`]: the CPU and the ROCm device in q8 mode, no
/// `ext_cpu` variant (candle's CPU behind the slot has the CPU's numerics, not CUDA's).
const TEST_DEVICE_MACRO_Q8: &str = r#"macro_rules! test_device {
    ($fn_name: ident, $test_cpu: ident, $test_cuda: ident, $test_metal: ident) => {
        #[test]
        fn $test_cpu() -> Result<()> {
            $fn_name(&Device::Cpu)
        }

        mod $fn_name {
            #[test]
            #[ignore = "needs a HIP device and CANDLE_ROCM_QMATVEC=q8"]
            fn rocm() -> super::Result<()> {
                if !candle_rocm::settings::qmatvec_q8() {
                    candle_core::bail!(
                        "this test expects Candle CUDA's 8-bit activations: run it with \
                         CANDLE_ROCM_QMATVEC=q8 (the default f32 activations give other, \
                         more exact products)"
                    );
                }
                let device = candle_rocm::device(0).map_err(candle_core::Error::wrap)?;
                super::$fn_name(&device)
            }
        }
    };
}
"#;

/// Test files whose device tests expect the numerics of Candle CUDA's quantized products, with
/// the reason. Their ROCm variants run in candle-rocm's q8 mode (`CANDLE_ROCM_QMATVEC=q8`,
/// activations rounded to q8_1 as Candle CUDA rounds them) and fail with that advice otherwise.
pub(super) const Q8_NUMERICS: &[(&str, &str)] = &[(
    "quantized_tests.rs",
    "its device tests assert the exact products of Candle CUDA's kernels on 8-bit (q8_1) \
     activations: the ROCm variants run with CANDLE_ROCM_QMATVEC=q8 (Candle CUDA's rounding; \
     the default f32 activations are checked against the CPU by tests/tests/gpu/quantized.rs), \
     and there is no ext_cpu variant",
)];

/// A test file after [`rewrite_test_file`].
#[derive(Debug, PartialEq)]
pub(super) enum Rewritten {
    /// The file to write.
    Text(String),
    /// The file is left out, for this reason.
    Excluded(String),
}

/// Rewrites one of candle-core's test files for the suite: drops the `test_device` import,
/// adds a generated-file header and, when the file uses `test_device!`, the local macro after
/// the inner attributes. Files gated as a whole on a feature are excluded. Anything not
/// recognised is an error, never a silently broken file.
pub(super) fn rewrite_test_file(file: &str, src: &str, version: &str) -> Result<Rewritten> {
    // The inner attributes and doc comments at the top, which must stay first.
    let mut prologue_end = 0;
    let mut offset = 0;
    let mut lines = src.split_inclusive('\n');
    while let Some(line) = lines.next() {
        let t = line.trim();
        if t.starts_with("#![") {
            let mut attr = line.to_string();
            let depth = |s: &str| s.matches('[').count() as isize - s.matches(']').count() as isize;
            let mut len = line.len();
            while depth(&attr) > 0 {
                let next = lines
                    .next()
                    .ok_or_else(|| anyhow!("unterminated inner attribute"))?;
                attr.push_str(next);
                len += next.len();
            }
            let compact: String = attr.split_whitespace().collect();
            if compact.starts_with("#![cfg") {
                let feature = compact
                    .strip_prefix("#![cfg(feature=\"")
                    .and_then(|r| r.strip_suffix("\")]"))
                    .filter(|f| !f.contains('"'));
                return match feature {
                    Some(f) => Ok(Rewritten::Excluded(format!(
                        "`#![cfg(feature = \"{f}\")]`: only for candle's {f} backend"
                    ))),
                    None => bail!("unrecognised crate-level cfg `{}`", attr.trim()),
                };
            }
            offset += len;
            prologue_end = offset;
            continue;
        }
        if t.starts_with("/*") {
            bail!("block comments before the first item are not supported");
        }
        offset += line.len();
        if t.starts_with("//!") {
            prologue_end = offset;
        } else if !(t.is_empty() || t.starts_with("//")) {
            break;
        }
    }

    let body = remove_test_device_import(&src[prologue_end..])?;
    let q8 = Q8_NUMERICS.iter().any(|(f, _)| *f == file);
    let body = adapt_to_module(&body);
    let invocations = check_test_device_uses(&body)?;
    let mut out = format!(
        "// Generated by `cargo xtask candle` from candle-core {version}'s tests/{file}; do not \
         edit.\n"
    );
    if invocations > 0 {
        out.push_str(
            "// Changed: `test_device!` is the local macro below, which runs each test on the \
             CPU\n// (`<name>_cpu`), on the first ROCm device (`<name>::rocm`, ignored \
             without a HIP device)\n// and on candle's CPU behind the backend slot \
             (`<name>::ext_cpu`).\n",
        );
    }
    out.push_str(
        "// Changed: a module of tests/suite.rs (`crate::` is `self::`); a `match` on `Device` \
         treats\n// `Device::Ext` (the ROCm device) like `Device::Cuda`.\n",
    );
    if q8 {
        out.push_str(
            "// Changed: the ROCm variants need CANDLE_ROCM_QMATVEC=q8 (Candle CUDA's 8-bit \
             activations)\n// and there are no ext_cpu variants.\n",
        );
    }
    let head = &src[..prologue_end];
    out.push_str(head);
    if invocations > 0 {
        if !head.is_empty() {
            if !head.ends_with('\n') {
                out.push('\n');
            }
            out.push('\n');
        }
        out.push_str(if q8 {
            TEST_DEVICE_MACRO_Q8
        } else {
            TEST_DEVICE_MACRO
        });
        if !body.starts_with('\n') {
            out.push('\n');
        }
    }
    out.push_str(&body);
    Ok(Rewritten::Text(out))
}

/// What the suite changes besides `test_device!`, each noted in the file's header:
/// - the file becomes a module of `tests/suite.rs`, so its `crate::` paths (which name its own
///   imports) become `self::`;
/// - an exhaustive `match` on `Device` gets the `Ext` variant of the backend slot, with the
///   expectations of the other GPU backend (`Device::Cuda(_) | Device::Ext(_) =>`). Calls of
///   `is_cuda()` stay as they are: `Device::Ext` is not CUDA there.
fn adapt_to_module(body: &str) -> String {
    body.replace("crate::", "self::")
        .replace("Device::Cuda(_) =>", "Device::Cuda(_) | Device::Ext(_) =>")
}

/// Byte offsets of `ident` in `s` as a whole identifier.
fn ident_positions(s: &str, ident: &str) -> Vec<usize> {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    s.match_indices(ident)
        .filter(|(i, _)| {
            !s[..*i].chars().next_back().is_some_and(is_ident)
                && !s[i + ident.len()..].chars().next().is_some_and(is_ident)
        })
        .map(|(i, _)| i)
        .collect()
}

/// Whether byte offset `i` of `s` lies in a `//` comment.
fn in_line_comment(s: &str, i: usize) -> bool {
    let line_start = s[..i].rfind('\n').map_or(0, |p| p + 1);
    s[line_start..i].contains("//")
}

/// Removes `test_device` from the `use` statements of candle-core (or an alias of it,
/// `use candle_core as candle;`) that import it.
fn remove_test_device_import(src: &str) -> Result<String> {
    let mut roots = vec!["candle_core".to_string()];
    for line in src.lines() {
        if let Some(alias) = line
            .trim()
            .strip_prefix("use candle_core as ")
            .and_then(|r| r.strip_suffix(';'))
        {
            roots.push(alias.trim().to_string());
        }
    }
    let mut out = src.to_string();
    // Statements are edited from the last one back, so earlier offsets stay valid.
    let mut stmts = Vec::new();
    let mut line_start = 0;
    for line in src.split_inclusive('\n') {
        let t = line.trim_start();
        if t.starts_with("use ") || t.starts_with("pub use ") {
            let semi = src[line_start..]
                .find(';')
                .ok_or_else(|| anyhow!("unterminated `use`"))?;
            let end = line_start + semi + 1;
            let stmt = &src[line_start..end];
            if !ident_positions(stmt, "test_device").is_empty() {
                stmts.push((line_start, end));
            }
        }
        line_start += line.len();
    }
    for (start, end) in stmts.into_iter().rev() {
        let stmt = &src[start..end];
        let replacement = rewrite_use(stmt, &roots).ok_or_else(|| {
            anyhow!(
                "`test_device` is imported in a form `cargo xtask candle` does not know: {:?}",
                stmt.trim()
            )
        })?;
        match replacement {
            Some(new) => out.replace_range(start..end, &new),
            None => {
                // The whole statement goes, with its line break.
                let end = if out[end..].starts_with('\n') {
                    end + 1
                } else {
                    end
                };
                out.replace_range(start..end, "");
            }
        }
    }
    Ok(out)
}

/// `stmt` (a whole `use …;`, indentation included) without `test_device`: `Some(None)` when
/// nothing is left of it, `None` when the form is not recognised.
fn rewrite_use(stmt: &str, roots: &[String]) -> Option<Option<String>> {
    let body = stmt.trim_start();
    let rest = body
        .strip_prefix("pub use ")
        .or_else(|| body.strip_prefix("use "))?;
    let compact: String = rest.split_whitespace().collect();
    let root = roots
        .iter()
        .find(|r| compact.starts_with(&format!("{r}::")))?;
    if compact == format!("{root}::test_device;") {
        return Some(None);
    }
    if !compact.starts_with(&format!("{root}::{{")) || !compact.ends_with("};") {
        return None;
    }
    let open = stmt.find('{')?;
    let close = stmt.rfind('}')?;
    // The top-level elements of the braces, as trimmed ranges of `stmt`.
    let mut elems = Vec::new();
    let (mut depth, mut from) = (0usize, open + 1);
    for (i, c) in stmt[open + 1..close]
        .char_indices()
        .map(|(i, c)| (open + 1 + i, c))
    {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.checked_sub(1)?,
            ',' if depth == 0 => {
                elems.push((from, i));
                from = i + 1;
            }
            _ => {}
        }
    }
    elems.push((from, close));
    let trimmed = |(a, b): (usize, usize)| {
        let s = &stmt[a..b];
        let lead = s.len() - s.trim_start().len();
        (a + lead, a + lead + s.trim().len())
    };
    let elems: Vec<(usize, usize)> = elems
        .into_iter()
        .map(trimmed)
        .filter(|(a, b)| a < b)
        .collect();
    let (s, e) = *elems.iter().find(|(a, b)| &stmt[*a..*b] == "test_device")?;
    if elems.len() == 1 {
        return Some(None);
    }
    let (mut start, mut end) = (s, e);
    if stmt[e..].starts_with(',') {
        let after = &stmt[e + 1..];
        end = e + 1 + (after.len() - after.trim_start_matches([' ', '\t']).len());
        let line_start = stmt[..s].rfind('\n').map_or(0, |p| p + 1);
        if stmt[line_start..s].trim().is_empty() && stmt[end..].starts_with('\n') {
            // The element has a line of its own.
            start = line_start;
            end += 1;
        }
    } else {
        // The last element: remove the comma before it.
        start = stmt[..s].rfind(',')?;
    }
    let mut new = stmt.to_string();
    new.replace_range(start..end, "");
    Some(Some(new))
}

/// Checks that what is left of `test_device` in `src` are `test_device!(a, b, c, d)`
/// invocations of the local macro (four identifiers, as candle's macro takes), and counts them.
fn check_test_device_uses(src: &str) -> Result<usize> {
    let mut count = 0;
    for i in ident_positions(src, "test_device") {
        if in_line_comment(src, i) {
            continue;
        }
        let line = src[..i].matches('\n').count() + 1;
        if src[..i].ends_with("::") {
            bail!("line {line}: `test_device` is used by path; only `test_device!` is supported");
        }
        if src[..i].trim_end().ends_with("macro_rules!") {
            bail!("line {line}: the file defines its own `test_device!`");
        }
        let after = src[i + "test_device".len()..].trim_start();
        let args = after
            .strip_prefix('!')
            .map(str::trim_start)
            .and_then(|a| a.strip_prefix('('))
            .and_then(|a| a.find(')').map(|end| &a[..end]))
            .ok_or_else(|| anyhow!("line {line}: unrecognised use of `test_device`"))?;
        let idents: Vec<&str> = args
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .collect();
        let is_ident = |a: &&str| {
            let a = a.strip_prefix('$').unwrap_or(a);
            a.chars()
                .next()
                .is_some_and(|c| c.is_alphabetic() || c == '_')
                && a.chars().all(|c| c.is_alphanumeric() || c == '_')
        };
        if idents.len() != 4 || !idents.iter().all(is_ident) {
            bail!("line {line}: `test_device!` with arguments other than four identifiers");
        }
        count += 1;
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_device_import_is_removed() {
        let one_line = "use candle_core::{test_device, Device, Result};\n\nfn f() {}\n";
        assert_eq!(
            remove_test_device_import(one_line).unwrap(),
            "use candle_core::{Device, Result};\n\nfn f() {}\n"
        );
        let last = "use candle_core::{Device, Result, test_device};\n";
        assert_eq!(
            remove_test_device_import(last).unwrap(),
            "use candle_core::{Device, Result};\n"
        );
        let own_line =
            "use candle_core::{\n    bail,\n    quantized::{self, X},\n    test_device,\n    Device,\n};\n";
        assert_eq!(
            remove_test_device_import(own_line).unwrap(),
            "use candle_core::{\n    bail,\n    quantized::{self, X},\n    Device,\n};\n"
        );
        let alias = "use candle::{test_device, Device};\nuse candle_core as candle;\n";
        assert_eq!(
            remove_test_device_import(alias).unwrap(),
            "use candle::{Device};\nuse candle_core as candle;\n"
        );
        let single = "use candle_core::test_device;\nuse x::Y;\n";
        assert_eq!(remove_test_device_import(single).unwrap(), "use x::Y;\n");
        assert!(remove_test_device_import("use other::{test_device};\n").is_err());
    }

    #[test]
    fn test_files_are_rewritten() {
        let src = "#![allow(clippy::approx_constant)]\nuse anyhow::Result;\n\
                   use candle_core::{test_device, Device};\n\nfn zeros(d: &Device) -> Result<()> \
                   { Ok(()) }\n\ntest_device!(zeros, zeros_cpu, zeros_gpu, zeros_metal);\n";
        let Rewritten::Text(out) = rewrite_test_file("t.rs", src, "0.0.1").unwrap() else {
            panic!("excluded");
        };
        let attr = out.find("#![allow").unwrap();
        let mac = out.find("macro_rules! test_device").unwrap();
        assert!(out.starts_with("// Generated by `cargo xtask candle` from candle-core 0.0.1"));
        assert!(attr < mac, "{out}");
        assert!(out.contains("use candle_core::{Device};\n"));
        assert!(!out.contains("test_device,"));

        let gated = "#![cfg(feature = \"metal\")]\n\nuse candle_core::Device;\n";
        assert!(matches!(
            rewrite_test_file("m.rs", gated, "0.0.1").unwrap(),
            Rewritten::Excluded(_)
        ));
        let five = "use candle_core::test_device;\ntest_device!(a, b, c, d, e);\n";
        assert!(rewrite_test_file("f.rs", five, "0.0.1").is_err());
        let by_path = "candle_core::test_device!(a, b, c, d);\n";
        assert!(rewrite_test_file("p.rs", by_path, "0.0.1").is_err());
    }
}
