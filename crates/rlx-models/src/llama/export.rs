//! Writing a loaded Llama model as a GGUF file that RLX and llama.cpp load (`rlx quantize`).
//!
//! Every projection is stored in the requested block format (or, when its rows are not a
//! whole number of blocks, in the closest format that fits, with a note); norms, biases and
//! RoPE frequency factors stay f32. Names and metadata are llama.cpp's (`token_embd.weight`,
//! `blk.N.attn_q.weight`, `llama.embedding_length`, ...). The loaded model keeps Q/K rows in
//! adjacent-pair RoPE order, GGML's own for `llama`; a `qwen2` file keeps Hugging Face's
//! "rotate half" order (llama.cpp ropes it as NEOX), so those rows and biases are permuted
//! back, exactly the inverse of what the reader does. The tokenizer becomes
//! `tokenizer.ggml.*` metadata: a GGUF source's is copied, a Hugging Face `tokenizer.json`
//! (byte-level BPE, or word-level) is converted.

use super::{model_err, Llama, LlamaError};
use crate::error::ModelError;
use rlx_gguf::{ggml_type_of, quantize, GgufFile, GgufWriter, MetaValue, QuantFormat, TensorDecl};
use serde_json::Value;
use std::borrow::Cow;
use std::path::Path;

/// GGUF token types (`tokenizer.ggml.token_type`).
const NORMAL: i32 = 1;
const UNKNOWN: i32 = 2;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const UNUSED: i32 = 5;

/// What [`export_gguf`] wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportReport {
    /// tensors written
    pub tensors: usize,
    /// size of the file in bytes
    pub bytes: usize,
    /// tensors stored in another format than asked, and why (also passed to the caller's
    /// `note` as they happen)
    pub fallbacks: Vec<String>,
}

/// What a file's projections are stored in: one block format, or a k-quant "medium"
/// mixture as llama.cpp's Q4_K_M and Q5_K_M make it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportType {
    /// every projection in this format
    Uniform(QuantFormat),
    /// the base format (Q4_K or Q5_K), with the output head, and the value and FFN down
    /// projections of the first and last eighth of the layers and of every third layer
    /// between, in Q6_K (llama.cpp's `use_more_bits` layers)
    Medium(QuantFormat),
}

impl From<QuantFormat> for ExportType {
    fn from(f: QuantFormat) -> Self {
        ExportType::Uniform(f)
    }
}

impl std::fmt::Display for ExportType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExportType::Uniform(q) => write!(f, "{q}"),
            ExportType::Medium(q) => write!(f, "{q}_m"),
        }
    }
}

impl ExportType {
    /// The format most projections are stored in.
    pub fn base(self) -> QuantFormat {
        match self {
            ExportType::Uniform(f) | ExportType::Medium(f) => f,
        }
    }

    /// llama.cpp's `general.file_type` for files of this type.
    pub fn file_type(self) -> u32 {
        match self {
            ExportType::Medium(QuantFormat::Q4K) => 15,
            ExportType::Medium(QuantFormat::Q5K) => 17,
            t => file_type(t.base()),
        }
    }

    /// The format asked for the GGUF tensor `name` of a model of `layers` layers.
    pub fn format_for(self, name: &str, layers: usize) -> QuantFormat {
        let ExportType::Medium(base) = self else {
            return self.base();
        };
        if name == "output.weight" {
            return QuantFormat::Q6K;
        }
        let layer = name
            .strip_prefix("blk.")
            .and_then(|rest| rest.split_once('.'))
            .filter(|(_, t)| *t == "attn_v.weight" || *t == "ffn_down.weight")
            .and_then(|(l, _)| l.parse::<usize>().ok());
        match layer {
            Some(i) if more_bits(i, layers) => QuantFormat::Q6K,
            _ => base,
        }
    }
}

/// llama.cpp's choice of the layers that keep more bits in a mixture: the first and last
/// eighth, and every third layer between.
fn more_bits(i: usize, n: usize) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// llama.cpp's `general.file_type` of a file whose projections are in `format` (the `_S`
/// variant for the k-quants: every projection in the one format).
pub fn file_type(format: QuantFormat) -> u32 {
    match format {
        QuantFormat::F32 => 0,
        QuantFormat::F16 => 1,
        QuantFormat::Q4_0 => 2,
        QuantFormat::Q4_1 => 3,
        QuantFormat::Q8_0 => 7,
        QuantFormat::Q5_0 => 8,
        QuantFormat::Q5_1 => 9,
        QuantFormat::Q2K => 10,
        QuantFormat::Q3K => 11,
        QuantFormat::Q4K => 14,
        QuantFormat::Q5K => 16,
        QuantFormat::Q6K => 18,
        QuantFormat::BF16 => 32,
    }
}

