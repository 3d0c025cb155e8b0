//! The kubelet's side of the device plugin API, as its device manager drives a plugin
//! (kubernetes `pkg/kubelet/cm/devicemanager`, `plugin/v1beta1/server.go`, `client.go`,
//! `manager.go`): it serves `Registration` on `kubelet.sock` in the plugin directory and, on a
//! `Register`, checks the version against the supported ones and the resource name as an
//! extended resource name, dials the plugin's endpoint (in the same directory, within 10 s)
//! before answering, asks its options, and reads its `ListAndWatch` stream from then on. An
//! allocation is made as the device manager makes it: the healthy devices not allocated are
//! available, the plugin's preferred ones are asked for when it offers them and taken where
//! available (the rest filled from the available ones), then `Allocate` with one container
//! request, whose answer must carry one container response; a pod's next container (after its
//! init container) is allocated the pod's devices again. Removing a pod gives its devices
//! back. A restart removes every socket of the directory and serves a new `kubelet.sock`.
#![allow(dead_code)]

use k8s::api::device_plugin::device_plugin_client::DevicePluginClient;
use k8s::api::registration::registration_server::{Registration, RegistrationServer};
use k8s::api::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::{Request, Response, Status};

/// What the kubelet knows of one registered resource.
#[derive(Default)]
pub struct Plugin {
    pub endpoint: String,
    pub options: DevicePluginOptions,
    /// The devices of the latest ListAndWatch answer, and when each answer arrived.
    pub devices: Vec<Device>,
    pub updates: Vec<(Instant, Vec<Device>)>,
    pub client: Option<DevicePluginClient<tonic::transport::Channel>>,
}

#[derive(Default)]
pub struct State {
    pub plugins: BTreeMap<String, Plugin>,
    /// Registrations in order: (resource, when).
    pub registrations: Vec<(String, Instant)>,
    /// Devices per pod, per resource.
    pub pods: BTreeMap<String, (String, Vec<String>)>,
    /// The tasks reading each plugin's ListAndWatch stream.
    pub readers: Vec<tokio::task::JoinHandle<()>>,
}

pub type Shared = Arc<Mutex<State>>;

pub fn lock(s: &Shared) -> std::sync::MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

struct Reg {
    dir: PathBuf,
    state: Shared,
}

/// The API machinery's extended resource name check, as the kubelet applies it: a
/// domain-prefixed name (`domain/name`) outside the `kubernetes.io` namespace, not a quota
/// `requests.` name, each part non-empty.
fn is_extended_resource_name(name: &str) -> bool {
    let Some((domain, rest)) = name.split_once('/') else { return false };
    let refused = domain.is_empty()
        || rest.is_empty()
        || rest.contains('/')
        || domain == "kubernetes.io"
        || domain.ends_with(".kubernetes.io")
        || name.starts_with("requests.");
    !refused
}

#[tonic::async_trait]
impl Registration for Reg {
    async fn register(&self, req: Request<RegisterRequest>) -> Result<Response<Empty>, Status> {
        let r = req.into_inner();
        if r.version != VERSION {
            return Err(Status::unknown(format!("version {} not supported ([v1beta1])", r.version)));
        }
        if !is_extended_resource_name(&r.resource_name) {
            return Err(Status::unknown(format!("invalid resource name {}", r.resource_name)));
        }
        if r.endpoint.is_empty() || r.endpoint.contains('/') {
            return Err(Status::unknown(format!("bad endpoint {}", r.endpoint)));
        }
        let sock = self.dir.join(&r.endpoint);
        let ch = tokio::time::timeout(Duration::from_secs(10), k8s::plugin::unix_channel(sock))
            .await
            .map_err(|_| Status::unknown("dial timed out"))?
            .map_err(|e| Status::unknown(format!("dial: {e}")))?;
        let mut client = DevicePluginClient::new(ch);
        let options = client.get_device_plugin_options(Empty {}).await?.into_inner();
        let mut stream = client.list_and_watch(Empty {}).await?.into_inner();
        {
            let mut st = lock(&self.state);
            st.registrations.push((r.resource_name.clone(), Instant::now()));
            st.plugins.insert(
                r.resource_name.clone(),
                Plugin { endpoint: r.endpoint.clone(), options, client: Some(client), ..Default::default() },
            );
        }
        let (state, res) = (self.state.clone(), r.resource_name.clone());
        let reader = tokio::spawn(async move {
            while let Ok(Some(resp)) = stream.message().await {
                let mut st = lock(&state);
                if let Some(p) = st.plugins.get_mut(&res) {
                    p.devices = resp.devices.clone();
                    p.updates.push((Instant::now(), resp.devices));
                }
            }
        });
        lock(&self.state).readers.push(reader);
        Ok(Response::new(Empty {}))
    }
}

/// A kubelet's device manager on a plugin directory.
pub struct Kubelet {
    pub dir: PathBuf,
    pub state: Shared,
    pub rt: tokio::runtime::Runtime,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<()>>,
}

impl Kubelet {
    pub fn start(dir: &Path) -> Self {
        std::fs::create_dir_all(dir).expect("plugin dir");
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        let mut k = Self { dir: dir.to_path_buf(), state: Shared::default(), rt, stop: None, server: None };
        k.serve();
        k
    }

