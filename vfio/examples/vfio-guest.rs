//! Runs inside the QEMU guest of `cli/tests/qemu.rs` (or on any machine with QEMU's `edu`
//! device): end-to-end checks of the vfio crate against a real kernel, and the DMA
//! map/unmap benchmark. An example of the vfio crate (`cargo build -p vfio --example
//! vfio-guest`), which the QEMU test builds and packs into the guest.
//!
//!   vfio-guest check   # discover edu → bind → open (container, iommufd) → MMIO → DMA → MSI → fault → reset → unbind,
//!                      # then a second edu without an IOMMU: refused without the opt-in, no-IOMMU mode with it;
//!                      # then MSI-X on an e1000e (vector routing, masking)
//!   vfio-guest bench   # DMA map+unmap throughput and ioctls per GiB, 4 KiB vs 2 MiB pages, per backend
//!   vfio-guest all     # both
//!
//! Output lines: `VFIO-CHECK ok|FAIL|skip NAME: detail`, `VFIO-BENCH ...`, and finally
//! `VFIO-RESULT PASS|FAIL`.

use std::io::{BufRead, Seek};
use std::sync::Arc;
use std::time::{Duration, Instant};

use platform::{DmaDir, HostMem, Mmio, PageSize};
use vfio::{Backend, Binding, Device, EventFd, Filter, IovaRange, OpenOptions, PciAddress, Sysfs, IRQ_MSI, IRQ_MSIX};

const EDU_VENDOR: u16 = 0x1234;
const EDU_DEVICE: u16 = 0x11e8;
const EDU_ID: u32 = 0x010000ed;
const R_ID: u64 = 0x00;
const R_LIVENESS: u64 = 0x04;
const R_FACT: u64 = 0x08;
const R_STATUS: u64 = 0x20;
const R_IRQ_STATUS: u64 = 0x24;
const R_IRQ_ACK: u64 = 0x64;
const R_DMA_SRC: u64 = 0x80;
const R_DMA_DST: u64 = 0x88;
const R_DMA_CNT: u64 = 0x90;
const R_DMA_CMD: u64 = 0x98;
const DMA_START: u64 = 1;
const DMA_TO_RAM: u64 = 2;
const DMA_IRQ: u64 = 4;
const DMA_IRQ_BIT: u32 = 0x100;
const EDU_BUF: u64 = 0x40000;

// QEMU's e1000e (Intel 82574L, 8086:10d3): the guest's MSI-X device. Registers and bits from
// the public 82574 datasheet (§10.2.4 interrupt registers): a cause written to ICS is latched
// in ICR and, when unmasked in IMS, raised on the MSI-X vector IVAR allocates to it.
const E1000E_VENDOR: u16 = 0x8086;
const E1000E_DEVICE: u16 = 0x10d3;
const E1000E_ICR: u64 = 0x00c0;
const E1000E_ICS: u64 = 0x00c8;
const E1000E_IMS: u64 = 0x00d0;
const E1000E_IMC: u64 = 0x00d8;
const E1000E_IVAR: u64 = 0x00e4;
/// ICR.RxQ0: receive queue 0 interrupt cause.
const E1000E_ICR_RXQ0: u32 = 1 << 20;
/// IVAR `INT_Alloc[0]` (RxQ0): vector in bits 2:0, bit 3 = valid.
const E1000E_IVAR_RXQ0_VALID: u32 = 1 << 3;

struct Report {
    failed: u32,
}

impl Report {
    fn check<T: std::fmt::Display, E: std::fmt::Display>(&mut self, name: &str, r: Result<T, E>) -> Option<T> {
        match r {
            Ok(v) => {
                println!("VFIO-CHECK ok {name}: {v}");
                Some(v)
            }
            Err(e) => {
                println!("VFIO-CHECK FAIL {name}: {e}");
                self.failed += 1;
                None
            }
        }
    }
    /// Run one check: `f`'s result is reported under `name`.
    fn run<T: std::fmt::Display>(&mut self, name: &str, f: impl FnOnce() -> Res<T>) -> Option<T> {
        self.check(name, f())
    }
    fn skip(&self, name: &str, why: &str) {
        println!("VFIO-CHECK skip {name}: {why}");
    }
}

type Res<T> = Result<T, String>;