/// The format rows of `k` values are stored in when `format` is asked: `format` itself
/// when `k` is a whole number of its blocks, else Q8_0 (blocks of 32), else f16.
pub fn fitting_format(format: QuantFormat, k: usize) -> QuantFormat {
    [format, QuantFormat::Q8_0, QuantFormat::F16]
        .into_iter()
        .find(|f| k.is_multiple_of(f.block()))
        .unwrap_or(QuantFormat::F16)
}

/// Writes `model` (loaded from `source`, a GGUF file, a folder holding one, or a Hugging
/// Face folder) to `out` with its projections in `format`, converting on `threads` threads.
/// `note` receives one line per tensor stored in a fallback format.
///
/// # Errors
/// The source's tokenizer cannot be exported (not byte-level BPE or word-level), the model
/// is inconsistent, or `out` cannot be written.
pub fn export_gguf(
    model: &Llama,
    source: &Path,
    out: &Path,
    ty: impl Into<ExportType>,
    threads: usize,
    note: &mut dyn FnMut(&str),
) -> Result<ExportReport, LlamaError> {
    let ty = ty.into();
    let c = &model.config;
    let arch = if c.qkv_bias { "qwen2" } else { "llama" };
    let neox = arch == "qwen2";
    let name = source
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    let mut meta = vec![
        (
            "general.architecture".to_string(),
            MetaValue::String(arch.into()),
        ),
        ("general.name".to_string(), MetaValue::String(name)),
        (
            "general.file_type".to_string(),
            MetaValue::U32(ty.file_type()),
        ),
        (
            "general.quantization_version".to_string(),
            MetaValue::U32(2),
        ),
    ];
    let u = |v: usize| MetaValue::U32(v as u32);
    // RoPE factor tensors: Phi-3 longrope's two sets (the trained context, the original one
    // and the attention factor in the metadata), or one set of divisors (Llama 3.1)
    let rope: Vec<(&str, &Vec<f64>)> = match (&c.rope_long, &c.rope_freq_factors) {
        (Some(long), Some(short)) => vec![
            ("rope_factors_short.weight", short),
            ("rope_factors_long.weight", &long.factors),
        ],
        (None, Some(f)) => vec![("rope_freqs.weight", f)],
        _ => Vec::new(),
    };
    let context = c.rope_long.as_ref().map_or(c.context, |l| l.context);
    if c.rope_long.is_some() {
        meta.push((
            format!("{arch}.rope.scaling.original_context_length"),
            u(c.context),
        ));
        meta.push((
            format!("{arch}.rope.scaling.attn_factor"),
            MetaValue::F32(c.rope_attn_scale as f32),
        ));
    }
    for (key, value) in [
        ("vocab_size", u(c.vocab)),
        ("context_length", u(context)),
        ("embedding_length", u(c.hidden)),
        ("block_count", u(c.layers)),
        ("feed_forward_length", u(c.ffn)),
        ("attention.head_count", u(c.heads)),
        ("attention.head_count_kv", u(c.kv_heads)),
        ("rope.freq_base", MetaValue::F32(c.rope_base as f32)),
        (
            "attention.layer_norm_rms_epsilon",
            MetaValue::F32(c.eps as f32),
        ),
        ("rope.dimension_count", u(c.head_dim)),
    ] {
        meta.push((format!("{arch}.{key}"), value));
    }
    if c.heads * c.head_dim != c.hidden {
        meta.push((format!("{arch}.attention.key_length"), u(c.head_dim)));
        meta.push((format!("{arch}.attention.value_length"), u(c.head_dim)));
    }
    meta.extend(tokenizer_metadata(model, source)?);

    // (name, RoPE heads whose rows are permuted back for qwen2)
    let mut names: Vec<(String, Option<usize>)> = vec![("token_embd.weight".into(), None)];
    if model.head_name() != "token_embd.weight" {
        names.push((model.head_name().into(), None));
    }
    names.push(("output_norm.weight".into(), None));
    for l in 0..c.layers {
        let p = |s: &str| format!("blk.{l}.{s}");
        names.push((p("attn_norm.weight"), None));
        for (s, rope) in [
            ("attn_q", Some(c.heads)),
            ("attn_k", Some(c.kv_heads)),
            ("attn_v", None),
        ] {
            names.push((p(&format!("{s}.weight")), rope));
            if c.qkv_bias {
                names.push((p(&format!("{s}.bias")), rope));
            }
        }
        names.push((p("attn_output.weight"), None));
        names.push((p("ffn_norm.weight"), None));
        for s in ["ffn_gate", "ffn_up", "ffn_down"] {
            names.push((p(&format!("{s}.weight")), None));
        }
    }
    let mut decls = Vec::new();
    let mut fallbacks = Vec::new();
    for (name, factors) in &rope {
        decls.push(decl(name, vec![factors.len() as u64], QuantFormat::F32));
    }
    for (n, _) in &names {
        let t = model
            .param(n)
            .ok_or_else(|| model_err(format!("the model has no `{n}`")))?;
        match model.linear(n) {
            Some((_, rows, k)) => {
                let format = ty.format_for(n, c.layers);
                let f = fitting_format(format, k);
                if f != format {
                    let line = format!(
                        "{n}: rows of {k} values are not a whole number of {format} blocks of {}, \
                         stored as {f}",
                        format.block()
                    );
                    note(&line);
                    fallbacks.push(line);
                }
                decls.push(decl(n, vec![k as u64, rows as u64], f));
            }
            None => decls.push(decl(n, vec![t.numel() as u64], QuantFormat::F32)),
        }
    }
    let tensors = decls.len();
    let mut w = GgufWriter::create(out, &meta, decls)?;
    for (_, factors) in &rope {
        let b: Vec<u8> = factors
            .iter()
            .flat_map(|&v| (v as f32).to_le_bytes())
            .collect();
        w.tensor_data(&b)?;
    }
    for (n, rope) in &names {
        let t = model.param(n).expect("checked above");
        let target = w.next_tensor().expect("declared").ggml_type;
        let rope = rope.filter(|_| neox);
        let bytes: Vec<u8> = match model.linear(n) {
            Some((from, rows, k)) => {
                let rlx_ir::TensorData::U8(packed) = t.data() else {
                    return Err(model_err(format!("`{n}` is not stored packed")));
                };
                let row_bytes = packed.len() / rows.max(1);
                let src: Cow<[u8]> = match rope {
                    Some(h) => Cow::Owned(unpermute_rows(packed, row_bytes, h, c.head_dim)),
                    None => Cow::Borrowed(&packed[..]),
                };
                let to = target.format().expect("a format RLX writes");
                if from == to {
                    src.into_owned()
                } else {
                    convert(&src, from, to, rows, k, threads)
                        .map_err(|m| model_err(format!("{n}: {m}")))?
                }
            }
            None => {
                let v = t
                    .as_f32()
                    .ok_or_else(|| model_err(format!("`{n}` is not f32")))?;
                let v: Cow<[f32]> = match rope {
                    Some(h) => Cow::Owned(
                        unpermute_rows(
                            &v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>(),
                            4,
                            h,
                            c.head_dim,
                        )
                        .chunks_exact(4)
                        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                        .collect(),
                    ),
                    None => Cow::Borrowed(v),
                };
                v.iter().flat_map(|x| x.to_le_bytes()).collect()
            }
        };
        w.tensor_data(&bytes)?;
    }
    let bytes = w.finish()?;
    Ok(ExportReport {
        tensors,
        bytes,
        fallbacks,
    })
}

