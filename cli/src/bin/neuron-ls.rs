//! `neuron-ls`: AWS's tool of that name, over the code of `neuron-vfio ls`.

fn main() {
    cli::main_neuron_ls()
}
