//! Semaphores and events (`tpb_sem`: one window per NC, and one per TOP_SP): events read
//! and write their bit, `sem_read` reads a semaphore, `sem_set`/`sem_inc`/`sem_dec` change
//! it. A change in an NC's window wakes that NC's sequencers waiting on the semaphore.

use csr_maps::blocks::tpb_sem::RegId as S;

use super::State;
use crate::decode::Hit;

/// Which window.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Window {
    /// An NC's semaphores and events.
    Tpb,
    /// A TOP_SP's.
    TopSp,
}

pub(crate) fn read(st: &State, w: Window, idx: u32, r: S) -> u32 {
    let (sems, events) = match w {
        Window::Tpb => (&st.sems, &st.events),
        Window::TopSp => (&st.topsp_sems, &st.topsp_events),
    };
    let at = |i: u32| i as usize;
    match r {
        S::Event(i) => events.get(idx as usize).and_then(|e| e.get(at(i))).copied().unwrap_or(0) as u32,
        S::SemRead(i) => sems.get(idx as usize).and_then(|s| s.get(at(i))).copied().unwrap_or(0) as u32,
        // The change registers are write-only.
        S::SemSet(_) | S::SemInc(_) | S::SemDec(_) => 0,
    }
}

pub(crate) fn write(st: &mut State, hit: &Hit, w: Window, idx: u32, r: S, val: u32) {
    let (nc, i) = (idx as usize, r.elem() as usize);
    let (sems, events) = match w {
        Window::Tpb => (&mut st.sems, &mut st.events),
        Window::TopSp => (&mut st.topsp_sems, &mut st.topsp_events),
    };
    let (Some(s), Some(e)) = (sems.get_mut(nc), events.get_mut(nc)) else { return };
    match r {
        S::Event(_) => {
            if let Some(e) = e.get_mut(i) {
                *e = (val & 1) as u8;
            }
        }
        S::SemSet(_) | S::SemInc(_) | S::SemDec(_) => {
            if let Some(s) = s.get_mut(i) {
                *s = match r {
                    S::SemSet(_) => val as i32,
                    S::SemInc(_) => s.wrapping_add(val as i32),
                    _ => s.wrapping_sub(val as i32),
                };
            }
        }
        S::SemRead(_) => {
            tracing::debug!(reg = hit.def.name, id = ?hit.id, value = val, "sim: write to a read-only semaphore ignored");
        }
    }
    if w == Window::Tpb {
        st.pending[nc] = true;
        if let Some(g) = st.sem_gen.get_mut(nc).and_then(|g| g.get_mut(i)) {
            *g = g.wrapping_add(1);
        }
    }
}
