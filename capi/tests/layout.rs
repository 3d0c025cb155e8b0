//! ABI check: tests/c/layout.c, compiled against include/, prints struct sizes, field
//! offsets, enumerator and macro values. They must equal (1) the Rust #[repr(C)]
//! definitions libnrt.so is built from and (2) the values of the public libnrt headers
//! (aws-neuron-sdk, src/libnrt/include/nrt/*.h), written out below as the expected facts.
//! Without a C compiler the test prints a notice and passes, unless NEURON_VFIO_REQUIRE_CC=1.

#![allow(non_camel_case_types)]

use std::collections::BTreeMap;
use std::mem::{offset_of, size_of};
use std::path::Path;
use std::process::Command;

use nrt::async_api::{nrt_cc_comm_t, nrt_tensor_list_t, nrta_error_t, nrta_seq_t};
use nrt::experimental::{nrt_ucode_img, nrt_ucode_info};
use nrt::ffi::{nrt_tensor_info_array_t, nrt_tensor_info_t, nrt_version_t, NRT_STATUS};
use nrt::info_ext::{nrt_instance_info_t, nrt_model_info_t, nrt_vnc_memory_stats_t};
use nrt::tensor_ops::{nrt_tensor_batch_op_t, nrt_tensor_batch_t, nrt_tensor_device_allocation_info_t};

