//! The subset of libfabric's C ABI the transport uses, declared by hand so that no libfabric
//! headers are needed at build time (the library itself is opened at run time, [`super::dl`]).
//!
//! libfabric's data-path calls (`fi_tsend`, `fi_cq_read`, `fi_domain`, …) are `static inline`
//! wrappers that call through the operation tables in the objects (`struct fid_*`), so what
//! the transport needs is the layout of those objects and tables, and the few real exports
//! (`fi_getinfo`, `fi_fabric`, `fi_dupinfo`, `fi_freeinfo`, `fi_strerror`, `fi_version`).
//!
//! Facts of the libfabric 2.1 headers (`rdma/fabric.h`, `fi_domain.h`, `fi_eq.h`,
//! `fi_endpoint.h`, `fi_cm.h`, `fi_tagged.h`, `fi_errno.h`). libfabric keeps the ABI
//! backward compatible: fields and table entries are only ever appended, so the prefixes
//! declared here read the same in every 1.x and 2.x library. Structures libfabric allocates
//! (`fi_info` and its attributes, the `fid_*` objects, the operation tables) are declared only
//! up to the last member read; the ones the caller allocates (`fi_cq_attr`, `fi_av_attr`,
//! completion entries, `fi_context2`) in full.
//!
//! To re-check against a libfabric release: `fabric/tests/abi.rs` compiles a C program with
//! that release's headers (`NEURON_VFIO_FABRIC_PREFIX`/include, default the prefix of
//! `scripts/fabric/setup.sh`) printing every offset, size and constant used here and compares
//! them with [`facts`]. For a newer release, run it against the new headers; a mismatch names
//! the member to fix.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};
use std::mem::{offset_of, size_of};

/// `FI_VERSION(major, minor)`.
pub const fn fi_version(major: u32, minor: u32) -> u32 {
    (major << 16) | minor
}

// Capabilities, modes and flags (`fabric.h`).
pub const FI_TAGGED: u64 = 1 << 3;
pub const FI_RECV: u64 = 1 << 10;
pub const FI_SEND: u64 = 1 << 11;
pub const FI_TRANSMIT: u64 = FI_SEND;
pub const FI_CONTEXT2: u64 = 1 << 52;
pub const FI_CONTEXT: u64 = 1 << 59;
pub const FI_MR_LOCAL: c_int = 1 << 2;
pub const FI_MR_VIRT_ADDR: c_int = 1 << 4;
pub const FI_MR_ALLOCATED: c_int = 1 << 5;
pub const FI_MR_PROV_KEY: c_int = 1 << 6;
/// `FI_ADDR_UNSPEC` (`(uint64_t) -1`).
pub const FI_ADDR_UNSPEC: u64 = u64::MAX;

// Enumerators.
/// `enum fi_ep_type`: `FI_EP_RDM`.
pub const FI_EP_RDM: c_int = 3;
/// `enum fi_av_type`: `FI_AV_TABLE`.
pub const FI_AV_TABLE: c_int = 2;
/// `enum fi_cq_format`: `FI_CQ_FORMAT_MSG`.
pub const FI_CQ_FORMAT_MSG: c_int = 2;
/// `enum fi_wait_obj`: `FI_WAIT_NONE`.
pub const FI_WAIT_NONE: c_int = 0;
/// Control command `FI_ENABLE` (`fi_enable`).
pub const FI_ENABLE: c_int = 6;

// Error numbers (`fi_errno.h`; returned negated).
pub const FI_EAGAIN: i64 = libc::EAGAIN as i64;
pub const FI_ENOMEM: i64 = libc::ENOMEM as i64;
pub const FI_ENODATA: i64 = libc::ENODATA as i64;
pub const FI_ETOOSMALL: i64 = 257;
pub const FI_EAVAIL: i64 = 259;

/// `struct fid`.
#[repr(C)]
pub struct fid {
    pub fclass: usize,
    pub context: *mut c_void,
    pub ops: *mut fi_ops,
}

/// `struct fi_ops` (up to `control`).
#[repr(C)]
pub struct fi_ops {
    pub size: usize,
    pub close: Option<unsafe extern "C" fn(*mut fid) -> c_int>,
    pub bind: Option<unsafe extern "C" fn(*mut fid, *mut fid, u64) -> c_int>,
    pub control: Option<unsafe extern "C" fn(*mut fid, c_int, *mut c_void) -> c_int>,
}

