//! `generated/` must equal what build.rs generates from the schemas right now.

const REFRESH: &str = "PI_CONFORM_UPDATE_GENERATED=1 cargo build";

fn check(name: &str, built: &str) {
    let path = format!("{}/generated/{name}", env!("CARGO_MANIFEST_DIR"));
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == built,
        "generated/{name} is stale: the schemas changed since it was generated.\nRefresh it with:\n    {REFRESH}\nand commit the result."
    );
}

#[test]
fn committed_generated_types_are_fresh() {
    check("tool_adapter.rs", include_str!(concat!(env!("OUT_DIR"), "/tool_adapter.rs")));
    check("protocol_v2.rs", include_str!(concat!(env!("OUT_DIR"), "/protocol_v2.rs")));
}
