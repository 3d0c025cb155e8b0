//! The `top` view: rows per NeuronCore, the one-frame text form and the live terminal UI.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use super::model::{report, sample, NcReport, Report};
use super::text::{fmt_bytes, opt_us};
use crate::device::DeviceSpec;
use crate::report::CliError;

/// Which devices `top` shows, from the selection without opening any (the devices belong to
/// the processes running on them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopTarget {
    pub arch: &'static csr_maps::Arch,
    /// The selection, as the header names it.
    pub label: String,
    pub devices: TopDevices,
}

/// The devices of a [`TopTarget`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopDevices {
    /// These devices by identity, shown even when no process owns a core of them: a PCI
    /// device, the shared simulated devices `sim:shared:ARCH:K`.
    Named(Vec<String>),
    /// Every simulated device private to a process (`sim:PID/INDEX`) of the arch: each
    /// process running on `sim` has its own.
    PrivateSims,
    /// Every device of the host, of any arch (no `--device`, as neuron-top shows them): these
    /// (the host's Neuron PCI functions, shown even when idle) and every device a runtime
    /// process drives — private and shared simulated devices, VFIO devices — by the counters
    /// it publishes.
    Host(Vec<(String, &'static csr_maps::Arch)>),
}

pub(super) fn top_target(spec: &DeviceSpec) -> Result<TopTarget, CliError> {
    let spec = match spec {
        DeviceSpec::Default => return Ok(host_target()),
        s => s.clone(),
    };
    match spec {
        DeviceSpec::Sim { arch, .. } => {
            Ok(TopTarget { arch, label: format!("sim:{}", arch.name), devices: TopDevices::PrivateSims })
        }
        // A shared device is named by the broker's name for it, never by a process.
        DeviceSpec::SimShared { arch, n } => Ok(TopTarget {
            arch,
            // The set as `--device` takes it less its count (the header counts the devices):
            // `sim:shared:cayman:1` reads as "device 1", which names sim:shared:cayman:0.
            label: format!("sim:shared:{}", arch.name),
            devices: TopDevices::Named((0..n).map(|k| format!("sim:shared:{}:{k}", arch.name)).collect()),
        }),
        DeviceSpec::Pci(addr) => {
            let f = crate::device::function(&crate::device::sysfs(), addr)?;
            let arch = crate::device::arch_of(&f)
                .ok_or_else(|| CliError::invalid(format!("{addr}: not a Neuron device this tool knows")))?;
            Ok(TopTarget { arch, label: addr.to_string(), devices: TopDevices::Named(vec![addr.to_string()]) })
        }
        DeviceSpec::Default => Err(CliError::failure("no device selected")),
    }
}

/// No `--device`: every device of the host. The arch shown in the header is the host's
/// first PCI function's, else sunda's; each device line names its own.
fn host_target() -> TopTarget {
    let sys = crate::device::sysfs();
    let pci: Vec<(String, &'static csr_maps::Arch)> = crate::device::neuron_functions(&sys)
        .map(|fs| fs.iter().filter_map(|f| Some((f.address.to_string(), crate::device::arch_of(f)?))).collect())
        .unwrap_or_default();
    TopTarget {
        arch: pci.first().map_or(&csr_maps::SUNDA, |p| p.1),
        label: "every device".into(),
        devices: TopDevices::Host(pci),
    }
}

pub(super) fn bar(frac: f64, width: usize) -> String {
    let fill = ((frac.clamp(0.0, 1.0) * width as f64).round() as usize).min(width);
    format!("[{}{}]", "#".repeat(fill), ".".repeat(width - fill))
}

/// One NeuronCore row of `top`: the NC of its device and the process that owns it (`None`: no
/// process owns it now), with that process's figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TopRow {
    pub nc: usize,
    pub pid: Option<u64>,
    pub utilization: f64,
    pub exec_per_s: f64,
    pub p50_us: Option<u64>,
    pub p99_us: Option<u64>,
    pub models: u64,
    pub memory: u64,
    pub errors: u64,
}

/// One device of `top`: its identity and a row per NC (an NC two processes claim has a row
/// for each).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TopDevice {
    pub id: String,
    /// Its arch (the target's, or for [`TopDevices::Host`] its own).
    pub arch: Option<&'static csr_maps::Arch>,
    pub rows: Vec<TopRow>,
    /// The processes owning its NCs.
    pub pids: Vec<u64>,
}

