//! The generated register identities agree with the run-time register list: every register
//! of every placed instance decodes to exactly one identity that leads back to its offset and
//! description, and nothing else decodes.

use std::collections::HashMap;

use csr_maps::{blocks, meta, InstanceId, LeafReg, RegId, ARCHES};

#[test]
fn every_register_has_an_identity_and_back() {
    for arch in ARCHES {
        let regs: HashMap<(u8, u64), &'static meta::RegDef> =
            arch.registers().into_iter().map(|r| ((r.bar, r.offset), r.def)).collect();
        let mut decoded = 0usize;
        for inst in arch.instances {
            let block = meta::block(inst.block).expect("instance of a described block");
            // The layout is the same for every index of an instance: check the first and the last.
            let idx = inst.indices();
            for &i in [idx.first(), idx.last()].into_iter().flatten() {
                let base = inst.base(i).expect("placed");
                for rel in (0..block.size).step_by(4) {
                    let id = RegId::new(inst.id, i as u32, rel).filter(|id| id.def().on_arch(arch.name));
                    let want = regs.get(&(inst.bar, base + rel)).copied();
                    match (id, want) {
                        (Some(id), Some(def)) => {
                            assert!(std::ptr::eq(id.def(), def), "{arch} {}[{i}] +{rel:#x}: {id:?}", inst.name);
                            assert_eq!(id.offset(), rel, "{arch} {id:?}");
                            assert_eq!((id.instance(), id.index()), (inst.id, i as u32));
                            decoded += 1;
                        }
                        (None, None) => {}
                        (id, want) => panic!("{arch} {}[{i}] +{rel:#x}: {id:?} vs {want:?}", inst.name),
                    }
                }
            }
        }
        assert!(decoded > 1000, "{arch}: only {decoded} registers decoded");
    }
}

#[test]
fn identities_name_registers_and_indices() {
    use blocks::{iofic_m2s_err as m2s_err, tpb_sem, udma, udma_gen, udma_m2s, udma_m2s_q as mq};
    let q3_tail_inc = udma::RegId::M2s(udma_m2s::RegId::Q(3, mq::RegId::TailInc));
    assert_eq!(udma::RegId::at(q3_tail_inc.offset()), Some(q3_tail_inc));
    assert_eq!(q3_tail_inc.def().name, "tail_inc");
    let sem = RegId::TpbSem(1, tpb_sem::RegId::SemInc(5));
    assert_eq!(RegId::new(InstanceId::TpbSem, 1, sem.offset()), Some(sem));
    assert_eq!((sem.elem(), sem.def().name), (5, "sem_inc"));
    assert_eq!(tpb_sem::RegId::at(tpb_sem::SEM_INC_OFFSET + 2), None, "misaligned");
    let cause = udma::RegId::Gen(udma_gen::RegId::SecA(m2s_err::RegId::Cause));
    assert_eq!(cause.leaf(), LeafReg::IoficM2sErr(m2s_err::RegId::Cause));
    assert_eq!(udma::RegId::at(udma::SIZE), None);
}
