//! Every runtime variable the Neuron SDK documents is in `runtime::env::documented::DOCUMENTED`
//! (honoured, honoured differently, or ignored with a notice), and the notices say what they
//! should.
//!
//! `SDK_NAMES` is transcribed from the SDK's pages by hand, independently of the table: a name
//! added here and not to the table, or dropped from the table, fails
//! `documented_names_are_handled`.

use runtime::env::documented::{lookup, notices, Handling, DOCUMENTED};

/// The SDK's documented names, grouped by the page they were read on (paths in the
/// aws-neuron/aws-neuron-sdk repository). A `<component>` name is given once per documented
/// component.
const SDK_NAMES: &[&str] = &[
    // neuron-runtime/guides/configuration-guide.rst (table, "Additional logging controls")
    "NEURON_RT_VISIBLE_CORES",
    "NEURON_RT_NUM_CORES",
    "NEURON_RT_LOG_LOCATION",
    "NEURON_RT_LOG_LEVEL",
    "NEURON_RT_EXEC_TIMEOUT",
    "NEURON_RT_VALIDATE_HASH",
    "NEURON_RT_MULTI_INSTANCE_SHARED_WEIGHTS",
    "NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS",
    "NEURON_RT_ALLOW_LEGACY_NEFF",
    "NEURON_RT_LOG_LEVEL_TDRV",
    "NEURON_RT_LOG_LEVEL_NMGR",
    "NEURON_RT_LOG_LEVEL_KMGR",
    "NEURON_RT_LOG_LEVEL_NRT",
    "NEURON_RT_LOG_LOCATION_TDRV",
    "NEURON_RT_LOG_LOCATION_NMGR",
    // neuron-runtime/guides/nrt-developer-guide.rst ("Environment variables used to configure …")
    "NEURON_RT_ROOT_COMM_ID",
    "NEURON_RT_STOCHASTIC_ROUNDING_SEED",
    "NEURON_RT_DEBUG_MEMLOG_MAX_SIZE",
    "NEURON_RT_STOCHASTIC_ROUNDING_EN",
    // about-neuron/arch/neuron-features/logical-neuroncore-config.rst
    "NEURON_LOGICAL_NC_CONFIG",
    // libraries/nxd-inference/tutorials/trn2-llama3.3-70b-tutorial.rst, tools/neuron-explorer/glossary.rst
    "NEURON_RT_VIRTUAL_CORE_SIZE",
    // tools/neuron-explorer/environment-variables.rst
    "NEURON_RT_INSPECT_ENABLE",
    "NEURON_RT_INSPECT_OUTPUT_DIR",
    "NEURON_RT_INSPECT_SYSTEM_PROFILE",
    "NEURON_RT_INSPECT_DEVICE_PROFILE",
    "NEURON_RT_INSPECT_DEVICE_PROFILE_NUM_WARMUP",
    "NEURON_RT_ENABLE_DGE_NOTIFICATIONS",
    "NEURON_RT_INSPECT_EVENT_FILTER_NC",
    "NEURON_RT_INSPECT_EVENT_FILTER_TYPE",
    "NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC",
    "NEURON_RT_INSPECT_PRECACHE_ENABLE",
    // tools/neuron-explorer/how-to-profile-workload.rst
    "NEURON_RT_INSPECT_CPU_UTIL",
    "NEURON_RT_INSPECT_HOST_MEMORY",
    // src/libnrt/include/nrt/nrt_profile.h (nrt_inspect_begin)
    "NEURON_RT_INSPECT_ON_FAIL",
    // neuron-runtime/explore/device-memory.rst
    "NEURON_RT_CONTIGUOUS_SCRATCHPAD",
    "NEURON_RT_PROFILE_BUF_EVENT_MB",
    "NEURON_RT_PROFILE_BUF_DMA_MB",
    "NEURON_RT_PROFILE_BUF_THROTTLE_MB",
    "NEURON_RT_PROFILE_BUF_CC_CORE_INSTRUCTION_MB",
    "NEURON_RT_PROFILE_BUF_CC_CORE_EVENT_MB",
    // neuron-runtime/explore/compute-comm-overlap.rst
    "NEURON_RT_DBG_DMA_PACKETIZATION_SIZE",
    "NEURON_RT_DBG_CC_DMA_PACKET_SIZE",
    // neuron-runtime/explore/core-dump-deep-dive.rst
    "NEURON_RT_LOCAL_CORE_DUMP_DIRECTORY",
    "NEURON_RT_S3_CORE_DUMP_PREFIX",
    // neuron-runtime/nrt-troubleshoot.rst
    "NEURON_RT_DBG_DUMP_INPUTS_ON_ERR",
    "NEURON_RT_RESET_CORES",
    // neuron-runtime/explore/runtime-performance-tips.rst
    "NEURON_RT_LOW_LATENCY_TASKS_CPU_AFFINITY",
    // neuron-runtime/api/debug-stream-api.rst
    "NEURON_RT_DEBUG_STREAM_BUFFER_SIZE",
    // release-notes/components/runtime.rst
    "NEURON_RT_NUMERICAL_ERRORS_VERBOSITY",
    "NEURON_RT_ENABLE_DEVICE_MEMORY_OOM_LOG",
    "NEURON_RT_ONE_THREAD_PER_CORE",
    "NEURON_RT_RANKS_PER_NETWORK_PROXY",
    "NEURON_RT_INSPECT_DURATION_NSEC",
    "NEURON_RT_INSPECT_START_OFFSET_NSEC",
    // neuron-customops/api-reference-guide/custom-ops-ref-guide.rst
    "NEURON_RT_GPSIMD_STDOUT_QUEUE_SIZE_BYTES",
    // deploy/eks/ultraserver.rst
    "NEURON_RT_ULTRASERVER_MODE",
    "NEURON_RT_ULTRASERVER_SERVER_ID",
    "NEURON_RT_ULTRASERVER_NODE_ID",
    // libraries/nxd-inference/tutorials/disaggregated-inference-tutorial-1p1d.rst
    "NEURON_RT_ASYNC_SENDRECV_EXPERIMENTAL_ENABLED",
    "NEURON_RT_ASYNC_SENDRECV_BOOTSTRAP_PORT",
    // libraries/nxd-inference/tutorials/qwen3-vl-tutorial.ipynb
    "NEURON_RT_DBG_INTRA_RDH_CHANNEL_BUFFER_SIZE",
    // nki/api/nki/language/__init__.py (device_print)
    "NEURON_RT_DEBUG_OUTPUT_DIR",
];

