use super::ids::private_sim;
use super::*;
use crate::observe::Observer;
use neff::NrtStatus;

fn ids(n: usize) -> Vec<NcId> {
    (0..n).map(|i| NcId { device: i / 2, nc: i % 2, nc_version: 3 }).collect()
}

fn devs(n: usize) -> Vec<DeviceId> {
    (0..n).map(|i| DeviceId { identity: format!("0000:1{i}:1c.0"), holding: Holding::Whole, owned: 0..2 }).collect()
}

#[test]
fn the_device_table_names_each_device_and_its_owned_ncs() {
    let dir = std::env::temp_dir().join(format!("rt-counters-devs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let p = dir.join(format!("neuron-vfio.{}.0.counters", std::process::id()));
    let long = "é".repeat(IDENTITY_BYTES); // 2 bytes each: cut at a character boundary
    let table = vec![
        DeviceId { identity: "sim:shared:cayman:1".into(), holding: Holding::Leased, owned: 3..5 },
        DeviceId { identity: "0000:10:1c.0".into(), holding: Holding::Whole, owned: 0..2 },
        DeviceId { identity: long.clone(), holding: Holding::Whole, owned: 0..2 },
    ];
    let ncs: Vec<NcId> = (0..6).map(|i| NcId { device: i / 2, nc: i % 2, nc_version: 3 }).collect();
    let c = Counters::create_at(&p, &ncs, &table).expect("create");
    c.execution(&[5], NrtStatus::Success, 1_000, 10);
    let r = Reader::open(&p).expect("open");
    let got = r.device_ids();
    assert_eq!(&got[..2], &table[..2]);
    assert_eq!(got[2].identity, "é".repeat(IDENTITY_BYTES / 2));
    assert!(got[0].owns(3) && got[0].owns(4) && !got[0].owns(2) && !got[0].owns(5));
    // The slots follow the table: the counts land where the reader looks.
    let s = r.snapshot();
    assert_eq!(s.device_ids, got);
    assert_eq!((s.ncs[5].device, s.ncs[5].nc, s.ncs[5].executions), (2, 1, 1));
    assert_eq!(s.ncs.iter().map(|n| n.executions).sum::<u64>(), 1);
    drop(c);

    // A table that does not fit the header it claims to be in is refused.
    let mut b = vec![0u8; 8 * (HEADER_WORDS + DEVICE_WORDS)];
    let mut put = |i: usize, v: u64| b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
    put(hdr::MAGIC, MAGIC);
    put(hdr::VERSION, VERSION);
    put(hdr::SLOT_WORDS, SLOT_WORDS as u64);
    put(hdr::HEADER_WORDS, (HEADER_WORDS + DEVICE_WORDS) as u64);
    put(hdr::DEVICE_WORDS, DEVICE_WORDS as u64);
    put(hdr::DEVICES, 2);
    std::fs::write(&p, &b).expect("write");
    assert!(matches!(Reader::open(&p), Err(ReadError::DeviceTable(_))));
    // A segment of a writer before the table (word 12 reserved, 0): no devices named.
    b[hdr::DEVICE_WORDS * 8..hdr::DEVICE_WORDS * 8 + 8].copy_from_slice(&0u64.to_le_bytes());
    std::fs::write(&p, &b).expect("write");
    assert!(Reader::open(&p).expect("open").device_ids().is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn only_the_simulators_own_devices_are_private() {
    assert!(private_sim("sim0") && private_sim("sim15"));
    for not in ["sim", "sim:shared:cayman:0", "0000:10:1c.0", "simx", "vfio-user"] {
        assert!(!private_sim(not), "{not}");
    }
    // The published identities: a process's own simulator, not a shared or PCI device.
    assert!(is_private_sim_identity("sim:4242/0"));
    for not in ["sim:shared:cayman:0", "0000:10:1c.0", "4242/0"] {
        assert!(!is_private_sim_identity(not), "{not}");
    }
}

#[test]
fn buckets_are_powers_of_two_microseconds() {
    assert_eq!(latency_bucket(0), 0);
    assert_eq!(latency_bucket(999), 0);
    assert_eq!(latency_bucket(1_000), 1);
    assert_eq!(latency_bucket(1_999), 1);
    assert_eq!(latency_bucket(2_000), 2);
    assert_eq!(latency_bucket(1_000_000), 10);
    assert_eq!(latency_bucket(u64::MAX), LAT_BUCKETS - 1);
    assert_eq!(bucket_upper_us(0), Some(1));
    assert_eq!(bucket_upper_us(10), Some(1024));
    assert_eq!(bucket_upper_us(LAT_BUCKETS - 1), None);
}

#[test]
fn a_reader_sees_what_the_writer_counts() {
    let dir = std::env::temp_dir().join(format!("rt-counters-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let p = dir.join(format!("neuron-vfio.{}.0.counters", std::process::id()));
    let c = Counters::create_at(&p, &ids(4), &devs(2)).expect("create");
    c.model_loaded(&[1, 2], &[4096, 8192]);
    c.execution(&[1, 2], NrtStatus::Success, 1_500, 700);
    c.execution(&[1], NrtStatus::ExecSwNqOverflow, 3_000_000, 0);
    c.tensor(2, 128, true, false);
    c.tensor(0, 256, false, false);
    c.tensor(0, 56, false, true);
    c.execution(&[9], NrtStatus::Success, 1, 1); // no such NC: ignored
    let readers = discover(&dir);
    assert_eq!(readers.len(), 1);
    let s = readers[0].snapshot();
    assert_eq!(s.pid, std::process::id() as u64);
    assert_eq!((s.devices, s.updates, s.host_tensor_bytes), (2, 3, 200));
    assert_eq!(s.ncs.len(), 4);
    let n1 = &s.ncs[1];
    assert_eq!((n1.device, n1.nc, n1.nc_version, n1.models), (0, 1, 3, 1));
    assert_eq!((n1.executions, n1.failed, n1.busy_ns, n1.mem_model), (2, 1, 700, 4096));
    assert_eq!(n1.errors[ErrorKind::NqOverflow as usize], 1);
    assert_eq!(n1.latency[1] + n1.latency[12], 2);
    // Device time: only the execution that had START/END records (700 ns: bucket 0).
    assert_eq!((n1.device_latency[0], n1.device_latency.iter().sum::<u64>()), (1, 1));
    assert!(n1.last_end_ns > 0);
    let n2 = &s.ncs[2];
    assert_eq!((n2.device, n2.nc, n2.executions, n2.failed, n2.mem_tensors), (1, 0, 1, 0, 128));
    assert_eq!(s.ncs[0].executions, 0);
    // Per process each execution counts once (the 2-NC one too; the ignored one not).
    assert_eq!((s.executions, s.failed, s.errors[ErrorKind::NqOverflow as usize]), (2, 1, 1));
    // The models file lists what is loaded, by name, and goes with the segment.
    let m =
        crate::observe::ModelDesc { id: 7, name: "m7", uuid: [0xab; 16], ncs: &[1, 2], bytes_per_nc: &[4096, 8192] };
    Observer::model_listed(&c, &m, true);
    let listed = read_models(&p);
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].id, listed[0].name.as_str(), &listed[0].ncs[..]), (7, "m7", &[1usize, 2][..]));
    assert_eq!(listed[0].uuid, "ab".repeat(16));
    Observer::model_listed(&c, &m, false);
    assert!(read_models(&p).is_empty());
    Observer::model_listed(&c, &m, true);
    c.model_unloaded(&[1, 2], &[4096, 9000]);
    let s = readers[0].snapshot();
    assert_eq!((s.ncs[1].models, s.ncs[1].mem_model, s.ncs[2].mem_model), (0, 0, 0));
    drop(c);
    assert!(discover(&dir).is_empty(), "the segment goes with its runtime");
    assert!(!models_path(&p).exists(), "and its models file");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn segments_of_dead_processes_are_removed() {
    let dir = std::env::temp_dir().join(format!("rt-counters-stale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    // pid_max is at most 2^22: no process has this id.
    let dead = dir.join("neuron-vfio.4294967.0.counters");
    let mine = dir.join(format!("neuron-vfio.{}.7.counters", std::process::id()));
    let other = dir.join("unrelated.counters");
    for p in [&dead, &mine, &other] {
        std::fs::write(p, [0u8; 8]).expect("write");
    }
    assert_eq!(segment_pid(&dead), Some(4294967));
    assert_eq!(segment_pid(&other), None);
    remove_stale(&dir);
    assert!(!dead.exists() && mine.exists() && other.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn readers_refuse_foreign_files() {
    let dir = std::env::temp_dir().join(format!("rt-counters-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let p = dir.join("neuron-vfio.1.0.counters");
    std::fs::write(&p, [7u8; 64]).expect("write");
    assert!(matches!(Reader::open(&p), Err(ReadError::Magic(_))));
    let mut b = vec![0u8; 8 * HEADER_WORDS];
    b[..8].copy_from_slice(&MAGIC.to_le_bytes());
    b[8..16].copy_from_slice(&99u64.to_le_bytes());
    std::fs::write(&p, &b).expect("write");
    assert!(matches!(Reader::open(&p), Err(ReadError::Version { version: 99, .. })));
    b[8..16].copy_from_slice(&VERSION.to_le_bytes());
    b[24..32].copy_from_slice(&1000u64.to_le_bytes()); // 1000 NCs in a header-only file
    b[32..40].copy_from_slice(&(SLOT_WORDS as u64).to_le_bytes());
    b[40..48].copy_from_slice(&(HEADER_WORDS as u64).to_le_bytes());
    std::fs::write(&p, &b).expect("write");
    assert!(matches!(Reader::open(&p), Err(ReadError::Truncated(_))));
    assert!(discover(&dir).is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}
