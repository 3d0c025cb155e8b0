//! The operations and data types of nccom-test's command line, what each costs on the bus, and
//! how each maps onto the simulator's collective engine.

use isa::device_ops::{ctype, dtype};

/// A collective operation named on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    AllReduce,
    AllGather,
    ReduceScatter,
    SendRecv,
    AllToAll,
    AllToAllV,
    Permute,
}

impl Op {
    /// The operation of a command-line name (nccom-test's names and short forms).
    pub fn parse(s: &str) -> Option<Op> {
        Some(match s {
            "all_reduce" | "allr" => Op::AllReduce,
            "all_gather" | "allg" => Op::AllGather,
            "reduce_scatter" | "redsct" => Op::ReduceScatter,
            "sendrecv" => Op::SendRecv,
            "alltoall" => Op::AllToAll,
            "alltoallv" => Op::AllToAllV,
            "permute" => Op::Permute,
            _ => return None,
        })
    }

    /// Every accepted name (for messages).
    pub const NAMES: &'static str =
        "all_reduce|allr, all_gather|allg, reduce_scatter|redsct, sendrecv, alltoall, alltoallv, permute";

    pub fn name(self) -> &'static str {
        match self {
            Op::AllReduce => "all_reduce",
            Op::AllGather => "all_gather",
            Op::ReduceScatter => "reduce_scatter",
            Op::SendRecv => "sendrecv",
            Op::AllToAll => "alltoall",
            Op::AllToAllV => "alltoallv",
            Op::Permute => "permute",
        }
    }

    /// Bus bandwidth over algorithm bandwidth for `n` ranks, as the nccom-test page's "Bus
    /// Bandwidth Calculation" table gives it (and nccl-tests' `doc/PERFORMANCE.md`): all-reduce
    /// `2(n-1)/n`; all-gather, reduce-scatter, all-to-all and all-to-allv `(n-1)/n`;
    /// send/receive and permute 1.
    pub fn busbw_factor(self, n: usize) -> f64 {
        let n = n.max(1) as f64;
        match self {
            Op::AllReduce => 2.0 * (n - 1.0) / n,
            Op::AllGather | Op::ReduceScatter | Op::AllToAll | Op::AllToAllV => (n - 1.0) / n,
            Op::SendRecv | Op::Permute => 1.0,
        }
    }

    /// The collective engine's kind code (`isa::device_ops::ctype`).
    pub fn ctype(self) -> u8 {
        match self {
            Op::AllReduce => ctype::ALL_REDUCE,
            Op::AllGather => ctype::ALL_GATHER,
            Op::ReduceScatter => ctype::REDUCE_SCATTER,
            Op::SendRecv => ctype::SEND_RECV,
            Op::AllToAll => ctype::ALL_TO_ALL,
            Op::Permute => ctype::PERMUTE,
            Op::AllToAllV => ctype::ALL_TO_ALLV,
        }
    }

    /// Whether the operation reduces (its result depends on the element type's arithmetic).
    pub fn reduces(self) -> bool {
        matches!(self, Op::AllReduce | Op::ReduceScatter)
    }
}

/// A data type named by `-d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    Fp16,
    Bf16,
    Fp32,
    Fp8E4m3,
    Fp8E5m2,
}

impl Dtype {
    pub const NAMES: &'static str = "uint8, int8, uint16, int16, uint32, int32, fp16, bf16, fp32, fp8_e4m3, fp8_e5m2";

    pub fn parse(s: &str) -> Option<Dtype> {
        Some(match s {
            "uint8" => Dtype::U8,
            "int8" => Dtype::I8,
            "uint16" => Dtype::U16,
            "int16" => Dtype::I16,
            "uint32" => Dtype::U32,
            "int32" => Dtype::I32,
            "fp16" => Dtype::Fp16,
            "bf16" => Dtype::Bf16,
            "fp32" => Dtype::Fp32,
            "fp8_e4m3" | "fp8" => Dtype::Fp8E4m3,
            "fp8_e5m2" => Dtype::Fp8E5m2,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Dtype::U8 => "uint8",
            Dtype::I8 => "int8",
            Dtype::U16 => "uint16",
            Dtype::I16 => "int16",
            Dtype::U32 => "uint32",
            Dtype::I32 => "int32",
            Dtype::Fp16 => "fp16",
            Dtype::Bf16 => "bf16",
            Dtype::Fp32 => "fp32",
            Dtype::Fp8E4m3 => "fp8_e4m3",
            Dtype::Fp8E5m2 => "fp8_e5m2",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::U8 | Dtype::I8 | Dtype::Fp8E4m3 | Dtype::Fp8E5m2 => 1,
            Dtype::U16 | Dtype::I16 | Dtype::Fp16 | Dtype::Bf16 => 2,
            Dtype::U32 | Dtype::I32 | Dtype::Fp32 => 4,
        }
    }
}

/// How a (operation, data type) pair runs on the simulator's collective engine: the
/// instruction's element code and its host-side type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wire {
    /// The collective DTYPE code of the instruction.
    pub code: u8,
    /// The host-side element type of that code (`reduce`'s reference arithmetic).
    pub dtype: reduce::DType,
}