/// What `top` shows: (the target's devices; runtime processes on them; their host DMA bytes).
pub fn top_rows(t: &TopTarget, r: &Report) -> (Vec<TopDevice>, usize, u64) {
    let secs = (r.period_ns as f64 / 1e9).max(1e-9);
    let views = r.devices();
    let ids: Vec<(String, &'static csr_maps::Arch)> = match &t.devices {
        TopDevices::Named(ids) => ids.iter().map(|id| (id.clone(), t.arch)).collect(),
        TopDevices::PrivateSims => views
            .iter()
            .filter(|d| d.nc_version == t.arch.nc_version as u64 && runtime::counters::is_private_sim_identity(d.id))
            .map(|d| (d.id.to_string(), t.arch))
            .collect(),
        TopDevices::Host(pci) => {
            let mut all = pci.clone();
            for d in &views {
                if let Some(a) = csr_maps::Arch::by_nc_version(d.nc_version) {
                    if !all.iter().any(|(id, _)| id == d.id) {
                        all.push((d.id.to_string(), a));
                    }
                }
            }
            all
        }
    };
    let devices: Vec<TopDevice> = ids
        .into_iter()
        .map(|(id, arch)| {
            let ncs = arch.counts.ncs as usize;
            let owned: Vec<&NcReport> = views
                .iter()
                .find(|d| d.id == id && d.nc_version == arch.nc_version as u64)
                .map(|d| d.ncs.clone())
                .unwrap_or_default();
            // Rows per logical NeuronCore, at the owning processes' LNC (else the environment's):
            // each process's share of a logical core's physical NCs merged into one row.
            let lnc = owned.first().map(|n| n.lnc.max(1) as usize).unwrap_or_else(|| crate::procs::shown_lnc(arch));
            let mut rows = Vec::new();
            for l in 0..ncs / lnc {
                let phys = l * lnc..(l + 1) * lnc;
                let mine: Vec<&&NcReport> = owned.iter().filter(|n| phys.contains(&(n.nc as usize))).collect();
                if mine.is_empty() {
                    rows.push(TopRow { nc: l, ..TopRow::default() });
                }
                let mut pids: Vec<u64> = mine.iter().map(|n| n.pid).collect();
                pids.dedup();
                for pid in pids {
                    let of: Vec<&&&NcReport> = mine.iter().filter(|n| n.pid == pid).collect();
                    let k = of.len().max(1) as f64;
                    rows.push(TopRow {
                        nc: l,
                        pid: Some(pid),
                        utilization: (of.iter().map(|n| n.utilization.min(1.0)).sum::<f64>() / k).min(1.0),
                        exec_per_s: of.iter().map(|n| n.executions).max().unwrap_or(0) as f64 / secs,
                        p50_us: of.iter().filter_map(|n| n.p50_us).max(),
                        p99_us: of.iter().filter_map(|n| n.p99_us).max(),
                        models: of.iter().map(|n| n.models).max().unwrap_or(0),
                        memory: of.iter().map(|n| n.mem_model + n.mem_tensors).sum(),
                        errors: of.iter().map(|n| n.errors.iter().sum::<u64>()).sum(),
                    });
                }
            }
            let pids: std::collections::BTreeSet<u64> = owned.iter().map(|n| n.pid).collect();
            let arch = matches!(t.devices, TopDevices::Host(_)).then_some(arch);
            TopDevice { id, arch, rows, pids: pids.into_iter().collect() }
        })
        .collect();
    let pids: std::collections::BTreeSet<u64> = devices.iter().flat_map(|d| d.pids.iter().copied()).collect();
    let host: u64 = r.processes.iter().filter(|p| pids.contains(&p.0)).map(|p| p.2).sum();
    (devices, pids.len(), host)
}

