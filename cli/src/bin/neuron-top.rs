//! `neuron-top`: AWS's tool of that name, over the code of `neuron-vfio top`.

fn main() {
    cli::main_neuron_top()
}
