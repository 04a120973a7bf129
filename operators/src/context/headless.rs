//! A Vulkan instance for compute only: no window-system (WSI) extensions.
//!
//! wgpu enables every surface extension the driver offers (xlib, xcb, wayland),
//! and with `VK_KHR_wayland_surface` enabled Mesa's drivers connect to a Wayland
//! display while the instance starts; on a headless machine without
//! `XDG_RUNTIME_DIR`, libwayland then prints `error: XDG_RUNTIME_DIR is invalid
//! or not set in the environment.` to standard error, once per instance, in
//! every service that embeds the library. Ridgeline never presents to a
//! surface, so on Linux and the BSDs it creates the instance itself with only
//! the extensions compute needs and hands it to wgpu
//! ([`wgpu::Instance::from_hal`]); [`instance`] returns `None` when that fails,
//! and the caller takes wgpu's own instance instead.
use ash::vk;
use std::ffi::{c_char, CStr};

/// The instance extensions wgpu uses for compute (the others are for surfaces
/// and debugging); each is enabled only where the driver offers it.
fn wanted() -> Vec<&'static CStr> {
    vec![ash::khr::get_physical_device_properties2::NAME]
}

/// A wgpu instance over a Vulkan instance without surface extensions, or `None`
/// (no loader, no driver, an error): the caller falls back to wgpu's.
pub(super) fn instance(flags: wgpu::InstanceFlags) -> Option<wgpu::Instance> {
    // SAFETY: loading the system's Vulkan loader; its functions are used below
    // through ash's checked wrappers.
    let entry = unsafe { ash::Entry::load() }.ok()?;
    // SAFETY: a valid entry (loaded above).
    let version = unsafe { entry.try_enumerate_instance_version() }.ok()?.unwrap_or(vk::API_VERSION_1_0);
    // wgpu asks for at most Vulkan 1.3 (and needs 1.1's features, reached through
    // the properties2 extension on 1.0 instances).
    let api = version.min(vk::API_VERSION_1_3);
    // SAFETY: a valid entry.
    let available = unsafe { entry.enumerate_instance_extension_properties(None) }.ok()?;
    let exts: Vec<&'static CStr> = wanted().into_iter().filter(|w| available.iter().any(|a| a.extension_name_as_c_str() == Ok(*w))).collect();
    let ptrs: Vec<*const c_char> = exts.iter().map(|e| e.as_ptr()).collect();
    let app = vk::ApplicationInfo::default().application_name(c"ridgeline").engine_name(c"wgpu-hal").api_version(api);
    let info = vk::InstanceCreateInfo::default().application_info(&app).enabled_extension_names(&ptrs);
    // SAFETY: the create info points at live locals (app, ptrs) for the call.
    let raw = unsafe { entry.create_instance(&info, None) }.ok()?;
    // SAFETY: `raw` was created from `entry` with exactly `exts`, at version `api`;
    // wgpu-hal takes ownership and destroys it when the instance drops.
    let hal = unsafe {
        wgpu::hal::vulkan::Instance::from_raw(entry, raw, api, 0, None, exts, flags, wgpu::MemoryBudgetThresholds::default(), false, None)
    };
    match hal {
        // SAFETY: a valid, usable Vulkan instance, now owned by wgpu.
        Ok(h) => Some(unsafe { wgpu::Instance::from_hal::<wgpu::hal::api::Vulkan>(h) }),
        Err(e) => {
            log::debug!("headless Vulkan instance refused ({e}); using wgpu's");
            None
        }
    }
}
