//! Test helpers: a launch-argument struct's fields against the C struct a kernel source
//! declares, so the two never drift apart.

/// The text of `kernels/hip/<file>`.
pub(crate) fn hip_source(file: &str) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(root.join("../kernels/hip").join(file)).unwrap()
}

/// Asserts that the `uint32_t` / `uint64_t` fields of `struct <name>` in
/// `kernels/hip/<file>` are, in order, the fields `debug` (a launch-argument struct's
/// `{:?}`) names, and returns them: the sizes are asserted on both sides, and this keeps
/// two fields of one type from trading places.
pub(crate) fn args_match_hip_struct(file: &str, name: &str, debug: &str) -> Vec<String> {
    let src = hip_source(file);
    let body = src
        .split_once(&format!("struct {name} {{"))
        .and_then(|(_, rest)| rest.split_once("};"))
        .map(|(body, _)| body)
        .unwrap();
    let c_fields: Vec<String> = body
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .filter_map(|l| {
            l.trim()
                .strip_prefix("uint64_t ")
                .or(l.trim().strip_prefix("uint32_t "))
        })
        .flat_map(|l| {
            l.trim_end_matches(';')
                .split(',')
                .map(|f| f.trim().to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    let rust_fields: Vec<String> = debug
        .split([',', '{'])
        .filter_map(|kv| kv.split_once(':').map(|(k, _)| k.trim().to_string()))
        .collect();
    assert_eq!(c_fields, rust_fields, "{name} in {file}");
    rust_fields
}
