//! `ls`, `info`, `bind`, `unbind`: finding devices, describing one, handing it to vfio-pci
//! and back.

use std::io::Write;
use std::path::PathBuf;

use csr_maps::consts::seq as seqc;
use csr_maps::Arch;
use serde_json::{json, Map, Value};
use vfio::{Binding, PciAddress, PciFunction, Released, Sysfs};

use crate::device::{self, DeviceSpec, SimTiming, VFIO_PCI};
use crate::report::{print_json, CliError};

/// One row of `ls`.
struct Row {
    bdf: String,
    arch: &'static Arch,
    pci_id: String,
    driver: Option<String>,
    iommu_group: Option<u32>,
    numa_node: Option<u32>,
    /// The CPUs close to the device (sysfs `local_cpulist`; a simulated device: every
    /// online CPU).
    cpu_affinity: String,
    user: crate::procs::DeviceUse,
    /// The device's name at the broker (its BDF, or `sim:shared:ARCH#N`): the processes the
    /// broker lists on it join those found without it (docs/sharing.md).
    broker_name: Option<String>,
}

fn hbm_bytes(arch: &Arch) -> u64 {
    arch.consts.hbm_active_size.saturating_mul(arch.counts.hbm_stacks)
}

/// What `ls` shows besides the devices.
#[derive(Debug, Clone, Copy, Default)]
pub struct LsOpts {
    /// List every process using a device, not only those running a Neuron runtime.
    pub show_all_procs: bool,
    /// neuron-ls's table (`neuron-ls`), else this tool's.
    pub neuron_ls_text: bool,
    /// neuron-ls's wide table: processes too.
    pub wide: bool,
    /// neuron-ls's topology view (below the table).
    pub topology: bool,
}

/// A row as `neuron-ls -j` has it (`index`: the device's position in the list), with this
/// tool's fields beside neuron-ls's.
fn row_json(index: usize, r: &Row, opts: LsOpts) -> Value {
    // NeuronCores as the SDK's tools count them: logical ones, at the LNC this environment
    // asks for (NEURON_LOGICAL_NC_CONFIG / NEURON_RT_VIRTUAL_CORE_SIZE), else the arch's default.
    let lnc = crate::procs::shown_lnc(r.arch);
    let ncs = r.arch.counts.ncs / lnc as u64;
    let all = crate::procs::device_processes(r.user, r.broker_name.as_deref());
    // This tool's own list: every process with its cores (device-local physical NC indices)
    // and the logical cores they make up.
    let ours: Vec<Value> = all
        .iter()
        .map(|p| {
            json!({"pid": p.pid, "command": p.command, "cores": p.cores,
                   "logical_cores": runtime::cores::group(&p.cores.iter().map(|&c| c as usize).collect::<Vec<_>>(), lnc)})
        })
        .collect();
    let procs: Vec<Value> = all
        .into_iter()
        .filter(|p| opts.show_all_procs || p.runtime_version.is_some())
        .map(|p| {
            json!({"pid": p.pid, "command": p.command,
                   "neuron_runtime_version": p.runtime_version.unwrap_or_else(|| "NA".into())})
        })
        .collect();
    let mut o = json!({
        "neuron_device": index,
        "bdf": r.bdf,
        "cpu_affinity": r.cpu_affinity,
        "numa_node": r.numa_node.map(|n| n.to_string()).unwrap_or_else(|| "-1".into()),
        // The links between devices are known to the kmod only.
        "connected_to": Vec::<u64>::new(),
        "nc_count": ncs,
        "memory_size": hbm_bytes(r.arch),
        "neuroncore_ids": (0..ncs).map(|i| (index as u64) * ncs + i).collect::<Vec<_>>(),
        "neuron_processes": procs,
        "arch": r.arch.name,
        "nc_version": r.arch.nc_version,
        "pci_id": r.pci_id,
        "hbm_bytes": hbm_bytes(r.arch),
        "hbm_channels": r.arch.counts.hbm_stacks,
        "driver": r.driver,
        "iommu_group": r.iommu_group,
        "processes": ours,
    });
    // Logical NeuronCores exist from NeuronCore-v3 on (Trn2, Trn3).
    if r.arch.nc_version >= 3 {
        o["logical_neuroncore_config"] = json!(lnc);
    }
    o["physical_nc_count"] = json!(r.arch.counts.ncs);
    o
}

