//! Allocation traces: JSON lines `{"op":"alloc","id":N,"bytes":B}` / `{"op":"free","id":N}`,
//! plain or gzip, parsed once into a compact event list that replays without hashing.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use flate2::read::MultiGzDecoder;
use serde::Deserialize;
use thiserror::Error;

use crate::MemError;

/// Errors reading or replaying a trace; malformed lines name the file and line number.
#[derive(Debug, Error)]
pub enum TraceError {
    /// The file could not be opened or read.
    #[error("cannot read trace {path}: {message}")]
    Io {
        /// The trace file.
        path: String,
        /// The system's reason.
        message: String,
    },
    /// A line that is not a valid event, or an event inconsistent with the ones before it.
    #[error("{path}:{line}: {message}")]
    Malformed {
        /// The trace file.
        path: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The allocator failed while replaying.
    #[error("replay failed: {0}")]
    Mem(#[from] MemError),
}

/// One event, with the trace's ids renumbered densely into slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceEvent {
    /// Allocate `bytes` into `slot`.
    Alloc {
        /// Dense index of the allocation.
        slot: u32,
        /// Bytes asked for.
        bytes: usize,
    },
    /// Free the allocation in `slot`.
    Free {
        /// Dense index of the allocation.
        slot: u32,
    },
}

/// A parsed trace.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// Where it came from, for reports.
    pub source: String,
    /// The events in order.
    pub events: Vec<TraceEvent>,
    /// Number of distinct allocations.
    pub slots: usize,
    /// Most bytes live at once: the lower bound any allocator must reserve.
    pub peak_live_bytes: usize,
    /// Allocations never freed by the trace (replays free them after timing).
    pub unfreed: usize,
}

#[derive(Deserialize)]
struct RawEvent<'a> {
    #[serde(borrow)]
    op: &'a str,
    id: u64,
    bytes: Option<u64>,
}

enum IdState {
    Live { slot: u32, bytes: usize },
    Freed { line: usize },
}

/// Reads a trace file, gzip or plain (detected from its first bytes).
///
/// # Errors
/// [`TraceError::Io`] when the file cannot be read, [`TraceError::Malformed`] for bad JSON, an
/// unknown op, a free of an unknown id, a double free or an id allocated twice.
pub fn read_trace(path: &Path) -> Result<Trace, TraceError> {
    let name = path.display().to_string();
    let io = |err: std::io::Error| TraceError::Io {
        path: name.clone(),
        message: err.to_string(),
    };
    let mut reader = BufReader::with_capacity(1 << 20, File::open(path).map_err(io)?);
    let gzip = reader.fill_buf().map_err(io)?.starts_with(&[0x1f, 0x8b]);
    let inner: Box<dyn Read> = if gzip {
        Box::new(MultiGzDecoder::new(reader))
    } else {
        Box::new(reader)
    };
    parse_trace(BufReader::with_capacity(1 << 20, inner), &name)
}

