//! The vfio-user device model driven directly (as QEMU's messages would) and over its socket,
//! by rust-vmm's vfio-user client (one this project did not write).

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};

use platform::Platform;
use sim::{SimConfig, SimDevice, Timing};
use sim_serve::{config, ServeConfig, SimBackend, SimServer};
use vfio::user::wire::{DMA_READ, DMA_UNMAP_ALL, DMA_WRITE};
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_DATA_NONE, VFIO_PCI_CONFIG_REGION_INDEX,
    VFIO_PCI_MSIX_IRQ_INDEX,
};

fn backend(arch: &'static csr_maps::Arch) -> SimBackend {
    let sim = SimDevice::new(SimConfig::new(arch).timing(Timing::Inline)).unwrap();
    SimBackend::new(sim, sim_serve::DEFAULT_BAR4_WINDOW).unwrap()
}

fn cfg32(b: &mut SimBackend, off: u64) -> u32 {
    let mut d = [0u8; 4];
    b.region_read(VFIO_PCI_CONFIG_REGION_INDEX, off, &mut d).unwrap();
    u32::from_le_bytes(d)
}

/// A client's memory as QEMU's memory-backend-memfd makes it: sealed against resizing.
fn memfd(len: u64) -> File {
    let f = unsealed_memfd(len);
    // SAFETY: fcntl(2) on a descriptor owned here.
    let r = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK | libc::F_SEAL_GROW) };
    assert_eq!(r, 0);
    f
}

