//! [`Gpu`]: the device the CUDA backend runs on, as the probe found it
//! (`driver::probe`). A value type of its own so that the probe, the kernel
//! compiler (`kernels`) and the device (`real`) can all name it without
//! importing each other.

/// The device the backend will use (ordinal 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gpu {
    pub name: String,
    /// Compute capability (major, minor).
    pub cc: (i32, i32),
    pub devices: i32,
    /// e.g. 12040 for CUDA 12.4.
    pub driver_version: i32,
    /// PCI address `dddd:bb:dd.0`, for placing threads near the GPU.
    pub pci_bus_id: String,
}

impl std::fmt::Display for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (sm_{}{}, driver CUDA {}.{}, {} device(s))",
            self.name,
            self.cc.0,
            self.cc.1,
            self.driver_version / 1000,
            self.driver_version % 1000 / 10,
            self.devices
        )
    }
}
