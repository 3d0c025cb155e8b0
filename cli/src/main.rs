//! `neuron-vfio`: bring-up, debug and run tool for AWS Neuron devices without the kmod.

mod cmd_csr;
mod cmd_neff;
mod report;

use clap::{Parser, Subcommand};

use report::CliError;

#[derive(Parser)]
#[command(
    name = "neuron-vfio",
    version,
    about = "Userspace driver and runtime for AWS Neuron devices (VFIO or the built-in simulator)"
)]
struct Cli {
    /// Machine-readable JSON output (errors too: {"status","code","error"}).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Registers: list, decode (offline); read/write/dump/watch on a device.
    #[command(subcommand)]
    Csr(cmd_csr::CsrCmd),
    /// NEFF model files: inspect, disassemble.
    #[command(subcommand)]
    Neff(cmd_neff::NeffCmd),
    /// Benchmarks (commands that print figures).
    #[command(subcommand)]
    Bench(BenchCmd),
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Parse + verify a NEFF with 1 GiB of weights vs raw inflate of its gzip payload.
    NeffLoad(cmd_neff::BenchNeffLoadArgs),
}

fn main() {
    let cli = Cli::parse();
    let json = cli.json;
    let res: Result<(), CliError> = match cli.cmd {
        Cmd::Csr(c) => cmd_csr::run(c, json),
        Cmd::Neff(c) => cmd_neff::run_neff(c, json),
        Cmd::Bench(BenchCmd::NeffLoad(a)) => cmd_neff::bench_neff_load(a, json),
    };
    if let Err(e) = res {
        e.report(json);
        std::process::exit(e.exit_code());
    }
}