/// `struct fi_info` (complete in 1.x and 2.x).
#[repr(C)]
pub struct fi_info {
    pub next: *mut fi_info,
    pub caps: u64,
    pub mode: u64,
    pub addr_format: u32,
    pub src_addrlen: usize,
    pub dest_addrlen: usize,
    pub src_addr: *mut c_void,
    pub dest_addr: *mut c_void,
    pub handle: *mut fid,
    pub tx_attr: *mut c_void,
    pub rx_attr: *mut c_void,
    pub ep_attr: *mut fi_ep_attr,
    pub domain_attr: *mut fi_domain_attr,
    pub fabric_attr: *mut fi_fabric_attr,
    pub nic: *mut c_void,
}

/// `struct fi_ep_attr` (up to `max_msg_size`).
#[repr(C)]
pub struct fi_ep_attr {
    pub type_: c_int,
    pub protocol: u32,
    pub protocol_version: u32,
    pub max_msg_size: usize,
}

/// `struct fi_domain_attr` (up to `mr_mode`).
#[repr(C)]
pub struct fi_domain_attr {
    pub domain: *mut fid_domain,
    pub name: *mut c_char,
    pub threading: c_int,
    pub control_progress: c_int,
    pub data_progress: c_int,
    pub resource_mgmt: c_int,
    pub av_type: c_int,
    pub mr_mode: c_int,
}

/// `struct fi_fabric_attr`.
#[repr(C)]
pub struct fi_fabric_attr {
    pub fabric: *mut fid_fabric,
    pub name: *mut c_char,
    pub prov_name: *mut c_char,
    pub prov_version: u32,
    pub api_version: u32,
}

/// `struct fid_fabric`.
#[repr(C)]
pub struct fid_fabric {
    pub fid: fid,
    pub ops: *mut fi_ops_fabric,
}

/// `struct fi_ops_fabric` (up to `domain`).
#[repr(C)]
pub struct fi_ops_fabric {
    pub size: usize,
    pub domain: Option<unsafe extern "C" fn(*mut fid_fabric, *mut fi_info, *mut *mut fid_domain, *mut c_void) -> c_int>,
}

/// `struct fid_domain`.
#[repr(C)]
pub struct fid_domain {
    pub fid: fid,
    pub ops: *mut fi_ops_domain,
    pub mr: *mut fi_ops_mr,
}

/// `struct fi_ops_domain` (up to `endpoint`).
#[repr(C)]
pub struct fi_ops_domain {
    pub size: usize,
    pub av_open: Option<unsafe extern "C" fn(*mut fid_domain, *mut fi_av_attr, *mut *mut fid_av, *mut c_void) -> c_int>,
    pub cq_open: Option<unsafe extern "C" fn(*mut fid_domain, *mut fi_cq_attr, *mut *mut fid_cq, *mut c_void) -> c_int>,
    pub endpoint: Option<unsafe extern "C" fn(*mut fid_domain, *mut fi_info, *mut *mut fid_ep, *mut c_void) -> c_int>,
}

/// `struct fi_ops_mr` (up to `reg`).
#[repr(C)]
pub struct fi_ops_mr {
    pub size: usize,
    #[allow(clippy::type_complexity)]
    pub reg: Option<
        unsafe extern "C" fn(
            *mut fid,
            *const c_void,
            usize,
            u64,
            u64,
            u64,
            u64,
            *mut *mut fid_mr,
            *mut c_void,
        ) -> c_int,
    >,
}

/// `struct fid_mr`.
#[repr(C)]
pub struct fid_mr {
    pub fid: fid,
    pub mem_desc: *mut c_void,
    pub key: u64,
}

/// `struct fi_av_attr`.
#[repr(C)]
pub struct fi_av_attr {
    pub type_: c_int,
    pub rx_ctx_bits: c_int,
    pub count: usize,
    pub ep_per_node: usize,
    pub name: *const c_char,
    pub map_addr: *mut c_void,
    pub flags: u64,
}

/// `struct fid_av`.
#[repr(C)]
pub struct fid_av {
    pub fid: fid,
    pub ops: *mut fi_ops_av,
}

/// `struct fi_ops_av` (up to `insert`).
#[repr(C)]
pub struct fi_ops_av {
    pub size: usize,
    pub insert: Option<unsafe extern "C" fn(*mut fid_av, *const c_void, usize, *mut u64, u64, *mut c_void) -> c_int>,
}

/// `struct fi_cq_attr`.
#[repr(C)]
pub struct fi_cq_attr {
    pub size: usize,
    pub flags: u64,
    pub format: c_int,
    pub wait_obj: c_int,
    pub signaling_vector: c_int,
    pub wait_cond: c_int,
    pub wait_set: *mut c_void,
}

/// `struct fid_cq`.
#[repr(C)]
pub struct fid_cq {
    pub fid: fid,
    pub ops: *mut fi_ops_cq,
}