fn s<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> Res<bool>) -> Res<Duration> {
    let t = Instant::now();
    while t.elapsed() < timeout {
        if f()? {
            return Ok(t.elapsed());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Err(format!("{what}: timed out after {timeout:?}"))
}

fn edu_dma(bar: &dyn Mmio, src: u64, dst: u64, len: u64, cmd: u64) -> Res<Duration> {
    bar.write64(R_DMA_SRC, src).map_err(s)?;
    bar.write64(R_DMA_DST, dst).map_err(s)?;
    bar.write64(R_DMA_CNT, len).map_err(s)?;
    bar.write64(R_DMA_CMD, cmd | DMA_START).map_err(s)?;
    wait_until("edu DMA", Duration::from_secs(5), || Ok(bar.read64(R_DMA_CMD).map_err(s)? & DMA_START == 0))
}

/// DMAR fault lines logged by the kernel since `kmsg` was opened.
fn dmar_faults(kmsg: &mut Option<std::io::BufReader<std::fs::File>>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(k) = kmsg {
        let mut line = String::new();
        while matches!(k.read_line(&mut line), Ok(n) if n > 0) {
            if line.contains("DMAR") && (line.contains("fault") || line.contains("Fault")) {
                out.push(line.trim().rsplit(';').next().unwrap_or("").to_string());
            }
            line.clear();
        }
    }
    out
}

fn open_kmsg() -> Option<std::io::BufReader<std::fs::File>> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open("/dev/kmsg").ok()?;
    f.seek(std::io::SeekFrom::End(0)).ok()?;
    Some(std::io::BufReader::new(f))
}

fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

fn run_backend(rep: &mut Report, addr: PciAddress, backend: Backend, seed: u8) {
    let p = |n: &str| format!("{backend}.{n}");
    let opts = OpenOptions {
        backend,
        // edu masks DMA addresses to 28 bits.
        iova_window: Some(IovaRange { start: 1 << 20, last: (1 << 28) - 1 }),
        ..Default::default()
    };
    let dev = match Device::open(addr, &opts) {
        Ok(d) => d,
        Err(e @ vfio::Error::IommufdUnavailable(_)) => {
            rep.skip(&p("open"), &e.to_string());
            return;
        }
        Err(e) => {
            rep.check::<&str, _>(&p("open"), Err(e));
            return;
        }
    };
    let info = dev.iommu_info().clone();
    rep.check::<_, String>(
        &p("open"),
        Ok(format!(
            "regions/irqs {:?}, valid IOVA {}, dma_avail {:?}",
            dev.counts(),
            info.valid.iter().map(|r| format!("{:#x}-{:#x}", r.start, r.last)).collect::<Vec<_>>().join(","),
            info.dma_avail
        )),
    );
    let Some(bar) = rep.run(&p("bar0.mmap"), || {
        let ri = dev.region_info(0).map_err(s)?;
        if !ri.mmappable() {
            return Err(format!("BAR0 not mmap-able: {ri:?}"));
        }
        let m = dev.map_region(0).map_err(s)?;
        if !m.is_mapped(0, 4) {
            return Err("BAR0 offset 0 not in an mmap'd area".into());
        }
        Ok(Wrap(m, format!("size {:#x}, areas {:?}", ri.size, ri.mmap_areas)))
    }) else {
        return;
    };
    let bar: Arc<vfio::RegionMmio> = bar.0;
    rep.run(&p("id"), || {
        let id = bar.read32(R_ID).map_err(s)?;
        if id != EDU_ID {
            return Err(format!("ID register {id:#010x}, expected {EDU_ID:#010x}"));
        }
        Ok(format!("{id:#010x}"))
    });
    rep.run(&p("liveness"), || {
        let v = 0x1234_5678u32 ^ u32::from(seed);
        bar.write32(R_LIVENESS, v).map_err(s)?;
        let r = bar.read32(R_LIVENESS).map_err(s)?;
        if r != !v {
            return Err(format!("wrote {v:#x}, read {r:#x}, expected {:#x}", !v));
        }
        Ok(format!("{v:#x} -> {r:#x}"))
    });
    rep.run(&p("factorial"), || {
        let n = 10 + u32::from(seed % 3);
        let expect: u32 = (1..=n).product();
        bar.write32(R_FACT, n).map_err(s)?;
        wait_until("factorial", Duration::from_secs(5), || Ok(bar.read32(R_STATUS).map_err(s)? & 1 == 0))?;
        let got = bar.read32(R_FACT).map_err(s)?;
        if got != expect {
            return Err(format!("{n}! read {got}, expected {expect}"));
        }
        Ok(format!("{n}! = {got}"))
    });
    rep.run(&p("bus_master"), || {
        dev.set_bus_master(true).map_err(s)?;
        let cmd = dev.config_read16(4).map_err(s)?;
        if cmd & 4 == 0 {
            return Err(format!("command register {cmd:#x} lacks bus master"));
        }
        Ok(format!("command {cmd:#06x}"))
    });

    // MSI to an eventfd.
    let ev = rep.run(&p("msi.enable"), || {
        let i = dev.irq_info(IRQ_MSI).map_err(s)?;
        if i.count == 0 {
            return Err("device reports no MSI vectors".into());
        }
        let ev = EventFd::new().map_err(s)?;
        use std::os::fd::AsFd;
        dev.enable_irq(IRQ_MSI, 0, &[ev.as_fd()]).map_err(s)?;
        Ok(Wrap(ev, format!("{} vector(s), flags {:#x}", i.count, i.flags.bits())))
    });

    // DMA RAM -> device -> RAM through IOMMU-mapped buffers, completion raised as MSI.
    const N: usize = 4000;
    rep.run(&p("dma.roundtrip"), || {
        let dma = dev.dma();
        let src = dma.alloc_map(4096, DmaDir::ToDevice).map_err(s)?;
        let dst = dma.alloc_map(4096, DmaDir::FromDevice).map_err(s)?;
        let data = pattern(seed, N);
        src.mem().write(0, &data).map_err(s)?;
        dst.mem().fill(0, 4096, 0).map_err(s)?;
        let t1 = edu_dma(bar.as_ref(), src.iova(), EDU_BUF, N as u64, 0)?;
        if let Some(ev) = &ev {
            ev.0.take().map_err(s)?;
        }
        let t2 = edu_dma(bar.as_ref(), EDU_BUF, dst.iova(), N as u64, DMA_TO_RAM | DMA_IRQ)?;
        let mut got = vec![0u8; N];
        dst.mem().read(0, &mut got).map_err(s)?;
        if got != data {
            let first = got.iter().zip(&data).position(|(a, b)| a != b).unwrap_or(0);
            return Err(format!("data mismatch at byte {first}: {:#x} != {:#x}", got[first], data[first]));
        }
        Ok(format!("{N} bytes via IOVA {:#x} -> edu -> IOVA {:#x} verified ({t1:?}, {t2:?})", src.iova(), dst.iova()))
    });
    if let Some(ev) = &ev {
        rep.run(&p("msi.delivered"), || {
            let n = ev.0.wait(Duration::from_secs(5)).map_err(s)?;
            let st = bar.read32(R_IRQ_STATUS).map_err(s)?;
            bar.write32(R_IRQ_ACK, st).map_err(s)?;
            if n == 0 {
                return Err(format!("no eventfd signal within 5 s (irq status {st:#x})"));
            }
            if st & DMA_IRQ_BIT == 0 {
                return Err(format!("eventfd signalled but irq status {st:#x} lacks the DMA bit"));
            }
            Ok(format!("eventfd count {n}, irq status {st:#x}"))
        });
        rep.check(&p("msi.disable"), dev.disable_irq(IRQ_MSI).map(|_| "ok"));
    }

    // A DMA to an unmapped IOVA is blocked; the memory around it stays intact.
    rep.run(&p("dma.blocked"), || {
        let dma = dev.dma();
        let mapped = dma.alloc_map(4096, DmaDir::Bidirectional).map_err(s)?;
        mapped.mem().fill(0, 4096, 0x5a).map_err(s)?;
        let hole = dma.reserve_iova(4096, 4096).map_err(s)?;
        let beyond = HostMem::alloc(4096).map_err(s)?;
        beyond.fill(0, 4096, 0xa5).map_err(s)?;
        let mut kmsg = open_kmsg();
        let r = edu_dma(bar.as_ref(), EDU_BUF, hole, 256, DMA_TO_RAM);
        dma.release_iova(hole).map_err(s)?;
        r?;
        let mut a = vec![0u8; 4096];
        mapped.mem().read(0, &mut a).map_err(s)?;
        let mut b = vec![0u8; 4096];
        beyond.read(0, &mut b).map_err(s)?;
        if a.iter().any(|&x| x != 0x5a) || b.iter().any(|&x| x != 0xa5) {
            return Err("memory next to the unmapped IOVA changed".into());
        }
        std::thread::sleep(Duration::from_millis(50));
        let faults = dmar_faults(&mut kmsg);
        match (kmsg.is_some(), faults.first()) {
            (true, None) => Err("no DMAR fault logged for the blocked DMA".into()),
            (true, Some(f)) => {
                let f = faults.iter().find(|l| l.contains("addr")).unwrap_or(f);
                Ok(format!("IOVA {hole:#x} blocked, neighbours intact; kernel: {f}"))
            }
            (false, _) => Ok(format!("IOVA {hole:#x} blocked, neighbours intact (no /dev/kmsg)")),
        }
    });

    // Reset.
    if dev.can_reset() {
        rep.run(&p("reset"), || {
            bar.write32(R_FACT, 3).map_err(s)?;
            dev.reset().map_err(s)?;
            let id = bar.read32(R_ID).map_err(s)?;
            let v = 0x0bad_cafe;
            bar.write32(R_LIVENESS, v).map_err(s)?;
            let live = bar.read32(R_LIVENESS).map_err(s)?;
            if id != EDU_ID || live != !v {
                return Err(format!("after reset: id {id:#x}, liveness {live:#x}"));
            }
            Ok("VFIO_DEVICE_RESET done; device answers again".to_string())
        });
    } else {
        rep.check(
            &p("reset"),
            match dev.reset() {
                Err(vfio::Error::ResetUnsupported) => {
                    Ok("device offers no reset method (no FLR/PM/bus reset); ResetUnsupported reported".to_string())
                }
                Err(e) => Err(e.to_string()),
                Ok(()) => Err("reset succeeded although the device flags say it cannot".to_string()),
            },
        );
    }
}

struct Wrap<T>(T, String);
impl<T> std::fmt::Display for Wrap<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.1)
    }
}