fn online_cpus(sys: &Sysfs) -> String {
    std::fs::read_to_string(sys.root().join("devices/system/cpu/online"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| format!("0-{}", crate::host::vcpus().saturating_sub(1)))
}

fn pci_row(sys: &Sysfs, f: &PciFunction, arch: &'static Arch) -> Row {
    let bdf = f.address.to_string();
    let cpus = std::fs::read_to_string(sys.root().join("bus/pci/devices").join(&bdf).join("local_cpulist"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    Row {
        bdf,
        arch,
        pci_id: format!("{:04x}:{:04x}", f.vendor, f.device),
        driver: f.driver.clone(),
        iommu_group: f.iommu_group,
        numa_node: f.numa_node,
        cpu_affinity: cpus,
        user: crate::procs::DeviceUse::Pci { iommu_group: f.iommu_group },
        broker_name: Some(f.address.to_string()),
    }
}

/// The broker's shared simulated devices of `arch` (`ls --device sim:shared:ARCH`; `None`:
/// of every arch): those it has opened, with their processes.
#[cfg(feature = "sim")]
fn shared_rows(sys: &Sysfs, arch: Option<&'static Arch>) -> Vec<Row> {
    broker_client::client::devices()
        .into_iter()
        .filter(|d| d.name.starts_with(SIM_SHARED) && arch.is_none_or(|a| d.arch == a.name))
        .filter_map(|d| Some((Arch::by_name(&d.arch).ok()?, d)))
        .map(|(arch, d)| Row {
            bdf: d.name.clone(),
            arch,
            pci_id: format!("{:04x}:{:04x}", arch.pci_vendor, arch.pci_devices.first().copied().unwrap_or(0)),
            driver: Some("broker".into()),
            iommu_group: None,
            numa_node: None,
            cpu_affinity: online_cpus(sys),
            user: crate::procs::DeviceUse::Shared,
            broker_name: Some(d.name),
        })
        .collect()
}

#[cfg(not(feature = "sim"))]
fn shared_rows(_sys: &Sysfs, _arch: Option<&'static Arch>) -> Vec<Row> {
    Vec::new()
}

/// How the broker names its shared simulated devices (`sim:shared:ARCH#N`).
#[cfg(feature = "sim")]
const SIM_SHARED: &str = "sim:shared:";

/// The simulated devices private to other processes (each lives in its process).
fn private_rows(sys: &Sysfs) -> Vec<Row> {
    crate::procs::private_sims()
        .into_iter()
        .map(|(id, arch, pid)| Row {
            bdf: id,
            arch,
            pci_id: format!("{:04x}:{:04x}", arch.pci_vendor, arch.pci_devices.first().copied().unwrap_or(0)),
            driver: Some("sim".into()),
            iommu_group: None,
            numa_node: None,
            cpu_affinity: online_cpus(sys),
            user: crate::procs::DeviceUse::PrivateOf(pid),
            broker_name: None,
        })
        .collect()
}

fn sim_rows(sys: &Sysfs, arch: &'static Arch, n: usize, timing: SimTiming) -> Result<Vec<Row>, CliError> {
    let opened = select::open_platforms(&DeviceSpec::Sim { arch, n }, timing.into())?;
    let mut rows = Vec::new();
    for (i, d) in opened.platforms.iter().enumerate() {
        let id = d.identity();
        let arch = Arch::by_pci_id(id.vendor, id.device)
            .ok_or_else(|| CliError::failure(format!("simulated device {i} has an unknown PCI id")))?;
        rows.push(Row {
            bdf: format!("sim:{i}"),
            arch,
            pci_id: format!("{:04x}:{:04x}", id.vendor, id.device),
            driver: Some("sim".into()),
            iommu_group: None,
            numa_node: None,
            cpu_affinity: online_cpus(sys),
            user: crate::procs::DeviceUse::Sim,
            broker_name: None,
        });
    }
    Ok(rows)
}

/// `ls` with `opts` (the `neuron-ls` command's flags): Neuron devices in sysfs (any driver),
/// the broker's shared ones and other processes' private simulators, or the simulated ones.
pub fn ls_with(spec: &DeviceSpec, timing: SimTiming, json: bool, opts: LsOpts) -> Result<(), CliError> {
    let sys = device::sysfs();
    let rows = match spec {
        DeviceSpec::Sim { arch, n } => sim_rows(&sys, arch, *n, timing)?,
        DeviceSpec::SimShared { arch, .. } => {
            let rows = shared_rows(&sys, Some(arch));
            if rows.is_empty() {
                eprintln!("notice: no broker serves a shared {} device now", arch.name);
            }
            rows
        }
        DeviceSpec::Pci(addr) => {
            let f = device::function(&sys, *addr)?;
            let arch = device::arch_of(&f).ok_or_else(|| {
                CliError::invalid(format!("{addr} is not a Neuron device (PCI id {:04x}:{:04x})", f.vendor, f.device))
            })?;
            vec![pci_row(&sys, &f, arch)]
        }
        DeviceSpec::Default => {
            // Every device of the host: its Neuron PCI functions, the broker's shared
            // simulated devices, the simulated devices private to running processes.
            let fs = device::neuron_functions(&sys)?;
            let mut rows: Vec<Row> =
                fs.iter().filter_map(|f| device::arch_of(f).map(|a| pci_row(&sys, f, a))).collect();
            rows.extend(shared_rows(&sys, None));
            rows.extend(private_rows(&sys));
            if rows.is_empty() {
                eprintln!("notice: no Neuron device found; listing the simulator (--device sim)");
                sim_rows(&sys, &csr_maps::SUNDA, 1, timing)?
            } else {
                rows
            }
        }
    };
    let devices: Vec<Value> = rows.iter().enumerate().map(|(i, r)| row_json(i, r, opts)).collect();
    if json {
        print_json(&Value::Array(devices));
        return Ok(());
    }
    let mut w = std::io::BufWriter::new(std::io::stdout().lock());
    if opts.neuron_ls_text {
        let _ = w.write_all(neuron_ls_table(&devices, opts.wide).as_bytes());
        if opts.topology {
            let _ = writeln!(
                w,
                "\nNeuron Device Topology: the links between devices are known to the Neuron kmod only (none listed)"
            );
        }
        return Ok(());
    }
    let _ = w.write_all(ls_table(&devices).as_bytes());
    Ok(())
}

/// A list of core numbers as ranges: `0-3`, `0,2`, `-` for none.
fn core_ranges(cores: &[u64]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cores.len() {
        let mut j = i;
        while j + 1 < cores.len() && cores[j + 1] == cores[j] + 1 {
            j += 1;
        }
        parts.push(if j > i { format!("{}-{}", cores[i], cores[j]) } else { cores[i].to_string() });
        i = j + 1;
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(",")
    }
}

/// Rows of cells as aligned columns (two spaces apart; `right`: the columns aligned right),
/// each line prefixed by `indent`, the last column not padded.
fn columns(rows: &[Vec<String>], right: &[usize], indent: &str) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> =
        (0..n).map(|c| rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0)).collect();
    let mut o = String::new();
    for r in rows {
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(c, s)| match (right.contains(&c), c + 1 == r.len()) {
                (true, _) => format!("{s:>w$}", w = widths[c]),
                (false, false) => format!("{s:<w$}", w = widths[c]),
                (false, true) => s.clone(),
            })
            .collect();
        o.push_str(indent);
        o.push_str(cells.join("  ").trim_end());
        o.push('\n');
    }
    o
}