/// The engine's element type for `d`: every type of `-d` is one of the engine's
/// (`isa::device_ops::dtype`; the integer and fp8 codes modeled).
pub fn wire(d: Dtype) -> Wire {
    let dtype = match d {
        Dtype::Fp32 => reduce::DType::F32,
        Dtype::Bf16 => reduce::DType::Bf16,
        Dtype::Fp16 => reduce::DType::F16,
        Dtype::I32 => reduce::DType::I32,
        Dtype::U32 => reduce::DType::U32,
        Dtype::U16 => reduce::DType::U16,
        Dtype::I16 => reduce::DType::I16,
        Dtype::U8 => reduce::DType::U8,
        Dtype::I8 => reduce::DType::I8,
        Dtype::Fp8E4m3 => reduce::DType::F8E4M3,
        Dtype::Fp8E5m2 => reduce::DType::F8E5M2,
    };
    Wire { code: dtype::code(dtype), dtype }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busbw_factors_follow_nccl_tests() {
        assert_eq!(Op::AllReduce.busbw_factor(2), 1.0);
        assert!((Op::AllReduce.busbw_factor(64) - 126.0 / 64.0).abs() < 1e-12);
        assert!((Op::AllGather.busbw_factor(32) - 31.0 / 32.0).abs() < 1e-12);
        assert!((Op::ReduceScatter.busbw_factor(8) - 7.0 / 8.0).abs() < 1e-12);
        assert_eq!(Op::SendRecv.busbw_factor(8), 1.0);
        assert_eq!(Op::Permute.busbw_factor(8), 1.0);
        assert!((Op::AllToAll.busbw_factor(4) - 0.75).abs() < 1e-12);
        assert!((Op::AllToAllV.busbw_factor(2) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn names_round_trip() {
        for s in ["all_reduce", "all_gather", "reduce_scatter", "sendrecv", "alltoall", "alltoallv", "permute"] {
            assert_eq!(Op::parse(s).map(Op::name), Some(s));
        }
        assert_eq!(Op::parse("allr"), Some(Op::AllReduce));
        assert_eq!(Op::parse("allg"), Some(Op::AllGather));
        assert_eq!(Op::parse("redsct"), Some(Op::ReduceScatter));
        assert_eq!(Op::parse("broadcast"), None);
        for s in Dtype::NAMES.split(", ") {
            assert_eq!(Dtype::parse(s).map(Dtype::name), Some(s));
        }
    }

    #[test]
    fn every_type_is_one_of_the_engines() {
        assert_eq!(wire(Dtype::U32).dtype, reduce::DType::U32);
        assert_eq!(wire(Dtype::I16).dtype, reduce::DType::I16);
        assert_eq!(wire(Dtype::Fp8E4m3).code, dtype::FP8_E4M3);
        assert_eq!(wire(Dtype::Fp8E5m2).dtype, reduce::DType::F8E5M2);
        assert_eq!(wire(Dtype::Fp32).code, isa::slot::coll_dtype::FP32);
        // The names of -d and of the engine's types agree.
        for s in Dtype::NAMES.split(", ") {
            assert_eq!(Dtype::parse(s).map(|d| wire(d).dtype.name()), Some(s));
        }
        // Every operation is a kind of the engine's.
        for s in ["all_reduce", "all_gather", "reduce_scatter", "sendrecv", "alltoall", "alltoallv", "permute"] {
            assert_eq!(Op::parse(s).map(|o| isa::device_ops::ctype::name(o.ctype())), Some(Some(s)));
        }
    }
}
