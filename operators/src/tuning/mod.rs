//! One home for the operators crate's tuned constants and `RIDGELINE_*` switches
//! (model: CUB's `tuning/` files).
//!
//! - Each kernel family has a file here (`select`, `skyline`, `partition`, `scan`, ...)
//!   with its tuned constants, the measurement that chose each one, and the
//!   options-struct defaults built from them.
//! - Every environment switch of the crate is declared once, in its family's `SWITCHES`
//!   table ([`all_switches`] lists them all),, read once
//!   per process ([`get`]), and reaches the code through the operators' options
//!   structs. `docs/settings.md` lists them in one table; a test fails when code names
//!   a `RIDGELINE_*` variable that the tables do not declare.
//! - Profiling output goes through `log` targets under [`PROFILE_TARGET`]
//!   (`RUST_LOG=ridgeline::profile=debug`), never `eprintln!`; code that must do extra
//!   work to profile (timestamps, a sync per pass) asks [`profiling`] first.
use std::collections::HashMap;
use std::sync::OnceLock;

/// What a switch is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwitchKind {
    /// Chooses how the process runs (adapter, mode, budget); users set these.
    Runtime,
    /// Overrides a tuned constant, for re-tuning on new hardware.
    Tuning,
    /// Read by the benchmark harness (the CLI's `bench` commands).
    Bench,
    /// Read by the test suite only.
    Test,
}

/// One `RIDGELINE_*` environment switch.
#[derive(Clone, Copy, Debug)]
pub struct Switch {
    /// Variable name, `RIDGELINE_...`.
    pub name: &'static str,
    /// What it is for.
    pub kind: SwitchKind,
    /// Accepted values and the default.
    pub values: &'static str,
    /// One line saying what it does.
    pub doc: &'static str,
}

/// Declares a family's `SWITCHES` table: `name, Kind, "values", "doc";` per line.
macro_rules! switches {
    ($($name:literal, $kind:ident, $values:literal, $doc:literal;)*) => {
        /// The `RIDGELINE_*` switches of this family.
        pub const SWITCHES: &[$crate::tuning::Switch] = &[$($crate::tuning::Switch {
            name: $name,
            kind: $crate::tuning::SwitchKind::$kind,
            values: $values,
            doc: $doc,
        }),*];
    };
}
pub(crate) use switches;

pub mod aggregate;
pub mod cpu_scan;
pub mod device;
pub mod join;
pub mod partition;
pub mod scan;
pub mod select;
pub mod skyline;

/// Every family's switch table; [`all_switches`] flattens them.
const FAMILIES: &[&[Switch]] = &[runtime::SWITCHES, select::SWITCHES, skyline::SWITCHES, partition::SWITCHES, scan::SWITCHES, cpu_scan::SWITCHES, device::SWITCHES, aggregate::SWITCHES, join::SWITCHES];

/// Every `RIDGELINE_*` switch the operators crate reads.
pub fn all_switches() -> impl Iterator<Item = &'static Switch> {
    FAMILIES.iter().flat_map(|f| f.iter())
}

/// Switches of the runtime (device, mode, budget).
pub mod runtime {
switches! {
    "RIDGELINE_GPU", Runtime, "off | auto | on (default auto)", "Where operators run; `on` fails without an adapter, `auto` places each operator by cost.";
    "RIDGELINE_ADAPTER", Runtime, "substring of an adapter name", "Picks the adapter whose name contains it (case-insensitive).";
    "RIDGELINE_GPU_MEMORY", Runtime, "bytes, K/M/G/T suffixes (default: the adapter's)", "Device memory budget of this process, shared by every session in it.";
    "RIDGELINE_MAX_SEGMENT_BYTES", Runtime, "bytes, K/M/G suffixes (default: the binding limit)", "Cap on one buffer segment; small values test the segmented paths.";
    "RIDGELINE_WAIT", Runtime, "block | spin | spin:MS (default spin)", "How a wait for the device behaves.";
    "RIDGELINE_SHADER_CHECKS", Runtime, "0 | 1 (default 0 on Vulkan)", "Keeps wgpu's runtime bounds checks in the shaders.";
    "RIDGELINE_TIMESTAMPS", Runtime, "0 | 1 (default 1)", "0 turns off the timestamp queries that kernel timings use (benchmarks quote wall times).";
}
}

/// The `log` target prefix of profiling output (`RUST_LOG=ridgeline::profile=debug`).
pub const PROFILE_TARGET: &str = "ridgeline::profile";

/// Whether profiling output for `target` (a child of [`PROFILE_TARGET`]) is enabled,
/// for code that must do extra work to measure.
#[macro_export]
macro_rules! profiling {
    ($target:literal) => {
        log::log_enabled!(target: $target, log::Level::Debug)
    };
}
pub use crate::profiling;

fn snapshot() -> &'static HashMap<&'static str, String> {
    static ENV: OnceLock<HashMap<&'static str, String>> = OnceLock::new();
    ENV.get_or_init(|| {
        all_switches()
            .filter_map(|s| std::env::var(s.name).ok().filter(|v| !v.trim().is_empty()).map(|v| (s.name, v.trim().to_string())))
            .collect()
    })
}

/// The value of switch `name` as the process started (read once; empty means unset).
/// `name` must be declared in a family's `SWITCHES` table.
pub fn get(name: &str) -> Option<&'static str> {
    debug_assert!(all_switches().any(|s| s.name == name), "{name} is not declared in a tuning SWITCHES table");
    snapshot().get(name).map(String::as_str)
}

/// Switch `name` parsed as `T`; a value that does not parse is ignored with a warning.
pub fn parse<T: std::str::FromStr>(name: &str) -> Option<T> {
    let v = get(name)?;
    match v.parse() {
        Ok(t) => Some(t),
        Err(_) => {
            warn_once(name, v);
            None
        }
    }
}

/// Switch `name` as a boolean (`1`/`on`/`true` or `0`/`off`/`false`), `None` when unset.
pub fn flag(name: &str) -> Option<bool> {
    let v = get(name)?;
    match v.to_ascii_lowercase().as_str() {
        "1" | "on" | "true" | "yes" => Some(true),
        "0" | "off" | "false" | "no" => Some(false),
        _ => {
            warn_once(name, v);
            None
        }
    }
}

fn warn_once(name: &str, v: &str) {
    static WARNED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut w = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    if !w.iter().any(|n| n == name) {
        w.push(name.to_string());
        let values = all_switches().find(|s| s.name == name).map_or("", |s| s.values);
        log::warn!("{name}={v} not understood ({values}): the default applies");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn switch_names_are_unique_and_prefixed() {
        let mut names: Vec<_> = all_switches().map(|s| s.name).collect();
        assert!(names.iter().all(|n| n.starts_with("RIDGELINE_") && n[10..].bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')));
        names.sort();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len());
    }
}
