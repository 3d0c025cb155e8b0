//! The manifest chain (docs/facts/libnrt.md §1.5-§1.7, gates 10-15): neff.json (fallback kelp.json) →
//! the `__kelf` node → KELF → each graph's def.json → var table, dma_queue, engine jsons, programs.

use std::collections::{HashMap, HashSet};

use isa::slot::{Instruction, SpSlot, SLOT_BYTES, SLOT_WORDS, SP_SLOT_BYTES};
use serde_json::{Map, Value};

use crate::arch::{Arch, Target};
use crate::container::{Blob, Container, ReadOptions};
use crate::error::NeffError;
use crate::model::*;
use crate::npy::{npy_data_offset, npy_data_range};

type Obj = Map<String, Value>;
/// A def.json table: its shape and (name, entry) pairs.
type Table<'a> = (DefShape, Vec<(String, &'a Obj)>);

/// The runtime's GPSIMD library major version (reference "1.21.1.0").
pub const RUNTIME_UCODE_MAJOR: u64 = 1;

fn bad(member: &str, field: &str, reason: impl Into<String>) -> NeffError {
    NeffError::manifest(member, field, reason)
}

/// Memory budget of parsing one JSON member: [`JSON_BUDGET_FACTOR`] × its bytes plus this.
pub const JSON_BUDGET_CONST: u64 = 1 << 20;
/// Memory budget of parsing one JSON member: this many times its bytes (plus
/// [`JSON_BUDGET_CONST`]).
pub const JSON_BUDGET_FACTOR: u64 = 64;
/// JSON objects one manifest member may hold (each costs a map node whatever its size).
pub const MAX_JSON_OBJECTS: u64 = 1 << 18;
/// Nesting depth of a manifest member (serde_json's own recursion limit).
pub const MAX_JSON_DEPTH: usize = 128;
/// Nodes of neff.json.
pub const MAX_NODES: usize = 1 << 16;
/// Vars of one graph's var table.
pub const MAX_VARS: usize = 1 << 20;
/// DMA queues of one graph.
pub const MAX_DMA_QUEUES: usize = 1 << 16;
/// Instructions of one engine program (64-byte slots; SP: 8-byte slots).
pub const MAX_INSTRUCTIONS: usize = 1 << 22;

/// What a JSON text will cost once parsed into a [`Value`] tree, counted by one pass over its
/// bytes that allocates nothing beyond a nesting stack of at most [`MAX_JSON_DEPTH`] entries.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct JsonCost {
    /// Objects (`{`).
    pub objects: u64,
    /// Object members (`"key": value`).
    pub entries: u64,
    /// Arrays (`[`).
    pub arrays: u64,
    /// Array elements.
    pub elements: u64,
    /// Strings (keys and values).
    pub strings: u64,
    /// Bytes inside strings.
    pub string_bytes: u64,
}

impl JsonCost {
    /// Counts `text`. Malformed JSON is counted as far as it goes (the parser refuses it
    /// afterwards); nesting deeper than [`MAX_JSON_DEPTH`] is an error.
    pub fn scan(text: &[u8]) -> Result<Self, String> {
        let mut c = JsonCost::default();
        // true = array, false = object.
        let mut stack: Vec<bool> = Vec::new();
        let mut in_str = false;
        let mut escaped = false;
        let mut fresh_array = false;
        for &b in text {
            if in_str {
                if escaped {
                    escaped = false;
                } else if b == b'\\' {
                    escaped = true;
                } else if b == b'"' {
                    in_str = false;
                    continue;
                }
                c.string_bytes += 1;
                continue;
            }
            if b.is_ascii_whitespace() {
                continue;
            }
            if fresh_array {
                fresh_array = false;
                if b != b']' {
                    c.elements += 1;
                }
            }
            match b {
                b'"' => {
                    in_str = true;
                    c.strings += 1;
                }
                b'{' | b'[' => {
                    if stack.len() >= MAX_JSON_DEPTH {
                        return Err(format!("nested deeper than {MAX_JSON_DEPTH} levels"));
                    }
                    stack.push(b == b'[');
                    if b == b'[' {
                        c.arrays += 1;
                        fresh_array = true;
                    } else {
                        c.objects += 1;
                    }
                }
                b'}' | b']' => {
                    stack.pop();
                }
                b':' => c.entries += 1,
                b',' if stack.last() == Some(&true) => c.elements += 1,
                _ => {}
            }
        }
        Ok(c)
    }

    /// Estimated bytes of the parsed tree (an upper bound for well-formed JSON): a B-tree node
    /// of 11 key/value slots per object plus a share of a further node per member, a
    /// [`Value`] per array element with the vector's doubling slack, and a heap block per
    /// string.
    pub fn estimated_bytes(&self) -> u64 {
        let value = std::mem::size_of::<Value>() as u64;
        let key = std::mem::size_of::<String>() as u64;
        let node = 11 * (key + value) + 16;
        let heap_block = 16;
        self.objects
            .saturating_mul(node)
            .saturating_add(self.entries.saturating_mul(node / 5 + heap_block))
            .saturating_add(self.arrays.saturating_mul(value))
            .saturating_add(self.elements.saturating_mul(2 * value))
            .saturating_add(self.strings.saturating_mul(heap_block))
            .saturating_add(self.string_bytes)
    }
}