fn header(t: &TopTarget, devices: usize, procs: usize, r: &Report) -> String {
    if matches!(t.devices, TopDevices::Host(_)) {
        return format!(
            "neuron-vfio top — every device of this host: {devices} device(s), {procs} runtime process(es), period {} ms",
            r.period_ns / 1_000_000
        );
    }
    // NeuronCores as the tools count them: logical, at the LNC shown, the physical count beside.
    let lnc = crate::procs::shown_lnc(t.arch).max(1);
    let physical = t.arch.counts.ncs;
    let ncs = if lnc > 1 {
        format!("{} NeuronCores per device at LNC={lnc}, {physical} physical", physical / lnc as u64)
    } else {
        format!("{physical} NeuronCores per device")
    };
    format!(
        "neuron-vfio top — {} ({}, {ncs}): {devices} device(s), {procs} runtime process(es), period {} ms",
        t.label,
        t.arch.name,
        r.period_ns / 1_000_000
    )
}

fn device_line(d: &TopDevice) -> String {
    let pids: Vec<String> = d.pids.iter().map(|p| p.to_string()).collect();
    let pids = if pids.is_empty() { "none".to_string() } else { pids.join(", ") };
    match d.arch {
        Some(a) => format!("device {} ({}, {} NeuronCores): process(es) {pids}", d.id, a.name, a.counts.ncs),
        None => format!("device {}: process(es) {pids}", d.id),
    }
}

fn opt_pid(p: Option<u64>) -> String {
    p.map(|p| p.to_string()).unwrap_or_else(|| "-".into())
}

/// One `top` frame: per device of the target (by identity), a row per NeuronCore with the
/// process that owns it and its figures.
pub fn top_frame(t: &TopTarget, r: &Report) -> String {
    let (devices, procs, host) = top_rows(t, r);
    let mut o = String::new();
    let _ = writeln!(o, "{}", header(t, devices.len(), procs, r));
    if devices.is_empty() {
        let _ = match t.devices {
            TopDevices::Host(_) => writeln!(o, "(no Neuron device in sysfs and no runtime process drives a device)"),
            _ => writeln!(o, "(no runtime process drives a {} device)", t.label),
        };
    }
    for d in &devices {
        let _ = writeln!(o, "{}", device_line(d));
        let _ = writeln!(
            o,
            "{:>3} {:>8} {:<22} {:>6} {:>10} {:>9} {:>9} {:>6} {:>10} {:>7}",
            "NC", "pid", "utilization", "util%", "exec/s", "p50 µs", "p99 µs", "models", "memory", "errors"
        );
        for row in &d.rows {
            let _ = writeln!(
                o,
                "{:>3} {:>8} {:<22} {:>6.1} {:>10.0} {:>9} {:>9} {:>6} {:>10} {:>7}",
                row.nc,
                opt_pid(row.pid),
                bar(row.utilization, 20),
                row.utilization * 100.0,
                row.exec_per_s,
                opt_us(row.p50_us),
                opt_us(row.p99_us),
                row.models,
                fmt_bytes(row.memory),
                row.errors
            );
        }
    }
    let _ = writeln!(o, "host DMA memory held by tensors: {}", fmt_bytes(host));
    o
}

