//! csr-maps: the Neuron hardware interface as data.
#![forbid(unsafe_code)]

pub mod formats;
