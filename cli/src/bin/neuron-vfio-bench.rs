//! `neuron-vfio-bench`: the `bench` commands under a counting global allocator, so
//! `bench exec` can report heap allocations per execute. `neuron-vfio bench …` runs this
//! binary when it is installed next to it.

#[global_allocator]
static ALLOC: cli::alloc_count::Counting = cli::alloc_count::Counting;

fn main() {
    cli::main_bench()
}
