//! Error reporting shared by every command: one clear line, or JSON
//! `{"status": "NRT_…", "code": N, "error": "…"}` under `--json`.

use std::fmt;

/// A command failure with the NRT status it maps to.
#[derive(Debug)]
pub struct CliError {
    /// NRT status name (`NRT_INVALID`, ...).
    pub status: &'static str,
    /// NRT status code.
    pub code: i64,
    pub message: String,
}

impl CliError {
    /// Bad user input (arguments, names, files): NRT_INVALID (2).
    pub fn invalid(msg: impl fmt::Display) -> Self {
        Self { status: "NRT_INVALID", code: 2, message: msg.to_string() }
    }
    /// Anything else: NRT_FAILURE (1).
    pub fn failure(msg: impl fmt::Display) -> Self {
        Self { status: "NRT_FAILURE", code: 1, message: msg.to_string() }
    }
    /// Print to stderr (text) or stdout (JSON).
    pub fn print(&self, json: bool) {
        if json {
            let v = serde_json::json!({"status": self.status, "code": self.code, "error": self.message});
            println!("{v}");
        } else {
            eprintln!("error: {}", self.message);
        }
    }
    /// Process exit code: never 0.
    pub fn exit_code(&self) -> i32 {
        if self.code > 0 && self.code < 256 {
            self.code as i32
        } else {
            1
        }
    }
}

impl From<csr_maps::CsrError> for CliError {
    fn from(e: csr_maps::CsrError) -> Self {
        match e {
            csr_maps::CsrError::Mmio(_) => CliError::failure(e),
            _ => CliError::invalid(e),
        }
    }
}

/// Print a JSON value on one line.
pub fn print_json(v: &serde_json::Value) {
    println!("{v}");
}