/// The memory budget of parsing `len` bytes of JSON.
pub fn json_budget(len: u64) -> u64 {
    len.saturating_mul(JSON_BUDGET_FACTOR).saturating_add(JSON_BUDGET_CONST)
}

/// Parses member `name` within the memory budget: its cost is counted first and a member that
/// would exceed [`json_budget`] or hold more than [`MAX_JSON_OBJECTS`] objects is refused
/// before any tree is built.
fn parse_json(c: &Container, name: &str) -> Result<Value, NeffError> {
    let blob = c.member(name).ok_or_else(|| bad(name, "", "member is missing"))?;
    let cost = JsonCost::scan(&blob).map_err(|e| bad(name, "", format!("invalid JSON: {e}")))?;
    if cost.objects > MAX_JSON_OBJECTS {
        return Err(bad(
            name,
            "size",
            format!("{} JSON objects, over the limit of {MAX_JSON_OBJECTS} per manifest member", cost.objects),
        ));
    }
    let (need, budget) = (cost.estimated_bytes(), json_budget(blob.len() as u64));
    if need > budget {
        return Err(bad(
            name,
            "size",
            format!(
                "parsing needs an estimated {need} bytes, over the budget of {JSON_BUDGET_FACTOR} x {} bytes + \
                 {JSON_BUDGET_CONST}",
                blob.len()
            ),
        ));
    }
    serde_json::from_slice(&blob).map_err(|e| bad(name, "", format!("invalid JSON: {e}")))
}

fn as_obj<'a>(v: &'a Value, member: &str, field: &str) -> Result<&'a Obj, NeffError> {
    v.as_object().ok_or_else(|| bad(member, field, format!("expected an object, found {}", kind(v))))
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn get<'a>(o: &'a Obj, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().find_map(|k| o.get(*k))
}

fn to_u64(v: &Value, member: &str, field: &str) -> Result<u64, NeffError> {
    v.as_u64().ok_or_else(|| bad(member, field, format!("expected an unsigned integer, found {v}")))
}

fn to_i64(v: &Value, member: &str, field: &str) -> Result<i64, NeffError> {
    v.as_i64().ok_or_else(|| bad(member, field, format!("expected an integer, found {v}")))
}

fn opt_u64(o: &Obj, keys: &[&str], member: &str, field: &str) -> Result<Option<u64>, NeffError> {
    get(o, keys).map(|v| to_u64(v, member, field)).transpose()
}

fn opt_u32(o: &Obj, keys: &[&str], member: &str, field: &str) -> Result<Option<u32>, NeffError> {
    match opt_u64(o, keys, member, field)? {
        None => Ok(None),
        Some(v) => u32::try_from(v).map(Some).map_err(|_| bad(member, field, format!("{v} does not fit in 32 bits"))),
    }
}

fn opt_str(o: &Obj, keys: &[&str], member: &str, field: &str) -> Result<Option<String>, NeffError> {
    match get(o, keys) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(bad(member, field, format!("expected a string, found {}", kind(v)))),
    }
}

fn opt_bool(o: &Obj, key: &str, member: &str, field: &str) -> Result<bool, NeffError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => match v.as_u64() {
            Some(n) => Ok(n != 0),
            None => Err(bad(member, field, format!("expected a bool, found {v}"))),
        },
    }
}

fn u64_list(v: &Value, member: &str, field: &str) -> Result<Vec<u64>, NeffError> {
    let a = v.as_array().ok_or_else(|| bad(member, field, format!("expected an array, found {}", kind(v))))?;
    a.iter().map(|x| to_u64(x, member, field)).collect()
}

fn i64_list(v: &Value, member: &str, field: &str) -> Result<Vec<i64>, NeffError> {
    let a = v.as_array().ok_or_else(|| bad(member, field, format!("expected an array, found {}", kind(v))))?;
    a.iter().map(|x| to_i64(x, member, field)).collect()
}

fn u32_of(v: u64, member: &str, field: &str) -> Result<u32, NeffError> {
    u32::try_from(v).map_err(|_| bad(member, field, format!("{v} does not fit in 32 bits")))
}

/// Entries of a def.json table in either shape: object keyed by name, or array with `name`.
fn table<'a>(v: &'a Value, member: &str, field: &str) -> Result<Table<'a>, NeffError> {
    match v {
        Value::Object(m) => {
            let mut out = Vec::with_capacity(m.len());
            for (k, e) in m {
                out.push((k.clone(), as_obj(e, member, &format!("{field}.{k}"))?));
            }
            Ok((DefShape::Object, out))
        }
        Value::Array(a) => {
            let mut out = Vec::with_capacity(a.len());
            for (i, e) in a.iter().enumerate() {
                let f = format!("{field}[{i}]");
                let o = as_obj(e, member, &f)?;
                let name = opt_str(o, &["name"], member, &format!("{f}.name"))?
                    .ok_or_else(|| bad(member, &f, "array-shaped entry has no \"name\""))?;
                out.push((name, o));
            }
            Ok((DefShape::Array, out))
        }
        other => Err(bad(member, field, format!("expected an object or an array, found {}", kind(other)))),
    }
}

