//! `Runtime::set_load_progress`: a load reports how much of the model's weights is on the
//! device, from 0 to the total, in chunks.

use std::sync::{Arc, Mutex};

use csr_maps::CAYMAN;
use neff::builder;
use neff::WeightFormat;
use platform::Platform;
use runtime::stage::LoadProgress;
use runtime::{Runtime, RuntimeConfig};
use sim::{SimConfig, SimDevice, Timing};

#[test]
fn load_reports_weight_bytes_written() {
    let sim = SimDevice::new(SimConfig::new(&CAYMAN).timing(Timing::Inline).hbm_bytes(1 << 28)).unwrap();
    let rt = Runtime::new();
    let opts = hal::DeviceOptions { hbm_limit: Some(1 << 28), ..Default::default() };
    rt.init(vec![Arc::new(sim) as Arc<dyn Platform>], RuntimeConfig::physical(), opts).unwrap();
    let weights = 40 << 20;
    let mut d = builder::weights_model((0..weights).map(|i| (i % 251) as u8).collect(), WeightFormat::Raw);
    d.target = CAYMAN.name.to_string();
    let bytes = d.build().unwrap();

    let seen: Arc<Mutex<Vec<LoadProgress>>> = Arc::default();
    let s = seen.clone();
    rt.set_load_progress(Some(Arc::new(move |p| platform::sync::lock(&s).push(p))));
    let m = rt.load(&bytes, None, None).unwrap();
    let calls = platform::sync::lock(&seen).clone();
    assert!(calls.len() >= 4, "{calls:?}");
    assert_eq!(calls[0], LoadProgress { done: 0, total: weights as u64 });
    assert_eq!(calls.last().map(|p| p.done), Some(weights as u64));
    assert!(calls.windows(2).all(|w| w[0].done < w[1].done && w[1].total == weights as u64), "{calls:?}");
    rt.unload(&m).unwrap();

    // Off again: the next load reports nothing.
    rt.set_load_progress(None);
    let before = platform::sync::lock(&seen).len();
    let m = rt.load(&bytes, None, None).unwrap();
    assert_eq!(platform::sync::lock(&seen).len(), before);
    rt.unload(&m).unwrap();
    rt.close().unwrap();
}
