//! `neuron-monitor`: AWS's tool of that name, over the code of `neuron-vfio monitor`.

fn main() {
    cli::main_neuron_monitor()
}
