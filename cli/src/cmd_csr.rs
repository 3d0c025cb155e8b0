//! `neuron-vfio csr …`: registers by name, from the csr-maps descriptions.

use clap::Subcommand;
use csr_maps::{Arch, RegInstance};
use serde_json::json;

use crate::report::{print_json, CliError};

#[derive(Subcommand)]
pub enum CsrCmd {
    /// Print every register instance of an arch with its BAR offset and fields (no device needed).
    List {
        /// sunda | cayman | mariana (or v2/v3/v4, trn1/inf2/trn2/trn3).
        #[arg(long, default_value = "sunda")]
        arch: String,
        /// Only registers whose name contains TEXT.
        #[arg(long)]
        filter: Option<String>,
    },
    /// Decode a register value into its fields (no device needed).
    Decode {
        #[arg(long, default_value = "sunda")]
        arch: String,
        /// Register path (udma[33].m2s.q[0].head) or BAR0 offset (0x30d01034).
        reg: String,
        /// The value to decode.
        value: String,
    },
}

pub fn run(cmd: CsrCmd, json: bool) -> Result<(), CliError> {
    match cmd {
        CsrCmd::List { arch, filter } => list(Arch::by_name(&arch)?, filter.as_deref(), json),
        CsrCmd::Decode { arch, reg, value } => {
            let arch = Arch::by_name(&arch)?;
            let r = resolve(arch, &reg)?;
            let v = csr_maps::parse_u64(&value).ok_or_else(|| CliError::invalid(format!("bad value `{value}`")))?;
            print_value(&r, v, json);
            Ok(())
        }
    }
}

/// A register by path, or by absolute BAR0 offset (`0x…` / decimal).
pub fn resolve(arch: &'static Arch, reg: &str) -> Result<RegInstance, CliError> {
    if reg.starts_with(|c: char| c.is_ascii_digit()) {
        let off = csr_maps::parse_u64(reg).ok_or_else(|| CliError::invalid(format!("bad offset `{reg}`")))?;
        return Ok(arch.lookup(arch.bars.apb, off)?);
    }
    Ok(arch.resolve(reg)?)
}

pub fn reg_json(r: &RegInstance) -> serde_json::Value {
    json!({
        "name": r.name,
        "bar": r.bar,
        "offset": r.offset,
        "width": r.def.width,
        "access": r.def.access.as_str(),
        "reset": r.def.reset,
        "blocked": r.def.blocked,
        "modeled": r.def.modeled,
        "fields": r.def.fields.iter().map(|f| json!({"name": f.name, "lsb": f.lsb, "width": f.width})).collect::<Vec<_>>(),
        "source": r.def.source,
        "description": r.def.desc,
    })
}

fn list(arch: &'static Arch, filter: Option<&str>, json: bool) -> Result<(), CliError> {
    let regs: Vec<RegInstance> =
        arch.registers().into_iter().filter(|r| filter.is_none_or(|f| r.name.contains(f))).collect();
    if json {
        print_json(&serde_json::Value::Array(regs.iter().map(reg_json).collect()));
        return Ok(());
    }
    use std::io::Write;
    let out = std::io::stdout();
    let mut w = std::io::BufWriter::new(out.lock());
    let _ = writeln!(
        w,
        "# {} (NeuronCore-v{}, kmod {}): {} registers",
        arch.name,
        arch.nc_version,
        arch.kmod_name,
        regs.len()
    );
    for r in &regs {
        let fields: Vec<String> = r
            .def
            .fields
            .iter()
            .map(|f| {
                if f.width == 1 {
                    format!("{}[{}]", f.name, f.lsb)
                } else {
                    format!("{}[{}:{}]", f.name, f.lsb + f.width - 1, f.lsb)
                }
            })
            .collect();
        let _ = writeln!(
            w,
            "{:<44} BAR{} {:#010x} {:>2} {:<3}{} {}  ({}{})",
            r.name,
            r.bar,
            r.offset,
            r.def.width,
            r.def.access.as_str(),
            if r.def.blocked { " blocked" } else { "" },
            fields.join(" "),
            r.def.source,
            if r.def.modeled { "; modeled" } else { "" }
        );
    }
    Ok(())
}

pub fn print_value(r: &RegInstance, v: u64, json: bool) {
    if json {
        let fields: serde_json::Map<String, serde_json::Value> =
            r.decode(v).into_iter().map(|(n, x)| (n.to_string(), json!(x))).collect();
        print_json(&json!({"name": r.name, "bar": r.bar, "offset": r.offset, "value": v, "fields": fields}));
    } else {
        let f: Vec<String> = r.decode(v).into_iter().map(|(n, x)| format!("{n}={x:#x}")).collect();
        println!("{} (BAR{} {:#x}) = {:#x}  {}", r.name, r.bar, r.offset, v, f.join(" "));
    }
}