/// The edu behind the IOMMU (with an IOMMU group), or without one.
fn find_edu_where(sysfs: &Sysfs, with_iommu: bool) -> Res<vfio::PciFunction> {
    let found = sysfs.find(&Filter::ids(EDU_VENDOR, Some(EDU_DEVICE))).map_err(s)?;
    let n = found.len();
    found.into_iter().find(|f| f.iommu_group.is_some() == with_iommu).ok_or_else(|| {
        format!("no edu device (1234:11e8) {} an IOMMU group among {n}", if with_iommu { "with" } else { "without" })
    })
}

fn find_edu(sysfs: &Sysfs) -> Res<vfio::PciFunction> {
    find_edu_where(sysfs, true)
}

/// The edu that no IOMMU translates (QEMU: behind a pxb-pcie with bypass_iommu=true):
/// refused without the opt-in; with it, no-IOMMU mode with DMA at physical addresses.
fn noiommu(rep: &mut Report, sysfs: &Sysfs) {
    let Some(f) = rep.check(
        "noiommu.discover",
        find_edu_where(sysfs, false).map(|f| {
            let d = format!("{} driver {:?} group {:?}", f.address, f.driver, f.iommu_group);
            Wrap(f, d)
        }),
    ) else {
        return;
    };
    let f = f.0;
    let param = vfio::noiommu::param_enabled(sysfs);
    println!("VFIO-INFO noiommu: {} = {param:?}", vfio::noiommu::PARAM);
    // Without the flag the device is refused, with the error saying how to opt in (checked
    // before binding: it needs nothing but sysfs).
    let refused = |rep: &mut Report, name: &str, addr: PciAddress| {
        rep.check(
            name,
            match Device::open(addr, &OpenOptions::default()) {
                Err(e @ vfio::Error::NoIommu(_)) => {
                    let m = e.to_string();
                    if m.contains("enable_unsafe_noiommu_mode") && m.contains("allow_noiommu") {
                        Ok(m)
                    } else {
                        Err(format!("NoIommu error does not say how to opt in: {m}"))
                    }
                }
                Err(e) => Err(format!("expected the NoIommu error, got: {e}")),
                Ok(d) => Err(format!("opened without allow_noiommu through {}", d.backend())),
            },
        );
    };
    refused(rep, "noiommu.refused", f.address);
    let allow = OpenOptions { allow_noiommu: true, ..Default::default() };
    if param != Some(true) {
        // The opt-in alone is not enough: the error names the module parameter.
        rep.check(
            "noiommu.unavailable",
            match Device::open(f.address, &allow) {
                Err(e @ vfio::Error::NoIommuUnavailable { .. })
                    if e.to_string().contains("enable_unsafe_noiommu_mode") =>
                {
                    Ok(e.to_string())
                }
                Err(e) => Err(format!("expected NoIommuUnavailable naming the parameter, got: {e}")),
                Ok(_) => Err("opened although no-IOMMU mode is off".to_string()),
            },
        );
        rep.skip(
            "noiommu",
            &format!(
                "no-IOMMU mode unavailable in this kernel ({} is {}); only the refusals were checked",
                vfio::noiommu::PARAM,
                match param {
                    None => "absent: CONFIG_VFIO_NOIOMMU not set",
                    _ => "N",
                }
            ),
        );
        return;
    }
    println!("VFIO-INFO noiommu supported");
    let Some(binding) = rep.check(
        "noiommu.bind",
        Binding::bind(sysfs, f.address).and_then(|b| {
            let g = sysfs.function(f.address)?.iommu_group;
            let name = g.and_then(|g| {
                std::fs::read_to_string(format!("/sys/kernel/iommu_groups/{g}/name")).ok().map(|n| n.trim().to_string())
            });
            Ok(Wrap(b, format!("vfio-pci; group {g:?} named {name:?}")))
        }),
    ) else {
        return;
    };
    refused(rep, "noiommu.refused_bound", f.address);
    let mut kmsg = open_kmsg();
    match Device::open(f.address, &allow) {
        Err(e) => {
            rep.check::<&str, _>("noiommu.open", Err(e));
        }
        Ok(dev) => {
            rep.check(
                "noiommu.open",
                if dev.backend() == Backend::NoIommu {
                    std::thread::sleep(Duration::from_millis(20));
                    let mut kernel = String::new();
                    if let Some(k) = &mut kmsg {
                        let mut line = String::new();
                        while matches!(k.read_line(&mut line), Ok(n) if n > 0) {
                            if line.contains("noiommu") {
                                kernel = line.trim().rsplit(';').next().unwrap_or("").to_string();
                            }
                            line.clear();
                        }
                    }
                    Ok(format!("backend {}, regions/irqs {:?}; kernel: {kernel}", dev.backend(), dev.counts()))
                } else {
                    Err(format!("opened through {}, expected noiommu", dev.backend()))
                },
            );
            noiommu_device(rep, &dev);
        }
    }
    // As a Platform (what hal drives): mappings are limited to one hugepage, and one that
    // size maps at a physical address.
    rep.check(
        "noiommu.platform",
        (|| -> Res<_> {
            use platform::Platform;
            let p = vfio::VfioPlatform::open(f.address, &allow).map_err(s)?;
            let max = p.max_dma_mapping();
            if max != Some(PageSize::Huge2M.bytes()) {
                return Err(format!("max_dma_mapping {max:?}, expected one 2 MiB hugepage"));
            }
            let m =
                p.dma_map(HostMem::alloc(PageSize::Huge2M.bytes()).map_err(s)?, DmaDir::Bidirectional).map_err(s)?;
            Ok(format!(
                "max_dma_mapping {max:?}; a 2 MiB buffer ({:?} pages) maps at {:#x}",
                m.mem().page_size(),
                m.iova()
            ))
        })(),
    );
    rep.check(
        "noiommu.unbind",
        (|| -> Res<_> {
            binding.0.restore().map_err(s)?;
            let after = sysfs.function(f.address).map_err(s)?;
            if after.driver != f.driver || after.driver_override != f.driver_override {
                return Err(format!(
                    "driver {:?} override {:?}, expected {:?}",
                    after.driver, after.driver_override, f.driver
                ));
            }
            Ok(format!("driver back to {:?}", after.driver))
        })(),
    );
}