/// Parses trace lines from any reader; `source` names it in errors.
///
/// # Errors
/// As [`read_trace`].
pub fn parse_trace(mut reader: impl BufRead, source: &str) -> Result<Trace, TraceError> {
    let malformed = |line: usize, message: String| TraceError::Malformed {
        path: source.to_string(),
        line,
        message,
    };
    let mut trace = Trace {
        source: source.to_string(),
        ..Trace::default()
    };
    let mut ids: HashMap<u64, IdState> = HashMap::new();
    let (mut live_bytes, mut line_no) = (0usize, 0usize);
    let mut buf = String::new();
    loop {
        buf.clear();
        line_no += 1;
        let read = reader
            .read_line(&mut buf)
            .map_err(|err| malformed(line_no, err.to_string()))?;
        if read == 0 {
            break;
        }
        let text = buf.trim();
        if text.is_empty() {
            continue;
        }
        let raw: RawEvent = serde_json::from_str(text)
            .map_err(|err| malformed(line_no, format!("invalid event: {err}")))?;
        match raw.op {
            "alloc" => {
                let bytes = raw.bytes.ok_or_else(|| {
                    malformed(line_no, format!("alloc of id {} has no bytes", raw.id))
                })?;
                let bytes = usize::try_from(bytes).map_err(|_| {
                    malformed(
                        line_no,
                        format!("{bytes} bytes do not fit this machine's address space"),
                    )
                })?;
                if ids.contains_key(&raw.id) {
                    return Err(malformed(line_no, format!("id {} allocated twice", raw.id)));
                }
                let slot = u32::try_from(trace.slots)
                    .map_err(|_| malformed(line_no, "more than 2^32 allocations".to_string()))?;
                trace.slots += 1;
                ids.insert(raw.id, IdState::Live { slot, bytes });
                live_bytes += bytes;
                trace.peak_live_bytes = trace.peak_live_bytes.max(live_bytes);
                trace.events.push(TraceEvent::Alloc { slot, bytes });
            }
            "free" => match ids.get(&raw.id) {
                None => return Err(malformed(line_no, format!("free of unknown id {}", raw.id))),
                Some(IdState::Freed { line }) => {
                    return Err(malformed(
                        line_no,
                        format!("double free of id {} (freed at line {line})", raw.id),
                    ))
                }
                Some(&IdState::Live { slot, bytes }) => {
                    live_bytes -= bytes;
                    ids.insert(raw.id, IdState::Freed { line: line_no });
                    trace.events.push(TraceEvent::Free { slot });
                }
            },
            other => {
                return Err(malformed(
                    line_no,
                    format!("unknown op {other:?} (expected \"alloc\" or \"free\")"),
                ))
            }
        }
    }
    trace.unfreed = ids
        .values()
        .filter(|s| matches!(s, IdState::Live { .. }))
        .count();
    Ok(trace)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn parse(text: &str) -> Result<Trace, TraceError> {
        parse_trace(text.as_bytes(), "mem.jsonl")
    }

    fn error_line(text: &str) -> (usize, String) {
        match parse(text) {
            Err(TraceError::Malformed { line, message, .. }) => (line, message),
            other => panic!("expected a malformed-trace error, got {other:?}"),
        }
    }

    #[test]
    fn parses_events_with_extra_fields_and_blank_lines() {
        let text = "{\"op\":\"alloc\",\"id\":70,\"bytes\":1000,\"stream\":3}\n\n\
                    {\"op\":\"alloc\",\"id\":9,\"bytes\":24}\n{\"id\":70,\"op\":\"free\",\"t\":1.5}\n\
                    {\"op\":\"alloc\",\"id\":5,\"bytes\":5000}\n";
        let trace = parse(text).unwrap();
        assert_eq!(trace.events.len(), 4);
        assert_eq!(trace.events[2], TraceEvent::Free { slot: 0 });
        assert_eq!(trace.slots, 3);
        assert_eq!(trace.peak_live_bytes, 5024);
        assert_eq!(trace.unfreed, 2);
    }

    #[test]
    fn malformed_traces_name_the_line() {
        let ok = "{\"op\":\"alloc\",\"id\":1,\"bytes\":64}\n";
        let (line, msg) = error_line(&format!("{ok}{{\"op\":\"alloc\",\"id\":2,\"bytes\":\n"));
        assert_eq!(line, 2);
        assert!(msg.contains("invalid event"), "{msg}");
        let (line, msg) = error_line(&format!("{ok}{{\"op\":\"free\",\"id\":7}}\n"));
        assert_eq!((line, msg.as_str()), (2, "free of unknown id 7"));
        let (line, msg) = error_line(&format!(
            "{ok}{{\"op\":\"free\",\"id\":1}}\n{{\"op\":\"free\",\"id\":1}}\n"
        ));
        assert_eq!(line, 3);
        assert!(msg.contains("double free of id 1 (freed at line 2)"));
        let (line, msg) = error_line(&format!("{ok}{ok}"));
        assert_eq!((line, msg.as_str()), (2, "id 1 allocated twice"));
        let (_, msg) = error_line("{\"op\":\"realloc\",\"id\":1}\n");
        assert!(msg.contains("unknown op \"realloc\""));
        let (_, msg) = error_line("{\"op\":\"alloc\",\"id\":1}\n");
        assert!(msg.contains("has no bytes"));
        let err = parse("{\"op\":\"free\",\"id\":3}").unwrap_err();
        assert_eq!(err.to_string(), "mem.jsonl:1: free of unknown id 3");
    }

    #[test]
    fn reads_gzip_and_plain_files() {
        let dir = std::env::temp_dir().join(format!("rlx-mem-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut text = String::new();
        let mut x: u64 = 0xabcdef;
        for id in 0..500u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            text.push_str(&format!(
                "{{\"op\":\"alloc\",\"id\":{id},\"bytes\":{}}}\n",
                (x >> 44) + 1
            ));
            if id % 3 == 2 {
                text.push_str(&format!("{{\"op\":\"free\",\"id\":{}}}\n", id - 1));
            }
        }
        let plain = dir.join("t.jsonl");
        std::fs::write(&plain, &text).unwrap();
        let gz = dir.join("t.jsonl.gz");
        let mut enc =
            flate2::write::GzEncoder::new(File::create(&gz).unwrap(), flate2::Compression::fast());
        enc.write_all(text.as_bytes()).unwrap();
        enc.finish().unwrap();
        let a = read_trace(&plain).unwrap();
        let b = read_trace(&gz).unwrap();
        assert_eq!(a.events, b.events);
        assert_eq!(a.events.len(), 500 + 166);
        let missing = read_trace(&dir.join("absent.jsonl")).unwrap_err();
        assert!(matches!(missing, TraceError::Io { .. }));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
