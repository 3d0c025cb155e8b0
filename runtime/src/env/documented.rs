//! Every `NEURON_RT_*` variable the Neuron SDK documents, and what this runtime does with it
//! (docs/environment.md carries the same table for users).
//!
//! Each entry is one of:
//! - [`Handling::Honoured`]: read in this module's parent ([`super`]) or by the C API and
//!   applied as the SDK documents it;
//! - [`Handling::Differently`]: read and applied, with a documented difference (the reason is
//!   in the entry);
//! - [`Handling::Ignored`]: not applied; when it is set, [`notices`] says so in one line naming
//!   it (the front ends print that line at `nrt_init` / before a command runs), never silently.
//!
//! The list was gathered from the SDK's pages (each entry names the page it was read on): the
//! runtime reference of variables (`neuron-runtime/api/nrt-env-var-reference.rst`, of which
//! only the introduction could be read), the configuration and developer guides, the profiler's
//! variables page, the LNC page, the device-memory, compute/communication-overlap, core-dump and
//! troubleshooting pages, the runtime release notes, and the tutorials and tool pages that set
//! the rest. Variables named only in since-removed pages or unmerged branches of the SDK are
//! not listed; they draw the "unknown" notice like any other name.

/// What the runtime does with a documented variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handling {
    /// Read and applied as documented.
    Honoured,
    /// Read and applied, differently from libnrt for the reason given.
    Differently(&'static str),
    /// Not applied (the reason given); setting it draws a one-line notice.
    Ignored(&'static str),
}

/// A documented variable: its name (a trailing `*` stands for the documented
/// `<component>` suffix), what the runtime does with it, and where the SDK documents it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Documented {
    pub name: &'static str,
    pub handling: Handling,
    pub source: &'static str,
}

const CFG: &str = "neuron-runtime/guides/configuration-guide.rst";
const DEVGUIDE: &str = "neuron-runtime/guides/nrt-developer-guide.rst";
const PROFILER: &str = "tools/neuron-explorer/environment-variables.rst";
const PROFILE_HOWTO: &str = "tools/neuron-explorer/how-to-profile-workload.rst";
const PROFILE_H: &str = "src/libnrt/include/nrt/nrt_profile.h (nrt_inspect_begin)";
const LNC: &str = "about-neuron/arch/neuron-features/logical-neuroncore-config.rst";
const DEVMEM: &str = "neuron-runtime/explore/device-memory.rst";
const OVERLAP: &str = "neuron-runtime/explore/compute-comm-overlap.rst";
const COREDUMP: &str = "neuron-runtime/explore/core-dump-deep-dive.rst";
const TROUBLE: &str = "neuron-runtime/nrt-troubleshoot.rst";
const PERF: &str = "neuron-runtime/explore/runtime-performance-tips.rst";
const RELNOTES: &str = "release-notes/components/runtime.rst";
const DEBUG_STREAM: &str = "neuron-runtime/api/debug-stream-api.rst";
const DISAGG: &str = "libraries/nxd-inference/tutorials/disaggregated-inference-tutorial-1p1d.rst";
const ULTRASERVER: &str = "deploy/eks/ultraserver.rst";
const ROUNDING: &str = "about-neuron/arch/neuron-features/rounding-modes.rst";
const PROFILE_BUF: &str = "profile buffers are host memory sized by the capture";
const ULTRA: &str = "UltraServer topologies are not modelled";
const DMA_PACKETS: &str = "DMA packet sizes are not tuned by this runtime";
const CORE_DUMPS: &str = "core dumps are not written; the debug endpoint reads a live process";
const CAPTURE_WINDOW: &str =
    "libnrt removed it (runtime release notes); captures run from nrt_inspect_begin to nrt_inspect_stop";

use Handling::{Differently, Honoured, Ignored};