/// MMIO and a DMA round trip at physical addresses on an edu opened in no-IOMMU mode.
fn noiommu_device(rep: &mut Report, dev: &Device) {
    let Some(bar) = rep.check("noiommu.bar0", dev.map_region(0).map(|m| Wrap(m, "mapped".into()))) else {
        return;
    };
    let bar = bar.0;
    rep.check(
        "noiommu.id",
        (|| -> Res<_> {
            let id = bar.read32(R_ID).map_err(s)?;
            if id != EDU_ID {
                return Err(format!("ID register {id:#010x}, expected {EDU_ID:#010x}"));
            }
            Ok(format!("{id:#010x}"))
        })(),
    );
    rep.check(
        "noiommu.factorial",
        (|| -> Res<_> {
            let n = 12u32;
            bar.write32(R_FACT, n).map_err(s)?;
            wait_until("factorial", Duration::from_secs(5), || Ok(bar.read32(R_STATUS).map_err(s)? & 1 == 0))?;
            let got = bar.read32(R_FACT).map_err(s)?;
            if got != 479_001_600 {
                return Err(format!("{n}! read {got}, expected 479001600"));
            }
            Ok(format!("{n}! = {got}"))
        })(),
    );
    // RAM (a 2 MiB hugepage) -> edu -> RAM (a single 4 KiB page), at physical addresses.
    const N: usize = 4000;
    const SRC_OFF: usize = 0x12_3000;
    rep.check(
        "noiommu.dma.roundtrip",
        (|| -> Res<_> {
            dev.set_bus_master(true).map_err(s)?;
            let dma = dev.dma();
            let huge = HostMem::alloc_with(2 << 20, PageSize::Huge2M).map_err(|e| format!("2 MiB hugepage: {e}"))?;
            let src = dma.map(huge, DmaDir::ToDevice).map_err(s)?;
            let page = HostMem::alloc_with(4096, PageSize::Base4K).map_err(s)?;
            let dst = dma.map(page, DmaDir::FromDevice).map_err(s)?;
            if src.iova() % (2 << 20) != 0 || dst.iova() % 4096 != 0 {
                return Err(format!("physical addresses {:#x} / {:#x} misaligned", src.iova(), dst.iova()));
            }
            let data = pattern(7, N);
            src.mem().write(SRC_OFF, &data).map_err(s)?;
            dst.mem().fill(0, 4096, 0).map_err(s)?;
            let t1 = edu_dma(bar.as_ref(), src.iova() + SRC_OFF as u64, EDU_BUF, N as u64, 0)?;
            let t2 = edu_dma(bar.as_ref(), EDU_BUF, dst.iova(), N as u64, DMA_TO_RAM)?;
            let mut got = vec![0u8; N];
            dst.mem().read(0, &mut got).map_err(s)?;
            if got != data {
                let first = got.iter().zip(&data).position(|(a, b)| a != b).unwrap_or(0);
                return Err(format!("data mismatch at byte {first}: {:#x} != {:#x}", got[first], data[first]));
            }
            Ok(format!(
                "{N} bytes from physical {:#x} (2 MiB hugepage {:#x} + {SRC_OFF:#x}) -> edu -> physical {:#x} (4 KiB page) verified ({t1:?}, {t2:?}); pinned {} bytes",
                src.iova() + SRC_OFF as u64,
                src.iova(),
                dst.iova(),
                dma.pinned()
            ))
        })(),
    );
    // Not a check (4 KiB pages of a fresh buffer may happen to be contiguous): what a
    // multi-page 4 KiB buffer gives.
    match HostMem::alloc_with(64 << 10, PageSize::Base4K)
        .map_err(s)
        .and_then(|m| dev.dma().map(m, DmaDir::ToDevice).map_err(s))
    {
        Ok(m) => {
            println!("VFIO-INFO noiommu: a 64 KiB buffer of 4 KiB pages happened to be contiguous at {:#x}", m.iova())
        }
        Err(e) => println!("VFIO-INFO noiommu: a 64 KiB buffer of 4 KiB pages: {e}"),
    }
}

