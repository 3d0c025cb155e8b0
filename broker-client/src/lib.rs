//! The device broker's client side (docs/sharing.md): what `select` (and through it libnrt.so
//! and the CLI) and the tools use to reach the broker, which owns each shared device and
//! leases its NeuronCores to processes. The broker itself is the `broker` crate.
//!
//! - [`protocol`]: the versioned binary messages, a [`wire::Format`];
//! - [`client`]: a [`Session`] with the broker, finding and starting it;
//! - [`paths`]: where the socket is.

pub mod client;
pub mod paths;
pub mod protocol;

pub use client::{ClientError, Session};
pub use protocol::{DeviceSpec, Role, Want};
