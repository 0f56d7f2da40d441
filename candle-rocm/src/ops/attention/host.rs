//! The CPU reference of [`super::spec`]'s semantics (being written).