fn decl(name: &str, dims: Vec<u64>, f: QuantFormat) -> TensorDecl {
    TensorDecl {
        name: name.into(),
        dims,
        ggml_type: ggml_type_of(f),
    }
}

/// The inverse of the reader's `permute_rope_rows`: within each head, row `2 * j + s`
/// (adjacent pairs) moves back to `s * half + j` ("rotate half").
fn unpermute_rows(bytes: &[u8], row: usize, heads: usize, head_dim: usize) -> Vec<u8> {
    let half = head_dim / 2;
    let mut out = vec![0u8; bytes.len()];
    for h in 0..heads {
        for s in 0..2 {
            for j in 0..half {
                let src = (h * head_dim + 2 * j + s) * row;
                let dst = (h * head_dim + s * half + j) * row;
                out[dst..dst + row].copy_from_slice(&bytes[src..src + row]);
            }
        }
    }
    out
}

/// `rows` packed rows of `k` values from one format to another, row by row, on up to
/// `threads` threads.
fn convert(
    src: &[u8],
    from: QuantFormat,
    to: QuantFormat,
    rows: usize,
    k: usize,
    threads: usize,
) -> Result<Vec<u8>, String> {
    let in_row = src.len() / rows.max(1);
    let out_row = to
        .bytes_for(k)
        .ok_or_else(|| format!("rows of {k} values do not fit {to} blocks"))?;
    let mut out = vec![0u8; rows * out_row];
    if rows == 0 {
        return Ok(out);
    }
    let per = rows.div_ceil(threads.max(1));
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = src
            .chunks(per * in_row)
            .zip(out.chunks_mut(per * out_row))
            .map(|(a, b)| {
                s.spawn(move || {
                    let mut x = vec![0f32; k];
                    for (ri, ro) in a.chunks_exact(in_row).zip(b.chunks_exact_mut(out_row)) {
                        from.dequantize(ri, &mut x);
                        ro.copy_from_slice(&quantize(to, &x)?);
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a worker panicked".into())))
            .collect()
    });
    results.into_iter().collect::<Result<(), String>>()?;
    Ok(out)
}

/// The `tokenizer.*` metadata of the source: copied from a GGUF file, converted from a
/// Hugging Face folder's `tokenizer.json`.
fn tokenizer_metadata(
    model: &Llama,
    source: &Path,
) -> Result<Vec<(String, MetaValue)>, LlamaError> {
    if source.is_dir() && source.join("config.json").is_file() {
        return hf_tokenizer_metadata(model, source);
    }
    let file = if source.is_dir() {
        let mut found: Vec<std::path::PathBuf> = std::fs::read_dir(source)
            .map_err(|e| model_err(format!("{}: {e}", source.display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
            .collect();
        found.sort();
        found
            .into_iter()
            .next()
            .ok_or_else(|| model_err(format!("{}: no .gguf file", source.display())))?
    } else {
        source.to_path_buf()
    };
    let f = GgufFile::open(&file)?;
    Ok(f.metadata
        .iter()
        .filter(|(k, _)| k.starts_with("tokenizer."))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect())
}

/// Converts `tokenizer.json` (byte-level BPE, or word-level) into GGUF's `gpt2` tokenizer:
/// tokens by id (ids the file lacks become `[PADn]`), token types, merges, BOS/EOS and the
/// chat template as loaded with the model.
fn hf_tokenizer_metadata(
    model: &Llama,
    dir: &Path,
) -> Result<Vec<(String, MetaValue)>, LlamaError> {
    let path = dir.join("tokenizer.json");
    let label = path.display().to_string();
    let text = std::fs::read_to_string(&path).map_err(|source| ModelError::Io {
        path: label.clone(),
        source,
    })?;
    let v: Value =
        serde_json::from_str(&text).map_err(|e| model_err(format!("{label}: not JSON: {e}")))?;
    let m = &v["model"];
    let kind = m["type"].as_str().unwrap_or("");
    let byte_level = v["pre_tokenizer"].to_string().contains("ByteLevel");
    let word_level = kind == "WordLevel";
    if !(word_level || kind == "BPE" && byte_level) {
        return Err(model_err(format!(
            "{label}: a `{kind}` tokenizer{} cannot be exported; RLX writes GPT-2 byte-level \
             BPE and word-level vocabularies",
            if kind == "BPE" {
                " without byte-level pre-tokenization"
            } else {
                ""
            }
        )));
    }
    let mut tokens: Vec<Option<String>> = vec![None; model.config.vocab];
    let mut types = vec![UNUSED; model.config.vocab];
    let mut set = |id: u64, t: &str, ty: i32| -> Result<(), LlamaError> {
        let slot = tokens.get_mut(id as usize).ok_or_else(|| {
            model_err(format!(
                "{label}: token `{t}` has id {id}, past the model's {} embeddings",
                model.config.vocab
            ))
        })?;
        *slot = Some(t.to_string());
        types[id as usize] = ty;
        Ok(())
    };
    let unk = m["unk_token"].as_str();
    for (t, id) in m["vocab"].as_object().into_iter().flatten() {
        let id = id
            .as_u64()
            .ok_or_else(|| model_err(format!("{label}: token `{t}` has no integer id")))?;
        // word-level words are whole tokens: user-defined, matched before BPE
        let ty = match (word_level, Some(t.as_str()) == unk) {
            (_, true) => UNKNOWN,
            (true, false) => USER_DEFINED,
            (false, false) => NORMAL,
        };
        set(id, t, ty)?;
    }
    for a in v["added_tokens"].as_array().into_iter().flatten() {
        let (Some(id), Some(t)) = (a["id"].as_u64(), a["content"].as_str()) else {
            continue;
        };
        let special = a["special"].as_bool().unwrap_or(false);
        set(id, t, if special { CONTROL } else { USER_DEFINED })?;
    }
    let mut merges = Vec::new();
    for mg in m["merges"].as_array().into_iter().flatten() {
        let line = match mg {
            Value::String(s) => s.clone(),
            Value::Array(p) if p.len() == 2 => format!(
                "{} {}",
                p[0].as_str().unwrap_or_default(),
                p[1].as_str().unwrap_or_default()
            ),
            other => return Err(model_err(format!("{label}: merge {other} is not a pair"))),
        };
        merges.push(MetaValue::String(line));
    }
    let has = |t: &str| tokens.iter().any(|x| x.as_deref() == Some(t));
    let pre = if model.config.qkv_bias {
        "qwen2"
    } else if has("<|begin_of_text|>") {
        "llama-bpe"
    } else if v["pre_tokenizer"]
        .to_string()
        .contains("\"individual_digits\":true")
    {
        "smollm"
    } else {
        "default"
    };
    let tokens: Vec<MetaValue> = tokens
        .into_iter()
        .enumerate()
        .map(|(i, t)| MetaValue::String(t.unwrap_or_else(|| format!("[PAD{i}]"))))
        .collect();
    let s = |k: &str| k.to_string();
    let mut out = vec![
        (s("tokenizer.ggml.model"), MetaValue::String("gpt2".into())),
        (s("tokenizer.ggml.pre"), MetaValue::String(pre.into())),
        (s("tokenizer.ggml.tokens"), MetaValue::Array(tokens)),
        (
            s("tokenizer.ggml.token_type"),
            MetaValue::Array(types.into_iter().map(MetaValue::I32).collect()),
        ),
        (s("tokenizer.ggml.merges"), MetaValue::Array(merges)),
    ];
    let tok = &model.tokenizer;
    if let Some(b) = tok.bos {
        out.push((s("tokenizer.ggml.bos_token_id"), MetaValue::U32(b)));
    }
    if let Some(e) = tok.eos {
        out.push((s("tokenizer.ggml.eos_token_id"), MetaValue::U32(e)));
    }
    out.push((
        s("tokenizer.ggml.add_bos_token"),
        MetaValue::Bool(tok.add_bos),
    ));
    if let Some(t) = &tok.chat_template {
        out.push((s("tokenizer.chat_template"), MetaValue::String(t.clone())));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpermute_inverts_the_readers_permutation() {
        let rows: Vec<u8> = (0..16).collect();
        let there = super::super::hf::permute_rope_rows(&rows, 2, 4);
        assert_eq!(unpermute_rows(&there, 2, 2, 4), rows);
    }

    #[test]
    fn fallbacks_fit_the_rows() {
        assert_eq!(fitting_format(QuantFormat::Q4K, 512), QuantFormat::Q4K);
        assert_eq!(fitting_format(QuantFormat::Q4K, 128), QuantFormat::Q8_0);
        assert_eq!(fitting_format(QuantFormat::Q4_0, 100), QuantFormat::F16);
        assert_eq!(file_type(QuantFormat::Q8_0), 7);
    }

    #[test]
    fn medium_mixtures_keep_more_bits_where_llama_cpp_does() {
        let m = ExportType::Medium(QuantFormat::Q4K);
        assert_eq!(m.to_string(), "q4_k_m");
        assert_eq!(m.file_type(), 15);
        assert_eq!(ExportType::Medium(QuantFormat::Q5K).file_type(), 17);
        let v = |l: usize| m.format_for(&format!("blk.{l}.attn_v.weight"), 32);
        // the first and last eighth (layers 0-3 and 28-31), then every third from layer 6
        let more: Vec<usize> = (0..32).filter(|&l| v(l) == QuantFormat::Q6K).collect();
        assert_eq!(
            more,
            [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]
        );
        assert_eq!(m.format_for("blk.6.ffn_down.weight", 32), QuantFormat::Q6K);
        assert_eq!(m.format_for("blk.6.attn_q.weight", 32), QuantFormat::Q4K);
        assert_eq!(m.format_for("blk.5.ffn_down.weight", 32), QuantFormat::Q4K);
        assert_eq!(m.format_for("output.weight", 32), QuantFormat::Q6K);
        assert_eq!(m.format_for("token_embd.weight", 32), QuantFormat::Q4K);
        let u = ExportType::from(QuantFormat::Q8_0);
        assert_eq!(u.format_for("output.weight", 32), QuantFormat::Q8_0);
        assert_eq!(u.file_type(), 7);
    }
}
