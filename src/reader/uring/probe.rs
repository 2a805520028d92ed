//! Start-up probe: can this process use the ring engine at all?
//!
//! Checks, in order: the `kernel.io_uring_disabled` sysctl; `io_uring_setup`
//! itself (seccomp filters in containers answer EPERM or ENOSYS); the opcodes
//! the engine submits (IORING_REGISTER_PROBE); and sparse fixed-file
//! registration (direct descriptors, Linux 5.19+). The error names exactly
//! what is missing, for the warning that precedes the std-engine fallback.

use io_uring::{IoUring, Probe, opcode};

/// What the probe found on a usable kernel.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ProbeReport {
    /// `uname -r`.
    pub kernel: String,
    /// `/proc/sys/kernel/io_uring_disabled` (0 when absent).
    pub io_uring_disabled: u8,
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Checks that io_uring and every feature the engine uses are available.
pub fn probe() -> Result<ProbeReport, String> {
    let kernel = kernel_release();
    let disabled: u8 = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    if disabled == 2 {
        return Err(format!(
            "io_uring is disabled system-wide (/proc/sys/kernel/io_uring_disabled = 2, kernel {kernel})"
        ));
    }
    let ring = IoUring::new(8).map_err(|e| match e.raw_os_error() {
        Some(libc::EPERM) if disabled == 1 => format!(
            "io_uring_setup: {e}; /proc/sys/kernel/io_uring_disabled = 1 allows it only to \
             root and members of the kernel.io_uring_group group"
        ),
        Some(libc::EPERM) => format!(
            "io_uring_setup: {e}; a seccomp filter (e.g. a container runtime's default \
             profile) probably blocks the io_uring syscalls"
        ),
        Some(libc::ENOSYS) => format!(
            "io_uring_setup: {e}; the kernel ({kernel}) lacks io_uring or a seccomp filter \
             hides it"
        ),
        _ => format!("io_uring_setup failed: {e} (kernel {kernel})"),
    })?;
    let mut p = Probe::new();
    ring.submitter()
        .register_probe(&mut p)
        .map_err(|e| format!("IORING_REGISTER_PROBE failed: {e} (kernel {kernel}; 5.6+ needed)"))?;
    let missing: Vec<&str> = [
        (opcode::OpenAt::CODE, "OPENAT"),
        (opcode::Statx::CODE, "STATX"),
        (opcode::ReadFixed::CODE, "READ_FIXED"),
        (opcode::Close::CODE, "CLOSE"),
    ]
    .into_iter()
    .filter(|(code, _)| !p.is_supported(*code))
    .map(|(_, name)| name)
    .collect();
    if !missing.is_empty() {
        return Err(format!(
            "the kernel ({kernel}) does not support io_uring opcode(s) {}",
            missing.join(", ")
        ));
    }
    ring.submitter().register_files_sparse(4).map_err(|e| {
        format!(
            "sparse fixed-file registration (direct descriptors) failed: {e} \
             (kernel {kernel}; 5.19+ needed)"
        )
    })?;
    Ok(ProbeReport {
        kernel,
        io_uring_disabled: disabled,
    })
}
