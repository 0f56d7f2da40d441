//! The bench on the CPU (CI has no GPU): the rows it is asked for come out in the line format
//! `tests/bench/table.py` reads, with positive times, and bad arguments are refused.

#![allow(clippy::expect_used)]

use std::process::Command;

fn bench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_candle-rocm-bench"))
        .args(args)
        .output()
        .expect("running candle-rocm-bench")
}

#[test]
fn cpu_rows_come_out_in_the_table_format() {
    let only = [
        "copy",
        "add",
        "softmax_last_dim",
        "cast_f32_bf16",
        "exp_sync",
    ];
    let out = bench(&["--cpu", "--elements", "262144", "--only", &only.join(",")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = text.lines();
    assert!(
        lines.next().is_some_and(|l| l.starts_with("device\t")),
        "{text}"
    );
    let mut seen = Vec::new();
    for line in lines {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 8, "{line}");
        assert_eq!(f[0], "bench", "{line}");
        let secs: f64 = f[5].parse().expect("seconds");
        let work: f64 = f[6].parse().expect("work");
        assert!(secs > 0.0 && secs.is_finite() && work > 0.0, "{line}");
        assert!(
            ["bytes", "flops", "calls", "tokens", "sequences"].contains(&f[7]),
            "{line}"
        );
        seen.push(f[2].to_string());
    }
    for op in only {
        assert!(
            seen.iter().any(|s| s.contains(op)),
            "no {op} row in\n{text}"
        );
    }
    // "add" also selects the broadcast rows; the filter still leaves the others out.
    assert!(
        !seen
            .iter()
            .any(|s| s == "exp" || s == "rope" || s == "matvec"),
        "{seen:?}"
    );
}

#[test]
fn bad_sizes_are_refused_with_the_reason() {
    let out = bench(&["--cpu", "--elements", "1000"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("multiple of 2^18"), "{err}");
}
