//! Error reporting shared by every command: one clear line on stderr
//! (`error: NRT_…: message`), or JSON `{"status": "NRT_…", "code": N, "error": "…"}` on
//! stdout under `--json`; the exit code is never 0.

use std::fmt;

pub use neff::{NrtStatus, Status};

/// A command failure with the NRT status it maps to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    pub status: NrtStatus,
    pub message: String,
}

impl CliError {
    /// A failure with `status`.
    pub fn new(status: NrtStatus, msg: impl Into<String>) -> Self {
        Self { status, message: msg.into() }
    }
    /// A failure with an optional status (none: NRT_FAILURE).
    pub fn opt(status: Option<NrtStatus>, msg: impl Into<String>) -> Self {
        Self::new(status.unwrap_or(NrtStatus::Failure), msg)
    }
    /// Bad user input (arguments, names, files): NRT_INVALID.
    pub fn invalid(msg: impl fmt::Display) -> Self {
        Self::new(NrtStatus::Invalid, msg.to_string())
    }
    /// Anything else: NRT_FAILURE.
    pub fn failure(msg: impl fmt::Display) -> Self {
        Self::new(NrtStatus::Failure, msg.to_string())
    }
    /// The JSON form.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({"status": self.status.name(), "code": self.status.code(), "error": self.message})
    }
    /// Print to stderr (text) or stdout (JSON).
    pub fn report(&self, json: bool) {
        if json {
            println!("{}", self.to_json());
        } else {
            eprintln!("error: {}: {}", self.status.name(), self.message.replace('\n', " "));
        }
    }
    /// Process exit code: never 0.
    pub fn exit_code(&self) -> i32 {
        match self.status.code() {
            c @ 1..=255 => c as i32,
            _ => 1,
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.status.name(), self.message)
    }
}

impl CliError {
    /// A failure with the status its error names ([`Status::status`], the one mapping every
    /// front end shares) and the error's message.
    pub fn of<E: Status + fmt::Display>(e: E) -> Self {
        Self::new(e.status(), e.to_string())
    }
}

impl From<csr_maps::CsrError> for CliError {
    fn from(e: csr_maps::CsrError) -> Self {
        CliError::of(e)
    }
}

impl From<neff::NeffError> for CliError {
    fn from(e: neff::NeffError) -> Self {
        CliError::of(e)
    }
}

impl From<hal::HalError> for CliError {
    fn from(e: hal::HalError) -> Self {
        CliError::of(e)
    }
}

impl From<hal::q7::UcodeError> for CliError {
    fn from(e: hal::q7::UcodeError) -> Self {
        CliError::of(e)
    }
}

impl From<select::SelectError> for CliError {
    fn from(e: select::SelectError) -> Self {
        CliError::of(e)
    }
}

impl From<runtime::RtError> for CliError {
    fn from(e: runtime::RtError) -> Self {
        CliError::new(e.status, e.message())
    }
}

/// Print a JSON value on one line.
pub fn print_json(v: &serde_json::Value) {
    println!("{v}");
}
