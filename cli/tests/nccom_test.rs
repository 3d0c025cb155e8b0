//! `nccom-test` on a shared simulated cayman (docs/collectives.md).
