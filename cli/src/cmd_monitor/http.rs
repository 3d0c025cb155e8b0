//! The `/metrics` HTTP endpoint of `monitor --listen`.

use std::sync::{Arc, Mutex};

use crate::report::CliError;

/// Serve `/metrics` from `latest` on `addr` in a background thread; returns the bound address.
pub(super) fn serve_metrics(addr: &str, latest: Arc<Mutex<String>>) -> Result<String, CliError> {
    let server = tiny_http::Server::http(addr)
        .map_err(|e| CliError::invalid(format!("--prometheus {addr}: cannot listen: {e}")))?;
    let bound = server.server_addr().to_string();
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            let ctype = "text/plain; version=0.0.4; charset=utf-8";
            for req in server.incoming_requests() {
                let resp = if req.url() == "/metrics" {
                    let body = platform::sync::lock(&latest).clone();
                    let mut r = tiny_http::Response::from_string(body);
                    if let Ok(h) = tiny_http::Header::from_bytes(&b"Content-Type"[..], ctype.as_bytes()) {
                        r.add_header(h);
                    }
                    r
                } else {
                    tiny_http::Response::from_string("see /metrics\n").with_status_code(404)
                };
                let _ = req.respond(resp);
            }
        })
        .map_err(CliError::failure)?;
    Ok(bound)
}