/// Enumerator and macro values of the public headers.
const PUBLIC_VALUES: &[(&str, i64)] = &[
    ("NRT_SUCCESS", 0),
    ("NRT_FAILURE", 1),
    ("NRT_INVALID", 2),
    ("NRT_INVALID_HANDLE", 3),
    ("NRT_RESOURCE", 4),
    ("NRT_TIMEOUT", 5),
    ("NRT_HW_ERROR", 6),
    ("NRT_QUEUE_FULL", 7),
    ("NRT_LOAD_NOT_ENOUGH_NC", 9),
    ("NRT_UNSUPPORTED_NEFF_VERSION", 10),
    ("NRT_FAIL_HOST_MEM_ALLOC", 11),
    ("NRT_UNINITIALIZED", 13),
    ("NRT_CLOSED", 14),
    ("NRT_QUEUE_EMPTY", 15),
    ("NRT_EXEC_UNIT_UNRECOVERABLE", 101),
    ("NRT_EXEC_BAD_INPUT", 1002),
    ("NRT_EXEC_COMPLETED_WITH_NUM_ERR", 1003),
    ("NRT_EXEC_COMPLETED_WITH_ERR", 1004),
    ("NRT_EXEC_NC_BUSY", 1005),
    ("NRT_EXEC_OOB", 1006),
    ("NRT_COLL_PENDING", 1100),
    ("NRT_EXEC_HW_ERR_COLLECTIVES", 1200),
    ("NRT_EXEC_HW_ERR_HBM_UE", 1201),
    ("NRT_EXEC_HW_ERR_NC_UE", 1202),
    ("NRT_EXEC_HW_ERR_DMA_ABORT", 1203),
    ("NRT_EXEC_SW_NQ_OVERFLOW", 1204),
    ("NRT_EXEC_HW_ERR_REPAIRABLE_HBM_UE", 1205),
    ("NRT_NETWORK_PROXY_FAILURE", 1206),
    ("NRT_TENSOR_PLACEMENT_DEVICE", 0),
    ("NRT_TENSOR_PLACEMENT_HOST", 1),
    ("NRT_TENSOR_PLACEMENT_VIRTUAL", 2),
    ("NRT_FRAMEWORK_TYPE_INVALID", 0),
    ("NRT_FRAMEWORK_TYPE_NO_FW", 1),
    ("NRT_FRAMEWORK_TYPE_TENSORFLOW", 2),
    ("NRT_FRAMEWORK_TYPE_PYTORCH", 3),
    ("NRT_FRAMEWORK_TYPE_MXNET", 4),
    ("NRT_FRAMEWORK_TYPE_PRECHECK", 5),
    ("NRT_INSTANCE_UNKNOWN", 0),
    ("NRT_INSTANCE_INF1", 1),
    ("NRT_INSTANCE_TRN1", 2),
    ("NRT_INSTANCE_TRN1N", 3),
    ("NRT_INSTANCE_INF2", 4),
    ("NRT_INSTANCE_TRN2", 5),
    ("NRT_INSTANCE_TRN2N", 6),
    ("NRT_INSTANCE_INF2E", 7),
    ("NRT_INSTANCE_TRN2P", 8),
    ("NRT_INSTANCE_TRN2U", 9),
    ("NRT_INSTANCE_TRN2E", 10),
    ("NRT_INSTANCE_TRN2EU", 11),
    ("NRT_INSTANCE_TRN2AC", 12),
    ("NRT_INSTANCE_TRN2UAC", 13),
    ("NRT_INSTANCE_TRN3", 14),
    ("NRT_INSTANCE_TRN3PDS98", 15),
    ("NRT_INSTANCE_SIZE_1XL", 0),
    ("NRT_INSTANCE_SIZE_2XL", 1),
    ("NRT_INSTANCE_SIZE_4XL", 2),
    ("NRT_INSTANCE_SIZE_6XL", 3),
    ("NRT_INSTANCE_SIZE_8XL", 4),
    ("NRT_INSTANCE_SIZE_24XL", 5),
    ("NRT_INSTANCE_SIZE_32XL", 6),
    ("NRT_INSTANCE_SIZE_48XL", 7),
    ("NRT_INSTANCE_SIZE_3XL", 8),
    ("NRT_INSTANCE_SIZE_UNKNOWN", 9),
    ("NRT_INSTANCE_SIZE_NUM", 9),
    ("NRT_OP_ADD", 0),
    ("NRT_OP_FMA", 1),
    ("NRT_OP_MAX", 2),
    ("NRT_OP_MIN", 3),
    ("NRT_OP_INVALID", 0xF),
    ("NRT_DTYPE_UNKNOWN", 0),
    ("NRT_DTYPE_INVALID", 0),
    ("NRT_DTYPE_FP8_E3", 0xD),
    ("NRT_DTYPE_FP8_E4", 0xE),
    ("NRT_DTYPE_FP8_E5", 0xF),
    ("NRT_DTYPE_FLOAT16", 0x7),
    ("NRT_DTYPE_BFLOAT16", 0x6),
    ("NRT_DTYPE_FLOAT32", 0xA),
    ("NRT_DTYPE_FP32R", 0xB),
    ("NRT_DTYPE_UINT8", 0x3),
    ("NRT_DTYPE_UINT16", 0x5),
    ("NRT_DTYPE_UINT32", 0x9),
    ("NRT_DTYPE_UINT64", 0x1),
    ("NRT_DTYPE_INT8", 0x2),
    ("NRT_DTYPE_INT16", 0x4),
    ("NRT_DTYPE_INT32", 0x8),
    ("NRT_DTYPE_INT64", 0xC),
    ("NRT_CC_ALLGATHER", 0),
    ("NRT_CC_ALLREDUCE", 1),
    ("NRT_CC_REDUCESCATTER", 2),
    ("NRT_TENSOR_USAGE_INPUT", 0),
    ("NRT_TENSOR_USAGE_OUTPUT", 1),
    ("NRTA_XU_TENSOR_READ", 0),
    ("NRTA_XU_TENSOR_WRITE", 1),
    ("NRTA_XU_TENSOR_OP", 2),
    ("NRTA_XU_COMPUTE", 3),
    ("NRTA_XU_COLLECTIVES", 4),
    ("NRTA_XU_TYPE_NUM", 5),
    ("NRT_MAJOR_VERSION", 2),
    ("NRT_MINOR_VERSION", 0),
    ("NRT_TENSOR_NAME_MAX", 256),
    ("RT_VERSION_DETAIL_LEN", 128),
    ("GIT_HASH_LEN", 64),
    ("NRTA_SEQ_NUM_MAX", (1 << 48) - 1),
    ("NRTA_SEQ_GET_XU_ID(0xABCD000000000001ull)", 0xABCD),
    ("NRTA_SEQ_GET_SEQ_NUM(0xABCD000000000001ull)", 1),
];

