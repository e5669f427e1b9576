//! The contract: the single home of every protocol rule.
//!
//! Every inbound document goes strict JSON → JSON Schema (compiled once) → typed decode into
//! the generated types → the semantic rules a schema cannot express. The reference adapter,
//! the reference daemon and the runners all call these functions.

pub mod error;
pub mod secret;
pub mod text;
pub mod types;

pub use error::{Code, ContractError};
pub use secret::CapabilityHandle;
pub mod schema;
