//! What the host itself says, for neuron-monitor's system groups and per-process figures:
//! `/proc/stat` (vCPU usage, context switches), `/proc/meminfo`, `/proc/PID/{stat,statm,
//! environ,cmdline}`, and the EC2 identity the instance's DMI tables carry (no network: the
//! instance metadata service is never queried). Parsers take text so they are tested on
//! fixed inputs.

use std::path::Path;

use serde_json::{json, Map, Value};

/// The seven `/proc/stat` CPU time columns neuron-monitor reports, in its names.
pub const CPU_FIELDS: [&str; 7] = ["user", "nice", "system", "idle", "io_wait", "irq", "soft_irq"];

/// Cumulative CPU times (clock ticks): all CPUs, each CPU, and context switches.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CpuTimes {
    pub total: [u64; 7],
    pub per_cpu: Vec<(String, [u64; 7])>,
    pub ctxt: u64,
}

/// `/proc/stat` text → [`CpuTimes`] (lines it does not know are skipped).
pub fn parse_stat(text: &str) -> CpuTimes {
    let mut t = CpuTimes::default();
    for line in text.lines() {
        let mut w = line.split_whitespace();
        let Some(key) = w.next() else { continue };
        let nums: Vec<u64> = w.map(|x| x.parse().unwrap_or(0)).collect();
        let seven = || -> [u64; 7] { std::array::from_fn(|i| nums.get(i).copied().unwrap_or(0)) };
        if key == "cpu" {
            t.total = seven();
        } else if let Some(n) = key.strip_prefix("cpu") {
            if n.parse::<u32>().is_ok() {
                t.per_cpu.push((n.to_string(), seven()));
            }
        } else if key == "ctxt" {
            t.ctxt = nums.first().copied().unwrap_or(0);
        }
    }
    t
}

/// This host's CPU times now.
pub fn cpu_times() -> Result<CpuTimes, String> {
    std::fs::read_to_string("/proc/stat").map(|s| parse_stat(&s)).map_err(|e| format!("/proc/stat: {e}"))
}

fn usage_obj(before: &[u64; 7], now: &[u64; 7]) -> Value {
    let d: Vec<u64> = (0..7).map(|i| now[i].saturating_sub(before[i])).collect();
    let sum: u64 = d.iter().sum();
    let pct = |x: u64| if sum == 0 { 0.0 } else { (x as f64 * 10_000.0 / sum as f64).round() / 100.0 };
    Value::Object(CPU_FIELDS.iter().zip(&d).map(|(k, &x)| (k.to_string(), json!(pct(x)))).collect())
}

/// neuron-monitor's `vcpu_usage` figures between two samples: percentages per field, for
/// all vCPUs (`average_usage`) and each (`usage_data`), and the context switches.
pub fn vcpu_usage(before: &CpuTimes, now: &CpuTimes) -> Map<String, Value> {
    let mut per = Map::new();
    for (name, t) in &now.per_cpu {
        let b = before.per_cpu.iter().find(|(n, _)| n == name).map(|(_, b)| *b).unwrap_or([0; 7]);
        per.insert(name.clone(), usage_obj(&b, t));
    }
    let mut m = Map::new();
    m.insert("average_usage".into(), usage_obj(&before.total, &now.total));
    m.insert("usage_data".into(), Value::Object(per));
    m.insert("context_switch_count".into(), json!(now.ctxt.saturating_sub(before.ctxt)));
    m
}

/// Host memory (bytes): total, used (total − available), swap total, swap used.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MemInfo {
    pub total: u64,
    pub used: u64,
    pub swap_total: u64,
    pub swap_used: u64,
}

/// `/proc/meminfo` text → [`MemInfo`].
pub fn parse_meminfo(text: &str) -> Result<MemInfo, String> {
    let kb = |key: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map(|k| k.saturating_mul(1024))
    };
    let total = kb("MemTotal").ok_or("/proc/meminfo: no MemTotal")?;
    let avail = kb("MemAvailable").or_else(|| kb("MemFree")).unwrap_or(0);
    let swap_total = kb("SwapTotal").unwrap_or(0);
    let swap_free = kb("SwapFree").unwrap_or(0);
    Ok(MemInfo {
        total,
        used: total.saturating_sub(avail),
        swap_total,
        swap_used: swap_total.saturating_sub(swap_free),
    })
}

/// This host's memory now.
pub fn meminfo() -> Result<MemInfo, String> {
    std::fs::read_to_string("/proc/meminfo").map_err(|e| format!("/proc/meminfo: {e}")).and_then(|s| parse_meminfo(&s))
}

/// `/proc/PID/stat` text → (utime, stime) in clock ticks (fields 14 and 15, counted after
/// the command name, which may itself hold spaces and parentheses).
pub fn parse_proc_stat(text: &str) -> Option<(u64, u64)> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After ")": state is field 3, so utime (14) and stime (15) are at 11 and 12.
    Some((f.get(11)?.parse().ok()?, f.get(12)?.parse().ok()?))
}

/// CPU time a process has used (user, system), in clock ticks.
pub fn proc_cpu(pid: u64) -> Option<(u64, u64)> {
    parse_proc_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Clock ticks per second of `/proc` CPU times.
pub fn clk_tck() -> u64 {
    // SAFETY: sysconf reads a configuration value; it takes no pointers and has no
    // side effects.
    let v = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if v > 0 {
        v as u64
    } else {
        100
    }
}

/// Online vCPUs (at least 1).
pub fn vcpus() -> u64 {
    std::thread::available_parallelism().map(|n| n.get() as u64).unwrap_or(1)
}

/// A process's resident memory, bytes.
pub fn proc_rss(pid: u64) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf takes no pointers and has no side effects.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages.saturating_mul(if page > 0 { page as u64 } else { 4096 }))
}

