//! Regenerates the example NEFFs in `examples/` with the NEFF writer (deterministic output:
//! fixed UUID, zero mtimes). `cargo run -p runtime --example make_examples -- examples`
//!
//! The models are libnrt's built-in test-model shape (input 32 fp32 → DMA → all-reduce →
//! DMA → output, gated by semaphores and an EVENT_SEMAPHORE) with target `*`, so they run on
//! every arch: `allreduce_1nc.neff` (identity) and `allreduce_2nc.neff` (two NCs, sums), both
//! compiled for LNC=1; and `allreduce_lnc2.neff`, one logical NeuronCore of two physical cores
//! (LNC=2, the Trn2/Trn3 default: two graphs, sums, so twice the input).

use std::process::ExitCode;

use neff::builder;

fn main() -> ExitCode {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "examples".into());
    for (name, mut m) in [
        ("allreduce_1nc.neff", builder::allreduce_model(1)),
        ("allreduce_2nc.neff", builder::allreduce_model(2)),
        ("allreduce_lnc2.neff", builder::allreduce_model_lnc(1, 2, "*")),
    ] {
        m.target = "*".into();
        let path = std::path::Path::new(&dir).join(name);
        match m.build().map(|b| std::fs::write(&path, b)) {
            Ok(Ok(())) => println!("wrote {}", path.display()),
            Ok(Err(e)) => {
                eprintln!("{}: {e}", path.display());
                return ExitCode::FAILURE;
            }
            Err(e) => {
                eprintln!("{name}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let input: Vec<u8> = (0..32).flat_map(|i| (i as f32 * 0.25 - 2.0).to_le_bytes()).collect();
    let path = std::path::Path::new(&dir).join("input_32xf32.bin");
    if let Err(e) = std::fs::write(&path, input) {
        eprintln!("{}: {e}", path.display());
        return ExitCode::FAILURE;
    }
    println!("wrote {}", path.display());
    ExitCode::SUCCESS
}