/// `ls`'s table of `ls --json`'s devices: a row per device (NeuronCores logical at the LNC
/// shown, the physical count beside them), and under each device its processes — pid, logical
/// and physical cores, command — as neuron-ls's wide table lists them.
pub fn ls_table(devices: &[Value]) -> String {
    let s = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    let head: Vec<String> = ["DEVICE", "ARCH", "PCI ID", "NCS", "LNC", "PHYSICAL", "HBM", "DRIVER", "IOMMU"]
        .iter()
        .map(|h| h.to_string())
        .collect();
    let mut table = vec![head];
    table.extend(devices.iter().map(|d| {
        vec![
            s(&d["bdf"]),
            s(&d["arch"]),
            s(&d["pci_id"]),
            s(&d["nc_count"]),
            d.get("logical_neuroncore_config").map(s).unwrap_or_else(|| "1".into()),
            s(&d["physical_nc_count"]),
            format!("{} GiB", d["hbm_bytes"].as_u64().unwrap_or(0) >> 30),
            s(&d["driver"]),
            s(&d["iommu_group"]),
        ]
    }));
    let lines = columns(&table, &[3, 4, 5], "");
    let mut lines = lines.lines();
    let mut o = String::new();
    if let Some(h) = lines.next() {
        o.push_str(h);
        o.push('\n');
    }
    let ids = |v: &Value| -> Vec<u64> { v.as_array().into_iter().flatten().filter_map(Value::as_u64).collect() };
    for (d, line) in devices.iter().zip(lines) {
        o.push_str(line);
        o.push('\n');
        let procs = d["processes"].as_array().cloned().unwrap_or_default();
        if procs.is_empty() {
            continue;
        }
        let mut rows = vec![vec!["PID".to_string(), "NCS".into(), "PHYSICAL".into(), "COMMAND".into()]];
        rows.extend(procs.iter().map(|p| {
            vec![s(&p["pid"]), core_ranges(&ids(&p["logical_cores"])), core_ranges(&ids(&p["cores"])), s(&p["command"])]
        }));
        o.push_str(&columns(&rows, &[], "    "));
    }
    o
}