/// The Rust side of every struct fact the C program prints.
fn rust_layout() -> Vec<(String, usize)> {
    macro_rules! sz {
        ($t:ident) => {
            (format!("sizeof {}", stringify!($t)), size_of::<$t>())
        };
    }
    macro_rules! off {
        ($t:ident, $f:ident) => {
            (format!("offsetof {}.{}", stringify!($t), stringify!($f)), offset_of!($t, $f))
        };
    }
    type nrta_xu_id_t = u16;
    vec![
        sz!(NRT_STATUS),
        sz!(nrt_tensor_info_t),
        off!(nrt_tensor_info_t, name),
        off!(nrt_tensor_info_t, usage),
        off!(nrt_tensor_info_t, size),
        off!(nrt_tensor_info_t, dtype),
        off!(nrt_tensor_info_t, shape),
        off!(nrt_tensor_info_t, ndim),
        sz!(nrt_tensor_info_array_t),
        off!(nrt_tensor_info_array_t, tensor_array),
        sz!(nrt_version_t),
        off!(nrt_version_t, rt_maintenance),
        off!(nrt_version_t, rt_detail),
        off!(nrt_version_t, git_hash),
        sz!(nrt_instance_info_t),
        off!(nrt_instance_info_t, size),
        off!(nrt_instance_info_t, arch_name),
        off!(nrt_instance_info_t, device_revision),
        sz!(nrt_vnc_memory_stats_t),
        off!(nrt_vnc_memory_stats_t, bytes_limit),
        sz!(nrt_model_info_t),
        sz!(nrt_tensor_batch_op_t),
        off!(nrt_tensor_batch_op_t, size),
        off!(nrt_tensor_batch_op_t, buffer),
        sz!(nrt_tensor_batch_t),
        off!(nrt_tensor_batch_t, ops),
        off!(nrt_tensor_batch_t, num_ops),
        sz!(nrt_tensor_device_allocation_info_t),
        off!(nrt_tensor_device_allocation_info_t, size),
        off!(nrt_tensor_device_allocation_info_t, hbm_index),
        sz!(nrta_error_t),
        off!(nrta_error_t, error_code),
        sz!(nrt_cc_comm_t),
        off!(nrt_cc_comm_t, rank),
        off!(nrt_cc_comm_t, rank_n),
        off!(nrt_cc_comm_t, ctx_device_id),
        off!(nrt_cc_comm_t, ctx_device_count),
        off!(nrt_cc_comm_t, vnc),
        sz!(nrt_tensor_list_t),
        off!(nrt_tensor_list_t, num_tensors),
        sz!(nrt_ucode_img),
        sz!(nrt_ucode_info),
        off!(nrt_ucode_info, dram),
        sz!(nrta_seq_t),
        sz!(nrta_xu_id_t),
    ]
}

