//! Adapters and devices: one wgpu device per [`Flavor`], created on first use and shared by
//! every program of the process. Probing never panics: wgpu's calls run behind
//! `catch_unwind`, a missing adapter becomes an [`Availability`] with a reason a person can
//! act on, and device errors are captured instead of aborting.

use rlx_driver::{Availability, DeviceInfo};
use std::sync::{Arc, Mutex, OnceLock};

/// Which RLX device a wgpu context serves; each picks adapters differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flavor {
    /// The best adapter of any backend, discrete GPUs first.
    Gpu,
    /// Vulkan adapters only.
    Vulkan,
    /// wgpu's GL backend (EGL, headless).
    OpenGl,
    /// The best adapter, but only the WebGPU default limits and no optional features, so a
    /// graph that compiles here also runs in a browser.
    WebGpu,
    /// wgpu's Metal backend (Apple hosts only).
    Metal,
}

impl Flavor {
    /// Every flavour.
    pub const ALL: [Flavor; 5] = [
        Flavor::Gpu,
        Flavor::Vulkan,
        Flavor::OpenGl,
        Flavor::WebGpu,
        Flavor::Metal,
    ];

    /// The RLX device name.
    pub fn name(self) -> &'static str {
        match self {
            Flavor::Gpu => "gpu",
            Flavor::Vulkan => "vulkan",
            Flavor::OpenGl => "opengl",
            Flavor::WebGpu => "webgpu",
            Flavor::Metal => "metal",
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    fn backends(self) -> wgpu::Backends {
        match self {
            Flavor::Gpu | Flavor::WebGpu => wgpu::Backends::all(),
            Flavor::Vulkan => wgpu::Backends::VULKAN,
            Flavor::OpenGl => wgpu::Backends::GL,
            Flavor::Metal => wgpu::Backends::METAL,
        }
    }

    fn missing(self) -> String {
        match self {
            Flavor::Vulkan => "no Vulkan adapter: install mesa-vulkan-drivers (lavapipe) or a GPU \
                 driver with its Vulkan ICD, and libvulkan1 (the loader)"
                .into(),
            Flavor::OpenGl => "no OpenGL adapter through EGL: install libegl1 with Mesa \
                 (libegl-mesa0, llvmpipe) or a GPU driver's EGL"
                .into(),
            Flavor::Metal => "no Metal adapter: Metal needs macOS or iOS with a Metal GPU".into(),
            Flavor::Gpu | Flavor::WebGpu => "no wgpu adapter on any backend (Vulkan, Metal, GL): \
                 install a GPU driver, or mesa-vulkan-drivers for a software Vulkan"
                .into(),
        }
    }
}

/// Facts about the adapter a context runs on.
#[derive(Debug, Clone, PartialEq)]
pub struct AdapterFacts {
    /// adapter name, e.g. "NVIDIA H200" or "llvmpipe (LLVM 15.0.7, 256 bits)"
    pub name: String,
    /// driver name and version
    pub driver: String,
    /// wgpu backend, e.g. "Vulkan"
    pub backend: String,
    /// discrete, integrated, virtual, cpu
    pub device_type: String,
    /// SHADER_F16 requested and granted
    pub shader_f16: bool,
    /// SUBGROUP requested and granted (subgroup operations in reductions)
    pub subgroups: bool,
    /// every optional feature the adapter offers (requested or not), for reports
    pub adapter_features: String,
}

/// A wgpu device and queue plus what they allow.
pub struct Context {
    /// which flavour this serves
    pub flavor: Flavor,
    /// the device
    pub device: wgpu::Device,
    /// its queue
    pub queue: wgpu::Queue,
    /// the limits the device was created with
    pub limits: wgpu::Limits,
    /// adapter facts
    pub facts: AdapterFacts,
    /// errors wgpu reported outside an error scope, drained by whoever checks next
    pub errors: Arc<Mutex<Vec<String>>>,
    _adapter: wgpu::Adapter,
    _instance: wgpu::Instance,
}

impl Context {
    /// "vulkan (llvmpipe ...)" for messages.
    pub fn label(&self) -> String {
        format!("{} ({})", self.flavor.name(), self.facts.name)
    }

