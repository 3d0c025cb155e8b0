//! Environment parsing and timestamp rescale.

use runtime::env::*;
use runtime::timestamp::*;
use std::collections::HashMap;
use std::time::Duration;

#[test]
fn exec_timeout() {
    assert_eq!(parse_exec_timeout("30").unwrap(), 30);
    assert_eq!(parse_exec_timeout(" 0 ").unwrap(), 0);
    assert_eq!(parse_exec_timeout("2147483647").unwrap(), i32::MAX as u32);
    for bad in ["", "-1", "2147483648", "1.5", "10s", "abc", "+5"] {
        assert!(matches!(parse_exec_timeout(bad), Err(EnvError::BadTimeout { .. })), "{bad:?}");
    }
    assert_eq!(core_timeout(7), Duration::from_millis(7000));
}

#[test]
fn visible_cores() {
    assert_eq!(parse_visible_cores("0-3,4").unwrap(), vec![0, 1, 2, 3, 4]);
    // libnrt refuses a list with holes.
    assert!(matches!(parse_visible_cores("0-3,5"), Err(EnvError::BadCores { .. })));
    assert!(matches!(parse_visible_cores("1,3"), Err(EnvError::BadCores { .. })));
    assert_eq!(parse_visible_cores("7").unwrap(), vec![7]);
    assert_eq!(parse_visible_cores(" 3 , 1-2 ").unwrap(), vec![1, 2, 3]);
    assert_eq!(parse_visible_cores("2-2,1-3").unwrap(), vec![1, 2, 3]);
    for bad in ["", ",", "1,", "3-1", "a", "1-", "-1", "1-2-3", "0x1", "1 2", "0-99999"] {
        assert!(matches!(parse_visible_cores(bad), Err(EnvError::BadCores { .. })), "{bad:?}");
    }
}

#[test]
fn log_level() {
    use tracing::Level;
    for (s, l) in [
        ("ERROR", Level::ERROR),
        ("warning", Level::WARN),
        ("WARN", Level::WARN),
        ("Info", Level::INFO),
        ("DEBUG", Level::DEBUG),
        ("trace", Level::TRACE),
    ] {
        assert_eq!(parse_log_level(s).unwrap(), l);
    }
    assert!(matches!(parse_log_level("verbose"), Err(EnvError::BadLogLevel { .. })));
    assert!(parse_log_level("").is_err());
}

#[test]
fn rt_env_from_lookup() {
    let env = RtEnv::from_lookup(|_| None).unwrap();
    assert_eq!(env, RtEnv::default());
    assert_eq!(env.exec_timeout_secs, DEFAULT_EXEC_TIMEOUT_SECS);
    assert_eq!(env.core_timeout(), Duration::from_secs(600));
    assert_eq!(env.log_level, tracing::Level::ERROR);
    let vars: HashMap<&str, &str> =
        [(EXEC_TIMEOUT_VAR, "5"), (VISIBLE_CORES_VAR, "0-1"), (LOG_LEVEL_VAR, "DEBUG")].into_iter().collect();
    let env = RtEnv::from_lookup(|k| vars.get(k).map(|v| v.to_string())).unwrap();
    assert_eq!(env.exec_timeout_secs, 5);
    assert_eq!(env.visible_cores, Some(vec![0, 1]));
    assert_eq!(env.log_level, tracing::Level::DEBUG);
    let e = RtEnv::from_lookup(|k| (k == VISIBLE_CORES_VAR).then(|| "1-0".to_string())).unwrap_err();
    assert!(matches!(e, runtime::env::EnvError::BadCores { var, .. } if var == VISIBLE_CORES_VAR), "{e:?}");
    // from_env reads the real environment; the test process does not set these knobs unless the
    // caller did, in which case the values must parse.
    let _ = RtEnv::from_env();
}

/// A launcher's local rank picks the one visible core when NEURON_RT_VISIBLE_CORES is unset
/// (and the job has more than one process); the variable itself always wins.
#[test]
fn visible_cores_from_a_launchers_local_rank() {
    let env = |pairs: &[(&str, &str)]| {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        RtEnv::from_lookup(|k| m.get(k).cloned()).unwrap().visible_cores
    };
    assert_eq!(env(&[("LOCAL_RANK", "3"), ("WORLD_SIZE", "8")]), Some(vec![3]));
    assert_eq!(env(&[("SLURM_LOCALID", "1"), ("SLURM_NTASKS", "4")]), Some(vec![1]));
    assert_eq!(env(&[("OMPI_COMM_WORLD_LOCAL_RANK", "2"), ("OMPI_COMM_WORLD_SIZE", "4")]), Some(vec![2]));
    assert_eq!(env(&[("LOCAL_RANK", "0"), ("WORLD_SIZE", "1")]), None);
    assert_eq!(env(&[("LOCAL_RANK", "2")]), None);
    assert_eq!(env(&[(VISIBLE_CORES_VAR, "0-1"), ("LOCAL_RANK", "1"), ("WORLD_SIZE", "2")]), Some(vec![0, 1]));
}

#[test]
fn rescale_delta_by_increment_ratio() {
    let c = EngineClock { init_ts: 1_000, expected_inc: 3, actual_inc: 2 };
    assert_eq!(rescale(3_000, &c).unwrap(), 3000.0);
    assert_eq!(rescale_ns(2_001_000, &c).unwrap(), 3000);
    assert_eq!(rescale(1_000, &c).unwrap(), 0.0);
    assert_eq!(rescale(999, &c).unwrap_err(), TimestampError::BeforeInit { ts: 999, init: 1000 });
    let z = EngineClock { actual_inc: 0, ..c };
    assert_eq!(rescale(2_000, &z).unwrap_err(), TimestampError::ZeroIncrement);
    assert_eq!(rescale_ns(5_000_000, &EngineClock::nominal(0)).unwrap(), 5_000);
}

