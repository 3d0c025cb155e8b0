//! The GPSIMD libraries a graph names (`ucode_libs`: inline or in a member of their own).

use std::collections::HashSet;

use serde_json::Value;

use super::json::*;
use super::resolve;
use crate::container::Container;
use crate::error::NeffError;
use crate::model::*;

/// The runtime's GPSIMD library major version (reference "1.21.1.0").
pub const RUNTIME_UCODE_MAJOR: u64 = 1;

pub(super) fn parse_ucode_libs(c: &Container, dir: &str, m: &str, v: &Value) -> Result<Vec<UcodeLib>, NeffError> {
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