/// The table (sorted by name; runtime/tests/env_documented.rs lists the SDK's names
/// independently and fails on one missing here).
pub const DOCUMENTED: &[Documented] = &[
    Documented { name: "NEURON_LOGICAL_NC_CONFIG", handling: Honoured, source: LNC },
    Documented { name: "NEURON_RT_ALLOW_LEGACY_NEFF", handling: Honoured, source: CFG },
    Documented {
        name: "NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS",
        handling: Differently(
            "bounds the requests in flight per NeuronCore of nrt_execute_async (default 64 when 0 or unset); \
             nrt_execute stays synchronous (libnrt's implicit async mode is not built)",
        ),
        source: CFG,
    },
    Documented { name: "NEURON_RT_ASYNC_SENDRECV_BOOTSTRAP_PORT", handling: Honoured, source: DISAGG },
    Documented {
        name: "NEURON_RT_ASYNC_SENDRECV_EXPERIMENTAL_ENABLED",
        handling: Differently("the nrt_async_sendrecv.h API is always available"),
        source: DISAGG,
    },
    Documented {
        name: "NEURON_RT_CONTIGUOUS_SCRATCHPAD",
        handling: Ignored("the scratchpad is one allocation per model in device memory already"),
        source: DEVMEM,
    },
    Documented { name: "NEURON_RT_DBG_CC_DMA_PACKET_SIZE", handling: Ignored(DMA_PACKETS), source: OVERLAP },
    Documented { name: "NEURON_RT_DBG_DMA_PACKETIZATION_SIZE", handling: Ignored(DMA_PACKETS), source: OVERLAP },
    Documented {
        name: "NEURON_RT_DBG_DUMP_INPUTS_ON_ERR",
        handling: Ignored("inputs of a failed execution are not dumped; the debug endpoint reads them live"),
        source: TROUBLE,
    },
    Documented {
        name: "NEURON_RT_DBG_INTRA_RDH_CHANNEL_BUFFER_SIZE",
        handling: Ignored("collectives here do not use libnrt's RDH channel buffers"),
        source: "libraries/nxd-inference/tutorials/qwen3-vl-tutorial.ipynb",
    },
    Documented {
        name: "NEURON_RT_DEBUG_MEMLOG_MAX_SIZE",
        handling: Ignored("libnrt's in-memory allocation log is not kept"),
        source: DEVGUIDE,
    },
    Documented {
        name: "NEURON_RT_DEBUG_OUTPUT_DIR",
        handling: Ignored("device-printed tensors (the debug stream) are not produced"),
        source: "nki/api/nki/language/__init__.py (device_print)",
    },
    Documented {
        name: "NEURON_RT_DEBUG_STREAM_BUFFER_SIZE",
        handling: Ignored("the debug stream API is not built"),
        source: DEBUG_STREAM,
    },
    Documented {
        name: "NEURON_RT_ENABLE_DEVICE_MEMORY_OOM_LOG",
        handling: Ignored("a device-memory allocation failure is always reported with its error"),
        source: RELNOTES,
    },
    Documented {
        name: "NEURON_RT_ENABLE_DGE_NOTIFICATIONS",
        handling: Ignored("DGE notifications are not enabled, so profiles carry no DMA variable names from them"),
        source: PROFILER,
    },
    Documented { name: "NEURON_RT_EXEC_TIMEOUT", handling: Honoured, source: DEVGUIDE },
    Documented {
        name: "NEURON_RT_GPSIMD_STDOUT_QUEUE_SIZE_BYTES",
        handling: Ignored("printf output of GPSIMD custom operators is not collected"),
        source: "neuron-customops/api-reference-guide/custom-ops-ref-guide.rst",
    },
    Documented {
        name: "NEURON_RT_INSPECT_CPU_UTIL",
        handling: Ignored("CPU utilisation is not sampled into profiles"),
        source: PROFILE_HOWTO,
    },
    Documented {
        name: "NEURON_RT_INSPECT_DEVICE_PROFILE",
        handling: Differently("`1`/`model` and `session` both capture every execution (default `0`, off)"),
        source: PROFILER,
    },
    Documented {
        name: "NEURON_RT_INSPECT_DEVICE_PROFILE_NUM_WARMUP",
        handling: Ignored("device profiles capture every execution; none are skipped as warm-up"),
        source: PROFILER,
    },
    Documented { name: "NEURON_RT_INSPECT_DURATION_NSEC", handling: Ignored(CAPTURE_WINDOW), source: RELNOTES },
    Documented { name: "NEURON_RT_INSPECT_ENABLE", handling: Honoured, source: PROFILER },
    Documented { name: "NEURON_RT_INSPECT_EVENT_FILTER_NC", handling: Honoured, source: PROFILER },
    Documented { name: "NEURON_RT_INSPECT_EVENT_FILTER_TYPE", handling: Honoured, source: PROFILER },
    Documented {
        name: "NEURON_RT_INSPECT_HOST_MEMORY",
        handling: Ignored("host memory is not sampled into profiles"),
        source: PROFILE_HOWTO,
    },
    Documented { name: "NEURON_RT_INSPECT_ON_FAIL", handling: Honoured, source: PROFILE_H },
    Documented { name: "NEURON_RT_INSPECT_OUTPUT_DIR", handling: Honoured, source: PROFILER },
    Documented {
        name: "NEURON_RT_INSPECT_PRECACHE_ENABLE",
        handling: Ignored("there is no framework graph cache in this runtime"),
        source: PROFILER,
    },
    Documented { name: "NEURON_RT_INSPECT_START_OFFSET_NSEC", handling: Ignored(CAPTURE_WINDOW), source: RELNOTES },
    Documented { name: "NEURON_RT_INSPECT_SYSTEM_PROFILE", handling: Honoured, source: PROFILER },
    Documented { name: "NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC", handling: Honoured, source: PROFILER },
    Documented { name: "NEURON_RT_LOCAL_CORE_DUMP_DIRECTORY", handling: Ignored(CORE_DUMPS), source: COREDUMP },
    Documented {
        name: "NEURON_RT_LOG_LEVEL",
        handling: Differently(
            "the documented levels and QUIET are honoured; unset, libnrt logs at ERROR (the configuration \
             guide's default; the reference page now says WARN) and the CLI at WARN",
        ),
        source: CFG,
    },
    Documented {
        name: "NEURON_RT_LOG_LEVEL_*",
        handling: Differently(
            "components TDRV (hal, vfio, simulator), NRT, NMGR and KMGR (the runtime and libnrt) are honoured; \
             another component name is refused",
        ),
        source: CFG,
    },
    Documented {
        name: "NEURON_RT_LOG_LOCATION",
        handling: Differently(
            "`console` (the default: the console only, not also syslog) and `syslog` (the local syslog socket, /dev/log)",
        ),
        source: CFG,
    },
    Documented {
        name: "NEURON_RT_LOG_LOCATION_*",
        handling: Ignored("per-component log files are not written; everything goes to NEURON_RT_LOG_LOCATION"),
        source: CFG,
    },
    Documented {
        name: "NEURON_RT_LOW_LATENCY_TASKS_CPU_AFFINITY",
        handling: Ignored("the runtime starts no low-latency helper threads to pin"),
        source: PERF,
    },
    Documented {
        name: "NEURON_RT_MULTI_INSTANCE_SHARED_WEIGHTS",
        handling: Ignored("every load stages its own copy of the weights"),
        source: CFG,
    },
    Documented {
        name: "NEURON_RT_NUMERICAL_ERRORS_VERBOSITY",
        handling: Differently(
            "values validated as libnrt does (another value fails nrt_init with NRT_INVALID); a numerical \
             error is reported at every setting, as NRT_EXEC_COMPLETED_WITH_NUM_ERR (1003) only",
        ),
        source: CFG,
    },
    Documented { name: "NEURON_RT_NUM_CORES", handling: Honoured, source: CFG },
    Documented {
        name: "NEURON_RT_ONE_THREAD_PER_CORE",
        handling: Ignored("network proxy threads are not pinned to dedicated CPU cores"),
        source: RELNOTES,
    },
    Documented { name: "NEURON_RT_PROFILE_BUF_CC_CORE_EVENT_MB", handling: Ignored(PROFILE_BUF), source: DEVMEM },
    Documented {
        name: "NEURON_RT_PROFILE_BUF_CC_CORE_INSTRUCTION_MB",
        handling: Ignored(PROFILE_BUF),
        source: DEVMEM,
    },
    Documented { name: "NEURON_RT_PROFILE_BUF_DMA_MB", handling: Ignored(PROFILE_BUF), source: DEVMEM },
    Documented { name: "NEURON_RT_PROFILE_BUF_EVENT_MB", handling: Ignored(PROFILE_BUF), source: DEVMEM },
    Documented { name: "NEURON_RT_PROFILE_BUF_THROTTLE_MB", handling: Ignored(PROFILE_BUF), source: DEVMEM },
    Documented {
        name: "NEURON_RT_RANKS_PER_NETWORK_PROXY",
        handling: Ignored("each rank drives its own network proxy"),
        source: RELNOTES,
    },
    Documented {
        name: "NEURON_RT_RESET_CORES",
        handling: Differently("cores are always reset when a process takes them (`0` cannot skip it)"),
        source: TROUBLE,
    },
    Documented { name: "NEURON_RT_ROOT_COMM_ID", handling: Honoured, source: DEVGUIDE },
    Documented { name: "NEURON_RT_S3_CORE_DUMP_PREFIX", handling: Ignored(CORE_DUMPS), source: COREDUMP },
    Documented {
        name: "NEURON_RT_STOCHASTIC_ROUNDING_EN",
        handling: Ignored("the simulator's engines round to nearest even; stochastic rounding is not modelled"),
        source: ROUNDING,
    },
    Documented {
        name: "NEURON_RT_STOCHASTIC_ROUNDING_SEED",
        handling: Ignored("stochastic rounding is not modelled"),
        source: DEVGUIDE,
    },
    Documented { name: "NEURON_RT_ULTRASERVER_MODE", handling: Ignored(ULTRA), source: ULTRASERVER },
    Documented { name: "NEURON_RT_ULTRASERVER_NODE_ID", handling: Ignored(ULTRA), source: ULTRASERVER },
    Documented { name: "NEURON_RT_ULTRASERVER_SERVER_ID", handling: Ignored(ULTRA), source: ULTRASERVER },
    Documented { name: "NEURON_RT_VALIDATE_HASH", handling: Honoured, source: CFG },
    Documented {
        name: "NEURON_RT_VIRTUAL_CORE_SIZE",
        handling: Differently(
            "read as NEURON_LOGICAL_NC_CONFIG (1 or 2, the arch's default when unset); both set to different \
             sizes is refused, as the SDK does not say which wins",
        ),
        source: "libraries/nxd-inference/tutorials/trn2-llama3.3-70b-tutorial.rst; tools/neuron-explorer/glossary.rst",
    },
    Documented { name: "NEURON_RT_VISIBLE_CORES", handling: Honoured, source: CFG },
];