/// neuron-ls's table of `ls --json`'s devices: a row per device (and, `wide`, per process).
pub fn neuron_ls_table(devices: &[Value], wide: bool) -> String {
    let s = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let ids = |d: &Value| {
        let v: Vec<u64> = d["neuroncore_ids"].as_array().into_iter().flatten().filter_map(Value::as_u64).collect();
        match (v.first(), v.last()) {
            (Some(a), Some(b)) => format!("{a}-{b}"),
            _ => String::new(),
        }
    };
    let mut head = vec![
        "NEURON DEVICE",
        "NEURON CORES",
        "NEURON CORE IDS",
        "NEURON MEMORY",
        "CONNECTED DEVICES",
        "PCI BDF",
        "CPU AFFINITY",
        "NUMA NODE",
    ];
    if wide {
        head.extend(["PID", "COMMAND", "RUNTIME VERSION"]);
    }
    let mut rows: Vec<Vec<String>> = Vec::new();
    for d in devices {
        let linked: Vec<String> = d["connected_to"].as_array().into_iter().flatten().map(s).collect();
        let base = vec![
            s(&d["neuron_device"]),
            s(&d["nc_count"]),
            ids(d),
            format!("{} GB", d["memory_size"].as_u64().unwrap_or(0) >> 30),
            linked.join(", "),
            s(&d["bdf"]),
            s(&d["cpu_affinity"]),
            s(&d["numa_node"]),
        ];
        let procs = d["neuron_processes"].as_array().cloned().unwrap_or_default();
        if !wide || procs.is_empty() {
            let mut r = base;
            if wide {
                r.extend([String::new(), String::new(), String::new()]);
            }
            rows.push(r);
            continue;
        }
        for (i, p) in procs.iter().enumerate() {
            let mut r = if i == 0 { base.clone() } else { vec![String::new(); base.len()] };
            let mut cmd = s(&p["command"]);
            if cmd.chars().count() > 60 {
                cmd = cmd.chars().take(57).collect::<String>() + "...";
            }
            r.extend([s(&p["pid"]), cmd, s(&p["neuron_runtime_version"])]);
            rows.push(r);
        }
    }
    let widths: Vec<usize> = (0..head.len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).chain([head[c].chars().count()]).max().unwrap_or(0))
        .collect();
    let line = || format!("+{}+\n", widths.iter().map(|w| "-".repeat(w + 2)).collect::<Vec<_>>().join("+"));
    let fmt = |cells: &[String]| {
        format!("| {} |\n", cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect::<Vec<_>>().join(" | "))
    };
    let mut o = line();
    o.push_str(&fmt(&head.iter().map(|h| h.to_string()).collect::<Vec<_>>()));
    o.push_str(&line());
    for r in &rows {
        o.push_str(&fmt(r));
    }
    o.push_str(&line());
    o
}

