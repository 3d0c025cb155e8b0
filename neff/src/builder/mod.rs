//! Writer: builds valid NEFFs (GNU ustar, gzip, MD5 — or pkg 1 tar + SHA-256) from a model
//! description. Used by tests, examples and benchmarks; `write → Neff::parse` gives the model back.
//! libnrt's built-in test model and its variants (`models.rs`) are behind the `test-models`
//! feature.
//!
//! Layout emitted (docs/facts/libnrt.md §1.4-§1.5): `neff.json` (TVM graph with a `__kelf` node),
//! `kelf-a.json`, per graph `sgNN/def.json`, `sgNN/<eng>.json` + `sgNN/<eng>.bin`, weights,
//! ucode libraries, plus any extra members.

use std::io::{self, Read, Seek, SeekFrom, Write};

use crate::header::{NeffHeader, NEFF_HEADER_SIZE, PKG_VERSION_GZIP_MD5, PKG_VERSION_TAR_SHA256};
use isa::slot::{Instruction, SLOT_BYTES};
use md5::Digest as _;
use serde_json::{json, Map, Value};

use crate::model::{
    DefShape, DmaBlock, DmaDesc, DmaOp, Engine, Fp8Config, QueueConvention, QueueRole, SbReservation, VarKind,
    WeightFormat,
};
use crate::npy::{npy_descr, npy_encode};

#[cfg(feature = "test-models")]
mod models;
#[cfg(feature = "test-models")]
pub use models::{
    allreduce_graph, allreduce_model, allreduce_model_lnc, copy_desc, sems, single_nc_allreduce, two_nc_allreduce,
    weights_model,
};

/// Writer failures.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("writing the NEFF: {0}")]
    Io(#[from] io::Error),
    #[error("invalid model description: {0}")]
    Invalid(String),
}

/// A model input/output for neff.json.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorDesc {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<u64>,
}

/// A weight payload of a `file` var.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightDesc {
    pub format: WeightFormat,
    pub data: Vec<u8>,
}

/// One var (its var_id is its index in [`GraphDesc::vars`]).
#[derive(Debug, Clone, PartialEq)]
pub struct VarDesc {
    pub name: String,
    pub kind: VarKind,
    pub size: u64,
    pub dtype: Option<String>,
    pub shape: Vec<u64>,
    pub element_size: Option<u64>,
    pub weights: Option<WeightDesc>,
    /// A virtual var's backing var (`backing_buf`) and byte offset (`backing_variable_off`).
    pub backing: Option<(String, u64)>,
}

impl VarDesc {
    pub fn new(name: &str, kind: VarKind, size: u64) -> Self {
        VarDesc {
            name: name.into(),
            kind,
            size,
            dtype: None,
            shape: Vec::new(),
            element_size: None,
            weights: None,
            backing: None,
        }
    }
    /// A float32 tensor of `n` elements, shape `[1,1,1,n]` (the fixture's internal_shape).
    pub fn f32(name: &str, kind: VarKind, n: u64) -> Self {
        VarDesc {
            dtype: Some("float32".into()),
            shape: vec![1, 1, 1, n],
            element_size: Some(4),
            ..VarDesc::new(name, kind, n * 4)
        }
    }
}

/// One dma_queue.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueDesc {
    pub name: String,
    pub role: QueueRole,
    pub owner: Engine,
    pub semaphore: Option<u32>,
}

/// One engine: its DMA blocks and its program bytes (64-byte slots, 8-byte for SP).
#[derive(Debug, Clone, PartialEq)]
pub struct EngineDesc {
    pub kind: Engine,
    pub dma_blocks: Vec<DmaBlock>,
    pub code: Vec<u8>,
}

impl EngineDesc {
    pub fn new(kind: Engine) -> Self {
        EngineDesc { kind, dma_blocks: Vec::new(), code: Vec::new() }
    }
    /// Appends one slot.
    pub fn push(&mut self, i: &Instruction) {
        self.code.extend_from_slice(&i.encode());
    }
}

/// One GPSIMD ucode library.
#[derive(Debug, Clone, PartialEq)]
pub struct UcodeLibDesc {
    pub name: String,
    pub library: String,
    pub version: String,
    pub opcode: i64,
    pub cpu_id: u64,
    pub total_cpus: u64,
    /// (name, opcode, sub_opcode)
    pub functions: Vec<(String, u8, Option<u8>)>,
    pub content: Vec<u8>,
}