/// The entry of variable `var`: by name, or by a `*` entry's prefix.
pub fn lookup(var: &str) -> Option<&'static Documented> {
    DOCUMENTED.iter().find(|d| d.name == var).or_else(|| {
        DOCUMENTED.iter().filter_map(|d| d.name.strip_suffix('*').map(|p| (p, d))).find_map(|(p, d)| {
            let rest = var.strip_prefix(p)?;
            (!rest.is_empty() && rest.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())).then_some(d)
        })
    })
}

/// One line per variable of `vars` (name, value) that is a `NEURON_RT_*` variable this
/// runtime does not apply: a documented one it ignores (its reason), or one the SDK does not
/// document. What the front ends print when they start.
pub fn notices<'a>(vars: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<String> {
    let mut out = Vec::new();
    for (k, _) in vars {
        if !k.starts_with("NEURON_RT_") && k != "NEURON_LOGICAL_NC_CONFIG" {
            continue;
        }
        match lookup(k).map(|d| d.handling) {
            Some(Ignored(why)) => out.push(format!("{k} is set but not applied by neuron-vfio: {why}")),
            Some(_) => {}
            None => out.push(format!("{k} is not a Neuron runtime variable neuron-vfio knows; it is ignored")),
        }
    }
    out.sort();
    out
}

/// [`notices`] for the process environment.
pub fn notices_from_env() -> Vec<String> {
    let vars: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.to_string_lossy().into_owned())))
        .collect();
    notices(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}
