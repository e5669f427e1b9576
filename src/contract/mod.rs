//! The contract: the single home of every protocol rule.
//!
//! Every inbound document goes strict JSON → JSON Schema (compiled once) → typed decode into
//! the generated types → the semantic rules a schema cannot express. The reference adapter,
//! the reference daemon and the runners all call these functions.

pub mod codes;
pub mod error;
pub mod secret;
pub mod text;
pub mod types;

pub use codes::{DaemonCode, Retryable};
pub use error::{Code, ContractError};
pub use secret::CapabilityHandle;
pub mod path;
pub mod schema;
pub use path::{is_0_3_3_passed_path, validate_relative_path, PathSide, ToolPath};
pub mod descriptor;
pub mod fingerprint;
pub mod operation;
pub use descriptor::{
    admit_descriptor, const_limits, fit_check, limit_range, limits_from_values, retry_after_ms, Descriptor,
    ExpectedBinding, Identity, LimitValues,
};
pub use types::tool_adapter::AdapterLimits;
pub mod command;
pub mod compose;
pub use command::{judge_command, parse_command, resources_with_tools, Command, CommandError, HostContext};
pub mod frame;
pub mod frame_view;
pub use frame::{parse_adapter_frame, parse_bind_request, Binding, Direction, Disposition, FrameError};
pub mod onepass;
pub mod record;
pub use record::{
    parse_handshake_data, parse_host_record, validate_event, validate_handshake_data, validate_response, HostRecord,
};
pub mod adapter_error;
pub use adapter_error::{AdapterCode, AdapterError};
pub mod adapter_output;
pub mod answer;
pub mod data_order;
pub use adapter_output::{adapter_output_passes, judge_adapter_output};
