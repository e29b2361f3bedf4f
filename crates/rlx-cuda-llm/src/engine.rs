//! [`CudaLlm`]: a Llama-family model resident on the GPU, with a paged KV cache shared by
//! many sequences. A forward step runs `m` token rows at once — prompt rows of one or
//! several new sequences (prefill) or one new token of each of `m` sequences (batched
//! decode) — through
//! hand-written kernels (`kernels.cu`): embedding lookup, RMSNorm, matrix-vector products
//! that dequantize the stored weights on the fly (q/k/v with RoPE and the KV-cache write in
//! their epilogue, the residual adds in theirs, SwiGLU — GeGLU for Gemma — in the down
//! projection's input),
//! split attention over the paged cache, and sampling (repetition penalty, temperature,
//! top-k, top-p, min-p and a seeded draw, all on the device). Tokens, positions, sequence
//! slots and sampling settings of the rows live in device memory, so a decode step of `m`
//! rows is captured once as a CUDA graph and replayed; only the token ids come back.

use crate::kv::{BlockTable, BLOCK_ROWS};
use crate::weights::{upload, Matrix, Weights};
use crate::LlmError;
use rlx_cuda::blas::{Blas, GemmPointers, PreparedGemm};
use rlx_cuda::codegen::ArgRef;
use rlx_cuda::codegen::Launch;
use rlx_cuda::device::{CudaDevice, Event, Function, Graph, Module};
use rlx_cuda::gemm::{Activation, GemmSpec, Operand};
use rlx_cuda::memory::{DeviceBuffer, DeviceMemory, Pinned};
use rlx_gguf::QuantFormat;
use rlx_ir::DType;
use rlx_models::llama::{FfnAct, GenerationStats, Llama, Sampling};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// The CUDA source of the kernels, without the per-format products (see [`kernel_source`]).
pub const KERNELS: &str = include_str!("kernels.cu");

/// Positions one attention block takes (`ATT_SPLIT` in the kernels).
const SPLIT_LEN: usize = 128;

/// The kernel-name suffix of a weight format.
pub fn format_suffix(f: QuantFormat) -> &'static str {
    f.name()
}

fn format_macro(f: QuantFormat) -> &'static str {
    match f {
        QuantFormat::F32 => "F_F32",
        QuantFormat::F16 => "F_F16",
        QuantFormat::BF16 => "F_BF16",
        QuantFormat::Q8_0 => "F_Q8_0",
        QuantFormat::Q4_0 => "F_Q4_0",
        QuantFormat::Q4_1 => "F_Q4_1",
        QuantFormat::Q4K => "F_Q4K",
        QuantFormat::Q5K => "F_Q5K",
        QuantFormat::Q6K => "F_Q6K",
        QuantFormat::Q5_0 => "F_Q5_0",
        QuantFormat::Q5_1 => "F_Q5_1",
        QuantFormat::Q2K => "F_Q2K",
        QuantFormat::Q3K => "F_Q3K",
    }
}

/// The source of the kernels for weights stored in `formats`: the shared kernels plus the
/// matrix-vector products and embedding lookups of those formats only (each format costs
/// NVRTC seconds; the result is cached on disk).
pub fn kernel_source(formats: &[QuantFormat]) -> String {
    let mut s = String::from(KERNELS);
    let mut done = Vec::new();
    for &f in formats {
        if done.contains(&f) {
            continue;
        }
        done.push(f);
        let (sfx, mac) = (format_suffix(f), format_macro(f));
        s.push_str(&format!(
            "GEMV_FORMAT({sfx}, {mac})\nEMBED_KERNEL({sfx}, {mac})\n"
        ));
        if int_dot(f) {
            s.push_str(&format!("GEMVQ_KERNEL({sfx}, {mac})\n"));
        }
    }
    s
}

/// The kernel names of [`kernel_source`] for `formats`.
pub fn kernel_names(formats: &[QuantFormat]) -> Vec<String> {
    let mut names = Vec::new();
    for f in QuantFormat::ALL.into_iter().filter(|f| formats.contains(f)) {
        for mr in [1, 4, 8] {
            names.push(format!("gemv{mr}_{}", format_suffix(f)));
        }
        names.push(format!("gemvs_{}", format_suffix(f)));
        names.push(format!("dequant_{}", format_suffix(f)));
        names.push(format!("embed_{}", format_suffix(f)));
        if int_dot(f) {
            names.push(format!("gemvq_{}", format_suffix(f)));
        }
    }
    for n in [
        "attention_f32",
        "attention_f16",
        "sample_rows",
        "row_scales",
        "quant_x",
        "gemm_input",
        "gemm_output",
    ] {
        names.push(n.to_string());
    }
    names
}

/// Settings of a [`CudaLlm`].
#[derive(Debug, Clone, PartialEq)]
pub struct LlmOptions {
    /// sequences that may decode together (sequence slots)
    pub max_sequences: usize,
    /// rows per sequence (prompt + generated); None: the model's trained context
    pub context: Option<usize>,
    /// KV-cache rows shared by all sequences; None: `context` rows for each of
    /// `max_sequences` sequences, or what fits in 90% of the free device memory
    pub kv_rows: Option<usize>,
    /// prompt rows per prefill step (larger steps read the weights fewer times per token)
    pub prefill_chunk: usize,
    /// replay decode steps from captured CUDA graphs (off: launch every kernel each step)
    pub graphs: bool,
    /// products of at least this many rows run as tensor-core GEMMs (cuBLASLt) on f16,
    /// bf16 and f32 weights; fewer rows, other formats or 0: the matrix-vector kernels
    pub gemm_rows: usize,
    /// single-row products (decode of one sequence) over at least this many columns split
    /// the columns over a block's warps (`gemvs_*`); 0: never. The default, 1, splits every
    /// one (`examples/decode_split.rs` compares the settings)
    pub split_k: usize,
    /// single-row products over block-format weights quantize their input row to int8 (a
    /// scale per 32 values) and multiply the weights' integers with `dp4a` (`gemvq_*`), as
    /// llama.cpp does (the default; logits within ~3% rel L2 of the f32 product on random
    /// models); off: f32 activations, the weights dequantized in registers
    pub int8_activations: bool,
    /// products of `gemm_rows` or more rows over block-format weights expand the matrix to
    /// f16 (`dequant_*`) and run cuBLASLt (the default); off: the matrix-vector kernels, 8
    /// rows per weight read
    pub expand_blocks: bool,
    /// the most bytes of f16 such a matrix expands to at once: larger ones expand and
    /// multiply a chunk of output rows at a time, so the scratch stays small next to the
    /// weights (an 8B model's head would take 1 GB whole); default 64 MiB
    pub expand_bytes: usize,
    /// time every kernel launch between two events (decode steps then run without graphs,
    /// and launches no longer overlap): a diagnosis, read with [`CudaLlm::kernel_profile`]
    pub profile_kernels: bool,
}

/// Time spent in one kernel over the launches since the last [`CudaLlm::kernel_profile`].
#[derive(Debug, Clone, PartialEq)]
pub struct KernelTime {
    /// the kernel's name
    pub name: String,
    /// launches
    pub calls: usize,
    /// milliseconds in all
    pub ms: f64,
}

