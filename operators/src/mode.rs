//! Where operators run: `RIDGELINE_GPU=off|auto|on`.
use std::fmt;
use std::str::FromStr;

/// The GPU mode of a session or process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum GpuMode {
    /// CPU paths only.
    Off,
    /// A cost model places each operator where it pays; no adapter means CPU with one warning.
    #[default]
    Auto,
    /// Every operator that can run on the GPU does; a missing adapter is an error.
    On,
}

impl GpuMode {
    /// The mode named by `RIDGELINE_GPU`, `Auto` when unset.
    pub fn from_env() -> Result<GpuMode, String> {
        crate::tuning::get("RIDGELINE_GPU").map_or(Ok(GpuMode::Auto), str::parse)
    }

    /// Lower-case name, as accepted by `FromStr`.
    pub fn as_str(&self) -> &'static str {
        match self {
            GpuMode::Off => "off",
            GpuMode::Auto => "auto",
            GpuMode::On => "on",
        }
    }
}

impl FromStr for GpuMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "off" | "false" | "0" | "cpu" => Ok(GpuMode::Off),
            "auto" => Ok(GpuMode::Auto),
            "on" | "true" | "1" | "gpu" => Ok(GpuMode::On),
            other => Err(format!("invalid GPU mode '{other}': expected off, auto or on")),
        }
    }
}

impl fmt::Display for GpuMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn parse_modes() {
        assert_eq!("ON".parse::<GpuMode>().unwrap(), GpuMode::On);
        assert_eq!(" auto ".parse::<GpuMode>().unwrap(), GpuMode::Auto);
        assert_eq!("off".parse::<GpuMode>().unwrap(), GpuMode::Off);
        let e = "sometimes".parse::<GpuMode>().unwrap_err();
        assert!(e.contains("expected off, auto or on"), "{e}");
        assert_eq!(GpuMode::On.to_string(), "on");
    }
}
