use super::*;

#[test]
fn sim_nc_count_without_opening() {
    let s = Spec::Sim { arch: &csr_maps::SUNDA, n: 2 };
    assert_eq!(
        arch_and_count(&s).ok().map(|(a, n)| (a.name, n)),
        Some(("sunda", csr_maps::SUNDA.counts.ncs as usize * 2))
    );
}

#[test]
fn bad_specs_are_nrt_invalid_and_name_the_variable() {
    let e = Spec::parse(Some("sim:inf1")).map_err(DeviceEnvError::select).err();
    assert_eq!(e.as_ref().map(DeviceEnvError::status), Some(NrtStatus::Invalid));
    assert!(e.is_some_and(|e| e.to_string().starts_with("NEURON_VFIO_DEVICE: ")));
    // A device that exists but cannot be used is not the variable's fault.
    let e = DeviceEnvError::select(SelectError::BackendMissing(crate::MissingBackend::Any));
    assert!(matches!(e, DeviceEnvError::Select { var: None, .. }), "{e:?}");
}

#[test]
fn reserves_as_libnrt() {
    assert_eq!(reserve(Some(&[2, 3]), Some(1)), Reserve::Cores(vec![2, 3]));
    assert_eq!(reserve(None, Some(2)), Reserve::Count(2));
    assert_eq!(reserve(None, None), Reserve::All);
}

#[test]
fn a_refused_lease_gives_libnrts_line_and_the_holder() {
    let refused = |owner_pid| {
        SelectError::Broker(Box::new(broker_client::ClientError::Refused {
            code: broker_client::protocol::ErrorCode::CoresUnavailable,
            owner_pid,
            message: "NeuronCore(s) not available - Requested:nc1-nc1 Available:0".into(),
        }))
    };
    let lines = refusal_lines(&refused(42));
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0], "NeuronCore(s) not available - Requested:nc1-nc1 Available:0");
    assert!(lines[1].contains("held by process 42"), "{lines:?}");
    assert_eq!(refusal_lines(&refused(0)).len(), 1);
    assert!(refusal_lines(&SelectError::SharedCores("x".into())).is_empty());
}

#[cfg(not(feature = "sim"))]
#[test]
fn without_the_simulator_a_sim_device_is_nrt_invalid() {
    let e = Spec::parse(Some("sim")).map_err(DeviceEnvError::select).err();
    assert_eq!(e.as_ref().map(DeviceEnvError::status), Some(NrtStatus::Invalid));
    assert!(matches!(e, Some(DeviceEnvError::Select { source: SelectError::NoSimulator(_), .. })), "{e:?}");
}

/// Every variant of the device environment's error with its status (exhaustive: a new
/// variant does not compile until listed).
#[test]
fn every_device_env_error_has_its_status() {
    fn variant(e: &DeviceEnvError) -> usize {
        match e {
            DeviceEnvError::Select { .. } => 0,
            DeviceEnvError::NotUnicode { .. } => 1,
            DeviceEnvError::SimTiming { .. } => 2,
            #[cfg(feature = "sim")]
            DeviceEnvError::SimFault(_) => 3,
            DeviceEnvError::NoSimulator { .. } => 4,
            DeviceEnvError::FaultNc { .. } => 5,
            DeviceEnvError::NoSimulatedNc { .. } => 6,
        }
    }
    let missing = SelectError::BackendMissing(crate::MissingBackend::Any);
    #[cfg_attr(not(feature = "sim"), allow(unused_mut))]
    let mut table = vec![
        (DeviceEnvError::Select { var: None, source: missing }, NrtStatus::Failure),
        (
            DeviceEnvError::Select {
                var: Some(DEVICE_VAR),
                source: SelectError::UnknownBackend { requested: "x".into() },
            },
            NrtStatus::Invalid,
        ),
        (DeviceEnvError::NotUnicode { var: DEVICE_VAR }, NrtStatus::Invalid),
        (DeviceEnvError::SimTiming { value: "fast".into() }, NrtStatus::Invalid),
        (DeviceEnvError::NoSimulator { value: "x".into() }, NrtStatus::Invalid),
        (DeviceEnvError::FaultNc { source: "no logical NC 9".into() }, NrtStatus::Invalid),
        (DeviceEnvError::NoSimulatedNc { nc: 3 }, NrtStatus::Invalid),
    ];
    #[cfg(feature = "sim")]
    table.push((DeviceEnvError::SimFault("bogus".parse::<sim::FaultSpec>().unwrap_err()), NrtStatus::Invalid));
    let mut seen = std::collections::BTreeSet::new();
    for (e, want) in table {
        assert_eq!(e.status(), want, "{e:?}");
        assert_eq!(Status::status(&e), want, "{e:?}");
        seen.insert(variant(&e));
    }
    let all: std::collections::BTreeSet<usize> = (0..7).filter(|&i| cfg!(feature = "sim") || i != 3).collect();
    assert_eq!(seen, all);
}

#[cfg(feature = "sim")]
#[test]
fn faults_are_armed_on_the_device_serving_the_nc() {
    let opened = crate::open_platforms(&Spec::Sim { arch: &csr_maps::SUNDA, n: 2 }, SimTiming::Inline).unwrap();
    let per = csr_maps::SUNDA.counts.ncs as usize;
    let fault: Fault = "hbm-ue@nc0".parse().unwrap();
    // Logical NC 0 is global NC `per` (the second device's first NC).
    let ok = arm(&opened, vec![fault.clone()], |_| Ok::<_, std::io::Error>(per));
    assert!(ok.is_ok(), "{ok:?}");
    let e = arm(&opened, vec![fault.clone()], |_| Ok::<_, std::io::Error>(per * 2)).unwrap_err();
    assert!(matches!(e, DeviceEnvError::NoSimulatedNc { nc: 0 }), "{e:?}");
    let e = arm(&opened, vec![fault], |_| Err(std::io::Error::other("no logical NC 0"))).unwrap_err();
    assert_eq!(e.to_string(), "NEURON_VFIO_SIM_FAULT: no logical NC 0");
}