/// A clock at its nominal rate (expected = actual increment) skips the division: the result
/// is bit for bit the formula's, for deltas beyond f64's exact integers too.
#[test]
fn rescale_at_the_nominal_rate_is_the_formula_bit_for_bit() {
    for inc in [1u64, 7, 1_000_000_007] {
        let c = EngineClock { init_ts: 5, expected_inc: inc, actual_inc: inc };
        for delta in [0u64, 1, 999, 1_000, 123_456_789, (1 << 53) + 1, (1 << 60) + 12_345, u64::MAX - 5] {
            let formula = inc as f64 / inc as f64 * delta as f64;
            let got = rescale(delta + 5, &c).unwrap();
            assert_eq!(got.to_bits(), formula.to_bits(), "inc {inc}, delta {delta}");
            assert_eq!(rescale_ns(delta + 5, &c).unwrap(), (formula / 1000.0) as u64);
        }
    }
}

#[test]
fn engine_selector_and_sync_point() {
    assert_eq!([0x06, 0x0A, 0x0E, 0x12, 0x16].map(engine_for_tag), [Some(0), Some(1), Some(2), Some(3), Some(4)]);
    for t in [0x04u8, 0x05, 0x07, 0x1F, 0] {
        assert_eq!(engine_for_tag(t), None);
    }
    let sp = SyncPoint { device_ns: 1_000, cpu_ns: 50_000 };
    assert_eq!(sp.to_cpu_ns(1_500), 50_500);
    assert_eq!(sp.to_cpu_ns(400), 49_400);
    assert_eq!(SyncPoint { device_ns: 100, cpu_ns: 10 }.to_cpu_ns(0), 0);
    let mut clocks = [EngineClock::nominal(0); 5];
    clocks[3] = EngineClock { init_ts: 10_000, expected_inc: 2, actual_inc: 1 };
    let ts = TimestampSync { clocks, sync: sp };
    // DVE: (11_000 − 10_000) × 2 = 2000 ps = 2 ns → 50_000 + (2 − 1000)
    assert_eq!(ts.to_cpu_ns(3, 11_000).unwrap(), 49_002);
    assert_eq!(ts.to_cpu_ns_by_tag(0x12, 11_000).unwrap(), 49_002);
    assert_eq!(ts.to_cpu_ns(0, 2_000_000).unwrap(), 51_000);
    assert_eq!(ts.to_cpu_ns(5, 0).unwrap_err(), TimestampError::NoEngine(5));
    assert!(ts.to_cpu_ns_by_tag(0x04, 0).is_err());
}

#[test]
fn inspect_knobs_parse_with_libnrts_defaults() {
    use runtime::env::{InspectEnv, DEFAULT_INSPECT_MAX_EVENTS_PER_NC, INSPECT_FILTER_NC_VAR};
    let none = InspectEnv::from_lookup(|_| None).unwrap();
    // NEURON_RT_INSPECT_DEVICE_PROFILE is off by default (the SDK's profiler variables page).
    assert!(!none.enable && none.system_profile && !none.device_profile && !none.on_fail);
    for (raw, on) in [("1", true), ("model", true), ("session", true), ("0", false), ("", false)] {
        let e =
            InspectEnv::from_lookup(|k| (k == "NEURON_RT_INSPECT_DEVICE_PROFILE").then(|| raw.to_string())).unwrap();
        assert_eq!(e.device_profile, on, "NEURON_RT_INSPECT_DEVICE_PROFILE={raw:?}");
    }
    assert_eq!(none.output_dir, std::path::PathBuf::from("./output"));
    assert_eq!((none.filter_type, none.filter_nc), (None, None));
    assert_eq!(none.max_events_per_nc, DEFAULT_INSPECT_MAX_EVENTS_PER_NC);
    let vars = [
        ("NEURON_RT_INSPECT_ENABLE", "1"),
        ("NEURON_RT_INSPECT_OUTPUT_DIR", "/tmp/x"),
        ("NEURON_RT_INSPECT_EVENT_FILTER_TYPE", "hardware,^hw_notify"),
        ("NEURON_RT_INSPECT_EVENT_FILTER_NC", "0,2-3"),
        ("NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC", "64"),
        ("NEURON_RT_INSPECT_DEVICE_PROFILE", "0"),
    ];
    let get = |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string());
    let e = InspectEnv::from_lookup(get).unwrap();
    assert!(e.enable && !e.device_profile);
    assert_eq!(e.output_dir, std::path::PathBuf::from("/tmp/x"));
    assert_eq!(e.filter_type.as_deref(), Some("hardware,^hw_notify"));
    assert_eq!(e.filter_nc, Some(vec![0, 2, 3]));
    assert_eq!(e.max_events_per_nc, 64);
    let bad = InspectEnv::from_lookup(|k| (k == INSPECT_FILTER_NC_VAR).then(|| "3-1".to_string())).unwrap_err();
    assert!(matches!(bad, EnvError::BadCores { var, .. } if var == INSPECT_FILTER_NC_VAR), "{bad:?}");
    let bad = InspectEnv::from_lookup(|k| k.ends_with("MAX_EVENTS_PER_NC").then(|| "many".to_string())).unwrap_err();
    assert!(matches!(bad, EnvError::BadCount { .. }), "{bad:?}");
}
