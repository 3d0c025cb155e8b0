//! The manifest chain (docs/facts/libnrt.md §1.5-§1.7, gates 10-15): neff.json (fallback kelp.json) →
//! the `__kelf` node → KELF → each graph's def.json → var table, dma_queue, engine jsons, programs.
//!
//! By concern: `json` (the budgeted reader and the typed field accessors), `graph` (def.json and
//! the engines), `ucode` (the GPSIMD libraries), `programs` (the engine programs); this module
//! holds the chain's entry ([`build`]), neff.json's tensors, member resolution and the limits.

mod graph;
mod json;
mod programs;
mod ucode;

use serde_json::Value;

use crate::arch::Target;
use crate::container::{Blob, Container, ReadOptions};
use crate::error::NeffError;
use crate::model::*;
use graph::parse_graph;
use json::*;

pub use json::{json_budget, JsonCost, JSON_BUDGET_CONST, JSON_BUDGET_FACTOR, MAX_JSON_DEPTH, MAX_JSON_OBJECTS};
pub use programs::decode_program;
pub use ucode::RUNTIME_UCODE_MAJOR;

/// Nodes of neff.json.
pub const MAX_NODES: usize = 1 << 16;
/// Vars of one graph's var table.
pub const MAX_VARS: usize = 1 << 20;
/// DMA queues of one graph.
pub const MAX_DMA_QUEUES: usize = 1 << 16;
/// Instructions of one engine program (64-byte slots; SP: 8-byte slots).
pub const MAX_INSTRUCTIONS: usize = 1 << 22;

/// Resolves a member name relative to the subgraph directory first, then as given.
pub(super) fn resolve(c: &Container, dir: &str, name: &str) -> Option<(String, Blob)> {
    let name = name.strip_prefix("./").unwrap_or(name);
    let rel = format!("{dir}{name}");
    if !dir.is_empty() {
        if let Some(b) = c.member(&rel) {
            return Some((rel, b));
        }
    }
    c.member(name).map(|b| (name.to_string(), b))
}

/// [`resolve`] for a streamed member (with `prefix` tried first, as for held members):
/// its name, size and kept head.
pub(super) fn resolve_streamed(
    c: &Container,
    dir: &str,
    name: &str,
    prefix: Option<&str>,
) -> Option<(String, u64, Blob)> {
    let one = |name: &str| {
        let name = name.strip_prefix("./").unwrap_or(name);
        let rel = format!("{dir}{name}");
        if !dir.is_empty() {
            if let Some((n, b)) = c.streamed(&rel) {
                return Some((rel, n, b));
            }
        }
        c.streamed(name).map(|(n, b)| (name.to_string(), n, b))
    };
    prefix.and_then(|p| one(&format!("{p}{name}"))).or_else(|| one(name))
}

/// Builds the model from an unpacked container.
pub fn build(c: &Container, opts: &ReadOptions) -> Result<Neff, NeffError> {
    // Gate 10: neff.json, falling back to kelp.json.
    let manifest_member = ["neff.json", "kelp.json"]
        .into_iter()
        .find(|n| c.member(n).is_some())
        .ok_or(NeffError::MissingNeffJson)?
        .to_string();
    let m = manifest_member.as_str();
    let root = parse_json(c, m)?;
    let root = as_obj(&root, m, "")?;
    let nodes =
        root.get("nodes").and_then(Value::as_array).ok_or_else(|| bad(m, "nodes", "missing or not an array"))?;
    if nodes.len() > MAX_NODES {
        return Err(bad(m, "nodes", format!("{} nodes, over the limit of {MAX_NODES}", nodes.len())));
    }
    let mut kelf_name = None;
    for (i, n) in nodes.iter().enumerate() {
        let Some(attrs) = n.get("attrs").and_then(Value::as_object) else { continue };
        if attrs.get("func_name").and_then(Value::as_str) == Some("__kelf") {
            let k = opt_str(attrs, &["kelf"], m, &format!("nodes[{i}].attrs.kelf"))?
                .ok_or_else(|| bad(m, &format!("nodes[{i}].attrs.kelf"), "the __kelf node names no KELF member"))?;
            kelf_name = Some(k);
            break;
        }
    }
    let kelf_name = kelf_name.ok_or_else(|| bad(m, "nodes", "no node has attrs.func_name == \"__kelf\""))?;
    let (inputs, outputs) = tensor_infos(root, nodes, m)?;

    let (kelf_member, _) = resolve(c, "", &kelf_name).ok_or_else(|| NeffError::MissingMember {
        name: kelf_name.clone(),
        referrer: m.to_string(),
        field: "__kelf node attrs.kelf".into(),
    })?;
    let km = kelf_member.as_str();
    let kv = parse_json(c, km)?;
    let ko = as_obj(&kv, km, "")?;
    let version = opt_str(ko, &["version"], km, "version")?.unwrap_or_default();
    let target_str = opt_str(ko, &["target"], km, "target")?.unwrap_or_default();
    // Gate 11.
    let target = Target::parse(&target_str)
        .ok_or_else(|| NeffError::InvalidTarget { target: target_str.clone(), member: km.to_string() })?;
    if let Some(arch) = opts.arch {
        if !target.matches(arch) && !opts.allow_legacy {
            return Err(NeffError::ArchIncompat {
                target: target_str.clone(),
                member: km.to_string(),
                neff_arch: target.to_string(),
                device_arch: arch.to_string(),
            });
        }
    }
    let graphs_v =
        ko.get("graphs").and_then(Value::as_array).ok_or_else(|| bad(km, "graphs", "missing or not an array"))?;
    if graphs_v.is_empty() {
        return Err(bad(km, "graphs", "the KELF lists no graph"));
    }
    let effective_arch = match target {
        Target::Arch(a) => Some(a),
        Target::Any => opts.arch,
    };
    let mut graphs = Vec::with_capacity(graphs_v.len());
    for (i, g) in graphs_v.iter().enumerate() {
        let f = format!("graphs[{i}]");
        let go = as_obj(g, km, &f)?;
        let def = opt_str(go, &["definition"], km, &format!("{f}.definition"))?
            .ok_or_else(|| bad(km, &format!("{f}.definition"), "missing"))?;
        let gname = opt_str(go, &["name"], km, &format!("{f}.name"))?;
        graphs.push(parse_graph(c, opts, effective_arch, km, &def, gname)?);
    }
    Ok(Neff {
        header: c.header.clone(),
        members: c.members.clone(),
        payload: c.payload.clone(),
        manifest_member,
        inputs,
        outputs,
        kelf: Kelf { member: kelf_member, version, target_str, target },
        graphs,
    })
}