fn unsealed_memfd(len: u64) -> File {
    // SAFETY: memfd_create with a NUL-terminated name; the returned descriptor is owned here.
    let fd = unsafe { libc::memfd_create(c"sim-serve-test".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    assert!(fd >= 0);
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    let f = unsafe { File::from_raw_fd(fd) };
    f.set_len(len).unwrap();
    f
}

fn eventfd() -> File {
    // SAFETY: eventfd(2); the returned descriptor is owned here.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    assert!(fd >= 0);
    // SAFETY: a fresh descriptor.
    unsafe { File::from_raw_fd(fd) }
}

#[test]
fn config_space_names_the_arch_and_sizes_its_bars() {
    for arch in [&csr_maps::SUNDA, &csr_maps::CAYMAN, &csr_maps::MARIANA] {
        let mut b = backend(arch);
        let id = cfg32(&mut b, 0);
        assert_eq!(id & 0xffff, arch.pci_vendor as u32);
        assert_eq!(id >> 16, arch.pci_devices[0] as u32);
        assert_eq!(cfg32(&mut b, 8) >> 8, config::CLASS_CODE);
        // BAR sizing through the config region, as the client does it.
        let bar0 = 0x10 + 4 * arch.bars.apb as u64;
        for off in [bar0, bar0 + 4] {
            b.region_write(VFIO_PCI_CONFIG_REGION_INDEX, off, &u32::MAX.to_le_bytes()).unwrap();
        }
        let mask = ((cfg32(&mut b, bar0 + 4) as u64) << 32) | (cfg32(&mut b, bar0) as u64 & !0xf);
        let size = (!mask).wrapping_add(1);
        assert_eq!(size, b.device().bar(arch.bars.apb).unwrap().size().next_power_of_two(), "{}", arch.name);
        assert_eq!(size, b.region_size(arch.bars.apb as u32));
        assert_eq!(b.region_size(arch.bars.dram as u32), sim_serve::DEFAULT_BAR4_WINDOW);
        let irqs = b.irqs();
        assert_eq!(irqs[VFIO_PCI_MSIX_IRQ_INDEX as usize].count as u64, arch.counts.ncs);
        assert_eq!((cfg32(&mut b, 0x40) >> 16) as u64, arch.counts.ncs - 1, "MSI-X table size");
        eprintln!("{}: BAR0 {:#x}, BAR4 window {:#x}", arch.name, size, sim_serve::DEFAULT_BAR4_WINDOW);
    }
}

#[test]
fn bar_accesses_reach_the_simulator() {
    let mut b = backend(&csr_maps::SUNDA);
    let arch = b.device().arch();
    let bar0 = b.device().bar(arch.bars.apb).unwrap();
    // The misc RAM as the driver reads it, through the served BAR0.
    let misc = arch.instance_base("misc_ram", 0).unwrap();
    let mut d = [0u8; 4];
    for off in (misc..misc + 64).step_by(4) {
        b.region_read(arch.bars.apb as u32, off, &mut d).unwrap();
        assert_eq!(u32::from_le_bytes(d), bar0.read32(off).unwrap(), "misc RAM +{:#x}", off - misc);
    }
    // HBM through the BAR4 window: a write lands in the simulator's device memory.
    let bar4 = b.device().bar(arch.bars.dram).unwrap();
    b.region_write(arch.bars.dram as u32, 0x1000, &0xfeed_f00d_u32.to_le_bytes()).unwrap();
    assert_eq!(bar4.read32(0x1000).unwrap(), 0xfeed_f00d);
    let mut q = [0u8; 8];
    bar4.write32(0x2004, 0x1234_5678).unwrap();
    b.region_read(arch.bars.dram as u32, 0x2000, &mut q).unwrap();
    assert_eq!(u64::from_le_bytes(q), 0x1234_5678_0000_0000);
    // A byte write merges into its word.
    b.region_write(arch.bars.dram as u32, 0x2005, &[0xaa]).unwrap();
    assert_eq!(bar4.read32(0x2004).unwrap(), 0x1234_aa78);
    // Outside the window: refused.
    assert!(b.region_read(arch.bars.dram as u32, sim_serve::DEFAULT_BAR4_WINDOW, &mut d).is_err());
}

#[test]
fn dma_maps_of_client_memory_enter_the_iommu_and_leave_it() {
    let mut b = backend(&csr_maps::SUNDA);
    let f = memfd(4 << 20);
    b.dma_map(DMA_READ | DMA_WRITE, 0, 0x10_0000, 2 << 20, Some(f.try_clone().unwrap())).unwrap();
    b.dma_map(DMA_READ, 2 << 20, 0x40_0000, 1 << 20, Some(f.try_clone().unwrap())).unwrap();
    let s = b.device().stats();
    assert_eq!((s.iommu_mappings, s.iommu_bytes), (2, 3 << 20));
    // A remap of an overlapping range replaces the old mapping.
    b.dma_map(DMA_READ | DMA_WRITE, 0, 0x10_0000, 1 << 20, Some(f.try_clone().unwrap())).unwrap();
    assert_eq!(b.device().stats().iommu_bytes, 2 << 20);
    b.dma_unmap(0, 0x10_0000, 1 << 20).unwrap();
    assert_eq!(b.device().stats().iommu_mappings, 1);
    b.dma_unmap(DMA_UNMAP_ALL, 0, 0).unwrap();
    assert_eq!(b.device().stats().iommu_mappings, 0);
    // Without a descriptor there is no memory to reach: accepted, not mapped.
    b.dma_map(DMA_READ | DMA_WRITE, 0, 0x10_0000, 4096, None).unwrap();
    assert_eq!(b.device().stats().iommu_mappings, 0);
}

#[test]
fn client_memory_that_could_shrink_under_the_device_is_refused() {
    let mut b = backend(&csr_maps::SUNDA);
    let rw = DMA_READ | DMA_WRITE;
    // Its client could truncate it after the map: the device's next access a SIGBUS in the
    // host that serves every client.
    let e = b.dma_map(rw, 0, 0x10_0000, 1 << 20, Some(unsealed_memfd(1 << 20))).unwrap_err();
    assert!(e.to_string().contains("F_SEAL_SHRINK"), "{e}");
    // A regular file cannot be sealed at all.
    let dir = std::env::temp_dir().join(format!("sim-serve-seal-{}", std::process::id()));
    std::fs::write(&dir, vec![0u8; 1 << 20]).unwrap();
    let e = b.dma_map(rw, 0, 0x10_0000, 1 << 20, Some(File::open(&dir).unwrap())).unwrap_err();
    std::fs::remove_file(&dir).unwrap();
    assert!(e.to_string().contains("not a memfd"), "{e}");
    // Sealed but shorter than the range: the mapping's tail would fault at once.
    let f = memfd(1 << 20);
    let e = b.dma_map(rw, 4096, 0x10_0000, 1 << 20, Some(f.try_clone().unwrap())).unwrap_err();
    assert!(e.to_string().contains("memfd of 0x100000 bytes"), "{e}");
    assert!(b.dma_map(rw, u64::MAX - 4095, 0x10_0000, 1 << 20, Some(f.try_clone().unwrap())).is_err());
    assert_eq!(b.device().stats().iommu_mappings, 0);
    // Accepted, and its client can no longer shrink it.
    b.dma_map(rw, 0, 0x10_0000, 1 << 20, Some(f.try_clone().unwrap())).unwrap();
    assert_eq!(b.device().stats().iommu_mappings, 1);
    assert!(f.set_len(0).is_err(), "a sealed memfd shrank");
}

#[test]
fn set_irqs_routes_msix_vectors_and_flr_resets() {
    let mut b = backend(&csr_maps::SUNDA);
    let e = eventfd();
    let flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
    b.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, flags, 1, 1, vec![e.try_clone().unwrap()]).unwrap();
    assert!(b.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, flags, 0, 2, vec![e.try_clone().unwrap()]).is_err());
    assert!(b.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, flags, 2, 1, vec![e.try_clone().unwrap()]).is_err(), "NC 2 of 2");
    assert!(b.set_irqs(0, flags, 0, 1, vec![e.try_clone().unwrap()]).is_err(), "no INTx");
    b.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER, 0, 0, vec![]).unwrap();
    // FLR through the PCI Express capability: config space back to power-on, device reset.
    let before = b.device().stats().resets;
    b.region_write(VFIO_PCI_CONFIG_REGION_INDEX, 4, &[6, 0]).unwrap();
    assert_eq!(cfg32(&mut b, 4) & 0xffff, 6);
    b.region_write(VFIO_PCI_CONFIG_REGION_INDEX, 0x58, &0x8000u16.to_le_bytes()).unwrap();
    assert_eq!(cfg32(&mut b, 4) & 0xffff, 0, "FLR clears the command register");
    assert_eq!(b.device().stats().resets, before + 1);
}

