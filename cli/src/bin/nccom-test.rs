//! `nccom-test`: the Neuron SDK's collectives benchmark (crate `nccom`; docs/collectives.md).

fn main() {
    std::process::exit(nccom::main(std::env::args_os().skip(1).collect(), &[]))
}