fn check(rep: &mut Report) {
    let sysfs = Sysfs::default();
    let support = vfio::probe_support(&sysfs, std::path::Path::new("/dev"));
    println!(
        "VFIO-INFO support: {support:?}, kernel {}",
        std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim()
    );
    rep.check("env", vfio::check_vfio_available(&sysfs, std::path::Path::new("/dev")).map(|s| format!("{s:?}")));
    let Some(f) = rep.check(
        "discover",
        find_edu(&sysfs).map(|f| {
            let d = format!(
                "{} class {:06x} driver {:?} group {:?} numa {:?} bars {:?}",
                f.address,
                f.class,
                f.driver,
                f.iommu_group,
                f.numa_node,
                f.bars.iter().map(|b| (b.index, b.size)).collect::<Vec<_>>()
            );
            Wrap(f, d)
        }),
    ) else {
        return;
    };
    let f = f.0;
    let Some(binding) = rep.check(
        "bind",
        Binding::bind(&sysfs, f.address).map(|b| Wrap(b, "driver_override + drivers_probe -> vfio-pci".into())),
    ) else {
        return;
    };
    rep.check("group_viable", sysfs.check_group_viable(f.address).map(|g| format!("group {g}")));
    run_backend(rep, f.address, Backend::Container, 1);
    run_backend(rep, f.address, Backend::Iommufd, 2);
    rep.check(
        "unbind",
        (|| -> Res<_> {
            binding.0.restore().map_err(s)?;
            let after = sysfs.function(f.address).map_err(s)?;
            if after.driver != f.driver || after.driver_override != f.driver_override {
                return Err(format!(
                    "driver {:?} override {:?}, expected {:?} {:?}",
                    after.driver, after.driver_override, f.driver, f.driver_override
                ));
            }
            Ok(format!("driver back to {:?}, override cleared", after.driver))
        })(),
    );
    noiommu(rep, &sysfs);
    msix(rep, &sysfs);
}

