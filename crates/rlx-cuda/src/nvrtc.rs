//! NVRTC compilation of generated CUDA C into CUBIN for the device's own architecture,
//! cached on disk by a hash of source + architecture + options + NVRTC version, so a
//! program compiles once per machine. NVRTC needs no GPU, which lets CI compile-check every
//! generated kernel.

use crate::CudaError;
use cudarc::nvrtc::{result, sys};
use std::ffi::CString;
use std::path::{Path, PathBuf};

/// Checks that libnvrtc can be loaded (it is found through `LD_LIBRARY_PATH`).
///
/// # Errors
/// A sentence saying the library is missing and how to provide it.
pub fn nvrtc_present() -> Result<(), String> {
    // SAFETY: only tries to dlopen the library under its usual names.
    if unsafe { sys::is_culib_present() } {
        Ok(())
    } else {
        Err(
            "libnvrtc.so.13 not found (install the CUDA toolkit's NVRTC, or \
             `pip install nvidia-cuda-nvrtc==13.0.88` and add its lib folder to LD_LIBRARY_PATH)"
                .into(),
        )
    }
}

/// NVRTC's version, e.g. (13, 0).
pub fn nvrtc_version() -> Result<(i32, i32), CudaError> {
    nvrtc_present().map_err(CudaError::Nvrtc)?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the library is present; the out-pointers are valid.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| CudaError::Nvrtc(format!("nvrtcVersion: {e:?}")))?;
    Ok((major, minor))
}

/// Where compiled kernels are cached: `$RLX_CUDA_CACHE`, else `$XDG_CACHE_HOME/rlx/cuda`,
/// else `~/.cache/rlx/cuda`, else a folder under the system temp dir.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = crate::settings::CACHE.raw() {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("rlx").join("cuda");
    }
    if let Some(h) = std::env::var_os("HOME") {
        return PathBuf::from(h).join(".cache").join("rlx").join("cuda");
    }
    std::env::temp_dir().join("rlx-cuda-cache")
}

/// A 128-bit FNV-1a digest in hex: stable across runs and Rust versions, unlike std's hasher.
pub fn stable_hash(parts: &[&[u8]]) -> String {
    let mut a: u64 = 0xcbf2_9ce4_8422_2325;
    let mut b: u64 = 0x6c62_272e_07bb_0142;
    for p in parts {
        for &byte in p.iter().chain(&[0xff]) {
            a = (a ^ byte as u64).wrapping_mul(0x0000_0100_0000_01b3);
            b = (b ^ byte as u64)
                .wrapping_mul(0x0000_0100_0000_01b3)
                .rotate_left(5);
        }
    }
    format!("{a:016x}{b:016x}")
}

/// A compiled module image.
#[derive(Debug, Clone)]
pub struct Cubin {
    /// the CUBIN bytes
    pub image: Vec<u8>,
    /// true when it came from the disk cache
    pub cached: bool,
}

/// The options every program is compiled with.
pub fn options(arch: &str) -> Vec<String> {
    vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".into(),
        "--fmad=true".into(),
        "-default-device".into(),
    ]
}

/// Compiles `source` for `arch` (e.g. `sm_90`), using the disk cache.
///
/// # Errors
/// NVRTC is missing, or rejects the source: the error carries NVRTC's log and the path
/// where the source was written.
pub fn compile_cached(name: &str, source: &str, arch: &str) -> Result<Cubin, CudaError> {
    let opts = options(arch);
    let (major, minor) = nvrtc_version()?;
    let version = format!("{major}.{minor}");
    let joined = opts.join(" ");
    let key = stable_hash(&[
        source.as_bytes(),
        arch.as_bytes(),
        joined.as_bytes(),
        version.as_bytes(),
    ]);
    let dir = cache_dir();
    let path = dir.join(format!("{key}.cubin"));
    if let Ok(image) = std::fs::read(&path) {
        if !image.is_empty() {
            return Ok(Cubin {
                image,
                cached: true,
            });
        }
    }
    let image = compile(name, source, &opts).map_err(|log| {
        let source_path = write_source(&dir, &key, source);
        CudaError::Compile {
            program: name.to_string(),
            arch: arch.to_string(),
            log,
            source_path,
        }
    })?;
    if std::fs::create_dir_all(&dir).is_ok() {
        let tmp = dir.join(format!("{key}.{}.tmp", std::process::id()));
        if std::fs::write(&tmp, &image).is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        }
    }
    Ok(Cubin {
        image,
        cached: false,
    })
}

