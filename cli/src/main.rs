//! `neuron-vfio`: the production binary (the system allocator, nothing counted).

fn main() {
    cli::main()
}
