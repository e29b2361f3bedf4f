//! `TfIdfVectorizer` over integer pools as comparisons and sums: for every n-gram size `s`
//! and skip distance `d` (unigrams once), the input's `s` shifted views are compared with
//! the pool's n-grams of that size, the matches counted per row and scattered into the
//! output columns (`ngram_indexes`) by a constant 0/1 matrix; `mode` then weights counts.

use crate::ctx::{invalid, unsupported, Ctx, Val, R};
use crate::node::NodeIn;
use rlx_ir::{BinaryOp, DType, ReduceOp};

/// `TfIdfVectorizer` (`pool_int64s` only: string pools are refused).
pub fn tfidf_vectorizer(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let min_n = n.int("min_gram_length", 0)?;
    let max_n = n.int("max_gram_length", 0)?;
    let max_skip = n.int("max_skip_count", 0)?;
    let mode = n.string("mode", "")?;
    let counts = n.ints_opt("ngram_counts")?.unwrap_or_default();
    let indexes = n.ints_opt("ngram_indexes")?.unwrap_or_default();
    let weights = n.floats_opt("weights")?;
    if n.strings_opt("pool_strings")?.is_some() {
        unsupported!("pool_strings (string inputs)");
    }
    let Some(pool) = n.ints_opt("pool_int64s")? else {
        invalid!("pool_int64s or pool_strings is required");
    };
    if min_n < 1 || max_n < min_n || max_skip < 0 {
        invalid!("gram lengths {min_n}..={max_n} and max_skip_count {max_skip}");
    }
    if !matches!(mode.as_str(), "TF" | "IDF" | "TFIDF") {
        invalid!("mode `{mode}` (expected TF, IDF or TFIDF)");
    }
    if indexes.iter().any(|&i| i < 0) || indexes.is_empty() {
        invalid!("ngram_indexes {indexes:?} must be non-empty and non-negative");
    }
    let out = *indexes.iter().max().unwrap_or(&0) as usize + 1;
    if let Some(w) = &weights {
        if w.len() < out {
            invalid!("weights has {} values for {out} outputs", w.len());
        }
    }
    if !ctx.dtype(&x).is_int() {
        unsupported!("input dtype {} (integer pools only)", ctx.dtype(&x));
    }
    let xs = ctx.shape(&x)?;
    let (rows, len, batched) = match xs.as_slice() {
        [c] => (1, *c, false),
        [b, c] => (*b, *c, true),
        _ => invalid!("input {xs:?} must be [C] or [B, C]"),
    };
    let x = ctx.cast(&x, DType::I64)?;
    let x = ctx.reshape(&x, &[rows, len, 1])?;
    // the pool's n-grams of each size s: (first id, tokens)
    let mut id = 0usize; // index into ngram_indexes
    let mut total: Option<Val> = None;
    for (i, &start) in counts.iter().enumerate() {
        let s = i + 1;
        let end = counts.get(i + 1).copied().unwrap_or(pool.len() as i64);
        if start < 0 || end < start || end as usize > pool.len() {
            invalid!("ngram_counts {counts:?} do not index the pool");
        }
        let items = (end - start) as usize;
        let grams = items / s;
        let first = id;
        id += grams;
        if grams == 0 || (s as i64) < min_n || (s as i64) > max_n {
            continue;
        }
        if id > indexes.len() {
            invalid!(
                "ngram_indexes has {} values, the pool {id}+ n-grams",
                indexes.len()
            );
        }
        let toks = &pool[start as usize..start as usize + grams * s];
        // columns: one-hot of each gram's output index
        let mut place = vec![0.0; grams * out];
        for g in 0..grams {
            place[g * out + indexes[first + g] as usize] = 1.0;
        }
        let place = ctx.tensor(DType::F32, &[grams, out], &place)?;
        let dists = if s == 1 { 1 } else { max_skip as usize + 1 };
        let mut per_size: Option<Val> = None;
        for d in 1..=dists {
            let span = (s - 1) * d;
            if span >= len {
                break;
            }
            let m = len - span; // start positions
            let mut hit: Option<Val> = None;
            for k in 0..s {
                let view = ctx.slice(&x, 1, (k * d) as i64, (k * d + m) as i64, 1)?;
                let tk: Vec<f64> = (0..grams).map(|g| toks[g * s + k] as f64).collect();
                let tk = ctx.tensor(DType::I64, &[1, 1, grams], &tk)?;
                let eq = ctx.binary(BinaryOp::Eq, &view, &tk)?; // (rows, m, grams)
                hit = Some(match hit {
                    None => eq,
                    Some(h) => ctx.binary(BinaryOp::And, &h, &eq)?,
                });
            }
            let Some(hit) = hit else { continue };
            let hit = ctx.cast(&hit, DType::F32)?;
            let c = ctx.reduce(ReduceOp::Sum, &hit, &[1], false)?; // (rows, grams)
            per_size = Some(match per_size {
                None => c,
                Some(p) => ctx.add(&p, &c)?,
            });
        }
        if let Some(c) = per_size {
            let y = ctx.matmul(&c, &place)?; // (rows, out)
            total = Some(match total {
                None => y,
                Some(t) => ctx.add(&t, &y)?,
            });
        }
    }
    let tf = match total {
        Some(t) => t,
        None => {
            let z = ctx.scalar(DType::F32, 0.0);
            ctx.expand(
                &z,
                vec![rlx_ir::Dim::Static(rows), rlx_ir::Dim::Static(out)],
            )?
        }
    };
    let w = match &weights {
        Some(w) => {
            let wv: Vec<f64> = w[..out].iter().map(|&v| v as f64).collect();
            Some(ctx.tensor(DType::F32, &[out], &wv)?)
        }
        None => None,
    };
    let y = match (mode.as_str(), w) {
        ("TF", _) | ("TFIDF", None) => tf,
        ("TFIDF", Some(w)) => ctx.mul(&tf, &w)?,
        (_, w) => {
            let zero = ctx.scalar(DType::F32, 0.0);
            let any = ctx.binary(BinaryOp::Gt, &tf, &zero)?;
            let on = match w {
                Some(w) => w,
                None => ctx.scalar(DType::F32, 1.0),
            };
            ctx.where_(&any, &on, &zero)?
        }
    };
    if batched {
        Ok(vec![y])
    } else {
        Ok(vec![ctx.reshape(&y, &[out])?])
    }
}