/// Resolves a member name relative to the subgraph directory first, then as given.
fn resolve(c: &Container, dir: &str, name: &str) -> Option<(String, Blob)> {
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
fn resolve_streamed(c: &Container, dir: &str, name: &str, prefix: Option<&str>) -> Option<(String, u64, Blob)> {
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

fn parse_graph(
    c: &Container,
    opts: &ReadOptions,
    arch: Option<&'static Arch>,
    kelf_member: &str,
    def: &str,
    kelf_gname: Option<String>,
) -> Result<Graph, NeffError> {
    let (dm, _) = resolve(c, "", def).ok_or_else(|| NeffError::MissingMember {
        name: def.to_string(),
        referrer: kelf_member.to_string(),
        field: "graphs[].definition".into(),
    })?;
    let dir = match dm.rfind('/') {
        Some(p) => dm[..=p].to_string(),
        None => String::new(),
    };
    let m = dm.as_str();
    let dv = parse_json(c, m)?;
    let d = as_obj(&dv, m, "")?;

    // 1. name
    let def_name = opt_str(d, &["name"], m, "name")?;
    // 2. var (required), dense ids, >= 1 output
    let var_v = d.get("var").ok_or_else(|| bad(m, "var", "missing (the var table is required)"))?;
    let (var_shape, entries) = table(var_v, m, "var")?;
    if entries.len() > MAX_VARS {
        return Err(bad(m, "var", format!("{} vars, over the limit of {MAX_VARS}", entries.len())));
    }
    let mut vars: Vec<Var> = Vec::with_capacity(entries.len());
    for (name, o) in entries {
        vars.push(parse_var(c, &dir, m, &name, o)?);
    }
    check_var_ids(&mut vars, m)?;
    for v in &vars {
        if let Some(r) = v.referenced_var_id {
            if r as usize >= vars.len() {
                return Err(bad(m, &format!("var.{}.referenced_var_id", v.name), format!("{r} is not a var_id")));
            }
        }
    }
    // 3. dma_queue
    let mut dma_queues = Vec::new();
    if let Some(qv) = d.get("dma_queue") {
        let (_, entries) = table(qv, m, "dma_queue")?;
        if entries.len() > MAX_DMA_QUEUES {
            return Err(bad(m, "dma_queue", format!("{} queues, over the limit of {MAX_DMA_QUEUES}", entries.len())));
        }
        for (name, o) in entries {
            dma_queues.push(parse_queue(m, &name, o)?);
        }
    }
    if dma_queues.iter().filter(|q| q.role == QueueRole::DynamicActTbl).count() > 1 {
        return Err(bad(m, "dma_queue", "more than one act_load queue (it must be unique)"));
    }
    // 4. replica_groups, 5. src_target_pairs
    let replica_groups = match d.get("replica_groups") {
        None => Vec::new(),
        Some(v) => {
            let a = v.as_array().ok_or_else(|| bad(m, "replica_groups", "expected an array of arrays"))?;
            let mut out = Vec::with_capacity(a.len());
            for (i, g) in a.iter().enumerate() {
                let f = format!("replica_groups[{i}]");
                out.push(u64_list(g, m, &f)?.into_iter().map(|x| u32_of(x, m, &f)).collect::<Result<_, _>>()?);
            }
            out
        }
    };
    let src_target_pairs = match d.get("src_target_pairs") {
        None => Vec::new(),
        Some(v) => {
            let a = v.as_array().ok_or_else(|| bad(m, "src_target_pairs", "expected an array of arrays"))?;
            a.iter()
                .enumerate()
                .map(|(i, p)| i64_list(p, m, &format!("src_target_pairs[{i}]")))
                .collect::<Result<_, _>>()?
        }
    };
    // 7. ucode_lib
    let ucode_libs = match d.get("ucode_lib") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => parse_ucode_libs(c, &dir, m, v)?,
    };
    // 8. runtime_statebuffer_reservation (gates 14, 15)
    let sb_reservations = match d.get("runtime_statebuffer_reservation") {
        None => {
            if arch == Some(&csr_maps::CAYMAN) && !opts.allow_legacy {
                return Err(bad(
                    m,
                    "runtime_statebuffer_reservation",
                    "missing for a CAYMAN target (legacy NEFF; NEURON_RT_ALLOW_LEGACY_NEFF not set)",
                ));
            }
            Vec::new()
        }
        Some(v) => parse_sb(m, v)?,
    };
    // 9. num_streams, 10. fp8
    let num_streams = opt_u64(d, &["num_streams", "cc_stream"], m, "num_streams")?;
    let fp8 = match d.get("fp8_conversion_config") {
        None | Some(Value::Null) => None,
        Some(v) => Some(parse_fp8(m, as_obj(v, m, "fp8_conversion_config")?)?),
    };
    // 11. engines (name sets keep the cross-reference checks linear)
    let names = Names {
        vars: vars.iter().map(|v| v.name.as_str()).collect(),
        queues: dma_queues.iter().map(|q| q.name.as_str()).collect(),
    };
    let mut engines = Vec::with_capacity(5);
    for kind in EngineKind::ALL {
        engines.push(parse_engine(c, &dir, m, d, kind, &names)?);
    }
    let mut blocks = HashSet::new();
    for e in &engines {
        for b in &e.dma_blocks {
            if !blocks.insert((b.queue.as_str(), b.id)) {
                return Err(bad(
                    m,
                    &format!("{}.dma", e.kind.name()),
                    format!("duplicate block id {} on queue {:?}", b.id, b.queue),
                ));
            }
        }
    }
    check_programs(m, &engines, &vars, &dma_queues, &blocks)?;
    let name = kelf_gname.or_else(|| def_name.clone()).unwrap_or_else(|| dir.trim_end_matches('/').to_string());
    Ok(Graph {
        name,
        definition: dm,
        def_name,
        var_shape,
        vars,
        dma_queues,
        replica_groups,
        src_target_pairs,
        ucode_libs,
        sb_reservations,
        num_streams,
        fp8,
        engines,
    })
}

fn parse_var(c: &Container, dir: &str, m: &str, name: &str, o: &Obj) -> Result<Var, NeffError> {
    let f = |k: &str| format!("var.{name}.{k}");
    let type_str = opt_str(o, &["type", "#transfer-type"], m, &f("type"))?
        .ok_or_else(|| bad(m, &f("type"), "missing (neither \"type\" nor \"#transfer-type\")"))?;
    let kind =
        VarKind::from_type(&type_str).ok_or_else(|| bad(m, &f("type"), format!("unknown var type {type_str:?}")))?;
    let var_id = opt_u32(o, &["var_id"], m, &f("var_id"))?.ok_or_else(|| bad(m, &f("var_id"), "missing"))?;
    let size = opt_u64(o, &["size"], m, &f("size"))?;
    if kind.needs_size() && size.is_none() {
        return Err(bad(m, &f("size"), format!("required for a {type_str} var")));
    }
    if kind == VarKind::Pointer && size != Some(8) {
        return Err(bad(m, &f("size"), format!("a pointer var must have size 8, found {}", size.unwrap_or(0))));
    }
    let alignment = opt_u64(o, &["alignment"], m, &f("alignment"))?;
    if let Some(a) = alignment {
        if !a.is_power_of_two() {
            return Err(bad(m, &f("alignment"), format!("{a} is not a power of 2")));
        }
    }
    let dtype = opt_str(o, &["dtype"], m, &f("dtype"))?;
    let shape = match get(o, &["shape", "internal_shape", "framework_shape"]) {
        Some(v) => u64_list(v, m, &f("shape"))?,
        None => Vec::new(),
    };
    let element_size = opt_u64(o, &["element_size"], m, &f("element_size"))?;
    let file_name = opt_str(o, &["file_name", "#file-name"], m, &f("file_name"))?;
    let prefix = opt_str(o, &["prefix"], m, &f("prefix"))?;
    if kind == VarKind::File && file_name.is_none() {
        return Err(bad(m, &f("file_name"), "a file var needs file_name"));
    }
    let (mut file_member, mut weight_format, mut data, mut streamed) = (None, None, None, None);
    if let Some(fname) = &file_name {
        let found = match &prefix {
            Some(p) => resolve(c, dir, &format!("{p}{fname}")).or_else(|| resolve(c, dir, fname)),
            None => resolve(c, dir, fname),
        };
        match found {
            Some((member, blob)) => {
                if fname.ends_with(".npy") {
                    let r = npy_data_range(&blob).map_err(|e| bad(m, &f("file_name"), format!("{member}: {e}")))?;
                    data = blob.slice(r);
                    weight_format = Some(WeightFormat::Npy);
                } else {
                    data = Some(blob);
                    weight_format = Some(WeightFormat::Raw);
                }
                file_member = Some(member);
            }
            None if resolve_streamed(c, dir, fname, prefix.as_deref()).is_some() => {
                let (member, size, head) =
                    resolve_streamed(c, dir, fname, prefix.as_deref()).ok_or_else(|| bad(m, &f("file_name"), ""))?;
                let offset = if fname.ends_with(".npy") {
                    weight_format = Some(WeightFormat::Npy);
                    npy_data_offset(&head, size).map_err(|e| bad(m, &f("file_name"), format!("{member}: {e}")))?
                } else {
                    weight_format = Some(WeightFormat::Raw);
                    0
                };
                streamed = Some(StreamedData { member: member.clone(), offset, len: size - offset });
                file_member = Some(member);
            }
            // Dangling references: tolerated for optional members (simulator outputs) and for
            // vars whose payload is not loaded from the NEFF (inputs, outputs, buffers).
            None if kind != VarKind::File || fname.ends_with("-simout.npy") => {}
            None => {
                return Err(NeffError::MissingMember {
                    name: fname.clone(),
                    referrer: m.to_string(),
                    field: f("file_name"),
                })
            }
        }
    }
    let held = data.as_ref().map(|d| d.len() as u64).or(streamed.as_ref().map(|s: &StreamedData| s.len));
    if let (Some(sz), Some(d)) = (size, held) {
        if kind == VarKind::File && d < sz {
            return Err(bad(m, &f("size"), format!("size {sz} but the weight payload holds {d} bytes")));
        }
    }
    let list = match o.get("list") {
        Some(v) => {
            u64_list(v, m, &f("list"))?.into_iter().map(|x| u32_of(x, m, &f("list"))).collect::<Result<_, _>>()?
        }
        None => Vec::new(),
    };
    Ok(Var {
        name: name.to_string(),
        var_id,
        kind,
        type_str,
        size,
        alignment,
        dtype,
        shape,
        element_size,
        file_name,
        file_member,
        weight_format,
        data,
        streamed,
        referenced_var_id: opt_u32(o, &["referenced_var_id"], m, &f("referenced_var_id"))?,
        backing_variable_off: opt_u64(o, &["backing_variable_off"], m, &f("backing_variable_off"))?,
        backing_buf: opt_str(o, &["backing_buf"], m, &f("backing_buf"))?,
        list,
    })
}

/// Gate 12: var_ids dense (max + 1 == count, no duplicates) and at least one output.
fn check_var_ids(vars: &mut [Var], m: &str) -> Result<(), NeffError> {
    let n = vars.len();
    let mut seen = vec![false; n];
    for v in vars.iter() {
        let id = v.var_id as usize;
        if id >= n || seen[id] {
            let max = vars.iter().map(|v| v.var_id).max().unwrap_or(0);
            return Err(bad(
                m,
                "var",
                format!("Unexpected var_ids set! {n} vars, max var_id {max}, var {:?} has var_id {id}", v.name),
            ));
        }
        seen[id] = true;
    }
    vars.sort_by_key(|v| v.var_id);
    if !vars.iter().any(|v| v.kind == VarKind::Output) {
        return Err(bad(m, "var", "no Outputs: the var table has no var of type \"output\""));
    }
    Ok(())
}

fn parse_queue(m: &str, name: &str, o: &Obj) -> Result<DmaQueue, NeffError> {
    let f = |k: &str| format!("dma_queue.{name}.{k}");
    let indirect = opt_bool(o, "indirect_memcpy", m, &f("indirect_memcpy"))?;
    let ty = o.get("type");
    let owner = o.get("owner");
    if owner.and_then(Value::as_u64) == Some(5) {
        return Err(bad(m, &f("owner"), "owner 5 is the invalid-engine sentinel"));
    }
    let as_role = |v: Option<&Value>| v.and_then(Value::as_str).and_then(|s| QueueRole::from_str_flag(s, indirect));
    let as_engine = |v: Option<&Value>| match v {
        Some(Value::String(s)) => EngineKind::from_name(s),
        Some(Value::Number(n)) => n.as_u64().and_then(|i| EngineKind::ALL.get(i as usize).copied()),
        _ => None,
    };
    let (role, owner_engine, convention) = if let Some(r) = as_role(ty) {
        (r, as_engine(owner), QueueConvention::TypeIsRole)
    } else if let Some(r) = as_role(owner) {
        (r, as_engine(ty), QueueConvention::OwnerIsRole)
    } else {
        return Err(bad(
            m,
            &f("type"),
            format!(
                "missing role: type {} / owner {} (expected in, out, data, act_load or embedding_update)",
                ty.map(|v| v.to_string()).unwrap_or_else(|| "absent".into()),
                owner.map(|v| v.to_string()).unwrap_or_else(|| "absent".into())
            ),
        ));
    };
    let num_queues = opt_u32(o, &["num_queues"], m, &f("num_queues"))?;
    if role == QueueRole::DynamicActTbl && num_queues.is_some_and(|n| n != 1) {
        return Err(bad(
            m,
            &f("num_queues"),
            format!("an act_load queue must have num_queues 1, found {num_queues:?}"),
        ));
    }
    Ok(DmaQueue {
        name: name.to_string(),
        role,
        owner: owner_engine,
        convention,
        semaphore: opt_u32(o, &["semaphore"], m, &f("semaphore"))?,
        semaphore_set: opt_u32(o, &["semaphore_set"], m, &f("semaphore_set"))?,
        num_queues,
        queue_instances: opt_u32(o, &["queue_instances"], m, &f("queue_instances"))?,
        pinned: opt_bool(o, "pinned", m, &f("pinned"))?,
        dge: opt_bool(o, "dge", m, &f("dge"))?,
        dynamic_dma: opt_bool(o, "dynamic_dma", m, &f("dynamic_dma"))?,
        indirect_memcpy: indirect,
        embedding_update_sync_semaphore: opt_u32(
            o,
            &["embedding_update_sync_semaphore"],
            m,
            &f("embedding_update_sync_semaphore"),
        )?,
    })
}

fn parse_ucode_libs(c: &Container, dir: &str, m: &str, v: &Value) -> Result<Vec<UcodeLib>, NeffError> {
    // A string names a manifest member; arrays / objects are inline.
    let owned;
    let (src, list): (String, &Value) = match v {
        Value::String(s) => {
            let (member, _) = resolve(c, dir, s).ok_or_else(|| NeffError::MissingMember {
                name: s.clone(),
                referrer: m.to_string(),
                field: "ucode_lib".into(),
            })?;
            owned = parse_json(c, &member)?;
            (member, &owned)
        }
        other => (m.to_string(), other),
    };
    let items: Vec<&Value> = match list {
        Value::Array(a) => a.iter().collect(),
        Value::Object(o) => match get(o, &["ucode_lib", "libs"]) {
            Some(Value::Array(a)) => a.iter().collect(),
            _ => vec![list],
        },
        other => return Err(bad(&src, "ucode_lib", format!("expected an array or an object, found {}", kind(other)))),
    };
    let mut out: Vec<UcodeLib> = Vec::with_capacity(items.len());
    let mut seen: HashSet<String> = HashSet::new();
    for (i, it) in items.into_iter().enumerate() {
        let f = |k: &str| format!("ucode_lib[{i}].{k}");
        let o = as_obj(it, &src, &format!("ucode_lib[{i}]"))?;
        let library =
            opt_str(o, &["library"], &src, &f("library"))?.ok_or_else(|| bad(&src, &f("library"), "missing"))?;
        let version = opt_str(o, &["ulib_to_ucode_version", "version"], &src, &f("ulib_to_ucode_version"))?
            .ok_or_else(|| bad(&src, &f("ulib_to_ucode_version"), "missing"))?;
        let version_major = version
            .split('.')
            .next()
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or_else(|| bad(&src, &f("ulib_to_ucode_version"), format!("{version:?} is not X.Y.Z.W")))?;
        if version_major != RUNTIME_UCODE_MAJOR {
            return Err(bad(
                &src,
                &f("ulib_to_ucode_version"),
                format!("Mismatch between GPSIMD lib version and NRT version! lib {version}, runtime major {RUNTIME_UCODE_MAJOR}"),
            ));
        }
        let opcode = match o.get("opcode") {
            Some(v) => to_i64(v, &src, &f("opcode"))?,
            None => 0,
        };
        let flags = if opcode == -123 { 0 } else { 6 };
        let cpu_id = opt_u64(o, &["cpu_id"], &src, &f("cpu_id"))?.unwrap_or(0);
        if cpu_id != 0 {
            return Err(bad(&src, &f("cpu_id"), format!("must be 0, found {cpu_id}")));
        }
        let total_cpus = opt_u64(o, &["total_cpus"], &src, &f("total_cpus"))?.unwrap_or(0);
        if total_cpus > 1 && total_cpus != 8 {
            return Err(bad(&src, &f("total_cpus"), format!("must be 0, 1 or 8, found {total_cpus}")));
        }
        let mut functions = Vec::new();
        if let Some(fv) = o.get("functions") {
            let fa = fv.as_array().ok_or_else(|| bad(&src, &f("functions"), "expected an array"))?;
            for (j, fe) in fa.iter().enumerate() {
                let ff = format!("ucode_lib[{i}].functions[{j}]");
                let fo = as_obj(fe, &src, &ff)?;
                let name = opt_str(fo, &["name"], &src, &format!("{ff}.name"))?.unwrap_or_default();
                let op = opt_u64(fo, &["opcode"], &src, &format!("{ff}.opcode"))?
                    .ok_or_else(|| bad(&src, &format!("{ff}.opcode"), "missing"))?;
                let opcode = u8::try_from(op).map_err(|_| bad(&src, &format!("{ff}.opcode"), format!("{op} > 255")))?;
                let sub_opcode = match opt_u64(fo, &["sub_opcode"], &src, &format!("{ff}.sub_opcode"))? {
                    Some(s) => Some(
                        u8::try_from(s).map_err(|_| bad(&src, &format!("{ff}.sub_opcode"), format!("{s} > 255")))?,
                    ),
                    None => None,
                };
                functions.push(UcodeFunction { name, opcode, sub_opcode });
            }
        }
        let name = opt_str(o, &["name"], &src, &f("name"))?.unwrap_or_else(|| library.clone());
        if !seen.insert(name.clone()) {
            return Err(bad(&src, &f("name"), format!("UCode Library {name} has already been added")));
        }
        let (_, content) = resolve(c, dir, &library).ok_or_else(|| NeffError::MissingMember {
            name: library.clone(),
            referrer: src.clone(),
            field: f("library"),
        })?;
        out.push(UcodeLib {
            name,
            library,
            version,
            version_major,
            opcode,
            flags,
            cpu_id,
            total_cpus,
            functions,
            add_lib: opt_bool(o, "add_lib", &src, &f("add_lib"))?,
            content: Some(content),
        });
    }
    Ok(out)
}

fn parse_sb(m: &str, v: &Value) -> Result<Vec<SbReservation>, NeffError> {
    let a = v.as_array().ok_or_else(|| bad(m, "runtime_statebuffer_reservation", "expected an array"))?;
    let mut out = Vec::with_capacity(a.len());
    for (i, e) in a.iter().enumerate() {
        let f = |k: &str| format!("runtime_statebuffer_reservation[{i}].{k}");
        let o = as_obj(e, m, &format!("runtime_statebuffer_reservation[{i}]"))?;
        let ty = opt_str(o, &["type"], m, &f("type"))?;
        if ty.as_deref() != Some("evtaccel") {
            return Err(bad(
                m,
                &f("type"),
                format!("Invalid runtime_statebuffer_reservation type {ty:?} (must be \"evtaccel\")"),
            ));
        }
        out.push(SbReservation {
            offset: opt_u64(o, &["offset"], m, &f("offset"))?.unwrap_or(0),
            size: opt_u64(o, &["size"], m, &f("size"))?.unwrap_or(0),
            base_partition: opt_u64(o, &["base_partition"], m, &f("base_partition"))?.unwrap_or(0),
            partitions: opt_u64(o, &["partitions"], m, &f("partitions"))?.unwrap_or(0),
        });
    }
    Ok(out)
}

fn parse_fp8(m: &str, o: &Obj) -> Result<Fp8Config, NeffError> {
    let f = |k: &str| format!("fp8_conversion_config.{k}");
    let u8f = |k: &str| -> Result<u8, NeffError> {
        let v = opt_u64(o, &[k], m, &f(k))?.unwrap_or(0);
        u8::try_from(v).map_err(|_| bad(m, &f(k), format!("{v} > 255")))
    };
    Ok(Fp8Config {
        fp8_range_extension: opt_u32(o, &["fp8_range_extension"], m, &f("fp8_range_extension"))?.unwrap_or(0),
        emax_fp8_e4m3: opt_u32(o, &["emax_fp8_e4m3"], m, &f("emax_fp8_e4m3"))?.unwrap_or(0),
        emax_fp8_e5m2: opt_u32(o, &["emax_fp8_e5m2"], m, &f("emax_fp8_e5m2"))?.unwrap_or(0),
        ocp_sat: u8f("ocp_sat")?,
        fp8_sis: u8f("fp8_sis")?,
        fp8_sns: u8f("fp8_sns")?,
    })
}

fn parse_engine(
    c: &Container,
    dir: &str,
    m: &str,
    d: &Obj,
    kind: EngineKind,
    names: &Names<'_>,
) -> Result<EngineProgram, NeffError> {
    let key = kind.name();
    let json_name = opt_str(d, &[key], m, key)?.unwrap_or_else(|| format!("{key}.json"));
    let mut eng = EngineProgram {
        kind,
        json_member: None,
        instr_member: None,
        dma_blocks: Vec::new(),
        code: None,
        program: if kind == EngineKind::Sp { Program::Sp(Vec::new()) } else { Program::Tpb(Vec::new()) },
        act_semaphore: None,
        act_info: None,
    };
    // A missing engine json is an empty placeholder (libnrt warns "Engine %s not found").
    let Some((jm, _)) = resolve(c, dir, &json_name) else { return Ok(eng) };
    let jv = parse_json(c, &jm)?;
    let jo = as_obj(&jv, &jm, "")?;
    eng.act_semaphore = opt_u32(jo, &["act_semaphore"], &jm, "act_semaphore")?;
    eng.act_info = opt_str(jo, &["act_info"], &jm, "act_info")?;
    if let Some(dv) = jo.get("dma") {
        let da = dv.as_array().ok_or_else(|| bad(&jm, "dma", "expected an array"))?;
        for (i, b) in da.iter().enumerate() {
            eng.dma_blocks.push(parse_block(&jm, i, as_obj(b, &jm, &format!("dma[{i}]"))?, names)?);
        }
    }
    if let Some(instr) = opt_str(jo, &["instr"], &jm, "instr")? {
        // A dangling or empty .bin is an empty stream.
        if let Some((bm, blob)) = resolve(c, dir, &instr) {
            eng.program = decode_program(&bm, kind, &blob)?;
            eng.code = Some(blob);
            eng.instr_member = Some(bm);
        }
    }
    eng.json_member = Some(jm);
    Ok(eng)
}

/// Var and queue names of one graph.
struct Names<'a> {
    vars: HashSet<&'a str>,
    queues: HashSet<&'a str>,
}

