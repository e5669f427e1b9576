//! Operation sets: which tool operations exist (in their canonical order,
//! [`crate::contract::descriptor::OPERATIONS`]) and which of them mutate the root. The
//! mutating set decides the idempotency rules of SPEC §4.5 (a mutating operation's outcome is
//! kept and replayed; a read-only one runs again) and the daemon's per-path serialisation.

use super::types::tool_adapter::ToolOperation;

pub use super::descriptor::OPERATIONS;

/// The operations that change the root: `fs.write` and `fs.edit`.
pub const MUTATING: [ToolOperation; 2] = [ToolOperation::FsWrite, ToolOperation::FsEdit];

/// Whether `op` changes the root.
pub fn is_mutating(op: ToolOperation) -> bool {
    MUTATING.contains(&op)
}

/// Whether the wire name `op` names a mutating operation (false for an unknown name).
pub fn is_mutating_name(op: &str) -> bool {
    op.parse::<ToolOperation>().is_ok_and(is_mutating)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mutating_set() {
        let mutating: Vec<&str> = OPERATIONS.iter().copied().filter(|o| is_mutating_name(o)).collect();
        assert_eq!(mutating, ["fs.write", "fs.edit"]);
        for op in OPERATIONS {
            let typed: ToolOperation = op.parse().expect("every listed operation is a ToolOperation");
            assert_eq!(typed.to_string(), op);
            assert_eq!(is_mutating(typed), is_mutating_name(op));
        }
        for not_an_op in ["fs.delete", "FS.WRITE", "fs.write ", "", "write"] {
            assert!(!is_mutating_name(not_an_op), "{not_an_op:?}");
        }
    }
}