    fn serve(&mut self) {
        let sock = self.dir.join(KUBELET_SOCKET);
        let _ = std::fs::remove_file(&sock);
        let listener = {
            let _g = self.rt.enter();
            tokio::net::UnixListener::bind(&sock).expect("kubelet.sock")
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let svc = RegistrationServer::new(Reg { dir: self.dir.clone(), state: self.state.clone() });
        self.server = Some(self.rt.spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming_shutdown(tokio_stream::wrappers::UnixListenerStream::new(listener), async {
                    let _ = rx.await;
                })
                .await;
        }));
        self.stop = Some(tx);
    }

    /// A kubelet restart: the registration server stops, the directory's sockets are removed
    /// (the device manager's start cleans the directory but for its checkpoint), the plugins
    /// are forgotten, and a new `kubelet.sock` is served.
    pub fn restart(&mut self) {
        // The process ends: its connections to the plugins close with it.
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(h) = self.server.take() {
            h.abort();
        }
        for r in std::mem::take(&mut lock(&self.state).readers) {
            r.abort();
        }
        for e in std::fs::read_dir(&self.dir).expect("dir").flatten() {
            let _ = std::fs::remove_file(e.path());
        }
        {
            let mut st = lock(&self.state);
            st.plugins.clear();
            st.registrations.clear();
        }
        self.serve();
    }

    /// Wait until `f` holds of the state (panics after `limit`).
    pub fn wait<T>(&self, limit: Duration, what: &str, mut f: impl FnMut(&State) -> Option<T>) -> T {
        let t0 = Instant::now();
        loop {
            if let Some(v) = f(&lock(&self.state)) {
                return v;
            }
            assert!(t0.elapsed() < limit, "timed out after {limit:?} waiting for {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The devices of `resource` that are healthy and allocated to no pod.
    pub fn available(&self, resource: &str) -> Vec<String> {
        let st = lock(&self.state);
        let used: BTreeSet<&String> =
            st.pods.values().filter(|(r, _)| r == resource).flat_map(|(_, d)| d.iter()).collect();
        st.plugins
            .get(resource)
            .map(|p| {
                p.devices
                    .iter()
                    .filter(|d| d.health == HEALTHY && !used.contains(&d.id))
                    .map(|d| d.id.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn client(&self, resource: &str) -> (DevicePluginClient<tonic::transport::Channel>, DevicePluginOptions) {
        let st = lock(&self.state);
        let p = st.plugins.get(resource).expect("registered resource");
        (p.client.clone().expect("client"), p.options.clone())
    }

    /// The plugin's preferred ids for `size` of `available` including `must`.
    pub fn preferred(&self, resource: &str, available: &[String], must: &[String], size: usize) -> Vec<String> {
        let (mut c, _) = self.client(resource);
        let req = PreferredAllocationRequest {
            container_requests: vec![ContainerPreferredAllocationRequest {
                available_device_ids: available.to_vec(),
                must_include_device_ids: must.to_vec(),
                allocation_size: size as i32,
            }],
        };
        let resp = self.rt.block_on(c.get_preferred_allocation(req)).expect("GetPreferredAllocation").into_inner();
        assert_eq!(resp.container_responses.len(), 1);
        resp.container_responses[0].device_ids.clone()
    }

    /// Admit `pod` with one container asking `size` devices of `resource`, as the device
    /// manager does; returns the devices and the container's allocation.
    pub fn admit(&self, pod: &str, resource: &str, size: usize) -> (Vec<String>, ContainerAllocateResponse) {
        let available = self.available(resource);
        assert!(available.len() >= size, "{resource}: {size} wanted, {} available", available.len());
        let (mut c, options) = self.client(resource);
        let mut devs: Vec<String> = Vec::new();
        if available.len() == size {
            devs = available.clone();
        } else if options.get_preferred_allocation_available {
            for id in self.preferred(resource, &available, &[], size) {
                if available.contains(&id) && !devs.contains(&id) && devs.len() < size {
                    devs.push(id);
                }
            }
        }
        for id in &available {
            if devs.len() == size {
                break;
            }
            if !devs.contains(id) {
                devs.push(id.clone());
            }
        }
        let req = AllocateRequest { container_requests: vec![ContainerAllocateRequest { devices_ids: devs.clone() }] };
        let resp = self.rt.block_on(c.allocate(req)).expect("Allocate").into_inner();
        assert_eq!(resp.container_responses.len(), 1, "one response per container request");
        lock(&self.state).pods.insert(pod.to_string(), (resource.to_string(), devs.clone()));
        (devs, resp.container_responses[0].clone())
    }

    /// Allocate for another container of `pod` with the pod's devices, as the device manager
    /// does when a container reuses its init container's devices (one Allocate per container).
    pub fn allocate_container(&self, pod: &str) -> ContainerAllocateResponse {
        let (resource, devs) = lock(&self.state).pods.get(pod).cloned().expect("an admitted pod");
        let (mut c, _) = self.client(&resource);
        let req = AllocateRequest { container_requests: vec![ContainerAllocateRequest { devices_ids: devs }] };
        let resp = self.rt.block_on(c.allocate(req)).expect("Allocate").into_inner();
        assert_eq!(resp.container_responses.len(), 1, "one response per container request");
        resp.container_responses[0].clone()
    }

    /// The pod is gone: its devices are free again.
    pub fn remove_pod(&self, pod: &str) {
        lock(&self.state).pods.remove(pod);
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

#[test]
fn extended_resource_names_are_checked_as_the_kubelet_checks_them() {
    assert!(is_extended_resource_name("aws.amazon.com/neuroncore"));
    for bad in ["neuroncore", "kubernetes.io/x", "node.kubernetes.io/x", "a/b/c", "/x", "a/", "requests.a/b"] {
        assert!(!is_extended_resource_name(bad), "{bad}");
    }
}