fn parse_block(jm: &str, i: usize, o: &Obj, names: &Names<'_>) -> Result<DmaBlock, NeffError> {
    let f = |k: &str| format!("dma[{i}].{k}");
    let queue = opt_str(o, &["queue"], jm, &f("queue"))?
        .or(opt_str(o, &["instance_name"], jm, &f("instance_name"))?)
        .ok_or_else(|| bad(jm, &f("queue"), "missing"))?;
    if !names.queues.contains(queue.as_str()) {
        return Err(bad(jm, &f("queue"), format!("{queue:?} is not a dma_queue of this graph")));
    }
    let id = opt_u32(o, &["id"], jm, &f("id"))?.ok_or_else(|| bad(jm, &f("id"), "missing"))?;
    let descs_v =
        o.get("desc").and_then(Value::as_array).ok_or_else(|| bad(jm, &f("desc"), "missing or not an array"))?;
    let mut descs = Vec::with_capacity(descs_v.len());
    for (j, dv) in descs_v.iter().enumerate() {
        let df = |k: &str| format!("dma[{i}].desc[{j}].{k}");
        let d = as_obj(dv, jm, &df(""))?;
        let op_s = opt_str(d, &["op"], jm, &df("op"))?.unwrap_or_else(|| "copy".into());
        let op = DmaOp::from_name(&op_s).ok_or_else(|| bad(jm, &df("op"), format!("unknown op {op_s:?}")))?;
        let leg = |end: &str| -> Result<(String, Vec<u64>, Vec<i64>), NeffError> {
            let var = opt_str(d, &[end], jm, &df(end))?.ok_or_else(|| bad(jm, &df(end), "missing"))?;
            if !names.vars.contains(var.as_str()) {
                return Err(bad(jm, &df(end), format!("{var:?} is not a var of this graph")));
            }
            let sizes_k = format!("{end}_sizes");
            let steps_k = format!("{end}_steps");
            let sizes = match d.get(&sizes_k) {
                Some(v) => u64_list(v, jm, &df(&sizes_k))?,
                None => Vec::new(),
            };
            let steps = match d.get(&steps_k) {
                Some(v) => i64_list(v, jm, &df(&steps_k))?,
                None => Vec::new(),
            };
            if sizes.len() != steps.len() {
                return Err(bad(
                    jm,
                    &df(&sizes_k),
                    format!("{} sizes but {} steps ({sizes:?} / {steps:?})", sizes.len(), steps.len()),
                ));
            }
            if sizes.len() > 8 {
                return Err(bad(jm, &df(&sizes_k), format!("{} dims, at most 8", sizes.len())));
            }
            if let Some(k) = sizes.iter().position(|&s| s == 0) {
                return Err(bad(jm, &df(&sizes_k), format!("size of dim {k} is 0")));
            }
            Ok((var, sizes, steps))
        };
        let (from, from_sizes, from_steps) = leg("from")?;
        let (to, to_sizes, to_steps) = leg("to")?;
        descs.push(DmaDesc { op, from, to, from_sizes, from_steps, to_sizes, to_steps });
    }
    Ok(DmaBlock {
        id,
        queue,
        instance_name: opt_str(o, &["instance_name"], jm, &f("instance_name"))?,
        comment: opt_str(o, &["#comment", "comment"], jm, &f("comment"))?,
        priority_class: opt_u32(o, &["priority_class"], jm, &f("priority_class"))?,
        descs,
    })
}

