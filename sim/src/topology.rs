//! Several simulated devices sharing one collective fabric.

use std::sync::Arc;

use crate::device::hub::Hub;
use crate::device::SimConfig;
use crate::handle::SimDevice;
use crate::SimError;

/// N simulated devices (1..16) sharing one collective fabric.
pub struct SimTopology {
    pub devices: Vec<SimDevice>,
}

impl SimTopology {
    /// `n` devices of `cfg.arch`, with device indices 0..n.
    pub fn new(cfg: SimConfig, n: usize) -> Result<Self, SimError> {
        if n == 0 || n > 16 {
            return Err(SimError::TopologySize(n));
        }
        let hub = Arc::new(Hub::default());
        let mut devices = Vec::new();
        for i in 0..n {
            let mut c = cfg.clone();
            c.device_index = i as u32;
            devices.push(SimDevice::with_hub(c, hub.clone())?);
        }
        Ok(Self { devices })
    }
}