/// MSI-X through vfio: QEMU's e1000e (edu has MSI only). Vectors 0 and 1 get eventfds; the
/// device's RxQ0 cause is routed to vector 1 (IVAR), unmasked (IMS) and raised by software (ICS);
/// vector 1's eventfd must fire (QEMU may re-raise a still-latched cause when its EITR
/// throttle timer expires, so the count can exceed 1), vector 0's must not, and nothing may
/// fire while the cause is masked in IMS.
fn msix(rep: &mut Report, sysfs: &Sysfs) {
    let Some(f) = rep.check(
        "msix.discover",
        sysfs
            .find(&Filter::ids(E1000E_VENDOR, Some(E1000E_DEVICE)))
            .map_err(s)
            .and_then(|v| v.into_iter().next().ok_or_else(|| "no e1000e (8086:10d3)".to_string()))
            .map(|f| {
                let d = format!("{} driver {:?} group {:?}", f.address, f.driver, f.iommu_group);
                Wrap(f, d)
            }),
    ) else {
        return;
    };
    let addr = f.0.address;
    let Some(binding) = rep.check("msix.bind", Binding::bind(sysfs, addr).map(|b| Wrap(b, "ok".into()))) else {
        return;
    };
    if let Some(dev) = rep.check(
        "msix.open",
        Device::open(addr, &OpenOptions::default()).map(|d| {
            let c = d.counts();
            Wrap(d, format!("regions/irqs {c:?}"))
        }),
    ) {
        let dev = dev.0;
        let run = || -> Res<String> {
            let info = dev.irq_info(IRQ_MSIX).map_err(s)?;
            if info.count < 2 {
                return Err(format!("device reports {} MSI-X vectors", info.count));
            }
            let bar = dev.map_region(0).map_err(s)?;
            // An MSI-X message is a memory write by the device: bus mastering must be on.
            dev.set_bus_master(true).map_err(s)?;
            // Vector 0 gets a decoy eventfd, vector 1 the one under test: delivery must follow
            // the device's routing, not merely reach some vector.
            let decoy = EventFd::new().map_err(s)?;
            let ev = EventFd::new().map_err(s)?;
            use std::os::fd::AsFd;
            dev.enable_irq(IRQ_MSIX, 0, &[decoy.as_fd(), ev.as_fd()]).map_err(s)?;
            let vec = 1u32;
            bar.write32(E1000E_IMC, u32::MAX).map_err(s)?;
            bar.read32(E1000E_ICR).map_err(s)?;
            bar.write32(E1000E_IVAR, E1000E_IVAR_RXQ0_VALID | vec).map_err(s)?;
            // Masked: the cause latches, no interrupt.
            bar.write32(E1000E_ICS, E1000E_ICR_RXQ0).map_err(s)?;
            let masked = ev.wait(Duration::from_millis(100)).map_err(s)?;
            if masked != 0 {
                return Err(format!("eventfd fired {masked}x while the cause was masked"));
            }
            bar.read32(E1000E_ICR).map_err(s)?;
            bar.write32(E1000E_IMS, E1000E_ICR_RXQ0).map_err(s)?;
            let t = Instant::now();
            bar.write32(E1000E_ICS, E1000E_ICR_RXQ0).map_err(s)?;
            let n = ev.wait(Duration::from_secs(5)).map_err(s)?;
            let lat = t.elapsed();
            let icr = bar.read32(E1000E_ICR).map_err(s)?;
            bar.write32(E1000E_IMC, u32::MAX).map_err(s)?;
            let stray = decoy.take().map_err(s)?;
            if n == 0 {
                let ctl = msix_control(&dev);
                return Err(format!(
                    "no eventfd signal on vector {vec} within 5 s (ICR {icr:#x}, vector 0 count {stray}, MSI-X control {ctl})"
                ));
            }
            if stray != 0 {
                return Err(format!("vector 0's eventfd fired {stray}x for a cause routed to vector {vec}"));
            }
            Ok(format!("{} vectors; RxQ0 cause -> vector {vec} eventfd count {n} in {lat:?}", info.count))
        };
        if rep.check("msix.delivered", run()).is_some() {
            rep.check("msix.disable", dev.disable_irq(IRQ_MSIX).map(|_| "ok"));
        }
    }
    rep.check("msix.unbind", binding.0.restore().map(|_| "ok"));
}