/// One subgraph.
#[derive(Debug, Clone, PartialEq)]
pub struct GraphDesc {
    pub name: String,
    pub vars: Vec<VarDesc>,
    pub queues: Vec<QueueDesc>,
    pub replica_groups: Vec<Vec<u32>>,
    pub src_target_pairs: Vec<Vec<i64>>,
    pub ucode_libs: Vec<UcodeLibDesc>,
    /// `None` omits the key.
    pub sb_reservations: Option<Vec<SbReservation>>,
    pub num_streams: Option<u64>,
    pub fp8: Option<Fp8Config>,
    pub engines: Vec<EngineDesc>,
}

impl GraphDesc {
    pub fn new(name: &str) -> Self {
        GraphDesc {
            name: name.into(),
            vars: Vec::new(),
            queues: Vec::new(),
            replica_groups: vec![vec![]],
            src_target_pairs: Vec::new(),
            ucode_libs: Vec::new(),
            sb_reservations: Some(Vec::new()),
            num_streams: None,
            fp8: None,
            engines: Vec::new(),
        }
    }
    /// var_id of a var by name.
    pub fn var_id(&self, name: &str) -> Option<u32> {
        self.vars.iter().position(|v| v.name == name).map(|i| i as u32)
    }
}

/// A whole model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelDesc {
    pub name: String,
    pub build_version: String,
    pub uuid: [u8; 16],
    pub neff_version: (u64, u64),
    pub feature_bits: u64,
    pub kelf_version: String,
    pub target: String,
    /// Physical NeuronCores per logical NeuronCore the model was compiled for (the header's
    /// `vnc_size`; the compiler's `--lnc`): its graphs are one per physical core, so a model
    /// for one logical core of size 2 has two.
    pub vnc_size: u32,
    pub inputs: Vec<TensorDesc>,
    pub outputs: Vec<TensorDesc>,
    pub graphs: Vec<GraphDesc>,
    /// Shape of `var` / `dma_queue` in def.json.
    pub def_shape: DefShape,
    /// Where the queue role goes.
    pub queue_convention: QueueConvention,
    /// Use `kelp.json` instead of `neff.json`.
    pub legacy_manifest_name: bool,
    /// Members appended verbatim (after the generated ones).
    pub extra_members: Vec<(String, Vec<u8>)>,
}

/// Writer options.
#[derive(Debug, Clone)]
pub struct WriteOptions {
    /// 2 = gzip + MD5 (default), 1 = plain tar + SHA-256.
    pub pkg_version: u64,
    /// gzip level 0..=9.
    pub level: u32,
    /// Prefix member paths with `./`.
    pub dot_slash: bool,
    /// Emit `sgNN/` directory entries.
    pub dir_entries: bool,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions { pkg_version: PKG_VERSION_GZIP_MD5, level: 6, dot_slash: false, dir_entries: true }
    }
}