/// The value of `NEURON_PROCESS_TAG` in a NUL-separated environment block.
pub fn parse_tag(environ: &[u8]) -> Option<String> {
    environ
        .split(|&b| b == 0)
        .find_map(|kv| kv.strip_prefix(b"NEURON_PROCESS_TAG="))
        .map(|v| String::from_utf8_lossy(v).chars().take(255).collect())
}

/// A process's tag: its `NEURON_PROCESS_TAG` (readable for processes of the same user),
/// else its pid, as neuron-monitor names applications.
pub fn proc_tag(pid: u64) -> String {
    std::fs::read(format!("/proc/{pid}/environ")).ok().and_then(|e| parse_tag(&e)).unwrap_or_else(|| pid.to_string())
}

/// A process's command line, arguments joined by spaces ("" when unreadable).
pub fn proc_cmdline(pid: u64) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    raw.split(|&b| b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a)).collect::<Vec<_>>().join(" ")
}

/// neuron-monitor's `instance_info`, from the DMI tables under `sysfs`
/// (`devices/virtual/dmi/id`): on EC2 (`sys_vendor` "Amazon EC2") `product_name` is the
/// instance type and `board_asset_tag` the instance id. Zone, region, subnet, AMI and name
/// live only in the instance metadata service, which is not queried: they stay empty.
pub fn instance_info(sysfs: &Path) -> Value {
    let dmi = sysfs.join("devices/virtual/dmi/id");
    let read = |f: &str| std::fs::read_to_string(dmi.join(f)).map(|s| s.trim().to_string()).unwrap_or_default();
    let ec2 = read("sys_vendor") == "Amazon EC2";
    let (id, ty) = if ec2 {
        let tag = read("board_asset_tag");
        (if tag.starts_with("i-") { tag } else { String::new() }, read("product_name"))
    } else {
        (String::new(), String::new())
    };
    let error = if ec2 {
        "instance metadata service not queried: zone, region, subnet and AMI unknown".to_string()
    } else {
        "not an EC2 instance (DMI sys_vendor is not Amazon EC2): instance metadata unknown".to_string()
    };
    json!({
        "instance_name": "",
        "instance_id": id,
        "instance_type": ty,
        "instance_availability_zone": "",
        "instance_availability_zone_id": "",
        "instance_region": "",
        "ami_id": "",
        "subnet_id": "",
        "error": error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_and_usage() {
        let a = parse_stat("cpu  10 0 10 80 0 0 0 0\ncpu0 10 0 10 80 0 0 0\nintr 5\nctxt 100\n");
        let b = parse_stat("cpu  40 0 30 130 0 0 0 0\ncpu0 40 0 30 130 0 0 0\nctxt 150\n");
        assert_eq!(a.per_cpu.len(), 1);
        let u = vcpu_usage(&a, &b);
        assert_eq!(u["average_usage"]["user"], 30.0);
        assert_eq!(u["average_usage"]["system"], 20.0);
        assert_eq!(u["average_usage"]["idle"], 50.0);
        assert_eq!(u["usage_data"]["0"]["user"], 30.0);
        assert_eq!(u["context_switch_count"], 50);
    }

    #[test]
    fn meminfo_and_process_files() {
        let m = parse_meminfo(
            "MemTotal: 1000 kB\nMemFree: 100 kB\nMemAvailable: 400 kB\nSwapTotal: 50 kB\nSwapFree: 20 kB\n",
        )
        .expect("meminfo");
        assert_eq!(m, MemInfo { total: 1_024_000, used: 614_400, swap_total: 51_200, swap_used: 30_720 });
        assert!(parse_meminfo("nothing").is_err());
        let stat = "42 (a (weird) name) S 1 42 42 0 -1 4194560 100 0 0 0 17 5 0 0 20 0 3 0";
        assert_eq!(parse_proc_stat(stat), Some((17, 5)));
        assert_eq!(parse_proc_stat("garbage"), None);
        assert_eq!(parse_tag(b"A=1\0NEURON_PROCESS_TAG=my_app\0B=2\0"), Some("my_app".into()));
        assert_eq!(parse_tag(b"A=1\0"), None);
        assert!(proc_cpu(std::process::id() as u64).is_some());
        assert!(proc_rss(std::process::id() as u64).is_some_and(|r| r > 0));
        assert!(!proc_cmdline(std::process::id() as u64).is_empty());
    }

    #[test]
    fn instance_identity_from_dmi_only() {
        let d = std::env::temp_dir().join(format!("nv-dmi-{}", std::process::id()));
        let id = d.join("devices/virtual/dmi/id");
        std::fs::create_dir_all(&id).expect("dir");
        let off = instance_info(&d);
        assert_eq!((off["instance_id"].as_str(), off["instance_type"].as_str()), (Some(""), Some("")));
        assert!(off["error"].as_str().is_some_and(|e| e.contains("not an EC2")));
        std::fs::write(id.join("sys_vendor"), "Amazon EC2\n").expect("w");
        std::fs::write(id.join("product_name"), "trn2.48xlarge\n").expect("w");
        std::fs::write(id.join("board_asset_tag"), "i-0123456789abcdef0\n").expect("w");
        let on = instance_info(&d);
        assert_eq!(on["instance_type"], "trn2.48xlarge");
        assert_eq!(on["instance_id"], "i-0123456789abcdef0");
        assert_eq!(on["instance_region"], "");
        let _ = std::fs::remove_dir_all(&d);
    }
}