/// `struct fi_ops_cq` (up to `strerror`).
#[repr(C)]
pub struct fi_ops_cq {
    pub size: usize,
    pub read: Option<unsafe extern "C" fn(*mut fid_cq, *mut c_void, usize) -> isize>,
    pub readfrom: Option<unsafe extern "C" fn(*mut fid_cq, *mut c_void, usize, *mut u64) -> isize>,
    pub readerr: Option<unsafe extern "C" fn(*mut fid_cq, *mut fi_cq_err_entry, u64) -> isize>,
    pub sread: Option<unsafe extern "C" fn()>,
    pub sreadfrom: Option<unsafe extern "C" fn()>,
    pub signal: Option<unsafe extern "C" fn()>,
    pub strerror: Option<unsafe extern "C" fn(*mut fid_cq, c_int, *const c_void, *mut c_char, usize) -> *const c_char>,
}

/// `struct fi_cq_msg_entry`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_cq_msg_entry {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: usize,
}

/// `struct fi_cq_err_entry` (2.x: with `src_addr`; 1.x providers fill the prefix).
#[repr(C)]
pub struct fi_cq_err_entry {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: usize,
    pub buf: *mut c_void,
    pub data: u64,
    pub tag: u64,
    pub olen: usize,
    pub err: c_int,
    pub prov_errno: c_int,
    pub err_data: *mut c_void,
    pub err_data_size: usize,
    pub src_addr: u64,
}

/// `struct fid_ep`.
#[repr(C)]
pub struct fid_ep {
    pub fid: fid,
    pub ops: *mut c_void,
    pub cm: *mut fi_ops_cm,
    pub msg: *mut c_void,
    pub rma: *mut c_void,
    pub tagged: *mut fi_ops_tagged,
}

/// `struct fi_ops_cm` (up to `getname`).
#[repr(C)]
pub struct fi_ops_cm {
    pub size: usize,
    pub setname: Option<unsafe extern "C" fn(*mut fid, *mut c_void, usize) -> c_int>,
    pub getname: Option<unsafe extern "C" fn(*mut fid, *mut c_void, *mut usize) -> c_int>,
}

/// `struct fi_ops_tagged` (up to `send`).
#[repr(C)]
pub struct fi_ops_tagged {
    pub size: usize,
    pub recv:
        Option<unsafe extern "C" fn(*mut fid_ep, *mut c_void, usize, *mut c_void, u64, u64, u64, *mut c_void) -> isize>,
    pub recvv: Option<unsafe extern "C" fn()>,
    pub recvmsg: Option<unsafe extern "C" fn()>,
    pub send:
        Option<unsafe extern "C" fn(*mut fid_ep, *const c_void, usize, *mut c_void, u64, u64, *mut c_void) -> isize>,
}

/// `struct fi_context2`.
#[repr(C)]
pub struct fi_context2 {
    pub internal: [*mut c_void; 8],
}