#[test]
fn documented_names_are_handled() {
    let missing: Vec<&str> = SDK_NAMES.iter().copied().filter(|n| lookup(n).is_none()).collect();
    assert!(missing.is_empty(), "documented by the SDK but not in DOCUMENTED: {missing:?}");
}

#[test]
fn every_table_entry_is_a_documented_name() {
    // The reverse direction: the table carries no name the SDK list does not have (a `*` entry
    // must stand for at least one documented component name).
    for d in DOCUMENTED {
        let covered = SDK_NAMES.iter().any(|n| lookup(n).is_some_and(|e| e.name == d.name));
        assert!(covered, "{} is in DOCUMENTED but not in this test's SDK list", d.name);
        assert!(!d.source.is_empty(), "{} has no source", d.name);
    }
}

#[test]
fn table_is_sorted_without_duplicates() {
    for w in DOCUMENTED.windows(2) {
        assert!(w[0].name < w[1].name, "not sorted or duplicated: {} then {}", w[0].name, w[1].name);
    }
}

#[test]
fn an_ignored_variable_draws_exactly_one_line_naming_it() {
    let ignored: Vec<&str> = DOCUMENTED
        .iter()
        .filter(|d| matches!(d.handling, Handling::Ignored(_)) && !d.name.ends_with('*'))
        .map(|d| d.name)
        .collect();
    assert!(!ignored.is_empty());
    for name in ignored {
        let lines = notices([(name, "1")]);
        assert_eq!(lines.len(), 1, "{name}: {lines:?}");
        assert!(lines[0].starts_with(&format!("{name} ")), "{name}: {lines:?}");
        assert!(!lines[0].contains('\n'), "{name}: {lines:?}");
    }
    // A component of a `*` entry is named as set.
    let lines = notices([("NEURON_RT_LOG_LOCATION_TDRV", "tdrv.log")]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("NEURON_RT_LOG_LOCATION_TDRV "), "{lines:?}");
}

#[test]
fn honoured_variables_draw_nothing() {
    // A `*` entry is set as its NRT component.
    let applied: Vec<String> = DOCUMENTED
        .iter()
        .filter(|d| !matches!(d.handling, Handling::Ignored(_)))
        .map(|d| d.name.strip_suffix('*').map_or(d.name.to_string(), |p| format!("{p}NRT")))
        .collect();
    assert!(applied.iter().any(|n| n == "NEURON_RT_VISIBLE_CORES"));
    assert!(applied.iter().any(|n| n == "NEURON_RT_LOG_LEVEL_NRT"));
    assert_eq!(notices(applied.iter().map(|n| (n.as_str(), "1"))), Vec::<String>::new());
}

#[test]
fn an_unknown_runtime_variable_draws_a_line_and_other_names_none() {
    let lines = notices([("NEURON_RT_FOO", "1"), ("PATH", "/bin"), ("NEURON_VFIO_DEVICE", "sim")]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("NEURON_RT_FOO "), "{lines:?}");
    // Several at once: one line each, sorted.
    let lines = notices([("NEURON_RT_FOO", "1"), ("NEURON_RT_ULTRASERVER_MODE", "1"), ("NEURON_RT_NUM_CORES", "2")]);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].starts_with("NEURON_RT_FOO ") && lines[1].starts_with("NEURON_RT_ULTRASERVER_MODE "));
}
