//! Writes one of the builder's test models as a `.neff` file.
//!
//! `cargo run -p neff --example write_model -- OUT.neff [1nc|2nc|weights] [--pkg1]`

use std::process::ExitCode;

use neff::builder::{self, WriteOptions};
use neff::WeightFormat;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(out) = args.first() else {
        eprintln!("usage: write_model OUT.neff [1nc|2nc|weights] [--pkg1]");
        return ExitCode::FAILURE;
    };
    let model = match args.get(1).map(String::as_str) {
        Some("2nc") => builder::two_nc_allreduce(),
        Some("weights") => {
            builder::weights_model((0..1024u32).flat_map(|i| (i as f32).to_le_bytes()).collect(), WeightFormat::Npy)
        }
        _ => builder::single_nc_allreduce(),
    };
    let pkg_version = if args.iter().any(|a| a == "--pkg1") { 1 } else { 2 };
    let opts = WriteOptions { pkg_version, ..WriteOptions::default() };
    let res = std::fs::File::create(out).map_err(builder::BuildError::Io).and_then(|f| model.write_to(f, &opts));
    match res {
        Ok(h) => {
            println!("wrote {out}: pkg {} data_size {}", h.pkg_version, h.data_size);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
