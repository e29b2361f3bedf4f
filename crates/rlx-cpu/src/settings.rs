//! The CPU backend's knobs: each `RLX_CPU_*` variable declared once here; the kernels read
//! them through these (once per process, where they pick an instruction set). [`KNOBS`] is
//! what `rlx devices --settings` lists for `cpu`.

use rlx_driver::Knob;

/// Worker threads of the global pool.
pub const THREADS: Knob = Knob {
    name: "RLX_CPU_THREADS",
    default: "",
    help: "worker threads of the CPU pool (else RAYON_NUM_THREADS, else every core)",
};
/// Microseconds pool workers spin between regions.
pub const SPIN_US: Knob = Knob {
    name: "RLX_CPU_SPIN_US",
    default: "1000",
    help: "microseconds pool workers spin between parallel regions before sleeping",
};
/// The packed AVX2/AVX-512 GEMM.
pub const PACKED_GEMM: Knob = Knob {
    name: "RLX_CPU_PACKED_GEMM",
    default: "1",
    help: "RLX's packed GEMM micro-kernel where AVX2+FMA exist (0: the gemm crate)",
};
/// AVX-512 kernels.
pub const AVX512: Knob = Knob {
    name: "RLX_CPU_AVX512",
    default: "1",
    help: "AVX-512 GEMM and integer kernels where the CPU has them (0: AVX2)",
};
/// AMX-BF16 tiles.
pub const AMX: Knob = Knob {
    name: "RLX_CPU_AMX",
    default: "1",
    help: "AMX-BF16 tile GEMMs for bf16 products where the CPU and OS allow them",
};
/// Copies elided into attention's strided reads.
pub const ELIDE: Knob = Knob {
    name: "RLX_CPU_ELIDE",
    default: "1",
    help: "f32 attention reads and writes head-split views in place of copies",
};

/// Every CPU knob, in the order `rlx devices --settings` lists them.
pub const KNOBS: &[Knob] = &[THREADS, SPIN_US, PACKED_GEMM, AVX512, AMX, ELIDE];