/// Values the Rust side defines itself (must agree with the facts too).
fn rust_values() -> Vec<(&'static str, i64)> {
    let mut v: Vec<(&'static str, i64)> = neff::NrtStatus::ALL.iter().map(|s| (s.name(), s.code() as i64)).collect();
    v.extend([
        ("NRT_TENSOR_PLACEMENT_DEVICE", nrt::ffi::NRT_TENSOR_PLACEMENT_DEVICE as i64),
        ("NRT_TENSOR_PLACEMENT_HOST", nrt::ffi::NRT_TENSOR_PLACEMENT_HOST as i64),
        ("NRT_TENSOR_PLACEMENT_VIRTUAL", nrt::ffi::NRT_TENSOR_PLACEMENT_VIRTUAL as i64),
        ("NRT_TENSOR_USAGE_INPUT", nrt::ffi::NRT_TENSOR_USAGE_INPUT as i64),
        ("NRT_TENSOR_USAGE_OUTPUT", nrt::ffi::NRT_TENSOR_USAGE_OUTPUT as i64),
        ("NRT_TENSOR_NAME_MAX", nrt::ffi::NRT_TENSOR_NAME_MAX as i64),
        ("RT_VERSION_DETAIL_LEN", nrt::ffi::RT_VERSION_DETAIL_LEN as i64),
        ("GIT_HASH_LEN", nrt::ffi::GIT_HASH_LEN as i64),
        ("NRT_INSTANCE_TRN1", nrt::info_ext::NRT_INSTANCE_TRN1 as i64),
        ("NRT_INSTANCE_TRN2", nrt::info_ext::NRT_INSTANCE_TRN2 as i64),
        ("NRT_INSTANCE_TRN3", nrt::info_ext::NRT_INSTANCE_TRN3 as i64),
        ("NRT_INSTANCE_SIZE_UNKNOWN", nrt::info_ext::NRT_INSTANCE_SIZE_UNKNOWN as i64),
        ("NRTA_XU_TENSOR_READ", nrt::async_api::NRTA_XU_TENSOR_READ as i64),
        ("NRTA_XU_TENSOR_WRITE", nrt::async_api::NRTA_XU_TENSOR_WRITE as i64),
        ("NRTA_XU_TENSOR_OP", nrt::async_api::NRTA_XU_TENSOR_OP as i64),
        ("NRTA_XU_COMPUTE", nrt::async_api::NRTA_XU_COMPUTE as i64),
        ("NRTA_XU_COLLECTIVES", nrt::async_api::NRTA_XU_COLLECTIVES as i64),
        ("NRTA_XU_TYPE_NUM", nrt::async_api::NRTA_XU_TYPE_NUM as i64),
        ("NRTA_SEQ_NUM_MAX", runtime::xu::SEQ_CURSOR_MASK as i64),
    ]);
    v
}

#[test]
fn rust_values_match_the_public_headers() {
    let facts: BTreeMap<&str, i64> = PUBLIC_VALUES.iter().copied().collect();
    for (k, v) in rust_values() {
        assert_eq!(facts.get(k), Some(&v), "{k}");
    }
    // Every NRT_STATUS of the public header is known to the runtime.
    let statuses = PUBLIC_VALUES.iter().take_while(|(k, _)| *k != "NRT_TENSOR_PLACEMENT_DEVICE");
    for (k, v) in statuses {
        let s = neff::NrtStatus::from_name(k).unwrap_or_else(|| panic!("{k} unknown to the runtime"));
        assert_eq!(s.code() as i64, *v, "{k}");
    }
    assert_eq!(neff::NrtStatus::ALL.len(), 28, "nrt_status.h has 28 codes");
}

#[test]
fn c_layout_matches_rust_and_public_values() {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    if !Command::new(&cc).arg("--version").output().is_ok_and(|o| o.status.success()) {
        if std::env::var("NEURON_VFIO_REQUIRE_CC").as_deref() == Ok("1") {
            panic!("no C compiler (`{cc}`), and NEURON_VFIO_REQUIRE_CC=1");
        }
        eprintln!("notice: no C compiler (`{cc}`): skipping");
        return;
    }
    let m = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("capi-layout");
    let o = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(m.join("include"))
        .arg(m.join("tests/c/layout.c"))
        .arg("-o")
        .arg(&out)
        .output()
        .expect("run the C compiler");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = Command::new(&out).output().expect("run the layout program");
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let c: BTreeMap<String, i64> = text
        .lines()
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect();
    for (k, v) in rust_layout() {
        assert_eq!(c.get(&k).copied(), Some(v as i64), "{k}: C vs Rust");
    }
    for (k, v) in PUBLIC_VALUES {
        assert_eq!(c.get(&format!("value {k}")).copied(), Some(*v), "{k}: our header vs the public one");
    }
    let printed = text.lines().count();
    assert_eq!(printed, rust_layout().len() + PUBLIC_VALUES.len(), "every printed fact is checked:\n{text}");
    // nrt_async.h's static assertion, checked from Rust as well.
    assert_eq!(size_of::<nrta_error_t>(), 16);
}
