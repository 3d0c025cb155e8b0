//! csr-maps
