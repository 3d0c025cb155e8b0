//! The device broker (docs/sharing.md): VFIO gives a device to one opener, and the kmod that
//! let many processes share a device — each owning some NeuronCores — is not there, so one
//! process per host and user owns each device and keeps what the kmod kept per device: the NC
//! lease table (exclusive, contiguous ranges; at most 16 processes per device), the device
//! memory granted to each process, an IOVA window per process, device init and reset, and the
//! cleanup of a process that dies. Each client then drives its own cores directly: the broker
//! is on the control path only (attach, lease, memory at load), never per execute.
//!
//! - [`server`]: the broker, given its settings by `select` ([`BrokerConfig`]);
//! - the client side — the protocol, the session, where the socket is — is the
//!   `broker-client` crate (what libnrt.so and the tools link: no simulator), re-exported
//!   here as [`client`], [`protocol`] and [`paths`].

pub mod server;

pub use broker_client::{client, paths, protocol, ClientError, DeviceSpec, Role, Session, Want};
pub use server::{Broker, BrokerConfig, BrokerError};
