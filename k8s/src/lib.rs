//! The Kubernetes device plugin (docs/kubernetes.md): the kubelet's `deviceplugin/v1beta1`
//! API ([`api`]), the node's devices and cores as the broker sees them ([`inventory`]), the
//! choice of cores to prefer ([`prefer`]) and the plugin's gRPC services ([`plugin`]).

pub mod api;
pub mod inventory;
pub mod plugin;
pub mod prefer;
