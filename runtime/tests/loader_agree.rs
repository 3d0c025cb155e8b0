//! One loader semantics at the runtime: `Runtime::load` (the NEFF in memory, `nrt_load`) and
//! `Runtime::load_reader` (streamed, the weights straight into device memory: what
//! `neuron-vfio run` and `load` use) accept and refuse the same bytes with the same status,
//! and either way leave the device as they found it — over the builder's fixtures, the
//! hostile-class generator, truncations of the inner tar at every 512-byte boundary (and
//! inside every block), and seeded byte flips of the inner tar behind valid digests.

use std::sync::Arc;

use neff::builder::{self, tar_bytes, wrap_archive, ModelDesc, WriteOptions};
use neff::NrtStatus;
use platform::Platform;
use proptest::prelude::*;
use runtime::{Runtime, RuntimeConfig};
use sim::{SimConfig, SimDevice, Timing};

#[path = "support/hostile_gen.rs"]
mod hostile_gen;

const HBM: u64 = 1 << 27;

fn rt() -> (Runtime, SimDevice) {
    let sim = SimDevice::new(SimConfig::new(&csr_maps::SUNDA).timing(Timing::Inline).hbm_bytes(HBM)).unwrap();
    let rt = Runtime::new();
    let opts = hal::DeviceOptions { hbm_limit: Some(HBM), ..Default::default() };
    rt.init(vec![Arc::new(sim.clone()) as Arc<dyn Platform>], RuntimeConfig::physical(), opts).unwrap();
    (rt, sim)
}

/// Loads `b` both ways (unloading what loads); panics when the verdicts differ or a load
/// leaves device memory behind (DMA mappings are checked at [`close`]: the host pool keeps
/// its chunks mapped for the next load).
fn agree(rt: &Runtime, sim: &SimDevice, b: &[u8], what: &str) -> Result<(), NrtStatus> {
    let before = sim.stats();
    let mut verdicts = Vec::new();
    for streamed in [false, true] {
        let r = if streamed { rt.load_reader(b, b.len() as u64, None, None) } else { rt.load(b, None, None) };
        let v = match r {
            Ok(m) => {
                rt.unload(&m).unwrap();
                Ok(())
            }
            Err(e) => Err(e.status),
        };
        let after = sim.stats();
        assert_eq!(
            after.device_bytes,
            before.device_bytes,
            "{what}: the {} load left device memory behind ({v:?})",
            if streamed { "streaming" } else { "in-memory" }
        );
        verdicts.push(v);
    }
    assert_eq!(verdicts[0], verdicts[1], "{what}: Runtime::load and Runtime::load_reader disagree");
    verdicts[0]
}

/// Closes the runtime: nothing stays mapped or allocated.
fn close(rt: Runtime, sim: SimDevice) {
    rt.close().unwrap();
    let st = sim.stats();
    assert_eq!((st.iommu_mappings, st.device_bytes), (0, 0), "left behind at close");
}

/// A model's inner tar, and a function that wraps a (changed) tar behind valid gates.
fn tar_of(m: &ModelDesc) -> (Vec<u8>, impl Fn(&[u8]) -> Vec<u8> + '_) {
    let opts = WriteOptions::default();
    let tar = tar_bytes(&m.members(), &opts).unwrap();
    (tar, move |t: &[u8]| wrap_archive(t, m.header(), &WriteOptions::default()).unwrap())
}

fn weights(n: usize) -> Vec<u8> {
    (0..n as u32).map(|i| (i * 13 % 241) as u8).collect()
}

#[test]
fn fixtures_load_alike() {
    let (rt, sim) = rt();
    let models = [
        ("1nc", builder::single_nc_allreduce()),
        ("2nc", builder::two_nc_allreduce()),
        // 2 MiB of .npy weights: streamed into device memory by load_reader.
        ("npy", builder::weights_model(weights(2 << 20), neff::WeightFormat::Npy)),
        ("raw", builder::weights_model(weights(5000), neff::WeightFormat::Raw)),
    ];
    for (name, m) in models {
        assert_eq!(agree(&rt, &sim, &m.build().unwrap(), name), Ok(()), "{name}");
    }
    close(rt, sim);
}

/// Issue 33's case: the 2-NC model's tar cut off after `sg01/pe.json` (inside its padding)
/// loaded in memory — and then hung, its partner's collective gone — while the streaming
/// reader refused it. Both refuse it now.
#[test]
fn tar_cut_after_sg01_pe_json_is_refused_by_both() {
    let (rt, sim) = rt();
    let m = builder::two_nc_allreduce();
    let (tar, wrap) = tar_of(&m);
    let mut ar = tar::Archive::new(std::io::Cursor::new(&tar[..]));
    let end = ar
        .entries_with_seek()
        .unwrap()
        .filter_map(Result::ok)
        .find(|e| e.path_bytes().as_ref() == b"sg01/pe.json")
        .map(|e| (e.raw_file_position() + e.size()) as usize)
        .unwrap();
    assert_eq!(agree(&rt, &sim, &wrap(&tar[..end]), "cut after sg01/pe.json"), Err(NrtStatus::Invalid));
    close(rt, sim);
}

#[test]
fn tar_truncations_agree() {
    let (rt, sim) = rt();
    for (name, m) in [("1nc", builder::single_nc_allreduce()), ("2nc", builder::two_nc_allreduce())] {
        let (tar, wrap) = tar_of(&m);
        let (mut ok, mut n) = (0, 0);
        for k in 0..=tar.len() / 512 {
            for cut in [k * 512, k * 512 + 200] {
                let cut = cut.min(tar.len());
                ok += usize::from(agree(&rt, &sim, &wrap(&tar[..cut]), &format!("{name} tar cut at {cut}")).is_ok());
                n += 1;
            }
        }
        assert!(ok > 0 && ok < n, "{name}: {ok} of {n} truncations loaded");
    }
    close(rt, sim);
}

#[test]
fn tar_byte_flips_agree() {
    let (rt, sim) = rt();
    let m = builder::two_nc_allreduce();
    let (tar, wrap) = tar_of(&m);
    let mut x: u64 = 0x0033_F11B_5EED;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut ok = 0;
    for case in 0..120 {
        let mut t = tar.clone();
        for _ in 0..1 + next() % 3 {
            let i = (next() % t.len() as u64) as usize;
            t[i] ^= 1 << (next() % 8);
        }
        ok += usize::from(agree(&rt, &sim, &wrap(&t), &format!("tar flip case {case}")).is_ok());
    }
    assert!(ok > 0 && ok < 120, "{ok} of 120 flipped models loaded");
    close(rt, sim);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]
    /// The hostile-class generator's models (confinement attacks: raw and var-relative DMA
    /// addresses, register writes, vars of every kind and size): whatever one loader decides,
    /// the other decides too.
    #[test]
    fn hostile_classes_load_alike(ops in proptest::collection::vec(hostile_gen::op(), 1..5)) {
        let (rt, sim) = rt();
        if let Some(b) = hostile_gen::build(&ops) {
            let _ = agree(&rt, &sim, &b, &format!("{ops:?}"));
        }
        close(rt, sim);
    }
}