/// `info`: identity, counts, firmware, HBM, ECC and engine states of the device.
pub fn info(spec: &DeviceSpec, timing: SimTiming, json: bool) -> Result<(), CliError> {
    let o = device::open(spec, timing)?;
    let dev = &o.dev;
    let arch = dev.arch();
    let id = dev.platform().identity();
    let regs = dev.regs();
    let misc = regs.misc_ram(0)?;
    let fw_api = misc.fw_api_version().read()?.0;
    let fw_build = misc.fw_build().read()?.0;
    let serial = ((misc.serial_hi().read()?.0 as u64) << 32) | misc.serial_lo().read()?.0 as u64;
    let sram = misc.sram_ecc().read()?;
    let mut hbm = Vec::new();
    for ch in 0..dev.allocator().channels() {
        let u = dev.allocator().usage(ch);
        let ecc = misc.hbm_ecc(ch as u64).ok().map(|r| r.read()).transpose()?;
        hbm.push(json!({
            "channel": ch,
            "device_addr": arch.hbm_dev_addr(ch as u64, 0),
            "capacity": u.as_ref().map(|u| u.capacity),
            "used": u.as_ref().map(|u| u.used),
            "ecc_repairable": ecc.map(|e| e.repairable()),
            "ecc_uncorrectable": ecc.map(|e| e.uncorrectable()),
        }));
    }
    let mut ncs = Vec::new();
    for nc in 0..dev.nc_count() {
        let mut engines = Vec::new();
        for (e, name) in seqc::Engine::ALL.map(seqc::Engine::name).into_iter().enumerate() {
            let s = dev.engine_status(nc, e)?;
            engines.push(json!({
                "engine": name, "state": seqc::state_name(s.state), "fault_code": s.fault_code, "pc": s.pc, "passes": s.passes,
            }));
        }
        let c = dev.fatal_causes(nc)?;
        // Every cause by name (lower case), latched or not.
        let fatal: Map<String, Value> = hal::FatalCauses::all()
            .iter_names()
            .map(|(name, f)| (name.to_ascii_lowercase(), c.contains(f).into()))
            .collect();
        ncs.push(json!({
            "nc": nc,
            "engines": engines,
            "fatal": fatal,
            "nq_overflow": dev.nq_overflow(nc)?,
        }));
    }
    let c = &arch.counts;
    let v = json!({
        "device": o.label,
        "simulated": o.is_sim(),
        "location": id.location,
        "pci_id": format!("{:04x}:{:04x}", id.vendor, id.device),
        "revision": id.revision,
        "arch": arch.name,
        "kmod_arch": arch.kmod_name,
        "nc_version": arch.nc_version,
        "counts": {
            "ncs": c.ncs, "dma_engines": c.dma_engines, "hbm_channels": c.hbm_stacks, "nq_slots": c.nq_slots,
            "semaphores": c.semaphores, "events": c.events, "top_sps": c.top_sps,
        },
        "fw_api_version": fw_api,
        "fw_build": fw_build,
        "device_id": dev.index(),
        "serial": format!("{serial:#018x}"),
        "hbm_bytes": hbm_bytes(arch),
        "hbm": hbm,
        "sram_ecc": {"corrected": sram.corrected(), "uncorrected": sram.uncorrected()},
        "ncs": ncs,
    });
    if json {
        print_json(&v);
        return Ok(());
    }
    print_info_text(&v);
    Ok(())
}