/// Model inputs (`arg_nodes`) and outputs (`heads`) with dtype/shape from graph attrs (§1.5).
fn tensor_infos(root: &Obj, nodes: &[Value], m: &str) -> Result<(Vec<TensorInfo>, Vec<TensorInfo>), NeffError> {
    let attrs = root.get("attrs").and_then(Value::as_object);
    let list_of = |key: &str| -> Option<&Vec<Value>> { attrs?.get(key)?.as_array()?.get(1)?.as_array() };
    let dltypes = list_of("dltype");
    let shapes = list_of("shape");
    let out_names = attrs.and_then(|a| a.get("output_names")).and_then(Value::as_array);
    let row_ptr = match root.get("node_row_ptr") {
        Some(v) => Some(u64_list(v, m, "node_row_ptr")?),
        None => None,
    };
    let node_name = |i: usize| -> String {
        nodes.get(i).and_then(|n| n.get("name")).and_then(Value::as_str).unwrap_or_default().to_string()
    };
    // The var a node writes, when the node names it (a tvm_op's `output` key, top level or in
    // its attrs); libnrt binds outputs by it.
    let node_output = |i: usize| -> Option<String> {
        let n = nodes.get(i)?;
        let o = n.get("output").or_else(|| n.get("attrs")?.get("output"))?;
        o.as_str().map(str::to_string)
    };
    let info = |name: String, eid: u64, field: &str| -> Result<TensorInfo, NeffError> {
        let eidx = usize::try_from(eid).unwrap_or(usize::MAX);
        let dtype = match dltypes {
            Some(d) => d
                .get(eidx)
                .and_then(Value::as_str)
                .ok_or_else(|| bad(m, "attrs.dltype", format!("{field}: no dtype string for entry {eid}")))?
                .to_string(),
            None => String::new(),
        };
        let shape = match shapes {
            Some(s) => {
                let v =
                    s.get(eidx).ok_or_else(|| bad(m, "attrs.shape", format!("{field}: no shape for entry {eid}")))?;
                u64_list(v, m, "attrs.shape")?
            }
            None => Vec::new(),
        };
        if shape.len() > 32 {
            return Err(bad(m, "attrs.shape", format!("{field}: {} dims, io_node_info_t holds 32", shape.len())));
        }
        let (code, esize) = crate::model::nrt_dtype(&dtype);
        let size = shape
            .iter()
            .try_fold(esize, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| bad(m, "attrs.shape", format!("{field}: size of shape {shape:?} overflows")))?;
        Ok(TensorInfo { name, dtype, nrt_dtype: code, shape, size })
    };
    let entry_id = |node: u64, idx: u64, field: &str| -> Result<u64, NeffError> {
        if node as usize >= nodes.len() {
            return Err(bad(m, field, format!("node id {node} out of range ({} nodes)", nodes.len())));
        }
        let base = match &row_ptr {
            Some(r) => {
                *r.get(node as usize).ok_or_else(|| bad(m, "node_row_ptr", format!("no entry for node {node}")))?
            }
            None => node,
        };
        base.checked_add(idx).ok_or_else(|| bad(m, field, "entry id overflows"))
    };
    let mut inputs = Vec::new();
    if let Some(args) = root.get("arg_nodes") {
        for (i, n) in u64_list(args, m, "arg_nodes")?.into_iter().enumerate() {
            let f = format!("arg_nodes[{i}]");
            let eid = entry_id(n, 0, &f)?;
            inputs.push(info(node_name(n as usize), eid, &f)?);
        }
    }
    let mut outputs = Vec::new();
    if let Some(heads) = root.get("heads") {
        let heads = heads.as_array().ok_or_else(|| bad(m, "heads", "expected an array"))?;
        for (i, h) in heads.iter().enumerate() {
            let f = format!("heads[{i}]");
            let h = u64_list(h, m, &f)?;
            let (node, idx) = (h.first().copied().unwrap_or(0), h.get(1).copied().unwrap_or(0));
            if h.is_empty() {
                return Err(bad(m, &f, "empty head entry"));
            }
            let eid = entry_id(node, idx, &f)?;
            let name = match out_names.and_then(|o| o.get(i)).and_then(Value::as_str) {
                Some(n) => n.to_string(),
                None if idx == 0 => node_output(node as usize).unwrap_or_else(|| node_name(node as usize)),
                None => format!("{}:{idx}", node_name(node as usize)),
            };
            outputs.push(info(name, eid, &f)?);
        }
    }
    Ok((inputs, outputs))
}
