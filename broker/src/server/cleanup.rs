//! Taking back what a client held: its cores reclaimed, its data path ended, its memory freed,
//! its window and attachment released.

use std::time::Instant;

use platform::sync::lock;

use super::state::Shared;

/// Take client `me`'s cores back on device `d`: end its data path (its IOVAs unmapped),
/// reclaim each NC (engines stopped, queues parked, NQ slots halted, NC reset) and free them.
pub(super) fn release(shared: &Shared, me: u64, d: usize) {
    take_back(shared, me, d, false)
}

/// [`release`], and with `detach` also the client's IOVA window and attachment — all in one
/// step of the tables, so nobody sees the cores free and the window still taken.
pub(super) fn take_back(shared: &Shared, me: u64, d: usize, detach: bool) {
    let (path, ncs, dev) = {
        let mut st = lock(&shared.st);
        let dev = &mut st.devices[d];
        let ncs: Vec<usize> = (0..dev.leases.len()).filter(|&i| dev.leases[i] == Some(me)).collect();
        (dev.paths.remove(&me), ncs, dev.ops())
    };
    for &nc in &ncs {
        if let Err(e) = dev.reclaim(nc) {
            tracing::warn!(nc, %e, "reclaiming a core failed");
        }
    }
    if let Some(p) = path {
        p.end();
    }
    let mut st = lock(&shared.st);
    let dev = &mut st.devices[d];
    // The client's memory goes after its engines stopped.
    dev.hbm.retain(|_, (o, _)| *o != me);
    for l in dev.leases.iter_mut() {
        if *l == Some(me) {
            *l = None;
        }
    }
    if detach {
        for s in dev.slots.iter_mut() {
            if *s == Some(me) {
                *s = None;
            }
        }
        let index = dev.index;
        if let Some(c) = st.clients.get_mut(&me) {
            c.attached.retain(|&x| x != index);
        }
    }
    st.last_activity = Some(Instant::now());
}

pub(super) fn detach(shared: &Shared, me: u64, d: usize) {
    take_back(shared, me, d, true)
}

/// Everything client `id` held, on every device, released; the client forgotten.
pub(super) fn cleanup(shared: &Shared, id: u64) {
    let devices: Vec<u32> = lock(&shared.st).clients.get(&id).map(|c| c.attached.clone()).unwrap_or_default();
    for d in devices {
        detach(shared, id, d as usize);
    }
    let mut st = lock(&shared.st);
    st.clients.remove(&id);
    st.last_activity = Some(Instant::now());
}
