//! Writer → reader round trip on random model descriptions: the parsed model is the described one.

use neff::builder::{EngineDesc, GraphDesc, ModelDesc, QueueDesc, VarDesc, WeightDesc, WriteOptions};
use neff::*;
use proptest::prelude::*;

fn var_kind() -> impl Strategy<Value = VarKind> {
    prop_oneof![Just(VarKind::Input), Just(VarKind::TmpBuf), Just(VarKind::StateBuffer), Just(VarKind::File)]
}

fn model() -> impl Strategy<Value = (ModelDesc, WriteOptions)> {
    let vars = proptest::collection::vec((var_kind(), 1u64..512, any::<bool>()), 0..6);
    let slots = proptest::collection::vec(proptest::collection::vec(any::<u8>(), 64), 0..5);
    let queues = proptest::collection::vec((0usize..3, 0usize..4, proptest::option::of(0u32..32)), 0..4);
    (vars, slots, queues, any::<bool>(), any::<bool>(), any::<bool>(), 0usize..4).prop_map(
        |(vars, slots, queues, array, owner_role, pkg1, nblocks)| {
            let mut g = GraphDesc::new("sg00");
            g.vars.push(VarDesc::f32("out", VarKind::Output, 8));
            for (i, (kind, size, npy)) in vars.into_iter().enumerate() {
                let mut v = VarDesc::new(&format!("v{i}"), kind, size);
                if kind == VarKind::File {
                    let format = if npy { WeightFormat::Npy } else { WeightFormat::Raw };
                    v.dtype = Some("uint8".into());
                    v.shape = vec![size];
                    v.weights = Some(WeightDesc { format, data: (0..size).map(|b| b as u8).collect() });
                }
                g.vars.push(v);
            }
            let roles = [QueueRole::In, QueueRole::Out, QueueRole::Data];
            for (i, (r, o, sem)) in queues.into_iter().enumerate() {
                g.queues.push(QueueDesc {
                    name: format!("q{i}"),
                    role: roles[r],
                    owner: Engine::ALL[o],
                    semaphore: sem,
                });
            }
            let mut pe = EngineDesc::new(Engine::Pe);
            for mut s in slots {
                s[1] = 0x10;
                if s[0] == 0xC1 || s[0] == 0xC8 {
                    s[0] = 0x68;
                }
                pe.code.extend_from_slice(&s);
            }
            let mut pool = EngineDesc::new(Engine::Pool);
            for (id, q) in g.queues.iter().enumerate().take(nblocks) {
                pool.dma_blocks.push(DmaBlock {
                    id: id as u32,
                    queue: q.name.clone(),
                    instance_name: None,
                    comment: None,
                    priority_class: None,
                    descs: vec![DmaDesc {
                        op: DmaOp::Add,
                        from: "out".into(),
                        to: "out".into(),
                        from_sizes: vec![8],
                        from_steps: vec![1],
                        to_sizes: vec![2, 4],
                        to_steps: vec![4, -1],
                    }],
                });
            }
            g.engines = vec![pe, pool];
            let mut m = ModelDesc::new("rt");
            m.graphs = vec![g];
            m.def_shape = if array { DefShape::Array } else { DefShape::Object };
            m.queue_convention = if owner_role { QueueConvention::OwnerIsRole } else { QueueConvention::TypeIsRole };
            let w = WriteOptions { pkg_version: if pkg1 { 1 } else { 2 }, level: 1, ..WriteOptions::default() };
            (m, w)
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn write_then_read_gives_the_model((m, w) in model()) {
        let bytes = m.to_bytes(&w).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let n = Neff::parse(&bytes, &ReadOptions::default()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(n.header.pkg_version, w.pkg_version);
        let (gd, g) = (&m.graphs[0], &n.graphs[0]);
        prop_assert_eq!(g.var_shape, m.def_shape);
        prop_assert_eq!(g.vars.len(), gd.vars.len());
        for (vd, v) in gd.vars.iter().zip(&g.vars) {
            prop_assert_eq!(&v.name, &vd.name);
            prop_assert_eq!(v.kind, vd.kind);
            prop_assert_eq!(v.size, Some(vd.size));
            prop_assert_eq!(&v.shape, &vd.shape);
            prop_assert_eq!(v.data.as_deref(), vd.weights.as_ref().map(|w| &w.data[..]));
        }
        prop_assert_eq!(g.dma_queues.len(), gd.queues.len());
        for (qd, q) in gd.queues.iter().zip(&g.dma_queues) {
            prop_assert_eq!((&q.name, q.role, q.owner, q.semaphore), (&qd.name, qd.role, Some(qd.owner), qd.semaphore));
        }
        for ed in &gd.engines {
            let e = g.engine(ed.kind).ok_or_else(|| TestCaseError::fail("engine"))?;
            prop_assert_eq!(&e.dma_blocks, &ed.dma_blocks);
            prop_assert_eq!(e.code.as_deref().unwrap_or(&[]), &ed.code[..]);
            let re: Vec<u8> = match &e.program {
                Program::Tpb(s) => s.iter().flat_map(|i| i.encode()).collect(),
                Program::Sp(s) => s.iter().flat_map(|i| i.encode()).collect(),
            };
            prop_assert_eq!(&re, &ed.code);
        }
        prop_assert_eq!(&g.replica_groups, &gd.replica_groups);
    }
}