/// Decodes a `.bin`: 64-byte slots with `inst_word_len == 16` (8-byte slots for SP).
pub fn decode_program(member: &str, kind: EngineKind, b: &[u8]) -> Result<Program, NeffError> {
    let slot = if kind == EngineKind::Sp { SP_SLOT_BYTES } else { SLOT_BYTES };
    if b.len() / slot > MAX_INSTRUCTIONS {
        return Err(bad(
            member,
            "length",
            format!("{} instructions, over the limit of {MAX_INSTRUCTIONS} per engine program", b.len() / slot),
        ));
    }
    if kind == EngineKind::Sp {
        if !b.len().is_multiple_of(SP_SLOT_BYTES) {
            return Err(bad(member, "length", format!("{} bytes is not a multiple of the 8-byte SP slot", b.len())));
        }
        let slots = b
            .chunks_exact(SP_SLOT_BYTES)
            .map(|s| {
                let mut a = [0u8; SP_SLOT_BYTES];
                a.copy_from_slice(s);
                SpSlot::decode(&a)
            })
            .collect();
        return Ok(Program::Sp(slots));
    }
    if !b.len().is_multiple_of(SLOT_BYTES) {
        return Err(bad(member, "length", format!("{} bytes is not a multiple of the 64-byte slot", b.len())));
    }
    let mut out = Vec::with_capacity(b.len() / SLOT_BYTES);
    for (i, s) in b.chunks_exact(SLOT_BYTES).enumerate() {
        let mut a = [0u8; SLOT_BYTES];
        a.copy_from_slice(s);
        if a[1] != SLOT_WORDS {
            return Err(bad(
                member,
                &format!("slot[{i}].inst_word_len"),
                format!("{} (opcode {:#04x}), expected 16", a[1], a[0]),
            ));
        }
        out.push(Instruction::decode(&a));
    }
    Ok(Program::Tpb(out))
}