fn print_info_text(v: &Value) {
    let s = |k: &str| match &v[k] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut w = std::io::BufWriter::new(std::io::stdout().lock());
    let _ = writeln!(
        w,
        "device {} ({}): {} (NeuronCore-v{}, {}), PCI {} rev {}",
        s("device"),
        s("location"),
        s("arch"),
        s("nc_version"),
        s("kmod_arch"),
        s("pci_id"),
        s("revision")
    );
    let c = &v["counts"];
    let _ = writeln!(
        w,
        "counts: {} NCs, {} DMA engines, {} HBM channels, {} NQ slots/NC, {} semaphores, {} events",
        c["ncs"], c["dma_engines"], c["hbm_channels"], c["nq_slots"], c["semaphores"], c["events"]
    );
    let _ = writeln!(
        w,
        "firmware: API version {}, build {}; device id {}; serial {}",
        s("fw_api_version"),
        s("fw_build"),
        s("device_id"),
        s("serial")
    );
    let _ =
        writeln!(w, "SRAM ECC: {} corrected, {} uncorrected", v["sram_ecc"]["corrected"], v["sram_ecc"]["uncorrected"]);
    for h in v["hbm"].as_array().into_iter().flatten() {
        let _ = writeln!(
            w,
            "HBM {}: {} GiB at {:#x}, {} bytes used; ECC repairable {} uncorrectable {}",
            h["channel"],
            h["capacity"].as_u64().unwrap_or(0) >> 30,
            h["device_addr"].as_u64().unwrap_or(0),
            h["used"],
            h["ecc_repairable"],
            h["ecc_uncorrectable"]
        );
    }
    for n in v["ncs"].as_array().into_iter().flatten() {
        let engines: Vec<String> = n["engines"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| format!("{}={}", e["engine"].as_str().unwrap_or("?"), e["state"].as_str().unwrap_or("?")))
            .collect();
        let fatal: Vec<&str> = n["fatal"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(_, b)| b.as_bool() == Some(true))
            .map(|(k, _)| k.as_str())
            .collect();
        let _ = writeln!(
            w,
            "NC {}: engines {}; fatal causes: {}{}",
            n["nc"],
            engines.join(" "),
            if fatal.is_empty() { "none".to_string() } else { fatal.join(",") },
            if n["nq_overflow"].as_bool() == Some(true) { "; NQ overflow" } else { "" }
        );
    }
}

// ------------------------------------------------------------------ bind / unbind

fn state_dir() -> PathBuf {
    std::env::var_os("NEURON_VFIO_STATE_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/run/neuron-vfio"))
}

fn state_file(addr: PciAddress) -> PathBuf {
    state_dir().join(format!("{addr}.driver"))
}

fn parse_bdf(s: &str) -> Result<PciAddress, CliError> {
    s.parse().map_err(|_| CliError::invalid(format!("bad PCI address `{s}` (expected DDDD:BB:DD.F or BB:DD.F)")))
}

fn neuron_function(sys: &Sysfs, addr: PciAddress) -> Result<PciFunction, CliError> {
    let f = device::function(sys, addr)?;
    if device::arch_of(&f).is_none() {
        return Err(CliError::invalid(format!(
            "{addr} is not a Neuron device (PCI id {:04x}:{:04x}); refusing to rebind it",
            f.vendor, f.device
        )));
    }
    Ok(f)
}

fn say(json: bool, v: Value, text: String) {
    if json {
        print_json(&v);
    } else {
        println!("{text}");
    }
}

/// `bind BDF`: hand the device to vfio-pci (and remember the driver it had).
pub fn bind(bdf: &str, json: bool) -> Result<(), CliError> {
    let addr = parse_bdf(bdf)?;
    let sys = device::sysfs();
    let f = neuron_function(&sys, addr)?;
    let (v, text) = bind_function(&sys, &f)?;
    say(json, v, text);
    Ok(())
}

/// Bind one Neuron function to vfio-pci: its JSON report and text line.
fn bind_function(sys: &Sysfs, f: &PciFunction) -> Result<(Value, String), CliError> {
    let addr = f.address;
    if f.driver.as_deref() == Some(VFIO_PCI) {
        return Ok((
            json!({"bdf": addr.to_string(), "driver": VFIO_PCI, "previous_driver": VFIO_PCI, "changed": false}),
            format!("{addr} is already bound to vfio-pci"),
        ));
    }
    vfio::check_vfio_available(sys, &device::dev_dir()).map_err(CliError::failure)?;
    sys.check_group_viable(addr).map_err(CliError::failure)?;
    // Keep the device on vfio-pci after this process exits: the binding is not undone.
    let b = Binding::bind(sys, addr).map_err(CliError::failure)?;
    if let Some(orig) = b.persist() {
        if let Err(e) = remember(addr, &orig) {
            tracing::warn!("cannot record the original driver of {addr} ({e}); unbind will reprobe instead");
        }
    }
    let prev = f.driver.clone();
    Ok((
        json!({"bdf": addr.to_string(), "driver": VFIO_PCI, "previous_driver": prev, "changed": true}),
        format!("{addr}: bound to vfio-pci (was {})", prev.as_deref().unwrap_or("unbound")),
    ))
}