impl Default for LlmOptions {
    fn default() -> Self {
        LlmOptions {
            max_sequences: 32,
            context: None,
            kv_rows: None,
            prefill_chunk: 512,
            graphs: true,
            gemm_rows: 9,
            split_k: 1,
            int8_activations: true,
            expand_blocks: true,
            expand_bytes: 64 << 20,
            profile_kernels: false,
        }
    }
}

/// A row of a step: its token, position, sequence slot and the sequence's sampling.
type Row = (u32, usize, usize, Sampling);

/// A sequence in the engine (the slot of its KV blocks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeqId(pub usize);

struct Seq {
    /// rows in the cache (the next position)
    pos: usize,
    /// the last token (the next step's input)
    last: u32,
    sampling: Sampling,
}

/// Model sizes the kernels need.
#[derive(Debug, Clone, Copy)]
struct Shape {
    layers: usize,
    hidden: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    ffn: usize,
    vocab: usize,
    eps: f64,
    /// factor on the token embeddings (Gemma: `sqrt(hidden)`)
    embed_scale: f32,
    /// RoPE's attention factor (Phi-3 longrope; 1 for the others)
    rope_attn_scale: f64,
    /// the down projection's input form: `IN_SWIGLU` (1) or `IN_GEGLU` (2, Gemma)
    gated: u64,
}

/// Byte offsets of the per-row arrays inside the rows buffer (device and pinned alike).
#[derive(Debug, Clone, Copy)]
struct RowsLayout {
    tokens: usize,
    pos: usize,
    slot: usize,
    temps: usize,
    seeds: usize,
    top_k: usize,
    top_p: usize,
    min_p: usize,
    penalty: usize,
    bytes: usize,
}

impl RowsLayout {
    fn new(cap: usize) -> RowsLayout {
        let a = |b: usize| b.div_ceil(256) * 256;
        let tokens = 0;
        let pos = a(tokens + cap * 4);
        let slot = a(pos + cap * 4);
        let temps = a(slot + cap * 4);
        let seeds = a(temps + cap * 4);
        let top_k = a(seeds + cap * 8);
        let top_p = a(top_k + cap * 4);
        let min_p = a(top_p + cap * 4);
        let penalty = a(min_p + cap * 4);
        RowsLayout {
            tokens,
            pos,
            slot,
            temps,
            seeds,
            top_k,
            top_p,
            min_p,
            penalty,
            bytes: a(penalty + cap * 4),
        }
    }
}

/// Device scratch for up to `cap` rows.
struct Scratch {
    x: DeviceBuffer,
    q: DeviceBuffer,
    att: DeviceBuffer,
    ffn: DeviceBuffer,
    logits: DeviceBuffer,
    part: DeviceBuffer,
    /// per (row, head) counters of finished attention splits (zero between kernels)
    tickets: DeviceBuffer,
    /// RMSNorm factors of the rows (products of several rows)
    scales: DeviceBuffer,
    rows: DeviceBuffer,
    /// a bit per vocabulary entry and sequence slot: the tokens the sequence has seen
    /// (the repetition penalty's set; the sampler adds each token it draws)
    seen: DeviceBuffer,
    /// GEMM operands in the weights' type: the input rows and the result (when GEMMs run)
    gemm_in: Option<DeviceBuffer>,
    gemm_out: Option<DeviceBuffer>,
    /// a block-format matrix expanded to f16 for a GEMM (the largest such matrix's size)
    deq: Option<DeviceBuffer>,
    /// one input row as int8 and its scales and half sums (`quant_x`, for `gemvq_*`)
    xq: Option<(DeviceBuffer, DeviceBuffer)>,
}

/// A Llama-family model on the GPU with a paged KV cache (see the module docs).
pub struct CudaLlm {
    dev: Arc<CudaDevice>,
    /// kernels by name (valid while `_module` lives)
    fns: HashMap<String, Function>,
    _module: Module,
    shape: Shape,
    weights: Weights,
    kv_half: bool,
    kv_pool: DeviceBuffer,
    layer_bytes: usize,
    table: BlockTable,
    table_dev: DeviceBuffer,
    cap: usize,
    splits: usize,
    layout: RowsLayout,
    s: Scratch,
    /// rows staging, token and logits downloads, block-table rows
    pinned_rows: Pinned,
    pinned_out: Pinned,
    pinned_table: Pinned,
    /// each slot's prompt bits for `seen`
    pinned_seen: Pinned,
    /// 32-bit words of a slot's `seen` bits
    seen_words: usize,
    /// captured decode steps by row count
    graphs: HashMap<usize, Graph>,
    /// cuBLASLt, when the library loads and the model has GEMM-able weights
    blas: Option<Blas>,
    /// prepared GEMMs by (n, k, m, format, row stride of the result)
    gemms: RefCell<HashMap<GemmKey, PreparedGemm>>,
    /// events around each launch when `profile_kernels` is on
    timings: RefCell<Vec<(String, Event, Event)>>,
    /// the int8 scratch already holds the next product's input, so its `quant_x` is
    /// skipped: the attention kernel wrote the o projection's, or an earlier part of the
    /// same projection (q/k/v or gate/up of different formats) quantized the shared input
    xq_holds_input: std::cell::Cell<bool>,
    seqs: Vec<Option<Seq>>,
    /// the sequence slots whose rows the device holds, in order, when its tokens and
    /// positions are those of the next step (a plain step moved them on itself)
    staged: Option<Vec<usize>>,
    options: LlmOptions,
    /// seconds spent compiling (NVRTC, cached on disk) and uploading
    pub setup_s: f64,
}

/// About this many attention blocks a launch (rows x heads x splits taken together).
const ATT_BLOCKS: usize = 1024;

/// Blocks along the attention grid's x (splits of `SPLIT_LEN` positions): about
/// [`ATT_BLOCKS`] in all, each folding the splits past it into one partial result, so a long
/// context neither launches thousands of blocks that find nothing to do at short lengths nor
/// needs a partial per split (the partials take at most `ATT_BLOCKS` or rows x heads slots).
fn att_grid_x(splits: usize, rows_heads: usize) -> u32 {
    (ATT_BLOCKS / rows_heads.max(1)).clamp(1, splits.max(1)) as u32
}

/// A prepared GEMM's shape: (n, k, m, format, row stride of the result).
type GemmKey = (usize, usize, usize, QuantFormat, usize);

/// Output rows of a block-format matrix expanded at once: what fits `bytes` of f16
/// ([`LlmOptions::expand_bytes`]), a multiple of 256 rows (aligned chunks of the result),
/// at least 256, at most the matrix.
fn expand_rows(n: usize, k: usize, bytes: usize) -> usize {
    let fit = (bytes / (2 * k.max(1))) / 256 * 256;
    fit.max(256).min(n)
}