/// Cross-references the load-time lowering needs: DMA triggers name a queue and one of its
/// blocks; collectives name vars.
fn check_programs(
    m: &str,
    engines: &[EngineProgram],
    vars: &[Var],
    queues: &[DmaQueue],
    blocks: &HashSet<(&str, u32)>,
) -> Result<(), NeffError> {
    let queue_names: HashMap<&str, ()> = queues.iter().map(|q| (q.name.as_str(), ())).collect();
    for e in engines {
        let Program::Tpb(slots) = &e.program else { continue };
        let member = e.instr_member.as_deref().unwrap_or(m);
        for (i, s) in slots.iter().enumerate() {
            match s {
                Instruction::DmaTrigger(t) => {
                    let q = t.queue();
                    if q.is_empty() {
                        return Err(bad(member, &format!("slot[{i}]"), "PSEUDO_DMA_TRIGGER with an empty queue name"));
                    }
                    if !queue_names.contains_key(q.as_str()) {
                        return Err(bad(
                            member,
                            &format!("slot[{i}]"),
                            format!("PSEUDO_DMA_TRIGGER names unknown queue {q:?}"),
                        ));
                    }
                    if t.use_raw_count == 0 && !blocks.contains(&(q.as_str(), t.block_id_or_count)) {
                        return Err(bad(
                            member,
                            &format!("slot[{i}]"),
                            format!(
                                "PSEUDO_DMA_TRIGGER block_id {} is not a DMA block of queue {q:?}",
                                t.block_id_or_count
                            ),
                        ));
                    }
                }
                Instruction::TriggerCollective(t) => {
                    for (what, id) in [("input_tensor_id", t.input_tensor_id), ("output_tensor_id", t.output_tensor_id)]
                    {
                        if id as usize >= vars.len() {
                            return Err(bad(
                                member,
                                &format!("slot[{i}].{what}"),
                                format!("PSEUDO_TRIGGER_COLLECTIVE var_id {id} out of range ({} vars)", vars.len()),
                            ));
                        }
                    }
                }
                _ => {}
            }
        }
    }
    Ok(())
}