/// [`compile_cached`] for each of `sources` (a program's parts, see
/// [`crate::codegen::program_sources`]), the uncached ones compiled at the same time on as
/// many threads as the machine has cores (NVRTC allows concurrent calls on separate
/// programs). Part `i` is named `{name}_{i}`.
///
/// # Errors
/// As [`compile_cached`], for the first part (in order) that fails.
pub fn compile_all_cached(
    name: &str,
    sources: &[String],
    arch: &str,
) -> Result<Vec<Cubin>, CudaError> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, sources.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut results: Vec<Option<Result<Cubin, CudaError>>> = Vec::new();
    results.resize_with(sources.len(), || None);
    let done = std::sync::Mutex::new(results);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(source) = sources.get(i) else {
                    break;
                };
                let r = compile_cached(&format!("{name}_{i}"), source, arch);
                done.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(r);
            });
        }
    });
    done.into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(CudaError::Invalid("a part was not compiled".into()))))
        .collect()
}

fn write_source(dir: &Path, key: &str, source: &str) -> String {
    let path = dir.join(format!("{key}-failed.cu"));
    let ok = std::fs::create_dir_all(dir).is_ok() && std::fs::write(&path, source).is_ok();
    if ok {
        path.display().to_string()
    } else {
        "<not written: cache folder not writable>".to_string()
    }
}

/// Compiles without the cache. Returns the CUBIN, or NVRTC's log on failure.
///
/// # Errors
/// The log (or the NVRTC error when even the log is unavailable).
pub fn compile(name: &str, source: &str, opts: &[String]) -> Result<Vec<u8>, String> {
    nvrtc_present()?;
    let src = CString::new(source).map_err(|_| "source contains a NUL byte".to_string())?;
    let cname = CString::new(format!("{name}.cu")).map_err(|_| "bad program name".to_string())?;
    let prog = result::create_program(&src, Some(&cname)).map_err(|e| format!("{e:?}"))?;
    // SAFETY: `prog` was just created and is destroyed once below; `src` and `cname` outlive it.
    let out = unsafe {
        let status = result::compile_program(prog, opts);
        let log = result::get_program_log(prog)
            .map(|l| {
                let bytes: Vec<u8> = l.iter().map(|&c| c as u8).take_while(|&c| c != 0).collect();
                String::from_utf8_lossy(&bytes).into_owned()
            })
            .unwrap_or_default();
        match status {
            Err(e) => Err(format!("{e:?}\n{log}")),
            Ok(()) => {
                let mut size = 0usize;
                sys::nvrtcGetCUBINSize(prog, &mut size)
                    .result()
                    .map_err(|e| format!("nvrtcGetCUBINSize: {e:?}"))?;
                let mut image = vec![0u8; size];
                sys::nvrtcGetCUBIN(prog, image.as_mut_ptr() as *mut std::ffi::c_char)
                    .result()
                    .map_err(|e| format!("nvrtcGetCUBIN: {e:?}"))?;
                Ok(image)
            }
        }
    };
    // SAFETY: created above, destroyed once.
    let _ = unsafe { result::destroy_program(prog) };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_stable_and_separates_parts() {
        assert_eq!(stable_hash(&[b"ab", b"c"]), stable_hash(&[b"ab", b"c"]));
        assert_ne!(stable_hash(&[b"ab", b"c"]), stable_hash(&[b"a", b"bc"]));
        assert_eq!(stable_hash(&[b""]).len(), 32);
    }
}
