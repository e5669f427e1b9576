//! The conformance runner: the case model, the engine, the reports and the suites.

pub mod adapter;
pub mod case;
pub mod coverage;
pub mod daemon;
pub mod killmatrix;
pub mod report;
pub mod run;
pub mod script;
pub mod selftest;
