//! `neuron-vfio`: minimal wiring of the neff commands (the full app lives on main).

mod cmd_neff;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "neuron-vfio", about = "Userspace driver and runtime for AWS Neuron accelerators")]
struct Cli {
    /// Machine-readable output (errors as {"status", "code", "error"}).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// NEFF model files.
    #[command(subcommand)]
    Neff(cmd_neff::NeffCmd),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCmd),
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Parse + verify a NEFF with 1 GiB of weights vs raw inflate of its gzip payload.
    NeffLoad(cmd_neff::BenchNeffLoadArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Neff(c) => cmd_neff::run_neff(c, cli.json),
        Cmd::Bench(BenchCmd::NeffLoad(a)) => cmd_neff::bench_neff_load(a, cli.json),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            e.report(cli.json);
            ExitCode::FAILURE
        }
    }
}
