//! The `top` view: rows per NeuronCore, the one-frame text form and the live terminal UI.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use super::model::{report, sample, NcReport, Report};
use super::text::{fmt_bytes, opt_us};
use crate::device::DeviceSpec;
use crate::report::CliError;

/// NC count and name of the device `top` shows, from the selection without opening it (the
/// device belongs to the processes running on it).
pub(super) fn top_target(spec: &DeviceSpec) -> Result<(&'static csr_maps::Arch, String), CliError> {
    let spec = match spec {
        DeviceSpec::Default => crate::device::resolve_default(&crate::device::sysfs())?,
        s => s.clone(),
    };
    match spec {
        DeviceSpec::Sim { arch, .. } => Ok((arch, format!("sim:{}", arch.name))),
        // A shared device is named by its index in the set, never by a process.
        DeviceSpec::SimShared { arch, .. } => Ok((arch, format!("sim:shared:{}#0", arch.name))),
        DeviceSpec::Pci(addr) => {
            let f = crate::device::function(&crate::device::sysfs(), addr)?;
            let arch = crate::device::arch_of(&f)
                .ok_or_else(|| CliError::invalid(format!("{addr}: not a Neuron device this tool knows")))?;
            Ok((arch, addr.to_string()))
        }
        DeviceSpec::Default => Err(CliError::failure("no device selected")),
    }
}

pub(super) fn bar(frac: f64, width: usize) -> String {
    let fill = ((frac.clamp(0.0, 1.0) * width as f64).round() as usize).min(width);
    format!("[{}{}]", "#".repeat(fill), ".".repeat(width - fill))
}

/// One NeuronCore row of `top`: figures summed over every process whose runtime drives a
/// device of the arch.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TopRow {
    pub nc: usize,
    pub utilization: f64,
    pub exec_per_s: f64,
    pub p50_us: Option<u64>,
    pub p99_us: Option<u64>,
    pub models: u64,
    pub memory: u64,
    pub errors: u64,
}

/// What `top` shows: (rows, one per NC of `arch`; runtime processes; host DMA bytes).
pub fn top_rows(arch: &'static csr_maps::Arch, r: &Report) -> (Vec<TopRow>, usize, u64) {
    let ncs = arch.counts.ncs as usize;
    let mine: Vec<&NcReport> = r.ncs.iter().filter(|n| n.nc_version == arch.nc_version as u64).collect();
    let pids: std::collections::BTreeSet<u64> = mine.iter().map(|n| n.pid).collect();
    let secs = (r.period_ns as f64 / 1e9).max(1e-9);
    let rows = (0..ncs)
        .map(|nc| {
            let rows: Vec<&&NcReport> = mine.iter().filter(|n| n.nc as usize == nc).collect();
            TopRow {
                nc,
                utilization: rows.iter().map(|n| n.utilization).sum::<f64>().min(1.0),
                exec_per_s: rows.iter().map(|n| n.executions).sum::<u64>() as f64 / secs,
                p50_us: rows.iter().filter_map(|n| n.p50_us).max(),
                p99_us: rows.iter().filter_map(|n| n.p99_us).max(),
                models: rows.iter().map(|n| n.models).sum(),
                memory: rows.iter().map(|n| n.mem_model + n.mem_tensors).sum(),
                errors: rows.iter().map(|n| n.errors.iter().sum::<u64>()).sum(),
            }
        })
        .collect();
    let host: u64 = r.processes.iter().filter(|p| pids.contains(&p.0)).map(|p| p.2).sum();
    (rows, pids.len(), host)
}