/// The stored formats of a model's projections and embedding.
fn model_formats(model: &Llama) -> Vec<QuantFormat> {
    let c = &model.config;
    let mut names = vec![
        "token_embd.weight".to_string(),
        model.head_name().to_string(),
    ];
    for l in 0..c.layers {
        for p in [
            "attn_q",
            "attn_k",
            "attn_v",
            "attn_output",
            "ffn_gate",
            "ffn_up",
            "ffn_down",
        ] {
            names.push(format!("blk.{l}.{p}.weight"));
        }
    }
    let mut formats: Vec<QuantFormat> = names
        .iter()
        .filter_map(|n| model.linear(n).map(|l| l.0))
        .collect();
    formats.sort_by_key(|f| f.name());
    formats.dedup();
    formats
}

/// The GEMM element type of a weight format and its code in `gemm_input`/`gemm_output`
/// (None: the format runs on the matrix-vector kernels only).
fn gemm_type(f: QuantFormat) -> Option<(DType, u64)> {
    match f {
        QuantFormat::F32 => Some((DType::F32, 0)),
        QuantFormat::F16 => Some((DType::F16, 1)),
        QuantFormat::BF16 => Some((DType::BF16, 2)),
        _ => None,
    }
}

/// Whether single-row products over `f` can run against int8 activations (`gemvq_*`): the
/// block formats, whose values are small integers.
pub fn int_dot(f: QuantFormat) -> bool {
    gemm_type(f).is_none()
}

fn bits(v: f64) -> u64 {
    v.to_bits()
}

impl CudaLlm {
    /// Uploads `model`'s weights, compiles the kernels and allocates the KV cache.
    ///
    /// # Errors
    /// No CUDA device (with the probe's reason), NVRTC missing or failing, a weight the
    /// kernels cannot read, or out of device memory.
    pub fn new(model: &Llama, options: LlmOptions) -> Result<CudaLlm, LlmError> {
        let start = Instant::now();
        let c = &model.config;
        let dev = CudaDevice::get()?;
        let mem = DeviceMemory::get()?;
        let lock = dev.clone();
        let _queue = lock.queue();
        dev.bind()?;
        if c.head_dim > 256 || !c.head_dim.is_multiple_of(32) {
            return Err(LlmError::Model(format!(
                "head size {} is not supported by the CUDA kernels (a multiple of 32, at most \
                 256)",
                c.head_dim
            )));
        }
        let shape = Shape {
            layers: c.layers,
            hidden: c.hidden,
            heads: c.heads,
            kv_heads: c.kv_heads,
            head_dim: c.head_dim,
            ffn: c.ffn,
            vocab: c.vocab,
            eps: c.eps,
            embed_scale: c.embed_scale,
            rope_attn_scale: c.rope_attn_scale,
            gated: match c.ffn_act {
                FfnAct::Silu => 1,
                FfnAct::GeluTanh => 2,
            },
        };
        let arch = format!(
            "sm_{}{}",
            dev.facts.compute_capability.0, dev.facts.compute_capability.1
        );
        let formats = model_formats(model);
        let source = kernel_source(&formats);
        let cubin = rlx_cuda::nvrtc::compile_cached("rlx_llm", &source, &arch)?;
        let module = dev.load_module(&cubin.image)?;
        let mut fns = HashMap::new();
        for name in kernel_names(&formats) {
            let f = module.function(&name, 0)?;
            fns.insert(name, f);
        }
        // the scale of what follows (the weights, then a KV cache of up to the free memory),
        // so an expandable segment grows by pieces of that scale from the first upload
        let kv_want = options.context.unwrap_or(c.context).min(c.context).max(1)
            * options.max_sequences.max(1)
            * c.layers
            * 2
            * c.kv_heads
            * c.head_dim
            * 2;
        let free = dev.mem_info().0.saturating_sub(model.weight_bytes);
        mem.expect_peak(model.weight_bytes + kv_want.min(free));
        let weights = upload(&dev, &mem, model)?;
        // GEMMs over block-format weights expand each matrix to f16 first, in chunks of
        // output rows (`expand_bytes`): room for the largest chunk, taken before the KV cache
        // sizes itself to the free memory
        let deq_bytes = if options.gemm_rows > 0 && options.expand_blocks {
            weights
                .matrices()
                .filter(|m| gemm_type(m.format).is_none())
                .map(|m| expand_rows(m.n, m.k, options.expand_bytes) * m.k * 2)
                .max()
                .unwrap_or(0)
        } else {
            0
        };
        let deq = if deq_bytes > 0 {
            mem.alloc(deq_bytes).ok()
        } else {
            None
        };
        // f32 checkpoints keep an f32 cache (exact parity); 16-bit and quantized ones f16
        let kv_half = weights
            .layers
            .first()
            .and_then(|l| l.qkv.first())
            .is_none_or(|p| p.matrix.format != QuantFormat::F32);
        let context = options.context.unwrap_or(c.context).min(c.context).max(1);
        let max_blocks = context.div_ceil(BLOCK_ROWS);
        let max_sequences = options.max_sequences.max(1);
        let elt = if kv_half { 2 } else { 4 };
        let row_bytes = c.layers * 2 * c.kv_heads * c.head_dim * elt;
        let kv_rows = match options.kv_rows {
            Some(r) => r,
            None => {
                let want = context * max_sequences;
                let (free, _) = dev.mem_info();
                let fits = (free as f64 * 0.9) as usize / row_bytes.max(1);
                want.min(fits.max(context))
            }
        };
        let blocks = kv_rows.div_ceil(BLOCK_ROWS).max(1);
        let layer_bytes = blocks * 2 * c.kv_heads * BLOCK_ROWS * c.head_dim * elt;
        let kv_pool = mem.alloc(layer_bytes * c.layers)?;
        let table = BlockTable::new(blocks, max_sequences, max_blocks);
        let table_dev = mem.alloc(max_sequences * max_blocks * 4)?;
        let cap = options.prefill_chunk.max(max_sequences).max(1);
        let splits = (max_blocks * BLOCK_ROWS).div_ceil(SPLIT_LEN).max(1);
        let qd = c.heads * c.head_dim;
        let layout = RowsLayout::new(cap);
        let f = 4usize;
        let mut s = Scratch {
            x: mem.alloc(cap * c.hidden * f)?,
            q: mem.alloc(cap * qd * f)?,
            att: mem.alloc(cap * qd * f)?,
            ffn: mem.alloc(cap * 2 * c.ffn * f)?,
            logits: mem.alloc(max_sequences * c.vocab * f)?,
            part: mem.alloc(ATT_BLOCKS.max(cap * c.heads) * (c.head_dim + 2) * f)?,
            tickets: mem.alloc(cap * c.heads * 4)?,
            scales: mem.alloc(cap * 4)?,
            rows: mem.alloc(layout.bytes)?,
            seen: mem.alloc(max_sequences * c.vocab.div_ceil(32) * 4)?,
            gemm_in: None,
            gemm_out: None,
            deq,
            xq: None,
        };
        if options.int8_activations && formats.iter().any(|f| int_dot(*f)) {
            let max_k = c.hidden.max(c.ffn).max(qd);
            s.xq = Some((mem.alloc(max_k)?, mem.alloc(max_k.div_ceil(32) * 16)?));
        }
        dev.upload(s.tickets.ptr(), &vec![0u8; cap * c.heads * 4])?;
        // tensor-core GEMMs for products of many rows, where cuBLASLt loads
        let gemm_formats = formats.iter().any(|f| gemm_type(*f).is_some()) || s.deq.is_some();
        let blas = if options.gemm_rows > 0 && gemm_formats {
            Blas::new(&mem).ok()
        } else {
            None
        };
        if blas.is_some() {
            let max_k = c.hidden.max(c.ffn).max(qd);
            let max_n = (qd + 2 * c.kv_heads * c.head_dim)
                .max(2 * c.ffn)
                .max(c.vocab)
                .max(c.hidden);
            s.gemm_in = Some(mem.alloc(cap * max_k * 4)?);
            s.gemm_out = Some(mem.alloc(cap * max_n * 4)?);
        }
        let pinned_rows = Pinned::new(&dev, layout.bytes)?;
        let pinned_out = Pinned::new(&dev, (max_sequences * c.vocab * 4).max(cap * 4))?;
        let pinned_table = Pinned::new(&dev, max_sequences * max_blocks * 4)?;
        let seen_words = c.vocab.div_ceil(32);
        let pinned_seen = Pinned::new(&dev, max_sequences * seen_words * 4)?;
        dev.sync()?;
        Ok(CudaLlm {
            dev,
            fns,
            _module: module,
            shape,
            weights,
            kv_half,
            kv_pool,
            layer_bytes,
            table,
            table_dev,
            cap,
            splits,
            layout,
            s,
            pinned_rows,
            pinned_out,
            pinned_table,
            pinned_seen,
            seen_words,
            graphs: HashMap::new(),
            blas,
            gemms: RefCell::new(HashMap::new()),
            xq_holds_input: std::cell::Cell::new(false),
            timings: RefCell::new(Vec::new()),
            seqs: (0..max_sequences).map(|_| None).collect(),
            staged: None,
            options,
            setup_s: start.elapsed().as_secs_f64(),
        })
    }