/// The MSI-X capability's message control word, for diagnostics.
fn msix_control(dev: &Device) -> String {
    let mut at = dev.config_read16(0x34).map(|v| v & 0xfc).unwrap_or(0);
    for _ in 0..48 {
        if at == 0 {
            break;
        }
        let Ok(hdr) = dev.config_read16(u64::from(at)) else { break };
        if hdr & 0xff == 0x11 {
            return dev.config_read16(u64::from(at) + 2).map_or_else(|e| e.to_string(), |v| format!("{v:#06x}"));
        }
        at = (hdr >> 8) & 0xfc;
    }
    "no capability".into()
}

/// DMA map+unmap throughput, per buffer and per page, for 4 KiB and 2 MiB pages.
fn bench(rep: &mut Report) {
    let sysfs = Sysfs::default();
    let Some(f) = rep.check("bench.discover", find_edu(&sysfs).map(|f| Wrap(f.clone(), f.address.to_string()))) else {
        return;
    };
    let Some(binding) = rep.check("bench.bind", Binding::bind(&sysfs, f.0.address).map(|b| Wrap(b, "ok".into())))
    else {
        return;
    };
    let mib: usize = std::env::var("VFIO_BENCH_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(64);
    let reps: u32 = 4;
    for backend in [Backend::Container, Backend::Iommufd] {
        bench_backend(rep, f.0.address, backend, mib, reps);
    }
    rep.check("bench.unbind", binding.0.restore().map(|_| "ok"));
}

/// The benchmark through one backend: `mib` MiB mapped and unmapped `reps` times, as one
/// buffer and page by page.
fn bench_backend(rep: &mut Report, addr: PciAddress, backend: Backend, mib: usize, reps: u32) {
    let total = mib << 20;
    let dev = match Device::open(addr, &OpenOptions { backend, ..Default::default() }) {
        Ok(d) => d,
        Err(e @ vfio::Error::IommufdUnavailable(_)) => {
            rep.skip(&format!("bench.{backend}"), &e.to_string());
            return;
        }
        Err(e) => {
            rep.check::<&str, _>(&format!("bench.{backend}.open"), Err(e));
            return;
        }
    };
    let dma = dev.dma();
    const GIB: f64 = (1u64 << 30) as f64;
    for page in [PageSize::Base4K, PageSize::Huge2M] {
        let label = if page == PageSize::Base4K { "4K" } else { "2M" };
        let mem = match HostMem::alloc_with(total, page) {
            Ok(m) => m,
            Err(e) => {
                rep.skip(
                    &format!("bench.{backend}.{label}"),
                    &format!("cannot allocate {mib} MiB of {label} pages: {e}"),
                );
                continue;
            }
        };
        // Touch the memory so page faults are not counted as pinning.
        let _ = mem.fill(0, mem.len(), 1);
        let iova = match dma.reserve_iova(total as u64, 2 << 20) {
            Ok(i) => i,
            Err(e) => {
                rep.check::<&str, _>(&format!("bench.{backend}.iova"), Err(e));
                continue;
            }
        };
        let psz = page.bytes();
        for (mode, chunk) in [("per-buffer", total), ("per-page", psz)] {
            let before = dma.ioctl_count();
            let t = Instant::now();
            let mut err = None;
            'outer: for _ in 0..reps {
                for off in (0..total).step_by(chunk) {
                    // SAFETY: `mem` stays alive and mapped until after the matching unmap
                    // below; nothing holds references into it.
                    let r = unsafe {
                        dma.map_raw(
                            mem.as_ptr() as u64 + off as u64,
                            iova + off as u64,
                            chunk as u64,
                            DmaDir::Bidirectional,
                        )
                    };
                    if let Err(e) = r {
                        err = Some(e);
                        break 'outer;
                    }
                }
                for off in (0..total).step_by(chunk) {
                    if let Err(e) = dma.unmap_raw(iova + off as u64, chunk as u64) {
                        err = Some(e);
                        break 'outer;
                    }
                }
            }
            let dt = t.elapsed().as_secs_f64();
            if let Some(e) = err {
                // Undo whatever is still mapped before reporting.
                let _ = dma.unmap_raw(iova, total as u64);
                rep.check::<&str, _>(&format!("bench.{backend}.{label}.{mode}"), Err(e));
                continue;
            }
            let bytes = total as f64 * f64::from(reps);
            let ioctls = (dma.ioctl_count() - before) as f64;
            println!(
                "VFIO-BENCH backend={backend} pages={label} mode={mode} bytes={} reps={reps} map+unmap={:.2} GiB/s ioctls/GiB={:.0} time={:.3}s",
                total,
                bytes / GIB / dt,
                ioctls / (bytes / GIB),
                dt
            );
        }
        let _ = dma.release_iova(iova);
    }
}

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    let mut rep = Report { failed: 0 };
    match mode.as_str() {
        "check" => check(&mut rep),
        "bench" => bench(&mut rep),
        "all" => {
            check(&mut rep);
            bench(&mut rep);
        }
        other => {
            eprintln!("usage: vfio-guest [check|bench|all] (got {other:?})");
            std::process::exit(2);
        }
    }
    println!("VFIO-RESULT {}", if rep.failed == 0 { "PASS" } else { "FAIL" });
    std::process::exit(if rep.failed == 0 { 0 } else { 1 });
}
