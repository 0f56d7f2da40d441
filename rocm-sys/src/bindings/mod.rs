//! Generated bindings. `hip.rs` is written by `cargo xtask bindgen`; never edit it by hand.

#[allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    missing_docs,
    clippy::all,
    clippy::undocumented_unsafe_blocks
)]
#[rustfmt::skip]
pub mod hip;