    /// Bytes of weights on the device.
    pub fn weight_bytes(&self) -> usize {
        self.weights.bytes
    }

    /// Bytes of the KV cache (every block of every layer).
    pub fn kv_bytes(&self) -> usize {
        self.kv_pool.bytes()
    }

    /// Rows one sequence may hold (prompt + generated).
    pub fn context(&self) -> usize {
        self.table.max_blocks * BLOCK_ROWS
    }

    /// KV blocks not held by any sequence, and the block size in rows.
    pub fn free_kv_rows(&self) -> usize {
        self.table.free_blocks() * BLOCK_ROWS
    }

    /// Sequences in the engine.
    pub fn active(&self) -> Vec<SeqId> {
        (0..self.seqs.len())
            .filter(|&i| self.seqs[i].is_some())
            .map(SeqId)
            .collect()
    }

    fn go(&self, name: &str, grid: [u32; 2], block: u32, args: &[u64]) -> Result<(), LlmError> {
        self.go_shaped(name, None, grid, block, args)
    }

    /// [`CudaLlm::go`] for a product over `w`: the kernel profile keeps its shape apart.
    fn go_shaped(
        &self,
        name: &str,
        w: Option<&Matrix>,
        grid: [u32; 2],
        block: u32,
        args: &[u64],
    ) -> Result<(), LlmError> {
        let f = self
            .fns
            .get(name)
            .ok_or_else(|| LlmError::Invalid(format!("no kernel `{name}`")))?;
        let launch = Launch {
            grid,
            block,
            shared_bytes: 0,
        };
        if !self.options.profile_kernels {
            return Ok(self.dev.launch(f, &launch, args, name)?);
        }
        let start = self.dev.record()?;
        self.dev.launch(f, &launch, args, name)?;
        let end = self.dev.record()?;
        let label = match w {
            Some(w) => format!("{name} {}x{}", w.n, w.k),
            None => name.to_string(),
        };
        self.timings.borrow_mut().push((label, start, end));
        Ok(())
    }

    /// Time per kernel over the launches since the last call, the largest first (empty
    /// unless [`LlmOptions::profile_kernels`] is on).
    ///
    /// # Errors
    /// The driver fails to read an event.
    pub fn kernel_profile(&self) -> Result<Vec<KernelTime>, LlmError> {
        let mut by_name: Vec<KernelTime> = Vec::new();
        for (name, start, end) in self.timings.borrow_mut().drain(..) {
            let ms = self.dev.elapsed_ms(&start, &end)? as f64;
            match by_name.iter_mut().find(|k| k.name == name) {
                Some(k) => {
                    k.calls += 1;
                    k.ms += ms;
                }
                None => by_name.push(KernelTime { name, calls: 1, ms }),
            }
        }
        by_name.sort_by(|a, b| b.ms.total_cmp(&a.ms));
        Ok(by_name)
    }

    fn rows_ptr(&self, off: usize, r: usize, size: usize) -> u64 {
        self.s.rows.ptr() + (off + r * size) as u64
    }

    /// Enqueues a matrix-vector product over `m` rows of `x`.
    #[allow(clippy::too_many_arguments)]
    fn gemv(
        &self,
        w: &Matrix,
        row0: usize,
        x: u64,
        m: usize,
        in_mode: u64,
        y: u64,
        y_stride: usize,
        out_mode: u64,
        qkv: Option<(usize, u64)>,
        norm: Option<&DeviceBuffer>,
    ) -> Result<(), LlmError> {
        let gemm_able = gemm_type(w.format).is_some()
            || self.s.deq.as_ref().is_some_and(|d| {
                d.bytes() >= expand_rows(w.n, w.k, self.options.expand_bytes) * w.k * 2
            });
        if m >= self.options.gemm_rows && self.blas.is_some() && gemm_able {
            return self.gemm(w, row0, x, m, in_mode, y, y_stride, out_mode, qkv, norm);
        }
        if m == 1 && self.int8_ready(w) {
            return self.gemv_int8(w, row0, x, in_mode, y, out_mode, qkv, norm);
        }
        let sh = &self.shape;
        let split = m == 1
            && self.options.split_k > 0
            && w.k >= self.options.split_k
            && (norm.is_none() || in_mode == 0);
        let mr = match m {
            1 => 1,
            2..=4 => 4,
            _ => 8,
        };
        let (name, grid) = if split {
            (
                format!("gemvs_{}", format_suffix(w.format)),
                [w.n.div_ceil(4) as u32, 1],
            )
        } else {
            (
                format!("gemv{mr}_{}", format_suffix(w.format)),
                [w.n.div_ceil(8) as u32, m.div_ceil(mr) as u32],
            )
        };
        let e = self.epilogue_args(qkv);
        let args = [
            w.buf.ptr(),
            w.row_bytes() as u64,
            w.n as u64,
            w.k as u64,
            row0 as u64,
            x,
            m as u64,
            in_mode,
            y,
            y_stride as u64,
            out_mode,
            e[0],
            e[1],
            e[2],
            e[3],
            e[4],
            e[5],
            e[6],
            e[7],
            e[8],
            e[9],
            e[10],
            e[11],
            e[12],
            norm.map_or(0, DeviceBuffer::ptr),
            bits(sh.eps),
            if norm.is_some() && m > 1 {
                self.s.scales.ptr()
            } else {
                0
            },
        ];
        self.go_shaped(&name, Some(w), grid, 128, &args)
    }

