//! How a context is created: [`ContextOptions`] (the global context reads them from the
//! `RIDGELINE_ADAPTER`, `RIDGELINE_GPU_MEMORY`, `RIDGELINE_MAX_SEGMENT_BYTES` and
//! `RIDGELINE_WAIT` switches, declared in [`crate::tuning::runtime`]) and their parsers.

use crate::tuning::device::SPIN_WAIT;

/// Options for creating a context (the global one reads them from the environment).
#[derive(Clone, Debug, Default)]
pub struct ContextOptions {
    /// Substring (case-insensitive) of the adapter name to pick (`RIDGELINE_ADAPTER`).
    pub adapter: Option<String>,
    /// Device memory budget of the process in bytes (`RIDGELINE_GPU_MEMORY`, accepts
    /// suffixes K/M/G/T); every session of the process shares it.
    pub memory_budget: Option<u64>,
    /// Cap on the bytes of one buffer segment (`RIDGELINE_MAX_SEGMENT_BYTES`); the
    /// adapter's binding limit applies in any case.
    pub max_segment_bytes: Option<u64>,
    /// How waits for the device behave (`RIDGELINE_WAIT`); `None`: the default.
    pub wait: Option<WaitMode>,
}

/// How a wait for the device behaves.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum WaitMode {
    /// Block in the driver at once.
    Block,
    /// Poll the device in a loop for up to this long, then block.
    Spin(std::time::Duration),
}

impl WaitMode {
    /// Parses `block`, `spin` or `spin:MS` (milliseconds).
    pub fn parse(s: &str) -> Option<WaitMode> {
        match s.trim() {
            "block" => Some(WaitMode::Block),
            "spin" => Some(WaitMode::Spin(SPIN_WAIT)),
            v => {
                let ms: f64 = v.strip_prefix("spin:")?.trim().parse().ok()?;
                (ms.is_finite() && ms >= 0.0).then(|| WaitMode::Spin(std::time::Duration::from_secs_f64(ms / 1e3)))
            }
        }
    }
}

impl ContextOptions {
    /// Options from `RIDGELINE_ADAPTER`, `RIDGELINE_GPU_MEMORY`, `RIDGELINE_MAX_SEGMENT_BYTES`,
    /// `RIDGELINE_WAIT`.
    pub fn from_env() -> Self {
        let nonempty = |k: &str| crate::tuning::get(k).map(str::to_string);
        ContextOptions {
            adapter: nonempty("RIDGELINE_ADAPTER"),
            memory_budget: nonempty("RIDGELINE_GPU_MEMORY").and_then(|v| parse_bytes(&v)),
            max_segment_bytes: nonempty("RIDGELINE_MAX_SEGMENT_BYTES").and_then(|v| parse_bytes(&v)),
            wait: nonempty("RIDGELINE_WAIT").and_then(|v| {
                let m = WaitMode::parse(&v);
                if m.is_none() {
                    log::warn!("RIDGELINE_WAIT={v} not understood (block, spin or spin:MS): the default applies");
                }
                m
            }),
        }
    }
}

/// Parses `123`, `64K`, `512M`, `8G` (binary units) into bytes.
pub fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()?.to_ascii_uppercase() {
        'K' => (&s[..s.len() - 1], 1u64 << 10),
        'M' => (&s[..s.len() - 1], 1 << 20),
        'G' => (&s[..s.len() - 1], 1 << 30),
        'T' => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    let v: f64 = num.trim().parse().ok()?;
    (v >= 0.0).then(|| (v * mult as f64) as u64)
}
