//! `nrt_async_sendrecv.h` inside one process (feature `fabric`, tcp provider on loopback): the
//! published limits and their NRT_RESOURCE refusals, `_flush`, and the close rules (a close with
//! a communicator still connecting fails and the LNC stays unusable until `nrt_close`).
//! Transfers between processes are tested in `global_comm.rs`.

use std::ffi::CString;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use nrt::sendrecv::*;
use nrt::*;

const SUCCESS: i32 = 0;
const FAILURE: i32 = 1;
const INVALID_HANDLE: i32 = 3;
const RESOURCE: i32 = 4;

fn wait_up(comms: &[*mut nrt_async_sendrecv_comm_t]) {
    let t0 = Instant::now();
    for &c in comms {
        loop {
            let mut up = false;
            // SAFETY: a live communicator handle and a valid out pointer.
            assert_eq!(unsafe { nrt_async_sendrecv_test_comm(c, &mut up) }, SUCCESS);
            if up {
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "not connected after 30 s");
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Tests every request until done; returns the bytes each moved.
fn wait_done(reqs: &[*mut nrt_async_sendrecv_request_t]) -> Vec<usize> {
    let t0 = Instant::now();
    reqs.iter()
        .map(|&r| loop {
            let (mut done, mut size) = (false, 0usize);
            // SAFETY: a live request handle and valid out pointers.
            assert_eq!(unsafe { nrt_async_sendrecv_test_request(r, &mut done, &mut size) }, SUCCESS);
            if done {
                break size;
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "request not done after 30 s");
            std::thread::sleep(Duration::from_millis(1));
        })
        .collect()
}

/// A base port whose `+ 128·lnc + peer` ports for the LNCs used here are free now.
fn base_port() -> u16 {
    for _ in 0..200 {
        let Ok(base) = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()) else {
            continue;
        };
        let Some(top) = base.checked_add(128 * 4 + 40) else { continue };
        let used = [base + 1, base + 128, base + 128 * 2 + 3]
            .into_iter()
            .chain((0..40).map(|p| base + 128 * 4 + p))
            .any(|p| p > top || TcpListener::bind(("0.0.0.0", p)).is_err());
        if !used {
            return base;
        }
    }
    panic!("no free port range");
}

#[test]
fn limits_flush_and_close_rules() {
    std::env::set_var("NEURON_VFIO_DEVICE", "sim");
    std::env::set_var("FI_PROVIDER", "tcp");
    std::env::set_var("NEURON_RT_EXEC_TIMEOUT", "2");
    std::env::set_var("NEURON_RT_ASYNC_SENDRECV_BOOTSTRAP_PORT", base_port().to_string());
    let ip = CString::new("127.0.0.1").unwrap();
    // SAFETY: the C API called as nrt.h / nrt_async_sendrecv.h document, with valid pointers.
    unsafe {
        let (mut max_comms, mut max_pending) = (0, 0);
        assert_eq!(nrt_async_sendrecv_get_max_num_communicators_per_lnc(&mut max_comms), SUCCESS);
        assert_eq!(nrt_async_sendrecv_get_max_num_pending_request(&mut max_pending), SUCCESS);
        assert_eq!((max_comms, max_pending), (MAX_COMMUNICATORS_PER_LNC, MAX_PENDING_REQUESTS));
        assert_eq!(nrt_async_sendrecv_get_max_num_pending_request(std::ptr::null_mut()), FAILURE);
        // Before nrt_init every LNC call fails.
        assert_eq!(nrt_async_sendrecv_init(0), FAILURE);

        assert_eq!(nrt_init(0, std::ptr::null(), std::ptr::null()), SUCCESS);
        assert_eq!(nrt_async_sendrecv_flush(0), FAILURE, "flush of an LNC not initialised");
        assert_eq!(nrt_async_sendrecv_init(0), SUCCESS);
        assert_eq!(nrt_async_sendrecv_init(1), SUCCESS);
        let (mut send, mut recv) = (std::ptr::null_mut(), std::ptr::null_mut());
        assert_eq!(nrt_async_sendrecv_accept(ip.as_ptr(), 0, 1, &mut recv), SUCCESS);
        assert_eq!(nrt_async_sendrecv_connect(ip.as_ptr(), 1, 0, &mut send), SUCCESS);
        wait_up(&[send, recv]);

        let n = MAX_PENDING_REQUESTS as usize;
        let (mut tin, mut tout) = (std::ptr::null_mut(), std::ptr::null_mut());
        let name = CString::new("t").unwrap();
        assert_eq!(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, n * 4, name.as_ptr(), &mut tin), SUCCESS);
        assert_eq!(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, n * 4, name.as_ptr(), &mut tout), SUCCESS);
        let data: Vec<u8> = (0..n * 4).map(|i| (i * 7 + 3) as u8).collect();
        assert_eq!(nrt_tensor_write(tin, data.as_ptr().cast(), 0, data.len()), SUCCESS);

        // The limit of pending requests: one more send is NRT_RESOURCE.
        let mut sends = Vec::new();
        for i in 0..n {
            let mut r = std::ptr::null_mut();
            assert_eq!(nrt_async_sendrecv_send_tensor(tin, i * 4, 4, send, &mut r), SUCCESS, "send {i}");
            sends.push(r);
        }
        let mut extra = std::ptr::null_mut();
        assert_eq!(nrt_async_sendrecv_send_tensor(tin, 0, 4, send, &mut extra), RESOURCE);
        // The receiving communicator has its own count. Receive in reverse chunk order: message
        // i lands at chunk n-1-i.
        let recvs: Vec<_> = (0..n)
            .map(|i| {
                let mut r = std::ptr::null_mut();
                assert_eq!(nrt_async_sendrecv_recv_tensor(tout, (n - 1 - i) * 4, 4, recv, &mut r), SUCCESS);
                r
            })
            .collect();
        assert!(wait_done(&sends).iter().all(|&s| s == 4));
        assert!(wait_done(&recvs).iter().all(|&s| s == 4));
        assert_eq!(nrt_async_sendrecv_flush(1), SUCCESS);
        let mut got = vec![0u8; n * 4];
        assert_eq!(nrt_tensor_read(tout, got.as_mut_ptr().cast(), 0, got.len()), SUCCESS);
        let want: Vec<u8> = data.chunks(4).rev().flatten().copied().collect();
        assert_eq!(got, want);
        // Requests reported done no longer count: the communicator takes new ones.
        let mut r = std::ptr::null_mut();
        assert_eq!(nrt_async_sendrecv_send_tensor(tin, 0, 4, send, &mut r), SUCCESS);
        let mut r2 = std::ptr::null_mut();
        assert_eq!(nrt_async_sendrecv_recv_tensor(tout, 0, 4, recv, &mut r2), SUCCESS);
        wait_done(&[r, r2]);
        // Both sides idle: the closes succeed.
        assert_eq!(nrt_async_sendrecv_close(0), SUCCESS);
        assert_eq!(nrt_async_sendrecv_close(1), SUCCESS);
        let mut up = false;
        assert_eq!(
            nrt_async_sendrecv_test_comm(send, &mut up),
            INVALID_HANDLE,
            "a closed LNC's communicator is a stale handle"
        );

        // The limit of communicators per LNC: receive sides that are never connected.
        assert_eq!(nrt_async_sendrecv_init(4), SUCCESS);
        for peer in 0..MAX_COMMUNICATORS_PER_LNC {
            let mut c = std::ptr::null_mut();
            assert_eq!(nrt_async_sendrecv_accept(ip.as_ptr(), peer, 4, &mut c), SUCCESS, "accept {peer}");
        }
        let mut c = std::ptr::null_mut();
        assert_eq!(nrt_async_sendrecv_accept(ip.as_ptr(), 33, 4, &mut c), RESOURCE);
        // Closing with communicators still connecting is an error, and the LNC stays closed for
        // good (until nrt_close).
        assert_eq!(nrt_async_sendrecv_close(4), FAILURE);
        assert_eq!(nrt_async_sendrecv_init(4), FAILURE);
        assert_eq!(nrt_async_sendrecv_init(2), SUCCESS);
        let mut c = std::ptr::null_mut();
        assert_eq!(nrt_async_sendrecv_accept(ip.as_ptr(), 3, 2, &mut c), SUCCESS);
        nrt_close();
        // nrt_close ended LNC 2 and forgot LNC 4's failed close.
        assert_eq!(nrt_init(0, std::ptr::null(), std::ptr::null()), SUCCESS);
        assert_eq!(nrt_async_sendrecv_init(4), SUCCESS);
        assert_eq!(nrt_async_sendrecv_init(2), SUCCESS);
        assert_eq!(nrt_async_sendrecv_close(4), SUCCESS);
        assert_eq!(nrt_async_sendrecv_close(2), SUCCESS);
        nrt_close();
    }
}