/// Every layout fact above as (`C expression`, value), in the form `fabric/tests/abi.rs`
/// prints from the C headers: `sizeof(struct X)` of the structures the caller allocates,
/// `offsetof(struct X, m)` of every member declared, and the constants.
#[doc(hidden)]
pub fn facts() -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = Vec::new();
    macro_rules! off {
        ($t:ident, $c:literal: $($f:ident = $cf:literal),+) => {
            $( v.push((format!("offsetof(struct {}, {})", $c, $cf), offset_of!($t, $f) as u64)); )+
        };
    }
    macro_rules! size {
        ($t:ident, $c:literal) => {
            v.push((format!("sizeof(struct {})", $c), size_of::<$t>() as u64));
        };
    }
    off!(fid, "fid": fclass = "fclass", context = "context", ops = "ops");
    off!(fi_ops, "fi_ops": size = "size", close = "close", bind = "bind", control = "control");
    off!(fi_info, "fi_info": next = "next", caps = "caps", mode = "mode", addr_format = "addr_format",
        src_addrlen = "src_addrlen", dest_addrlen = "dest_addrlen", src_addr = "src_addr",
        dest_addr = "dest_addr", handle = "handle", tx_attr = "tx_attr", rx_attr = "rx_attr",
        ep_attr = "ep_attr", domain_attr = "domain_attr", fabric_attr = "fabric_attr", nic = "nic");
    off!(fi_ep_attr, "fi_ep_attr": type_ = "type", protocol = "protocol",
        protocol_version = "protocol_version", max_msg_size = "max_msg_size");
    off!(fi_domain_attr, "fi_domain_attr": domain = "domain", name = "name", threading = "threading",
        control_progress = "control_progress", data_progress = "data_progress",
        resource_mgmt = "resource_mgmt", av_type = "av_type", mr_mode = "mr_mode");
    off!(fi_fabric_attr, "fi_fabric_attr": fabric = "fabric", name = "name", prov_name = "prov_name",
        prov_version = "prov_version", api_version = "api_version");
    off!(fid_fabric, "fid_fabric": fid = "fid", ops = "ops");
    off!(fi_ops_fabric, "fi_ops_fabric": size = "size", domain = "domain");
    off!(fid_domain, "fid_domain": fid = "fid", ops = "ops", mr = "mr");
    off!(fi_ops_domain, "fi_ops_domain": size = "size", av_open = "av_open", cq_open = "cq_open",
        endpoint = "endpoint");
    off!(fi_ops_mr, "fi_ops_mr": size = "size", reg = "reg");
    off!(fid_mr, "fid_mr": fid = "fid", mem_desc = "mem_desc", key = "key");
    off!(fi_av_attr, "fi_av_attr": type_ = "type", rx_ctx_bits = "rx_ctx_bits", count = "count",
        ep_per_node = "ep_per_node", name = "name", map_addr = "map_addr", flags = "flags");
    size!(fi_av_attr, "fi_av_attr");
    off!(fid_av, "fid_av": fid = "fid", ops = "ops");
    off!(fi_ops_av, "fi_ops_av": size = "size", insert = "insert");
    off!(fi_cq_attr, "fi_cq_attr": size = "size", flags = "flags", format = "format",
        wait_obj = "wait_obj", signaling_vector = "signaling_vector", wait_cond = "wait_cond",
        wait_set = "wait_set");
    size!(fi_cq_attr, "fi_cq_attr");
    off!(fid_cq, "fid_cq": fid = "fid", ops = "ops");
    off!(fi_ops_cq, "fi_ops_cq": size = "size", read = "read", readfrom = "readfrom",
        readerr = "readerr", sread = "sread", sreadfrom = "sreadfrom", signal = "signal",
        strerror = "strerror");
    off!(fi_cq_msg_entry, "fi_cq_msg_entry": op_context = "op_context", flags = "flags", len = "len");
    size!(fi_cq_msg_entry, "fi_cq_msg_entry");
    off!(fi_cq_err_entry, "fi_cq_err_entry": op_context = "op_context", flags = "flags", len = "len",
        buf = "buf", data = "data", tag = "tag", olen = "olen", err = "err", prov_errno = "prov_errno",
        err_data = "err_data", err_data_size = "err_data_size", src_addr = "src_addr");
    size!(fi_cq_err_entry, "fi_cq_err_entry");
    off!(fid_ep, "fid_ep": fid = "fid", ops = "ops", cm = "cm", msg = "msg", rma = "rma", tagged = "tagged");
    off!(fi_ops_cm, "fi_ops_cm": size = "size", setname = "setname", getname = "getname");
    off!(fi_ops_tagged, "fi_ops_tagged": size = "size", recv = "recv", recvv = "recvv",
        recvmsg = "recvmsg", send = "send");
    size!(fi_context2, "fi_context2");
    for (name, value) in [
        ("FI_TAGGED", FI_TAGGED),
        ("FI_RECV", FI_RECV),
        ("FI_SEND", FI_SEND),
        ("FI_TRANSMIT", FI_TRANSMIT),
        ("FI_CONTEXT2", FI_CONTEXT2),
        ("FI_CONTEXT", FI_CONTEXT),
        ("FI_MR_LOCAL", FI_MR_LOCAL as u64),
        ("FI_MR_VIRT_ADDR", FI_MR_VIRT_ADDR as u64),
        ("FI_MR_ALLOCATED", FI_MR_ALLOCATED as u64),
        ("FI_MR_PROV_KEY", FI_MR_PROV_KEY as u64),
        ("FI_ADDR_UNSPEC", FI_ADDR_UNSPEC),
        ("FI_EP_RDM", FI_EP_RDM as u64),
        ("FI_AV_TABLE", FI_AV_TABLE as u64),
        ("FI_CQ_FORMAT_MSG", FI_CQ_FORMAT_MSG as u64),
        ("FI_WAIT_NONE", FI_WAIT_NONE as u64),
        ("FI_ENABLE", FI_ENABLE as u64),
        ("FI_EAGAIN", FI_EAGAIN as u64),
        ("FI_ENOMEM", FI_ENOMEM as u64),
        ("FI_ENODATA", FI_ENODATA as u64),
        ("FI_ETOOSMALL", FI_ETOOSMALL as u64),
        ("FI_EAVAIL", FI_EAVAIL as u64),
    ] {
        v.push((name.to_string(), value));
    }
    v
}