    /// Takes the errors wgpu reported since the last call.
    pub fn take_errors(&self) -> Vec<String> {
        std::mem::take(&mut *self.errors.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Alignment of every tensor's offset in a buffer: the binding offset alignment, at
    /// least 256 bytes.
    pub fn align(&self) -> usize {
        (self.limits.min_storage_buffer_offset_alignment as usize).max(256)
    }
}

fn rank(info: &wgpu::AdapterInfo) -> (u8, u8) {
    let ty = match info.device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    };
    let backend = match info.backend {
        wgpu::Backend::Vulkan | wgpu::Backend::Metal | wgpu::Backend::Dx12 => 0,
        _ => 1,
    };
    (ty, backend)
}

fn create(flavor: Flavor) -> Result<Context, String> {
    if flavor == Flavor::Metal && !cfg!(any(target_os = "macos", target_os = "ios")) {
        return Err(Flavor::Metal.missing());
    }
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = flavor.backends();
    desc.flags = wgpu::InstanceFlags::empty();
    let instance = wgpu::Instance::new(desc);
    let adapters = pollster::block_on(instance.enumerate_adapters(flavor.backends()));
    let mut adapters: Vec<wgpu::Adapter> = adapters
        .into_iter()
        .filter(|a| {
            let b = a.get_info().backend;
            match flavor {
                Flavor::Vulkan => b == wgpu::Backend::Vulkan,
                Flavor::OpenGl => b == wgpu::Backend::Gl,
                Flavor::Metal => b == wgpu::Backend::Metal,
                Flavor::Gpu | Flavor::WebGpu => b != wgpu::Backend::Noop,
            }
        })
        .collect();
    adapters.sort_by_key(|a| rank(&a.get_info()));
    let adapter = adapters
        .into_iter()
        .next()
        .ok_or_else(|| flavor.missing())?;
    let info = adapter.get_info();
    let adapter_features = adapter.features();
    let (features, limits) = if flavor == Flavor::WebGpu {
        let defaults = wgpu::Limits::defaults();
        let have = adapter.limits();
        if !defaults.check_limits(&have) {
            return Err(format!(
                "adapter {} does not reach the WebGPU default limits",
                info.name
            ));
        }
        (wgpu::Features::empty(), defaults)
    } else {
        // Optional features only where the adapter offers them: without, codegen falls back.
        let f = adapter_features
            & (wgpu::Features::SHADER_F16
                | wgpu::Features::SUBGROUP
                | wgpu::Features::TIMESTAMP_QUERY);
        (f, adapter.limits())
    };
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("rlx"),
        required_features: features,
        required_limits: limits.clone(),
        ..Default::default()
    }))
    .map_err(|e| {
        format!(
            "{}: wgpu could not open a device on {}: {e}",
            flavor.name(),
            info.name
        )
    })?;
    let errors = Arc::new(Mutex::new(Vec::new()));
    let sink = errors.clone();
    device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
        sink.lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(e.to_string());
    }));
    let facts = AdapterFacts {
        name: info.name.clone(),
        driver: format!("{} {}", info.driver, info.driver_info)
            .trim()
            .to_string(),
        backend: format!("{:?}", info.backend),
        device_type: format!("{:?}", info.device_type),
        shader_f16: features.contains(wgpu::Features::SHADER_F16),
        adapter_features: format!("{adapter_features:?}"),
        subgroups: features.contains(wgpu::Features::SUBGROUP),
    };
    Ok(Context {
        flavor,
        device,
        queue,
        limits,
        facts,
        errors,
        _adapter: adapter,
        _instance: instance,
    })
}

static CONTEXTS: [OnceLock<Result<Arc<Context>, String>>; 5] = [
    OnceLock::new(),
    OnceLock::new(),
    OnceLock::new(),
    OnceLock::new(),
    OnceLock::new(),
];

/// The shared context of `flavor`, created on first use.
///
/// # Errors
/// No adapter for the flavour, or the device could not be opened; the reason says what to
/// install.
pub fn context(flavor: Flavor) -> Result<Arc<Context>, String> {
    CONTEXTS[flavor.index()]
        .get_or_init(|| {
            let quiet = std::panic::catch_unwind(|| create(flavor));
            match quiet {
                Ok(r) => r.map(Arc::new),
                Err(p) => {
                    let msg = p
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    Err(format!(
                        "{}: wgpu panicked while probing adapters: {msg}; {}",
                        flavor.name(),
                        flavor.missing()
                    ))
                }
            }
        })
        .clone()
}

/// Whether `flavor` can run now; when it can, the reason names the adapter and driver.
pub fn availability(flavor: Flavor) -> Availability {
    match context(flavor) {
        Ok(c) => Availability {
            available: true,
            reason: Some(format!(
                "{} via {} ({}, driver {})",
                c.facts.name, c.facts.backend, c.facts.device_type, c.facts.driver
            )),
        },
        Err(reason) => Availability::no(reason),
    }
}

/// Facts for `rlx devices`.
pub fn info(flavor: Flavor) -> Option<DeviceInfo> {
    let c = context(flavor).ok()?;
    let mut extras = vec![
        c.facts.backend.clone(),
        format!("driver {}", c.facts.driver),
    ];
    if c.facts.shader_f16 {
        extras.push("shader-f16".into());
    }
    if c.facts.subgroups {
        extras.push("subgroups".into());
    }
    Some(DeviceInfo {
        name: c.facts.name.clone(),
        memory_bytes: None,
        compute_units: None,
        arch: Some(extras.join(", ")),
        software: c.facts.device_type == "Cpu",
    })
}