#[test]
fn served_over_the_socket_with_a_control_channel() {
    let dir = std::env::temp_dir().join(format!("sim-serve-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("dev.sock");
    let ctl = dir.join("ctl.sock");
    let _ = std::fs::remove_file(&sock);
    let _ = std::fs::remove_file(&ctl);
    let mut cfg = ServeConfig::new(&csr_maps::CAYMAN, &sock);
    cfg.control = Some(ctl.clone());
    let server = SimServer::new(&cfg).unwrap();
    let t = std::thread::spawn(move || server.run());
    let mut c = vfio_user::Client::new(&sock).unwrap();
    let mut d = [0u8; 4];
    c.region_read(VFIO_PCI_CONFIG_REGION_INDEX, 0, &mut d).unwrap();
    assert_eq!(u32::from_le_bytes(d), 0x1d0f | ((csr_maps::CAYMAN.pci_devices[0] as u32) << 16));
    c.reset().unwrap();
    assert_eq!(sim_serve::control_send(&ctl, "hbm-ue@nc0").unwrap(), "ok hbm-ue@nc0");
    assert!(sim_serve::control_send(&ctl, "bogus@nc0").unwrap().starts_with("error: "));
    let stats = sim_serve::control_send(&ctl, "stats").unwrap();
    assert!(stats.contains("resets: 1,"), "{stats}");
    c.shutdown().unwrap();
    drop(c);
    t.join().unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `bar_wrap` sees every BAR access the client makes, and `mark TEXT` control lines reach the
/// mark sink in order with them (what `neuron-vfio --mmio-trace FILE sim-serve` records).
#[test]
fn bar_accesses_and_marks_reach_the_trace_hooks() {
    use std::sync::{Arc, Mutex};
    struct Logged(Arc<dyn platform::Mmio>, u8, Arc<Mutex<Vec<String>>>);
    impl platform::Mmio for Logged {
        fn size(&self) -> u64 {
            self.0.size()
        }
        fn read32(&self, off: u64) -> Result<u32, platform::MmioError> {
            let v = self.0.read32(off)?;
            self.2.lock().unwrap().push(format!("R{} {off:#x} {v:#x}", self.1));
            Ok(v)
        }
        fn write32(&self, off: u64, v: u32) -> Result<(), platform::MmioError> {
            self.2.lock().unwrap().push(format!("W{} {off:#x} {v:#x}", self.1));
            self.0.write32(off, v)
        }
    }
    let dir = std::env::temp_dir().join(format!("sim-serve-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (sock, ctl) = (dir.join("dev.sock"), dir.join("ctl.sock"));
    let _ = std::fs::remove_file(&sock);
    let _ = std::fs::remove_file(&ctl);
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut cfg = ServeConfig::new(&csr_maps::SUNDA, &sock);
    cfg.control = Some(ctl.clone());
    let l = log.clone();
    cfg.bar_wrap = Some(Arc::new(move |bar, inner| Arc::new(Logged(inner, bar, l.clone())) as Arc<dyn platform::Mmio>));
    let l = log.clone();
    cfg.marks = Some(Arc::new(move |t: &str| l.lock().unwrap().push(format!("mark {t}"))));
    let server = SimServer::new(&cfg).unwrap();
    let t = std::thread::spawn(move || server.run());
    let mut c = vfio_user::Client::new(&sock).unwrap();
    let sem = csr_maps::SUNDA.resolve("misc_ram.fw_api_version").unwrap();
    assert_eq!(sim_serve::control_send(&ctl, "mark first step").unwrap(), "ok mark first step");
    c.region_write(sem.bar as u32, sem.offset, &7u32.to_le_bytes()).unwrap();
    let mut d = [0u8; 4];
    c.region_read(sem.bar as u32, sem.offset, &mut d).unwrap();
    assert_eq!(sim_serve::control_send(&ctl, "mark second").unwrap(), "ok mark second");
    assert!(sim_serve::control_send(&ctl, "mark ").unwrap().starts_with("error: "));
    c.shutdown().unwrap();
    drop(c);
    t.join().unwrap().unwrap();
    let got = log.lock().unwrap().clone();
    let v = u32::from_le_bytes(d);
    assert_eq!(
        got,
        vec![
            "mark first step".to_string(),
            format!("W0 {:#x} 0x7", sem.offset),
            format!("R0 {:#x} {v:#x}", sem.offset),
            "mark second".to_string()
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The handshake as QEMU 11's client makes it: it proposes minor 0 and refuses a server that
/// answers a greater one or more than 16 descriptors per message; the function is resettable.
#[test]
fn a_vms_client_gets_its_minor_and_capabilities_qemu_takes() {
    use std::os::unix::net::UnixStream;
    use vfio::user::wire::{self, Command, Header};
    let dir = std::env::temp_dir().join(format!("sim-serve-version-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("dev.sock");
    let _ = std::fs::remove_file(&sock);
    let server = SimServer::new(&ServeConfig::new(&csr_maps::SUNDA, &sock)).unwrap();
    let t = std::thread::spawn(move || server.run());
    let s = UnixStream::connect(&sock).unwrap();
    let ask = |id: u16, cmd: Command, body: &[u8]| {
        wire::write_message(&s, Header { id, command: cmd as u16, ..Default::default() }, body, &[]).unwrap();
        wire::read_message(&s).unwrap().unwrap()
    };
    let v = ask(1, Command::Version, &wire::version_body(0, 0, r#"{"capabilities":{"max_msg_fds":8}}"#));
    let mut f = wire::Fields::new("VERSION reply", &v.body);
    assert_eq!((f.u16().unwrap(), f.u16().unwrap()), (0, 0));
    let caps = String::from_utf8(f.rest().to_vec()).unwrap();
    let fds: u32 = caps.split("\"max_msg_fds\":").nth(1).unwrap().split([',', '}']).next().unwrap().parse().unwrap();
    assert!((1..=16).contains(&fds), "{caps}");
    assert!(caps.ends_with('\0'), "NUL-terminated: {caps:?}");
    let info = wire::DeviceInfo::decode(&ask(2, Command::DeviceGetInfo, &[0; 16]).body).unwrap();
    assert_ne!(info.flags & vfio_bindings::bindings::vfio::VFIO_DEVICE_FLAGS_RESET, 0);
    drop(s);
    t.join().unwrap().unwrap();
    assert!(!sock.exists(), "the socket is removed with the server");
    let _ = std::fs::remove_dir_all(&dir);
}