/// Parse `--ids` (VVVV:DDDD, hex): each must be a Neuron id csr-maps knows.
fn parse_ids(ids: &[String]) -> Result<Vec<(u16, u16)>, CliError> {
    ids.iter()
        .map(|s| {
            let bad = || CliError::invalid(format!("bad PCI id `{s}` (expected VVVV:DDDD, hex)"));
            let (v, d) = s.trim().split_once(':').ok_or_else(bad)?;
            let v = u16::from_str_radix(v.trim_start_matches("0x"), 16).map_err(|_| bad())?;
            let d = u16::from_str_radix(d.trim_start_matches("0x"), 16).map_err(|_| bad())?;
            if Arch::by_pci_id(v, d).is_none() {
                return Err(CliError::invalid(format!("{v:04x}:{d:04x} is not a Neuron PCI id; refusing to bind it")));
            }
            Ok((v, d))
        })
        .collect()
}

/// `bind --all [--ids IDS]`: every Neuron function in sysfs (those with one of `ids`, when
/// given) to vfio-pci. Reports every device (an `error` key for one that failed) and fails
/// when any did.
pub fn bind_all(ids: &[String], json: bool) -> Result<(), CliError> {
    let ids = parse_ids(ids)?;
    let sys = device::sysfs();
    let fs = device::neuron_functions(&sys)?;
    let chosen = fs
        .iter()
        .filter(|f| device::arch_of(f).is_some())
        .filter(|f| ids.is_empty() || ids.contains(&(f.vendor, f.device)));
    let mut reports = Vec::new();
    let mut failed = 0usize;
    for f in chosen {
        match bind_function(&sys, f) {
            Ok((v, text)) => reports.push((v, text)),
            Err(e) => {
                failed += 1;
                reports.push((
                    json!({"bdf": f.address.to_string(), "driver": f.driver, "changed": false, "error": e.message}),
                    format!("{}: not bound: {}", f.address, e.message),
                ));
            }
        }
    }
    let n = reports.len();
    if json {
        print_json(&Value::Array(reports.into_iter().map(|(v, _)| v).collect()));
    } else if n == 0 {
        println!("no Neuron device to bind");
    } else {
        for (_, text) in reports {
            println!("{text}");
        }
    }
    if failed > 0 {
        return Err(CliError::failure(format!("{failed} of {n} devices could not be bound to vfio-pci")));
    }
    Ok(())
}

fn remember(addr: PciAddress, driver: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(state_dir())?;
    std::fs::write(state_file(addr), driver)
}

/// `unbind BDF`: give the device back to the driver it had before `bind`, or (unknown)
/// clear `driver_override` and let the kernel reprobe.
pub fn unbind(bdf: &str, json: bool) -> Result<(), CliError> {
    let addr = parse_bdf(bdf)?;
    let sys = device::sysfs();
    let f = neuron_function(&sys, addr)?;
    if f.driver.as_deref() != Some(VFIO_PCI) {
        say(
            json,
            json!({"bdf": addr.to_string(), "driver": f.driver, "changed": false}),
            format!(
                "{addr} is not bound to vfio-pci (driver: {}); nothing to do",
                f.driver.as_deref().unwrap_or("none")
            ),
        );
        return Ok(());
    }
    let recorded = std::fs::read_to_string(state_file(addr))
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty() && s != VFIO_PCI);
    let how = match vfio::release(&sys, addr, recorded.as_deref()).map_err(CliError::failure)? {
        Released::Rebound(d) => format!("rebound to {d}"),
        Released::Reprobed(bind_error) => {
            if let Some(e) = bind_error {
                tracing::warn!("{e}; reprobing instead");
            }
            "reprobed".to_string()
        }
    };
    let _ = std::fs::remove_file(state_file(addr));
    let now = sys.function(addr).ok().and_then(|f| f.driver);
    say(
        json,
        json!({"bdf": addr.to_string(), "driver": now, "restored": recorded, "changed": true}),
        format!("{addr}: released from vfio-pci, {how} (driver now: {})", now.as_deref().unwrap_or("none")),
    );
    Ok(())
}
