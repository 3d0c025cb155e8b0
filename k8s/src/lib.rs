//! The Kubernetes device plugin (docs/kubernetes.md): the kubelet's `deviceplugin/v1beta1`
//! API ([`api`]), the node's devices and cores as the broker sees them ([`inventory`]), the
//! choice of cores to prefer ([`prefer`]), the plugin's gRPC services ([`plugin`]) and the
//! process that runs them ([`daemon`]: the binary's and `neuron-vfio k8s-device-plugin`'s).

pub mod api;
pub mod daemon;
pub mod inventory;
pub mod plugin;
pub mod prefer;
