//! Start-up probe: can this process use the ring engine at all?
//!
//! Checks, in order: the `kernel.io_uring_disabled` sysctl; `io_uring_setup`
//! itself (seccomp filters in containers answer EPERM or ENOSYS); the opcodes
//! the engine submits (IORING_REGISTER_PROBE); and sparse fixed-file
//! registration (direct descriptors, Linux 5.19+). The error
//! ([`ProbeError`], one variant per check) names exactly what is missing, for
//! the warning that precedes the std-engine fallback.

use std::io;

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

/// What the probe found missing: each variant is one check that failed, with
/// the kernel release (and the OS error) the sentence names.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// `kernel.io_uring_disabled = 2`: nobody may create a ring.
    #[error(
        "io_uring is disabled system-wide (/proc/sys/kernel/io_uring_disabled = 2, kernel {kernel})"
    )]
    Disabled { kernel: String },
    /// `io_uring_setup` answered EPERM and `kernel.io_uring_disabled = 1`.
    #[error(
        "io_uring_setup: {source}; /proc/sys/kernel/io_uring_disabled = 1 allows it only to \
         root and members of the kernel.io_uring_group group"
    )]
    Restricted { source: io::Error },
    /// `io_uring_setup` answered EPERM with the sysctl open: a seccomp filter.
    #[error(
        "io_uring_setup: {source}; a seccomp filter (e.g. a container runtime's default \
         profile) probably blocks the io_uring syscalls"
    )]
    Seccomp { source: io::Error },
    /// `io_uring_setup` answered ENOSYS.
    #[error(
        "io_uring_setup: {source}; the kernel ({kernel}) lacks io_uring or a seccomp filter \
         hides it"
    )]
    NoSyscall { source: io::Error, kernel: String },
    /// `io_uring_setup` failed otherwise.
    #[error("io_uring_setup failed: {source} (kernel {kernel})")]
    Setup { source: io::Error, kernel: String },
    /// `IORING_REGISTER_PROBE` failed (kernels before 5.6).
    #[error("IORING_REGISTER_PROBE failed: {source} (kernel {kernel}; 5.6+ needed)")]
    RegisterProbe { source: io::Error, kernel: String },
    /// Opcodes the engine submits that the kernel does not know (names
    /// without the `IORING_OP_` prefix, in submission order).
    #[error(
        "the kernel ({kernel}) does not support io_uring opcode(s) {}",
        .ops.join(", ")
    )]
    Unsupported {
        ops: Vec<&'static str>,
        kernel: String,
    },
    /// Sparse fixed-file registration (direct descriptors) failed (before 5.19).
    #[error(
        "sparse fixed-file registration (direct descriptors) failed: {source} \
         (kernel {kernel}; 5.19+ needed)"
    )]
    SparseFiles { source: io::Error, kernel: String },
}

/// Classifies an `io_uring_setup` failure: EPERM is the sysctl when it is 1,
/// else most likely seccomp; ENOSYS is a kernel without io_uring (or a filter
/// that hides it).
fn setup_error(source: io::Error, disabled: u8, kernel: String) -> ProbeError {
    match source.raw_os_error() {
        Some(libc::EPERM) if disabled == 1 => ProbeError::Restricted { source },
        Some(libc::EPERM) => ProbeError::Seccomp { source },
        Some(libc::ENOSYS) => ProbeError::NoSyscall { source, kernel },
        _ => ProbeError::Setup { source, kernel },
    }
}

/// Checks that io_uring and every feature the engine uses are available.
pub fn probe() -> Result<ProbeReport, ProbeError> {
    let kernel = kernel_release();
    let disabled: u8 = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    if disabled == 2 {
        return Err(ProbeError::Disabled { kernel });
    }
    let ring = IoUring::new(8).map_err(|e| setup_error(e, disabled, kernel.clone()))?;
    let mut p = Probe::new();
    ring.submitter()
        .register_probe(&mut p)
        .map_err(|source| ProbeError::RegisterProbe {
            source,
            kernel: kernel.clone(),
        })?;
    let ops: Vec<&'static str> = [
        (opcode::OpenAt::CODE, "OPENAT"),
        (opcode::Statx::CODE, "STATX"),
        (opcode::ReadFixed::CODE, "READ_FIXED"),
        (opcode::Close::CODE, "CLOSE"),
    ]
    .into_iter()
    .filter(|(code, _)| !p.is_supported(*code))
    .map(|(_, name)| name)
    .collect();
    if !ops.is_empty() {
        return Err(ProbeError::Unsupported { ops, kernel });
    }
    if let Err(source) = ring.submitter().register_files_sparse(4) {
        return Err(ProbeError::SparseFiles { source, kernel });
    }
    Ok(ProbeReport {
        kernel,
        io_uring_disabled: disabled,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(errno: i32) -> io::Error {
        io::Error::from_raw_os_error(errno)
    }

    #[test]
    fn setup_failures_are_told_apart_by_errno_and_sysctl() {
        let k = || "6.1.0".to_owned();
        assert!(matches!(
            setup_error(os(libc::EPERM), 1, k()),
            ProbeError::Restricted { .. }
        ));
        assert!(matches!(
            setup_error(os(libc::EPERM), 0, k()),
            ProbeError::Seccomp { .. }
        ));
        assert!(matches!(
            setup_error(os(libc::ENOSYS), 0, k()),
            ProbeError::NoSyscall { .. }
        ));
        assert!(matches!(
            setup_error(os(libc::ENOMEM), 1, k()),
            ProbeError::Setup { .. }
        ));
    }

    #[test]
    fn each_failure_names_what_is_missing() {
        let k = || "5.4.0".to_owned();
        assert_eq!(
            setup_error(os(libc::EPERM), 0, k()).to_string(),
            "io_uring_setup: Operation not permitted (os error 1); a seccomp filter (e.g. a \
             container runtime's default profile) probably blocks the io_uring syscalls"
        );
        assert_eq!(
            setup_error(os(libc::ENOSYS), 0, k()).to_string(),
            "io_uring_setup: Function not implemented (os error 38); the kernel (5.4.0) lacks \
             io_uring or a seccomp filter hides it"
        );
        assert_eq!(
            ProbeError::Disabled { kernel: k() }.to_string(),
            "io_uring is disabled system-wide (/proc/sys/kernel/io_uring_disabled = 2, \
             kernel 5.4.0)"
        );
        let e = ProbeError::Unsupported {
            ops: vec!["OPENAT", "CLOSE"],
            kernel: k(),
        };
        assert_eq!(
            e.to_string(),
            "the kernel (5.4.0) does not support io_uring opcode(s) OPENAT, CLOSE"
        );
        assert_eq!(
            ProbeError::SparseFiles {
                source: os(libc::EINVAL),
                kernel: k()
            }
            .to_string(),
            "sparse fixed-file registration (direct descriptors) failed: Invalid argument \
             (os error 22) (kernel 5.4.0; 5.19+ needed)"
        );
    }
}