    /// After one part of a projection whose parts read the same input: when that part
    /// quantized it to int8, the next parts reuse it instead of quantizing it again.
    fn share_quantized_input(&self, w: &Matrix, m: usize) {
        if m == 1 && self.int8_ready(w) {
            self.xq_holds_input.set(true);
        }
    }

    /// Whether a single-row product over `w` runs against int8 activations.
    fn int8_ready(&self, w: &Matrix) -> bool {
        // the kernels read 32 values a lane and K-quant blocks as 16-byte words
        self.s.xq.is_some()
            && int_dot(w.format)
            && w.k.is_multiple_of(32)
            && w.buf.ptr().is_multiple_of(16)
    }

    /// Enqueues a single-row product against int8 activations: `quant_x` (the input's
    /// RMSNorm and gated form applied), then `gemvq_*` (arguments as [`CudaLlm::gemv`]).
    #[allow(clippy::too_many_arguments)]
    fn gemv_int8(
        &self,
        w: &Matrix,
        row0: usize,
        x: u64,
        in_mode: u64,
        y: u64,
        out_mode: u64,
        qkv: Option<(usize, u64)>,
        norm: Option<&DeviceBuffer>,
    ) -> Result<(), LlmError> {
        let Some((xq, xd)) = &self.s.xq else {
            return Err(LlmError::Invalid("no int8 activation scratch".into()));
        };
        // (the o projection's row may come quantized from the attention kernel)
        if !self.xq_holds_input.replace(false) {
            self.go_shaped(
                "quant_x",
                Some(w),
                [w.k.div_ceil(256) as u32, 1],
                256,
                &[
                    x,
                    1,
                    w.k as u64,
                    in_mode,
                    norm.map_or(0, DeviceBuffer::ptr),
                    bits(self.shape.eps),
                    xq.ptr(),
                    xd.ptr(),
                ],
            )?;
        }
        let e = self.epilogue_args(qkv);
        let mut args = vec![
            w.buf.ptr(),
            w.row_bytes() as u64,
            w.n as u64,
            w.k as u64,
            row0 as u64,
            xq.ptr(),
            xd.ptr(),
            y,
            out_mode,
        ];
        args.extend_from_slice(&e);
        let name = format!("gemvq_{}", format_suffix(w.format));
        self.go_shaped(&name, Some(w), [w.n.div_ceil(4) as u32, 1], 128, &args)
    }