/// Draw the live `top` view into `f`: a header, then per device a title and a row per
/// NeuronCore (NC, owner, utilization bar, execution rate, latency, models, memory, errors),
/// and a footer.
pub fn top_ui(f: &mut ratatui::Frame, t: &TopTarget, r: &Report, colour: bool) {
    use ratatui::layout::{Constraint, Layout};
    use ratatui::style::{Color, Style};
    use ratatui::text::Line;
    use ratatui::widgets::{Gauge, Paragraph};
    let (devices, procs, host) = top_rows(t, r);
    let mut v = vec![Constraint::Length(2)];
    for d in &devices {
        v.push(Constraint::Length(1));
        v.extend(d.rows.iter().map(|_| Constraint::Length(1)));
    }
    v.push(Constraint::Length(2));
    v.push(Constraint::Min(0));
    let area = Layout::vertical(v).split(f.area());
    let cols = format!(
        "{:>3} {:>8} {:<24} {:>10} {:>9} {:>9} {:>6} {:>10} {:>7}",
        "NC", "pid", "utilization", "exec/s", "p50 µs", "p99 µs", "models", "memory", "errors"
    );
    let head = header(t, devices.len(), procs, r);
    f.render_widget(Paragraph::new(vec![Line::from(head), Line::from(cols)]), area[0]);
    let mut at = 1;
    for d in &devices {
        f.render_widget(Paragraph::new(device_line(d)), area[at]);
        at += 1;
        for row in &d.rows {
            let cells = Layout::horizontal([Constraint::Length(13), Constraint::Length(25), Constraint::Min(0)])
                .split(area[at]);
            at += 1;
            f.render_widget(Paragraph::new(format!("{:>3} {:>8}", row.nc, opt_pid(row.pid))), cells[0]);
            let style = match (colour, row.errors > 0) {
                (false, _) => Style::default(),
                (true, true) => Style::default().fg(Color::Red),
                (true, false) => Style::default().fg(Color::Green),
            };
            let g = Gauge::default()
                .gauge_style(style)
                .ratio(row.utilization.clamp(0.0, 1.0))
                .label(format!("{:5.1}%", row.utilization * 100.0));
            f.render_widget(g, Rect { width: cells[1].width.saturating_sub(1), ..cells[1] });
            let rest = format!(
                "{:>10.0} {:>9} {:>9} {:>6} {:>10} {:>7}",
                row.exec_per_s,
                opt_us(row.p50_us),
                opt_us(row.p99_us),
                row.models,
                fmt_bytes(row.memory),
                row.errors
            );
            f.render_widget(Paragraph::new(rest), cells[2]);
        }
    }
    let foot = format!("host DMA memory held by tensors: {}    q/Esc: quit", fmt_bytes(host));
    f.render_widget(Paragraph::new(foot), area[at]);
}

use ratatui::layout::Rect;

/// The live terminal UI until q, Esc or Ctrl-C: samples every `p`, redraws on each sample and
/// on resize. The terminal is restored on every exit path.
pub(super) fn top_live(target: &TopTarget, p: Duration) -> Result<(), CliError> {
    use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
    use ratatui::crossterm::{execute, terminal};
    struct Restore;
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = terminal::disable_raw_mode();
            let _ = execute!(std::io::stdout(), terminal::LeaveAlternateScreen, ratatui::crossterm::cursor::Show);
        }
    }
    let io = |e: std::io::Error| CliError::failure(format!("terminal: {e}"));
    terminal::enable_raw_mode().map_err(io)?;
    let _restore = Restore;
    execute!(std::io::stdout(), terminal::EnterAlternateScreen).map_err(io)?;
    let mut term = ratatui::Terminal::new(ratatui::backend::CrosstermBackend::new(std::io::stdout())).map_err(io)?;
    let colour = crate::use_colour(true, std::env::var_os("NO_COLOR").as_deref());
    let mut before = sample();
    let mut t = Instant::now();
    let mut r = report(&before, &before, 0);
    term.draw(|f| top_ui(f, target, &r, colour)).map_err(io)?;
    loop {
        let wait = p.saturating_sub(t.elapsed());
        if event::poll(wait).map_err(io)? {
            match event::read().map_err(io)? {
                Event::Key(k) if k.kind == KeyEventKind::Press => {
                    let ctrl_c = k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                    if matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) || ctrl_c {
                        return Ok(());
                    }
                }
                Event::Resize(..) => {
                    term.draw(|f| top_ui(f, target, &r, colour)).map_err(io)?;
                }
                _ => {}
            }
            continue;
        }
        let now = sample();
        r = report(&before, &now, t.elapsed().as_nanos() as u64);
        t = Instant::now();
        before = now;
        term.draw(|f| top_ui(f, target, &r, colour)).map_err(io)?;
    }
}
