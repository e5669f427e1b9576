//! Confined filesystem operations (SPEC §5.3). Placeholder until the module lands.