/// One `top` frame: a row per NeuronCore of `arch` (figures summed over every process whose
/// runtime drives a device of that arch — the device of `label`).
pub fn top_frame(arch: &'static csr_maps::Arch, label: &str, r: &Report) -> String {
    let (rows, procs, host) = top_rows(arch, r);
    let mut o = String::new();
    let _ = writeln!(
        o,
        "neuron-vfio top — {label} ({}, {} NeuronCores), {procs} runtime process(es), period {} ms",
        arch.name,
        rows.len(),
        r.period_ns / 1_000_000
    );
    let _ = writeln!(
        o,
        "{:>3} {:<22} {:>6} {:>10} {:>9} {:>9} {:>6} {:>10} {:>7}",
        "NC", "utilization", "util%", "exec/s", "p50 µs", "p99 µs", "models", "memory", "errors"
    );
    for t in &rows {
        let _ = writeln!(
            o,
            "{:>3} {:<22} {:>6.1} {:>10.0} {:>9} {:>9} {:>6} {:>10} {:>7}",
            t.nc,
            bar(t.utilization, 20),
            t.utilization * 100.0,
            t.exec_per_s,
            opt_us(t.p50_us),
            opt_us(t.p99_us),
            t.models,
            fmt_bytes(t.memory),
            t.errors
        );
    }
    let _ = writeln!(o, "host DMA memory held by tensors: {}", fmt_bytes(host));
    o
}

/// Draw the live `top` view into `f`: a header, a row per NeuronCore (utilization bar, then
/// execution rate, latency, models, memory, errors), and a footer.
pub fn top_ui(f: &mut ratatui::Frame, arch: &'static csr_maps::Arch, label: &str, r: &Report, colour: bool) {
    use ratatui::layout::{Constraint, Layout};
    use ratatui::style::{Color, Style};
    use ratatui::text::Line;
    use ratatui::widgets::{Gauge, Paragraph};
    let (rows, procs, host) = top_rows(arch, r);
    let mut v = vec![Constraint::Length(2)];
    v.extend(rows.iter().map(|_| Constraint::Length(1)));
    v.push(Constraint::Length(2));
    v.push(Constraint::Min(0));
    let area = Layout::vertical(v).split(f.area());
    let head = format!(
        "neuron-vfio top — {label} ({}, {} NeuronCores), {procs} runtime process(es), period {} ms",
        arch.name,
        rows.len(),
        r.period_ns / 1_000_000
    );
    let cols = format!(
        "{:>3} {:<24} {:>10} {:>9} {:>9} {:>6} {:>10} {:>7}",
        "NC", "utilization", "exec/s", "p50 µs", "p99 µs", "models", "memory", "errors"
    );
    f.render_widget(Paragraph::new(vec![Line::from(head), Line::from(cols)]), area[0]);
    for (i, t) in rows.iter().enumerate() {
        let cells =
            Layout::horizontal([Constraint::Length(4), Constraint::Length(25), Constraint::Min(0)]).split(area[1 + i]);
        f.render_widget(Paragraph::new(format!("{:>3}", t.nc)), cells[0]);
        let style = match (colour, t.errors > 0) {
            (false, _) => Style::default(),
            (true, true) => Style::default().fg(Color::Red),
            (true, false) => Style::default().fg(Color::Green),
        };
        let g = Gauge::default()
            .gauge_style(style)
            .ratio(t.utilization.clamp(0.0, 1.0))
            .label(format!("{:5.1}%", t.utilization * 100.0));
        f.render_widget(g, Rect { width: cells[1].width.saturating_sub(1), ..cells[1] });
        let rest = format!(
            "{:>10.0} {:>9} {:>9} {:>6} {:>10} {:>7}",
            t.exec_per_s,
            opt_us(t.p50_us),
            opt_us(t.p99_us),
            t.models,
            fmt_bytes(t.memory),
            t.errors
        );
        f.render_widget(Paragraph::new(rest), cells[2]);
    }
    let foot = format!("host DMA memory held by tensors: {}    q/Esc: quit", fmt_bytes(host));
    f.render_widget(Paragraph::new(foot), area[1 + rows.len()]);
}

use ratatui::layout::Rect;

/// The live terminal UI until q, Esc or Ctrl-C: samples every `p`, redraws on each sample and
/// on resize. The terminal is restored on every exit path.
pub(super) fn top_live(arch: &'static csr_maps::Arch, label: &str, p: Duration) -> Result<(), CliError> {
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
    term.draw(|f| top_ui(f, arch, label, &r, colour)).map_err(io)?;
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
                    term.draw(|f| top_ui(f, arch, label, &r, colour)).map_err(io)?;
                }
                _ => {}
            }
            continue;
        }
        let now = sample();
        r = report(&before, &now, t.elapsed().as_nanos() as u64);
        t = Instant::now();
        before = now;
        term.draw(|f| top_ui(f, arch, label, &r, colour)).map_err(io)?;
    }
}
