//! `neuron-vfio`: bring-up, debug and run tool for AWS Neuron devices without the kmod.

mod cmd_csr;
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
}

fn main() {
    let cli = Cli::parse();
    let json = cli.json;
    let res: Result<(), CliError> = match cli.cmd {
        Cmd::Csr(c) => cmd_csr::run(c, json),
    };
    if let Err(e) = res {
        e.print(json);
        std::process::exit(e.exit_code());
    }
}
