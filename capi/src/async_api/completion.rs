//! Following requests: completion queries, sequence numbers, completion handles
//! (eventfds), the async-exec callback and draining a core's queues.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use neff::NrtStatus;
use runtime::xu::{Ticket, XuId};

use super::units::{
    completed, signal, state_of_seq, tensor_xu, XuState, CALLBACK, NRT_ASYNC_EXEC_STATUS_CALLBACK, XUS,
};
use super::{nrta_seq_t, NRTA_XU_COMPUTE, NRTA_XU_TYPE_NUM};
use crate::base::{entry, err, guard, lock, need, put, NRT_STATUS};

/// `nrta_is_completed`.
///
/// # Safety
/// `is_completed` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrta_is_completed(seq: nrta_seq_t, is_completed: *mut bool) -> NRT_STATUS {
    entry("nrta_is_completed", || {
        need(is_completed, "is_completed")?;
        let (st, cur) = state_of_seq(seq)?;
        // SAFETY: checked non-null.
        unsafe { put(is_completed, completed(&st, cur)) };
        Ok(())
    })
}

/// `nrta_get_sequence`: last completed sequence id of an XU (cursor 0 if none yet).
///
/// # Safety
/// `seq` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrta_get_sequence(lnc: u32, xu: c_int, queue: c_int, seq: *mut nrta_seq_t) -> NRT_STATUS {
    entry("nrta_get_sequence", || {
        guard()?;
        need(seq, "seq")?;
        let lnc_u8 = u8::try_from(lnc).map_err(|_| err(NrtStatus::Invalid, format!("bad lnc {lnc}")))?;
        let id = match xu {
            NRTA_XU_COMPUTE => {
                let q = u8::try_from(queue).map_err(|_| err(NrtStatus::Invalid, format!("bad queue {queue}")))?;
                XuId::compute(q, lnc_u8).map_err(|e| err(NrtStatus::Invalid, e.to_string()))?
            }
            k if (0..NRTA_XU_TYPE_NUM).contains(&k) => tensor_xu(k, queue, lnc as usize)?,
            k => return Err(err(NrtStatus::Invalid, format!("bad xu {k}"))),
        };
        let st = lock(&XUS).as_ref().and_then(|m| m.get(&id.raw()).cloned());
        let done = st.map_or(0, |s| {
            let t = lock(&s.track);
            // Requests complete in order: the last one polled complete counts too.
            let polled = t.pending.iter().take_while(|(_, tk)| tk.poll().is_some()).map(|(c, _)| *c).last();
            polled.unwrap_or(0).max(t.completed)
        });
        // SAFETY: checked non-null.
        unsafe { put(seq, id.seq_id(done)) };
        Ok(())
    })
}

/// `nrta_get_completion_handle`: an eventfd that becomes readable when `seq` completes.
///
/// # Safety
/// `fd` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrta_get_completion_handle(seq: nrta_seq_t, fd: *mut c_int) -> NRT_STATUS {
    entry("nrta_get_completion_handle", || {
        need(fd, "fd")?;
        let (st, cur) = state_of_seq(seq)?;
        // SAFETY: plain syscall; checked.
        let user = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if user < 0 {
            return Err(err(NrtStatus::Resource, format!("eventfd: {}", std::io::Error::last_os_error())));
        }
        // Our own descriptor of the same eventfd: the caller may close theirs at any time.
        // SAFETY: `user` is a live fd we just created.
        let ours = unsafe { libc::fcntl(user, libc::F_DUPFD_CLOEXEC, 0) };
        if ours < 0 {
            let e = err(NrtStatus::Resource, format!("dup: {}", std::io::Error::last_os_error()));
            // SAFETY: closing our fresh fd once.
            unsafe { libc::close(user) };
            return Err(e);
        }
        {
            let mut t = lock(&st.track);
            if cur <= t.completed {
                drop(t);
                signal(ours);
            } else {
                t.waiters.push((cur, ours));
            }
        }
        // SAFETY: checked non-null.
        unsafe { put(fd, user) };
        Ok(())
    })
}

/// `nrt_register_async_exec_callback` (NULL removes the callback).
#[no_mangle]
pub extern "C" fn nrt_register_async_exec_callback(
    callback: NRT_ASYNC_EXEC_STATUS_CALLBACK,
    params: *mut c_void,
) -> NRT_STATUS {
    entry("nrt_register_async_exec_callback", || {
        *lock(&CALLBACK) = (callback, params as usize);
        Ok(())
    })
}

/// `nrt_async_drain_queued_execs`: wait until every request queued so far on `vnc`'s
/// execution units has completed and been processed.
#[no_mangle]
pub extern "C" fn nrt_async_drain_queued_execs(vnc: i32) -> NRT_STATUS {
    entry("nrt_async_drain_queued_execs", || {
        guard()?;
        let v = u8::try_from(vnc).map_err(|_| err(NrtStatus::Invalid, format!("bad vnc {vnc}")))?;
        let states: Vec<Arc<XuState>> =
            lock(&XUS).as_ref().map(|m| m.values().filter(|s| s.id.vnc() == v).cloned().collect()).unwrap_or_default();
        for s in states {
            let (tickets, last): (Vec<Ticket>, u64) = {
                let t = lock(&s.track);
                (t.pending.values().cloned().collect(), t.issued)
            };
            for tk in tickets {
                tk.wait();
            }
            // The completion thread processes in order: wait until it reached `last`.
            while lock(&s.track).completed < last {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        }
        Ok(())
    })
}
