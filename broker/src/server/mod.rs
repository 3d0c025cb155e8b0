//! The broker: owns the devices and, per device, what the kmod kept — the NC lease table,
//! device memory granted to each process, an IOVA window per process, device-level init and
//! reset — and cleans up after a process that goes away (docs/sharing.md).
//!
//! One thread accepts; one thread per client reads its requests and watches it (its socket
//! and a pidfd: a process that dies while a forked child still holds its socket is noticed
//! too). All tables sit behind one mutex; requests are short (no device wait under it except
//! a dead client's cleanup, which must finish before its cores are leased again).
//!
//! One file per concern, each using only those listed before it:
//!
//! - [`config`]: [`BrokerConfig`], the IOVA windows, a device host's socket;
//! - `reply`: refusals; `ops`: reclaims and the firmware mailbox (a device as a whole);
//! - `device`: a device's backend, tables and data paths; `state`: the tables' mutex;
//! - `settle`: an adopted device's grace period and its end; `open`: opening a device;
//! - `attach`: attachments and the listing; `adopt`: re-registrations after a restart;
//! - `lease`: leases, grants and the mailbox's users; `cleanup`: taking back a client's;
//! - `dispatch`: one client's connection; `accept`: the accept loop and the stop;
//! - [`activation`]: systemd socket activation.

mod accept;
pub mod activation;
mod adopt;
mod attach;
mod cleanup;
pub mod config;
mod device;
mod dispatch;
mod lease;
mod open;
mod ops;
mod reply;
mod settle;
mod state;

pub use accept::{Broker, Stopper};
pub use activation::{activated_listener, describe};
pub use config::{broker_window, host_socket, iova_window, BrokerConfig, BrokerError, MAX_CLIENTS};