    /// Enqueues a product of `m` rows as a tensor-core GEMM: the rows converted to the
    /// weights' type, cuBLASLt, and the epilogue of [`CudaLlm::gemv`] (same arguments).
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        &self,
        w: &Matrix,
        row0: usize,
        x: u64,
        m: usize,
        in_mode: u64,
        y: u64,
        y_stride: usize,
        out_mode: u64,
        qkv: Option<(usize, u64)>,
        norm: Option<&DeviceBuffer>,
    ) -> Result<(), LlmError> {
        let (Some(blas), Some(xin), Some(yout)) = (&self.blas, &self.s.gemm_in, &self.s.gemm_out)
        else {
            return Err(LlmError::Invalid("no GEMM for this product".into()));
        };
        let (n, k) = (w.n, w.k);
        // a block format is expanded to f16 (`dequant_*`) and multiplied as f16, a chunk of
        // output rows at a time; the others multiply the stored matrix whole
        let (dtype, t) = match (gemm_type(w.format), &self.s.deq) {
            (Some(g), _) => g,
            (None, Some(_)) => (DType::F16, 1),
            (None, None) => return Err(LlmError::Invalid("no GEMM for this product".into())),
        };
        let chunk = match gemm_type(w.format) {
            Some(_) => n,
            None => expand_rows(n, k, self.options.expand_bytes),
        };
        let blocks = (k.div_ceil(256) as u32).min(16);
        self.go(
            "gemm_input",
            [blocks, m as u32],
            256,
            &[
                x,
                m as u64,
                k as u64,
                in_mode,
                norm.map_or(0, DeviceBuffer::ptr),
                self.s.scales.ptr(),
                xin.ptr(),
                t,
            ],
        )?;
        let elt = if t == 0 { 4 } else { 2 };
        for n0 in (0..n).step_by(chunk) {
            let nc = chunk.min(n - n0);
            let b = match (gemm_type(w.format), &self.s.deq) {
                (None, Some(deq)) => {
                    let blocks = (nc * k / 8).div_ceil(256).min(4096) as u32;
                    self.go(
                        &format!("dequant_{}", format_suffix(w.format)),
                        [blocks, 1],
                        256,
                        &[
                            w.buf.ptr() + (n0 * w.row_bytes()) as u64,
                            w.row_bytes() as u64,
                            nc as u64,
                            k as u64,
                            deq.ptr(),
                        ],
                    )?;
                    deq.ptr()
                }
                _ => w.buf.ptr(),
            };
            // the chunk's columns of the m x n result (rows n apart)
            let key = (nc, k, m, w.format, n);
            let mut gemms = self.gemms.borrow_mut();
            if let std::collections::hash_map::Entry::Vacant(slot) = gemms.entry(key) {
                let op = |row_stride| Operand {
                    arg: ArgRef::Scratch(0),
                    offset: 0,
                    batch_stride: 0,
                    outer_stride: 0,
                    row_stride,
                };
                let spec = GemmSpec {
                    label: format!("llm {m}x{nc}x{k}"),
                    dtype,
                    m,
                    n: nc,
                    k,
                    batch: 1,
                    outer: 1,
                    a: op(None),
                    b: op(None),
                    c: op((nc != n).then_some(n)),
                    bias: None,
                    activation: Activation::None,
                    residual: None,
                    trans_b: true,
                    alpha: 1.0,
                };
                slot.insert(blas.prepare(&spec, false, false)?);
            }
            let g = &gemms[&key];
            let p = GemmPointers {
                a: xin.ptr(),
                b,
                c: yout.ptr() + (n0 * elt) as u64,
                bias: None,
                residual: None,
                arrays: None,
            };
            blas.run(g, &p, self.dev.stream())?;
        }
        let blocks = (n.div_ceil(512) as u32).min(64);
        let mut args = vec![
            yout.ptr(),
            t,
            m as u64,
            n as u64,
            row0 as u64,
            y,
            y_stride as u64,
            out_mode,
        ];
        args.extend(self.epilogue_args(qkv));
        self.go("gemm_output", [blocks, m as u32], 256, &args)
    }

    /// The epilogue's arguments of a product (`QkvArgs` in `kernels.cu`): bias, inverse
    /// frequencies, the rows' positions and slots, block table, this layer's cache and the
    /// sizes; zeros where `qkv` is None (no RoPE, no cache write).
    fn epilogue_args(&self, qkv: Option<(usize, u64)>) -> [u64; 13] {
        let sh = &self.shape;
        let (bias, inv_freq, cache) = match qkv {
            Some((layer, bias)) => (
                bias,
                self.weights.inv_freq.ptr(),
                self.kv_pool.ptr() + (layer * self.layer_bytes) as u64,
            ),
            None => (0, 0, 0),
        };
        let l = &self.layout;
        [
            bias,
            inv_freq,
            self.rows_ptr(l.pos, 0, 4),
            self.rows_ptr(l.slot, 0, 4),
            self.table_dev.ptr(),
            cache,
            (sh.heads * sh.head_dim) as u64,
            (sh.kv_heads * sh.head_dim) as u64,
            sh.head_dim as u64,
            sh.kv_heads as u64,
            BLOCK_ROWS as u64,
            self.table.max_blocks as u64,
            u64::from(self.kv_half),
        ]
    }

    /// Enqueues the RMSNorm factors of rows `0..m` of `x` when there are several (one row:
    /// each product computes its own).
    fn row_scales(&self, x: u64, m: usize) -> Result<(), LlmError> {
        if m < 2 {
            return Ok(());
        }
        let sh = self.shape;
        let args = [x, sh.hidden as u64, bits(sh.eps), self.s.scales.ptr()];
        self.go("row_scales", [m as u32, 1], 128, &args)
    }

    /// Enqueues one forward step of rows `0..m` (their tokens, positions and slots already
    /// in the rows buffer); logits for rows `head..m` (at logits rows `0..m - head`), then
    /// sampling into their tokens when `sample` (moving their positions on when `advance`).
    fn enqueue_forward(
        &self,
        m: usize,
        head: usize,
        sample: bool,
        advance: bool,
    ) -> Result<(), LlmError> {
        let sh = self.shape;
        let w = &self.weights;
        let l = &self.layout;
        let (qd, hd) = (sh.heads * sh.head_dim, sh.head_dim);
        let f = 4u64;
        let x = self.s.x.ptr();
        let emb = &w.embed;
        self.go(
            &format!("embed_{}", format_suffix(emb.format)),
            [m as u32, 1],
            128,
            &[
                emb.buf.ptr(),
                emb.row_bytes() as u64,
                self.rows_ptr(l.tokens, 0, 4),
                x,
                sh.hidden as u64,
                bits(f64::from(sh.embed_scale)),
            ],
        )?;
        let att_kernel = if self.kv_half {
            "attention_f16"
        } else {
            "attention_f32"
        };
        for (li, layer) in w.layers.iter().enumerate() {
            self.row_scales(x, m)?;
            let bias = layer.qkv_bias.as_ref().map_or(0, |b| b.ptr());
            for p in &layer.qkv {
                let (q, norm) = (self.s.q.ptr(), Some(&layer.attn_norm));
                self.gemv(&p.matrix, p.row0, x, m, 0, q, qd, 2, Some((li, bias)), norm)?;
                self.share_quantized_input(&p.matrix, m);
            }
            self.xq_holds_input.set(false);
            let cache = self.kv_pool.ptr() + (li * self.layer_bytes) as u64;
            // one row whose o projection runs on int8 activations: attention writes them
            let (xq, xd) = match &self.s.xq {
                Some((xq, xd)) if m == 1 && self.int8_ready(&layer.o) => (xq.ptr(), xd.ptr()),
                _ => (0, 0),
            };
            self.go(
                att_kernel,
                [att_grid_x(self.splits, sh.heads * m), (sh.heads * m) as u32],
                128,
                &[
                    self.s.q.ptr(),
                    cache,
                    self.table_dev.ptr(),
                    self.rows_ptr(l.pos, 0, 4),
                    self.rows_ptr(l.slot, 0, 4),
                    self.s.part.ptr(),
                    self.s.att.ptr(),
                    self.s.tickets.ptr(),
                    sh.heads as u64,
                    sh.kv_heads as u64,
                    hd as u64,
                    BLOCK_ROWS as u64,
                    self.table.max_blocks as u64,
                    // Phi-3 longrope scales cos and sin, so q·k by the factor squared
                    bits(sh.rope_attn_scale.powi(2) / (hd as f64).sqrt()),
                    xq,
                    xd,
                ],
            )?;
            self.xq_holds_input.set(xq != 0);
            let att = self.s.att.ptr();
            self.gemv(&layer.o, 0, att, m, 0, x, sh.hidden, 1, None, None)?;
            self.row_scales(x, m)?;
            for p in &layer.gate_up {
                let (ffn, norm) = (self.s.ffn.ptr(), Some(&layer.ffn_norm));
                self.gemv(&p.matrix, p.row0, x, m, 0, ffn, 2 * sh.ffn, 0, None, norm)?;
                self.share_quantized_input(&p.matrix, m);
            }
            self.xq_holds_input.set(false);
            let ffn = self.s.ffn.ptr();
            self.gemv(
                &layer.down,
                0,
                ffn,
                m,
                sh.gated,
                x,
                sh.hidden,
                1,
                None,
                None,
            )?;
        }
        let n = m - head;
        if n == 0 {
            return Ok(());
        }
        let xh = x + (head * sh.hidden) as u64 * f;
        let logits = self.s.logits.ptr();
        self.row_scales(xh, n)?;
        let norm = Some(&w.out_norm);
        self.gemv(w.head(), 0, xh, n, 0, logits, sh.vocab, 0, None, norm)?;
        if sample {
            self.go(
                "sample_rows",
                [n as u32, 1],
                1024,
                &[
                    logits,
                    sh.vocab as u64,
                    self.rows_ptr(l.tokens, head, 4),
                    self.rows_ptr(l.pos, head, 4),
                    self.rows_ptr(l.slot, head, 4),
                    self.rows_ptr(l.temps, head, 4),
                    self.rows_ptr(l.seeds, head, 8),
                    self.rows_ptr(l.top_k, head, 4),
                    self.rows_ptr(l.top_p, head, 4),
                    self.rows_ptr(l.min_p, head, 4),
                    self.rows_ptr(l.penalty, head, 4),
                    self.s.seen.ptr(),
                    self.seen_words as u64,
                    u64::from(advance),
                ],
            )?;
        }
        Ok(())
    }

    /// Writes rows `0..rows.len()` (token, position, slot and the sequence's sampling) to
    /// pinned memory and enqueues their upload.
    fn stage_rows(&mut self, rows: &[Row]) -> Result<(), LlmError> {
        let l = self.layout;
        // the previous upload from this pinned buffer must have left it
        self.dev.sync()?;
        let buf = self.pinned_rows.as_mut_slice();
        let mut put = |at: usize, r: usize, b: &[u8]| {
            buf[at + b.len() * r..][..b.len()].copy_from_slice(b);
        };
        for (r, &(tok, pos, slot, s)) in rows.iter().enumerate() {
            let to_i32 = |v: usize| i32::try_from(v).unwrap_or(i32::MAX).to_le_bytes();
            put(l.tokens, r, &(tok as i32).to_le_bytes());
            put(l.pos, r, &to_i32(pos));
            put(l.slot, r, &to_i32(slot));
            put(l.temps, r, &(s.temperature.max(0.0) as f32).to_le_bytes());
            put(l.seeds, r, &s.seed.to_le_bytes());
            put(l.top_k, r, &to_i32(s.top_k));
            put(l.top_p, r, &(s.top_p.clamp(0.0, 1.0) as f32).to_le_bytes());
            put(l.min_p, r, &(s.min_p.clamp(0.0, 1.0) as f32).to_le_bytes());
            put(l.penalty, r, &(s.repetition_penalty as f32).to_le_bytes());
        }
        self.dev
            .upload(self.s.rows.ptr(), &self.pinned_rows.as_slice()[..l.bytes])?;
        Ok(())
    }

    /// Uploads the `seen` bits of `slot`: the tokens of its prompt.
    fn stage_seen(&mut self, slot: usize, prompt: &[u32]) -> Result<(), LlmError> {
        let w = self.seen_words;
        let at = slot * w * 4;
        let bits = &mut self.pinned_seen.as_mut_slice()[at..at + w * 4];
        bits.fill(0);
        for &t in prompt {
            let (word, bit) = (t as usize / 32, t % 32);
            bits[4 * word + bit as usize / 8] |= 1 << (bit % 8);
        }
        self.dev.upload(
            self.s.seen.ptr() + at as u64,
            &self.pinned_seen.as_slice()[at..at + w * 4],
        )?;
        Ok(())
    }

    /// Reserves cache rows for `slot` and uploads its block-table row when it grew.
    fn reserve(&mut self, slot: usize, rows: usize) -> Result<(), LlmError> {
        let before = self.table.blocks(slot).len();
        self.table.reserve(slot, rows)?;
        let blocks = self.table.blocks(slot);
        if blocks.len() != before {
            let mb = self.table.max_blocks;
            let at = slot * mb * 4;
            let dst = &mut self.pinned_table.as_mut_slice()[at..at + blocks.len() * 4];
            for (i, b) in blocks.iter().enumerate() {
                dst[4 * i..4 * i + 4].copy_from_slice(&(*b as i32).to_le_bytes());
            }
            self.dev.upload(
                self.table_dev.ptr() + at as u64,
                &self.pinned_table.as_slice()[at..at + blocks.len() * 4],
            )?;
        }
        Ok(())
    }

    /// Adds a sequence: runs its prompt (in chunks of `prefill_chunk` rows) and returns its
    /// id with the first generated token. The sequence then takes part in every
    /// [`CudaLlm::step`] until [`CudaLlm::remove`]d.
    ///
    /// # Errors
    /// An empty prompt, a token outside the vocabulary, no free sequence slot, a prompt
    /// longer than the context, the KV cache full, or a device failure. Other sequences
    /// are unaffected.
    pub fn add(&mut self, prompt: &[u32], sampling: Sampling) -> Result<(SeqId, u32), LlmError> {
        self.add_many(&[(prompt, sampling)]).remove(0)
    }

    /// Adds several sequences at once: their prompts run together, rows of different
    /// sequences sharing each prefill step, so admitting k prompts costs about one prefill
    /// of all their tokens instead of k. One result per prompt, in order; a prompt that is
    /// refused (bad setting or token, no free slot, cache full) fails alone.
    pub fn add_many(
        &mut self,
        prompts: &[(&[u32], Sampling)],
    ) -> Vec<Result<(SeqId, u32), LlmError>> {
        let dev = self.dev.clone();
        let _queue = dev.queue();
        let mut out: Vec<Result<(SeqId, u32), LlmError>> = Vec::with_capacity(prompts.len());
        let mut ready = Vec::new();
        for (i, (prompt, sampling)) in prompts.iter().enumerate() {
            let opened = sampling
                .validate()
                .map_err(LlmError::Invalid)
                .and_then(|()| self.check_prompt(prompt))
                .and_then(|()| dev.bind().map_err(LlmError::from))
                .and_then(|()| self.table.open())
                .and_then(|slot| {
                    match self
                        .reserve(slot, prompt.len() + 1)
                        .and_then(|()| self.stage_seen(slot, prompt))
                    {
                        Ok(()) => Ok(slot),
                        Err(e) => {
                            self.table.close(slot);
                            Err(e)
                        }
                    }
                });
            match opened {
                Ok(slot) => {
                    ready.push((i, slot));
                    out.push(Ok((SeqId(slot), 0)));
                }
                Err(e) => out.push(Err(e)),
            }
        }
        if ready.is_empty() {
            return out;
        }
        let seqs: Vec<(usize, &[u32], Sampling)> = ready
            .iter()
            .map(|&(i, slot)| (slot, prompts[i].0, prompts[i].1))
            .collect();
        match self.prefill(&seqs) {
            Ok(firsts) => {
                for (&(i, slot), first) in ready.iter().zip(firsts) {
                    let (prompt, sampling) = prompts[i];
                    self.seqs[slot] = Some(Seq {
                        pos: prompt.len(),
                        last: first,
                        sampling,
                    });
                    out[i] = Ok((SeqId(slot), first));
                }
            }
            Err(e) => {
                let message = e.to_string();
                for &(i, slot) in &ready {
                    self.table.close(slot);
                    out[i] = Err(LlmError::Run(message.clone()));
                }
            }
        }
        out
    }

    /// Runs the prompts of `seqs` (slot, prompt, sampling; slots reserved, `seen` bits
    /// staged) and returns each one's first token, sampled on the device. Every prompt's
    /// last row goes to the tail of the last step, so one logits block serves them all; a
    /// row's earlier positions always run in the same or an earlier step.
    fn prefill(&mut self, seqs: &[(usize, &[u32], Sampling)]) -> Result<Vec<u32>, LlmError> {
        let k = seqs.len();
        let mut flat: Vec<Row> = seqs
            .iter()
            .flat_map(|&(slot, p, s)| {
                let body = &p[..p.len() - 1];
                body.iter().enumerate().map(move |(i, &t)| (t, i, slot, s))
            })
            .collect();
        flat.extend(
            seqs.iter()
                .map(|&(slot, p, s)| (p[p.len() - 1], p.len() - 1, slot, s)),
        );
        let chunk = self.options.prefill_chunk.clamp(k, self.cap);
        // steps cut from the end: the last one holds every prompt's last row
        let mut cuts = vec![flat.len()];
        while cuts[cuts.len() - 1] > 0 {
            let end = cuts[cuts.len() - 1];
            cuts.push(end.saturating_sub(chunk));
        }
        cuts.reverse();
        for w in cuts.windows(2) {
            let rows = &flat[w[0]..w[1]];
            let last = w[1] == flat.len();
            let m = rows.len();
            self.stage_rows(rows)?;
            self.staged = None;
            self.enqueue_forward(m, if last { m - k } else { m }, last, false)?;
        }
        // the last step's rows: its tail of k rows holds the sampled tokens
        let m_last = flat.len() - cuts[cuts.len() - 2];
        let at = self.layout.tokens + 4 * (m_last - k);
        let ids = self.download_i32(self.s.rows.ptr() + at as u64, k)?;
        Ok(ids.into_iter().map(|t| t as u32).collect())
    }

    /// The logits after `prompt` (the last position's, `vocab` values), without keeping a
    /// sequence: for scoring and for checks against other runtimes.
    ///
    /// # Errors
    /// As [`CudaLlm::add`].
    pub fn logits(&mut self, prompt: &[u32]) -> Result<Vec<f32>, LlmError> {
        let greedy = Sampling::default();
        self.check_prompt(prompt)?;
        let dev = self.dev.clone();
        let _queue = dev.queue();
        dev.bind()?;
        let slot = self.table.open()?;
        let r = self
            .reserve(slot, prompt.len() + 1)
            .and_then(|()| self.prefill(&[(slot, prompt, greedy)]))
            .and_then(|_| self.download_logits(1));
        self.table.close(slot);
        Ok(r?.remove(0))
    }

    fn check_prompt(&self, prompt: &[u32]) -> Result<(), LlmError> {
        if prompt.is_empty() {
            return Err(LlmError::Invalid("the prompt has no tokens".into()));
        }
        if let Some(&t) = prompt.iter().find(|&&t| t as usize >= self.shape.vocab) {
            return Err(LlmError::Invalid(format!(
                "token {t} is outside the vocabulary of {}",
                self.shape.vocab
            )));
        }
        Ok(())
    }

    fn download_i32(&mut self, src: u64, n: usize) -> Result<Vec<i32>, LlmError> {
        let dst = &mut self.pinned_out.as_mut_slice()[..n * 4];
        self.dev.download(dst, src)?;
        self.dev.sync()?;
        Ok(self.pinned_out.as_slice()[..n * 4]
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    fn download_logits(&mut self, rows: usize) -> Result<Vec<Vec<f32>>, LlmError> {
        let v = self.shape.vocab;
        let dst = &mut self.pinned_out.as_mut_slice()[..rows * v * 4];
        self.dev.download(dst, self.s.logits.ptr())?;
        self.dev.sync()?;
        let all = &self.pinned_out.as_slice()[..rows * v * 4];
        Ok(all
            .chunks_exact(v * 4)
            .map(|r| {
                r.chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect()
            })
            .collect())
    }

    /// Removes a sequence and gives its KV blocks back at once.
    pub fn remove(&mut self, id: SeqId) {
        self.staged = None;
        if let Some(s) = self.seqs.get_mut(id.0) {
            if s.take().is_some() {
                self.table.close(id.0);
            }
        }
    }

    /// One decode step of every sequence in the engine: returns each one's next token. A
    /// sequence whose cache cannot grow (context or pool exhausted) fails the step with an
    /// error naming it; remove it and step again.
    ///
    /// # Errors
    /// As above, or a device failure.
    pub fn step(&mut self) -> Result<Vec<(SeqId, u32)>, LlmError> {
        let ids = self.active();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let dev = self.dev.clone();
        let _queue = dev.queue();
        dev.bind()?;
        let mut rows: Vec<Row> = Vec::with_capacity(ids.len());
        for id in &ids {
            let (pos, last, s) = {
                let q = self.seqs[id.0].as_ref().expect("active");
                (q.pos, q.last, q.sampling)
            };
            self.reserve(id.0, pos + 1).map_err(|e| match e {
                LlmError::Capacity(m) => LlmError::Capacity(format!("sequence {}: {m}", id.0)),
                e => e,
            })?;
            rows.push((last, pos, id.0, s));
        }
        let m = rows.len();
        let slots: Vec<usize> = ids.iter().map(|i| i.0).collect();
        if self.staged.as_ref() != Some(&slots) {
            self.stage_rows(&rows)?;
        }
        self.staged = None;
        self.run_step(m)?;
        let t = self.layout.tokens as u64;
        let next = self.download_i32(self.s.rows.ptr() + t, m)?;
        // the sampling kernel wrote the tokens and moved the positions on
        self.staged = Some(slots);
        let mut out = Vec::with_capacity(m);
        for (id, &t) in ids.iter().zip(&next) {
            let q = self.seqs[id.0].as_mut().expect("active");
            q.pos += 1;
            q.last = t as u32;
            out.push((*id, t as u32));
        }
        Ok(out)
    }

    /// Runs a decode step of `m` staged rows: a captured graph when graphs are on.
    fn run_step(&mut self, m: usize) -> Result<(), LlmError> {
        if !self.options.graphs || self.options.profile_kernels {
            return self.enqueue_forward(m, 0, true, true);
        }
        if !self.graphs.contains_key(&m) {
            self.dev.begin_capture()?;
            let enq = self.enqueue_forward(m, 0, true, true);
            let graph = self.dev.end_capture();
            enq?;
            self.graphs.insert(m, graph?);
        }
        self.dev.replay(&self.graphs[&m])?;
        Ok(())
    }

    /// Generates up to `max_tokens` after `prompt` for one sequence, calling `on_token` with
    /// each id as it comes; stops after a token of `stop_ids`.
    ///
    /// # Errors
    /// As [`CudaLlm::add`] and [`CudaLlm::step`]; the sequence is removed either way.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        max_tokens: usize,
        sampling: &Sampling,
        stop_ids: &[u32],
        mut on_token: impl FnMut(u32),
    ) -> Result<GenerationStats, LlmError> {
        if prompt.len() + max_tokens.max(1) > self.context() {
            return Err(LlmError::Capacity(format!(
                "prompt ({}) + max tokens ({max_tokens}) exceed the context of {}",
                prompt.len(),
                self.context()
            )));
        }
        let mut stats = GenerationStats {
            prompt_tokens: prompt.to_vec(),
            compile_s: self.setup_s,
            ..Default::default()
        };
        let start = Instant::now();
        let (id, first) = self.add(prompt, *sampling)?;
        stats.prefill_s = start.elapsed().as_secs_f64();
        stats.tokens.push(first);
        on_token(first);
        let elt = if self.kv_half { 2 } else { 4 };
        let sh = self.shape;
        stats.kv_cache_bytes =
            (prompt.len() + max_tokens) * sh.layers * 2 * sh.kv_heads * sh.head_dim * elt;
        let result = (|| {
            if stop_ids.contains(&first) {
                return Ok(());
            }
            let start = Instant::now();
            while stats.tokens.len() < max_tokens {
                let step = Instant::now();
                let out = self.step()?;
                let t = out
                    .iter()
                    .find(|(i, _)| *i == id)
                    .map(|(_, t)| *t)
                    .ok_or_else(|| LlmError::Invalid("the sequence left the batch".into()))?;
                stats.decode_steps += 1;
                stats.step_s.push(step.elapsed().as_secs_f64());
                stats.tokens.push(t);
                on_token(t);
                if stop_ids.contains(&t) {
                    break;
                }
            }
            stats.decode_s = start.elapsed().as_secs_f64();
            Ok(())
        })();
        self.remove(id);
        result.map(|()| stats)
    }
}
