//! The device broker (docs/sharing.md): VFIO gives a device to one opener, and the kmod that
//! let many processes share a device — each owning some NeuronCores — is not there, so one
//! process per host and user owns each device and keeps what the kmod kept per device: the NC
//! lease table (exclusive, contiguous ranges; at most 16 processes per device), the device
//! memory granted to each process, an IOVA window per process, device init and reset, and the
//! cleanup of a process that dies. Each client then drives its own cores directly: the broker
//! is on the control path only (attach, lease, memory at load), never per execute.
//!
//! - [`protocol`]: the versioned binary messages; [`wire`]: frames and descriptors on a socket;
//! - [`server`]: the broker; [`client`]: what the runtime, libnrt.so and the tools use;
//! - [`paths`]: where the socket is.

pub mod client;
pub mod paths;
pub mod protocol;
#[cfg(feature = "server")]
pub mod server;
pub mod wire;

pub use client::{ClientError, Session};
pub use protocol::{DeviceSpec, Role, Want};
#[cfg(feature = "server")]
pub use server::{Broker, BrokerConfig, BrokerError};
