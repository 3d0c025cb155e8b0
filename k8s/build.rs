//! The kubelet's device plugin services (deviceplugin/v1beta1), generated from their Rust
//! description (tonic-build's manual mode: no .proto file, no protoc). The messages are
//! hand-written prost structs in src/api.rs.

use tonic_build::manual::{Builder, Method, Service};

fn method(name: &str, route: &str, input: &str, output: &str, streaming: bool) -> Method {
    let m = Method::builder()
        .name(name)
        .route_name(route)
        .input_type(format!("crate::api::{input}"))
        .output_type(format!("crate::api::{output}"))
        .codec_path("tonic::codec::ProstCodec");
    if streaming { m.server_streaming() } else { m }.build()
}

fn main() {
    let registration = Service::builder()
        .name("Registration")
        .package("v1beta1")
        .method(method("register", "Register", "RegisterRequest", "Empty", false))
        .build();
    let plugin = Service::builder()
        .name("DevicePlugin")
        .package("v1beta1")
        .method(method("get_device_plugin_options", "GetDevicePluginOptions", "Empty", "DevicePluginOptions", false))
        .method(method("list_and_watch", "ListAndWatch", "Empty", "ListAndWatchResponse", true))
        .method(method(
            "get_preferred_allocation",
            "GetPreferredAllocation",
            "PreferredAllocationRequest",
            "PreferredAllocationResponse",
            false,
        ))
        .method(method("allocate", "Allocate", "AllocateRequest", "AllocateResponse", false))
        .method(method(
            "pre_start_container",
            "PreStartContainer",
            "PreStartContainerRequest",
            "PreStartContainerResponse",
            false,
        ))
        .build();
    Builder::new().compile(&[registration, plugin]);
    println!("cargo:rerun-if-changed=build.rs");
}