/// A member body: owned bytes or an npy header followed by borrowed data.
pub enum Body<'a> {
    Owned(Vec<u8>),
    Borrowed(&'a [u8]),
    Prefixed(Vec<u8>, &'a [u8]),
}

impl Body<'_> {
    pub fn len(&self) -> usize {
        match self {
            Body::Owned(v) => v.len(),
            Body::Borrowed(b) => b.len(),
            Body::Prefixed(h, b) => h.len() + b.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The bytes, concatenated (copies).
    pub fn to_vec(&self) -> Vec<u8> {
        match self {
            Body::Owned(v) => v.clone(),
            Body::Borrowed(b) => b.to_vec(),
            Body::Prefixed(h, b) => [h.as_slice(), b].concat(),
        }
    }
}

fn json_bytes(v: &Value) -> Vec<u8> {
    // serde_json's Value serializer cannot fail (string keys only).
    serde_json::to_vec_pretty(v).unwrap_or_default()
}

impl ModelDesc {
    pub fn new(name: &str) -> Self {
        ModelDesc {
            name: name.into(),
            build_version: "0.1.0%neuron-vfio@builder".into(),
            uuid: [0x4E; 16],
            neff_version: (2, 0),
            feature_bits: 0,
            kelf_version: "0.6-".into(),
            target: "sunda".into(),
            vnc_size: 1,
            inputs: Vec::new(),
            outputs: Vec::new(),
            graphs: Vec::new(),
            def_shape: DefShape::Object,
            queue_convention: QueueConvention::TypeIsRole,
            legacy_manifest_name: false,
            extra_members: Vec::new(),
        }
    }

    fn neff_json(&self) -> Value {
        // nodes: one "null" node per input, then the __kelf node (outputs are its entries).
        let mut nodes = Vec::new();
        let mut row_ptr = Vec::new();
        let mut dltype = Vec::new();
        let mut shapes = Vec::new();
        let mut entry = 0u64;
        for t in &self.inputs {
            row_ptr.push(entry);
            nodes.push(json!({"op": "null", "name": t.name, "inputs": []}));
            dltype.push(t.dtype.clone());
            shapes.push(t.shape.clone());
            entry += 1;
        }
        let kelf_id = nodes.len();
        row_ptr.push(entry);
        let ins: Vec<Value> = (0..self.inputs.len()).map(|i| json!([i, 0, 0])).collect();
        nodes.push(json!({
            "op": "tvm_op",
            "name": self.name,
            "inputs": ins,
            "attrs": {"func_name": "__kelf", "kelf": "kelf-a.json", "num_outputs": self.outputs.len().to_string()}
        }));
        for t in &self.outputs {
            dltype.push(t.dtype.clone());
            shapes.push(t.shape.clone());
            entry += 1;
        }
        row_ptr.push(entry);
        let heads: Vec<Value> = (0..self.outputs.len()).map(|i| json!([kelf_id, i, 0])).collect();
        let out_names: Vec<&str> = self.outputs.iter().map(|t| t.name.as_str()).collect();
        json!({
            "nodes": nodes,
            "arg_nodes": (0..self.inputs.len()).collect::<Vec<_>>(),
            "heads": heads,
            "node_row_ptr": row_ptr,
            "attrs": {
                "dltype": ["list_str", dltype],
                "shape": ["list_shape", shapes],
                "storage_id": ["list_int", (0..entry).collect::<Vec<_>>()],
                "output_names": out_names,
            }
        })
    }

    fn def_json(&self, gi: usize, g: &GraphDesc) -> Value {
        let dir = format!("sg{gi:02}/");
        let table = |items: Vec<(String, Map<String, Value>)>| -> Value {
            match self.def_shape {
                DefShape::Object => Value::Object(items.into_iter().map(|(k, v)| (k, Value::Object(v))).collect()),
                DefShape::Array => Value::Array(
                    items
                        .into_iter()
                        .map(|(k, mut v)| {
                            v.insert("name".into(), Value::String(k));
                            Value::Object(v)
                        })
                        .collect(),
                ),
            }
        };
        let vars = g
            .vars
            .iter()
            .enumerate()
            .map(|(id, v)| {
                let mut o = Map::new();
                // The fixture spells these "#transfer-type"/"#file-name"; the array shape uses MS names.
                let (tkey, fkey) = if self.def_shape == DefShape::Object {
                    ("#transfer-type", "#file-name")
                } else {
                    ("type", "file_name")
                };
                o.insert(tkey.into(), json!(v.kind.type_str()));
                o.insert("var_id".into(), json!(id));
                o.insert("size".into(), json!(v.size));
                if let Some(d) = &v.dtype {
                    o.insert("dtype".into(), json!(d));
                }
                if !v.shape.is_empty() {
                    o.insert("internal_shape".into(), json!(v.shape));
                }
                if let Some(e) = v.element_size {
                    o.insert("element_size".into(), json!(e));
                }
                if let Some(w) = &v.weights {
                    o.insert(fkey.into(), json!(weight_member_name(v, w)));
                }
                if let Some((b, off)) = &v.backing {
                    o.insert("backing_buf".into(), json!(b));
                    o.insert("backing_variable_off".into(), json!(off));
                }
                (v.name.clone(), o)
            })
            .collect();
        let queues = g
            .queues
            .iter()
            .map(|q| {
                let mut o = Map::new();
                let (role, owner) = (q.role.as_str(), q.owner.name());
                match self.queue_convention {
                    QueueConvention::TypeIsRole => {
                        o.insert("type".into(), json!(role));
                        o.insert("owner".into(), json!(owner));
                    }
                    QueueConvention::OwnerIsRole => {
                        o.insert("owner".into(), json!(role));
                        o.insert("type".into(), json!(owner));
                    }
                }
                if q.role == QueueRole::IndirectMemcpy {
                    o.insert("indirect_memcpy".into(), json!(true));
                }
                if let Some(s) = q.semaphore {
                    o.insert("semaphore".into(), json!(s));
                }
                (q.name.clone(), o)
            })
            .collect();
        let mut d = Map::new();
        d.insert("name".into(), json!(g.name));
        d.insert("version".into(), json!("0.6-"));
        d.insert("var".into(), table(vars));
        d.insert("dma_queue".into(), table(queues));
        d.insert("replica_groups".into(), json!(g.replica_groups));
        d.insert("src_target_pairs".into(), json!(g.src_target_pairs));
        if !g.ucode_libs.is_empty() {
            let libs: Vec<Value> = g
                .ucode_libs
                .iter()
                .map(|l| {
                    let fs: Vec<Value> = l
                        .functions
                        .iter()
                        .map(|(n, op, sub)| match sub {
                            Some(s) => json!({"name": n, "opcode": op, "sub_opcode": s}),
                            None => json!({"name": n, "opcode": op}),
                        })
                        .collect();
                    json!({"name": l.name, "library": l.library, "ulib_to_ucode_version": l.version,
                           "opcode": l.opcode, "cpu_id": l.cpu_id, "total_cpus": l.total_cpus, "functions": fs})
                })
                .collect();
            d.insert("ucode_lib".into(), Value::Array(libs));
        }
        if let Some(sb) = &g.sb_reservations {
            let v: Vec<Value> = sb
                .iter()
                .map(|r| {
                    json!({"type": "evtaccel", "offset": r.offset, "size": r.size,
                                 "base_partition": r.base_partition, "partitions": r.partitions})
                })
                .collect();
            d.insert("runtime_statebuffer_reservation".into(), Value::Array(v));
        }
        if let Some(n) = g.num_streams {
            d.insert("num_streams".into(), json!(n));
        }
        if let Some(f) = &g.fp8 {
            d.insert(
                "fp8_conversion_config".into(),
                json!({"fp8_range_extension": f.fp8_range_extension, "emax_fp8_e4m3": f.emax_fp8_e4m3,
                       "emax_fp8_e5m2": f.emax_fp8_e5m2, "ocp_sat": f.ocp_sat, "fp8_sis": f.fp8_sis,
                       "fp8_sns": f.fp8_sns}),
            );
        }
        for e in &g.engines {
            d.insert(e.kind.name().into(), json!(format!("{}.json", e.kind.name())));
        }
        d.insert("debug_info".into(), json!({"wavegraph": format!("{dir}wavegraph-bin.json")}));
        Value::Object(d)
    }

    fn engine_json(e: &EngineDesc) -> Value {
        let blocks: Vec<Value> = e
            .dma_blocks
            .iter()
            .map(|b| {
                let descs: Vec<Value> = b.descs.iter().map(desc_json).collect();
                let mut o = json!({"queue": b.queue, "id": b.id, "desc": descs});
                if let (Some(c), Some(m)) = (&b.comment, o.as_object_mut()) {
                    m.insert("#comment".into(), json!(c));
                }
                o
            })
            .collect();
        json!({"dma": blocks, "instr": format!("{}.bin", e.kind.name()), "name": format!("{}_array_json", e.kind.name())})
    }

    /// Every member the writer will emit, in write order (directories as names ending in `/`).
    pub fn members(&self) -> Vec<(String, Body<'_>)> {
        let mut out: Vec<(String, Body<'_>)> = Vec::new();
        let manifest = if self.legacy_manifest_name { "kelp.json" } else { "neff.json" };
        out.push((manifest.into(), Body::Owned(json_bytes(&self.neff_json()))));
        let graphs: Vec<Value> = self
            .graphs
            .iter()
            .enumerate()
            .map(|(i, g)| json!({"name": g.name, "definition": format!("sg{i:02}/def.json")}))
            .collect();
        let kelf = json!({"version": self.kelf_version, "target": self.target, "graphs": graphs});
        out.push(("kelf-a.json".into(), Body::Owned(json_bytes(&kelf))));
        for (gi, g) in self.graphs.iter().enumerate() {
            let dir = format!("sg{gi:02}/");
            out.push((dir.clone(), Body::Owned(Vec::new())));
            out.push((format!("{dir}def.json"), Body::Owned(json_bytes(&self.def_json(gi, g)))));
            for e in &g.engines {
                out.push((format!("{dir}{}.json", e.kind.name()), Body::Owned(json_bytes(&Self::engine_json(e)))));
                out.push((format!("{dir}{}.bin", e.kind.name()), Body::Borrowed(&e.code)));
            }
            for v in &g.vars {
                if let Some(w) = &v.weights {
                    let name = format!("{dir}{}", weight_member_name(v, w));
                    let body = match w.format {
                        WeightFormat::Raw => Body::Borrowed(&w.data),
                        WeightFormat::Npy => {
                            let descr = npy_descr(v.dtype.as_deref().unwrap_or(""));
                            let shape = if v.shape.is_empty() { vec![w.data.len() as u64] } else { v.shape.clone() };
                            let mut hdr = npy_encode(descr, &shape, &[]);
                            hdr.shrink_to_fit();
                            Body::Prefixed(hdr, &w.data)
                        }
                    };
                    out.push((name, body));
                }
            }
            for l in &g.ucode_libs {
                out.push((format!("{dir}{}", l.library), Body::Borrowed(&l.content)));
            }
        }
        for (n, b) in &self.extra_members {
            out.push((n.clone(), Body::Borrowed(b)));
        }
        out
    }

    /// The header this model gets (data_size and hash filled in by the writer).
    pub fn header(&self) -> NeffHeader {
        let mut h = NeffHeader {
            neff_version_major: self.neff_version.0,
            neff_version_minor: self.neff_version.1,
            feature_bits: self.feature_bits,
            uuid: self.uuid,
            requested_tpb_count: self.graphs.len() as u32,
            vnc_size: self.vnc_size,
            ..NeffHeader::default()
        };
        h.set_name(&self.name);
        h.set_build_version(&self.build_version);
        h
    }

    /// Writes the NEFF to a seekable sink (the header is patched in at the end).
    pub fn write_to<W: Write + Seek>(&self, w: W, opts: &WriteOptions) -> Result<NeffHeader, BuildError> {
        pack_to(&self.members(), self.header(), opts, w)
    }

    /// The NEFF as bytes.
    pub fn to_bytes(&self, opts: &WriteOptions) -> Result<Vec<u8>, BuildError> {
        let mut cur = io::Cursor::new(Vec::new());
        self.write_to(&mut cur, opts)?;
        Ok(cur.into_inner())
    }

    /// The NEFF as bytes with default options (pkg 2).
    pub fn build(&self) -> Result<Vec<u8>, BuildError> {
        self.to_bytes(&WriteOptions::default())
    }
}

fn weight_member_name(v: &VarDesc, w: &WeightDesc) -> String {
    match w.format {
        WeightFormat::Npy => format!("{}.npy", v.name),
        WeightFormat::Raw => format!("{}.bin", v.name),
    }
}

fn desc_json(d: &DmaDesc) -> Value {
    let mut o = json!({
        "from": d.from, "to": d.to,
        "from_sizes": d.from_sizes, "from_steps": d.from_steps,
        "to_sizes": d.to_sizes, "to_steps": d.to_steps,
    });
    if d.op != DmaOp::Copy {
        if let Some(m) = o.as_object_mut() {
            m.insert("op".into(), json!(d.op.name()));
        }
    }
    o
}

enum Hasher {
    Md5(md5::Md5),
    Sha256(sha2::Sha256),
}

/// Counts and hashes what passes through to the sink.
struct HashWriter<W> {
    inner: W,
    hasher: Hasher,
    n: u64,
}

impl<W: Write> Write for HashWriter<W> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        let k = self.inner.write(b)?;
        match &mut self.hasher {
            Hasher::Md5(h) => h.update(&b[..k]),
            Hasher::Sha256(h) => h.update(&b[..k]),
        }
        self.n += k as u64;
        Ok(k)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn append<W: Write>(tar: &mut tar::Builder<W>, name: &str, body: &Body<'_>) -> io::Result<()> {
    let mut h = tar::Header::new_gnu();
    h.set_mode(0o644);
    h.set_mtime(0);
    h.set_uid(0);
    h.set_gid(0);
    h.set_size(body.len() as u64);
    h.set_entry_type(tar::EntryType::Regular);
    match body {
        Body::Owned(v) => tar.append_data(&mut h, name, v.as_slice()),
        Body::Borrowed(b) => tar.append_data(&mut h, name, *b),
        Body::Prefixed(p, b) => tar.append_data(&mut h, name, p.as_slice().chain(*b)),
    }
}

fn write_tar<W: Write>(sink: W, members: &[(String, Body<'_>)], opts: &WriteOptions) -> io::Result<W> {
    let mut tar = tar::Builder::new(sink);
    tar.mode(tar::HeaderMode::Deterministic);
    for (name, body) in members {
        let path = if opts.dot_slash { format!("./{name}") } else { name.clone() };
        if name.ends_with('/') {
            if opts.dir_entries {
                let mut h = tar::Header::new_gnu();
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(0o755);
                h.set_mtime(0);
                h.set_size(0);
                tar.append_data(&mut h, &path, io::empty())?;
            }
            continue;
        }
        append(&mut tar, &path, body)?;
    }
    tar.into_inner()
}

/// Packs members into a NEFF on `w`: header placeholder, archive, then the real header.
pub fn pack_to<W: Write + Seek>(
    members: &[(String, Body<'_>)],
    header: NeffHeader,
    opts: &WriteOptions,
    w: W,
) -> Result<NeffHeader, BuildError> {
    pack_window(header, opts, w, |sink| write_tar(sink, members, opts).map(drop))
}

/// The uncompressed tar of `members` (what a NEFF's data window holds once inflated).
pub fn tar_bytes(members: &[(String, Body<'_>)], opts: &WriteOptions) -> Result<Vec<u8>, BuildError> {
    Ok(write_tar(Vec::new(), members, opts)?)
}

/// A NEFF whose archive is `archive` exactly as given — gzipped and MD5-hashed for pkg 2,
/// as is and SHA-256-hashed for pkg 1 — so that an archive the writer would never emit (a
/// truncated or edited tar) reaches the tar walk behind valid header gates and digest.
pub fn wrap_archive(archive: &[u8], header: NeffHeader, opts: &WriteOptions) -> Result<Vec<u8>, BuildError> {
    let mut cur = io::Cursor::new(Vec::new());
    pack_window(header, opts, &mut cur, |sink| sink.write_all(archive))?;
    Ok(cur.into_inner())
}

/// Writes a NEFF on `w`: a header placeholder, the data window (`emit` writes the archive,
/// compressed on the way for pkg 2, and hashed), then the real header.
fn pack_window<W: Write + Seek>(
    mut header: NeffHeader,
    opts: &WriteOptions,
    mut w: W,
    emit: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<NeffHeader, BuildError> {
    let start = w.stream_position()?;
    w.write_all(&[0u8; NEFF_HEADER_SIZE])?;
    let hasher = match opts.pkg_version {
        PKG_VERSION_GZIP_MD5 => Hasher::Md5(md5::Md5::new()),
        PKG_VERSION_TAR_SHA256 => Hasher::Sha256(sha2::Sha256::new()),
        p => return Err(BuildError::Invalid(format!("pkg_version {p} (the writer emits 1 or 2)"))),
    };
    let (n, digest) = {
        let mut hw = HashWriter { inner: io::BufWriter::with_capacity(1 << 20, &mut w), hasher, n: 0 };
        if opts.pkg_version == PKG_VERSION_GZIP_MD5 {
            let mut gz = flate2::write::GzEncoder::new(&mut hw, flate2::Compression::new(opts.level.min(9)));
            emit(&mut gz)?;
            gz.finish()?;
        } else {
            emit(&mut hw)?;
        }
        let HashWriter { inner, hasher, n } = hw;
        inner.into_inner().map_err(|e| e.into_error())?;
        let digest = match hasher {
            Hasher::Md5(h) => h.finalize().to_vec(),
            Hasher::Sha256(h) => h.finalize().to_vec(),
        };
        (n, digest)
    };
    header.pkg_version = opts.pkg_version;
    header.data_size = n;
    header.header_size = NEFF_HEADER_SIZE as u64;
    if opts.pkg_version == PKG_VERSION_GZIP_MD5 {
        header.hash[..16].copy_from_slice(&digest);
        header.hash[16..].fill(b'0');
    } else {
        header.hash.copy_from_slice(&digest);
    }
    w.seek(SeekFrom::Start(start))?;
    w.write_all(&header.encode())?;
    w.seek(SeekFrom::Start(start + NEFF_HEADER_SIZE as u64 + n))?;
    w.flush()?;
    Ok(header)
}

/// Packs members into NEFF bytes.
pub fn pack(members: &[(String, Body<'_>)], header: NeffHeader, opts: &WriteOptions) -> Result<Vec<u8>, BuildError> {
    let mut cur = io::Cursor::new(Vec::new());
    pack_to(members, header, opts, &mut cur)?;
    Ok(cur.into_inner())
}

/// Number of 64-byte slots in a program buffer.
pub fn slot_count(code: &[u8]) -> usize {
    code.len() / SLOT_BYTES
}
