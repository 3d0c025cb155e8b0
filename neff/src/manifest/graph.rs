//! One graph: its def.json (var table, DMA queues, replica groups, state-buffer reservations,
//! fp8 config) and its engines (engine jsons, their DMA blocks and instruction streams).

use std::collections::HashSet;

use serde_json::Value;

use super::json::*;
use super::programs::{check_programs, decode_program};
use super::ucode::parse_ucode_libs;
use super::{resolve, resolve_streamed, MAX_DMA_QUEUES, MAX_VARS};
use crate::arch::Arch;
use crate::container::{Container, ReadOptions};
use crate::error::NeffError;
use crate::model::*;
use crate::npy::{npy_data_offset, npy_data_range};

pub(super) fn parse_graph(
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
    for kind in Engine::ALL {
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

pub(super) fn parse_var(c: &Container, dir: &str, m: &str, name: &str, o: &Obj) -> Result<Var, NeffError> {
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
pub(super) fn check_var_ids(vars: &mut [Var], m: &str) -> Result<(), NeffError> {
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

pub(super) fn parse_queue(m: &str, name: &str, o: &Obj) -> Result<DmaQueue, NeffError> {
    let f = |k: &str| format!("dma_queue.{name}.{k}");
    let indirect = opt_bool(o, "indirect_memcpy", m, &f("indirect_memcpy"))?;
    let ty = o.get("type");
    let owner = o.get("owner");
    if owner.and_then(Value::as_u64) == Some(5) {
        return Err(bad(m, &f("owner"), "owner 5 is the invalid-engine sentinel"));
    }
    let as_role = |v: Option<&Value>| v.and_then(Value::as_str).and_then(|s| QueueRole::from_str_flag(s, indirect));
    let as_engine = |v: Option<&Value>| match v {
        Some(Value::String(s)) => Engine::from_name(s),
        Some(Value::Number(n)) => n.as_u64().and_then(|i| Engine::ALL.get(i as usize).copied()),
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

pub(super) fn parse_sb(m: &str, v: &Value) -> Result<Vec<SbReservation>, NeffError> {
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

pub(super) fn parse_fp8(m: &str, o: &Obj) -> Result<Fp8Config, NeffError> {
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

pub(super) fn parse_engine(
    c: &Container,
    dir: &str,
    m: &str,
    d: &Obj,
    kind: Engine,
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
        program: if kind == Engine::Sp { Program::Sp(Vec::new()) } else { Program::Tpb(Vec::new()) },
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
pub(super) struct Names<'a> {
    vars: HashSet<&'a str>,
    queues: HashSet<&'a str>,
}

pub(super) fn parse_block(jm: &str, i: usize, o: &Obj, names: &Names<'_>) -> Result<DmaBlock, NeffError> {
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
