//! Raw system calls: the one place melforge calls libc directly, outside the
//! io_uring engine (`crate::reader::uring`) and the CUDA FFI
//! (`crate::compute::cuda`), which keep their own next to the code that needs
//! them.
//!
//! Each function is a thin wrapper over one call (or a fixed short sequence):
//! it turns the C error convention (`-1` + `errno`, or an error number
//! returned directly) into [`std::io::Result`], takes descriptors as
//! [`BorrowedFd`] so they stay open for the call, and hands a descriptor it
//! creates back as an [`OwnedFd`]. Callers build their RAII types on top (the
//! read arena's mapping, the signal thread). Every function here is safe to
//! call except [`unmap`], whose contract the compiler cannot check; each
//! call of it carries its own `// SAFETY:`.
//!
//! Grouped by concept: signals; waiting on and locking descriptors; socket
//! peers; identity (uid, groups, uname); memory (anonymous mappings, the
//! memlock limit); the page cache; durability (fsync of a file or a
//! directory); and, for tests only, thread affinity. Nothing here forks:
//! tests run a child through `std::process::Command` (docs/CONVENTIONS.md,
//! "Tests").

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::time::Duration;

// ---------------------------------------------------------------- signals

/// A signal set holding `signals`; EINVAL names a number that is no signal.
fn sigset(signals: &[i32]) -> io::Result<libc::sigset_t> {
    // SAFETY: sigset_t is plain data; all-zero is a valid value, and
    // sigemptyset initialises it fully before any bit is read.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is valid for writes for the call.
    unsafe { libc::sigemptyset(&mut set) };
    for &s in signals {
        // SAFETY: `set` is an initialised sigset_t, valid for writes; an
        // invalid signal number is refused with EINVAL, not undefined.
        if unsafe { libc::sigaddset(&mut set, s) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(set)
}

/// Blocks `signals` in the calling thread (`pthread_sigmask(SIG_BLOCK)`);
/// threads it starts afterwards inherit the mask.
pub fn block_signals(signals: &[i32]) -> io::Result<()> {
    let set = sigset(signals)?;
    // SAFETY: `set` is an initialised sigset_t; a null old-set pointer is
    // allowed.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Installs `handler` for each of `signals`, process-wide, with
/// `SA_RESTART` (a system call the signal interrupts is restarted, so the
/// stage threads never see EINTR). The handler runs on whichever thread the
/// kernel picks and must be async-signal-safe (store to an atomic, nothing
/// else).
pub fn set_signal_handler(signals: &[i32], handler: extern "C" fn(libc::c_int)) -> io::Result<()> {
    for &signo in signals {
        // SAFETY: sigaction is plain data; all-zero is a valid value.
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        act.sa_sigaction = handler as usize as libc::sighandler_t;
        act.sa_flags = libc::SA_RESTART;
        // SAFETY: `act.sa_mask` is valid for writes for the call.
        if unsafe { libc::sigemptyset(&mut act.sa_mask) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `act` is initialised and outlives the call; a null old-action
        // pointer is allowed; `handler` is an `extern "C" fn(c_int)`, the
        // signature sigaction expects without SA_SIGINFO.
        if unsafe { libc::sigaction(signo, &act, std::ptr::null_mut()) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Sets SIGPIPE to ignored for the whole process, so a write to a socket
/// whose peer hung up fails with EPIPE instead of killing the process.
pub fn ignore_sigpipe() -> io::Result<()> {
    // SAFETY: SIG_IGN installs no handler code, so no async-signal-safety
    // rule applies.
    if unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A new close-on-exec signalfd reporting `signals` (which should be blocked,
/// see [`block_signals`], or they are delivered the usual way instead).
pub fn signalfd(signals: &[i32]) -> io::Result<OwnedFd> {
    let set = sigset(signals)?;
    // SAFETY: `set` is initialised; -1 asks for a new descriptor.
    let fd = unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: signalfd returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// What one read from a signalfd reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SignalInfo {
    /// The signal number.
    pub signo: i32,
    /// The pid of the sender (for `kill`).
    pub pid: u32,
}

/// Reads one signal from a signalfd. Blocks unless the descriptor is
/// non-blocking; EINTR and EAGAIN come back as errors of those kinds.
pub fn read_signalfd(fd: BorrowedFd<'_>) -> io::Result<SignalInfo> {
    // SAFETY: signalfd_siginfo is plain data; all-zero is a valid value.
    let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::signalfd_siginfo>();
    // SAFETY: `info` is valid for writes of `size` bytes and the descriptor
    // is borrowed, so open for the call.
    let n = unsafe { libc::read(fd.as_raw_fd(), (&raw mut info).cast(), size) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != size {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("short read from a signalfd: {n} of {size} bytes"),
        ));
    }
    Ok(SignalInfo {
        signo: info.ssi_signo as i32,
        pid: info.ssi_pid,
    })
}

// ----------------------------------------------------- waiting and locking

/// One `poll` for input on `fds`, waiting at most `timeout` (`None`: no
/// limit). Entry `i` of the answer is whether `fds[i]` reported anything
/// (input, hang-up or error: any `revents`); all `false` means the time ran
/// out. EINTR comes back as an error of kind `Interrupted`, for the caller to
/// retry or not.
pub fn poll_readable<const N: usize>(
    fds: [BorrowedFd<'_>; N],
    timeout: Option<Duration>,
) -> io::Result<[bool; N]> {
    let mut pfds = fds.map(|fd| libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    });
    let timeout_ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as i32);
    // SAFETY: `pfds` holds N pollfds, valid for reads and writes for the call,
    // and the count matches; their descriptors are borrowed, so open.
    let rc = unsafe { libc::poll(pfds.as_mut_ptr(), N as libc::nfds_t, timeout_ms) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(pfds.map(|p| p.revents != 0))
}

/// `flock(fd, how)` (`LOCK_EX`, `LOCK_SH`, `LOCK_UN`, with `LOCK_NB`).
pub fn flock(fd: BorrowedFd<'_>, how: libc::c_int) -> io::Result<()> {
    // SAFETY: flock on a borrowed, open descriptor; no memory is involved.
    if unsafe { libc::flock(fd.as_raw_fd(), how) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The system's page size in bytes (`sysconf(_SC_PAGESIZE)`; 4096 if it
/// cannot say).
pub fn page_size() -> u64 {
    // SAFETY: sysconf only reads a system constant.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(p).unwrap_or(4096).max(1)
}

/// CPU time the calling thread has run (`CLOCK_THREAD_CPUTIME_ID`): its
/// work, without the time it waited.
pub fn thread_cpu_time() -> std::time::Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec for the call's duration, and
    // CLOCK_THREAD_CPUTIME_ID is supported on every Linux melforge runs on.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    debug_assert_eq!(rc, 0);
    std::time::Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Takes an exclusive `flock` on `fd` without waiting: `Ok(false)` when
/// another open file description holds a lock on the file.
pub fn try_lock_exclusive(fd: BorrowedFd<'_>) -> io::Result<bool> {
    // SAFETY: flock on a borrowed, open descriptor; no memory is involved.
    if unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        return Ok(false);
    }
    Err(e)
}

// ------------------------------------------------------------ socket peers

/// The SO_PEERCRED credentials (pid, uid, gid at connect time) of the process
/// at the other end of the Unix socket `fd`.
pub fn peer_credentials(fd: BorrowedFd<'_>) -> io::Result<libc::ucred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: the descriptor is borrowed, so open; `cred` and `len` are valid
    // for writes and `len` holds the size of `cred`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred)
}

// ---------------------------------------------------------------- identity

/// This process's effective uid.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The gid of the group called `name` (`getgrnam_r`), `None` when there is
/// no such group.
pub fn group_id(name: &CStr) -> io::Result<Option<u32>> {
    const MAX_BUF: usize = 1 << 20;
    let mut buf = vec![0u8; 1024];
    loop {
        // SAFETY: a zeroed `group` is a valid value for getgrnam_r to fill.
        let mut grp: libc::group = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::group = std::ptr::null_mut();
        // SAFETY: `name` is NUL-terminated; `grp`, `buf` (with its true
        // length) and `result` are valid for writes for the whole call.
        let rc = unsafe {
            libc::getgrnam_r(
                name.as_ptr(),
                &mut grp,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut result,
            )
        };
        if rc == libc::ERANGE && buf.len() < MAX_BUF {
            buf.resize(buf.len() * 2, 0);
            continue;
        }
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        return Ok((!result.is_null()).then_some(grp.gr_gid));
    }
}

/// `uname`'s fields, decoded lossily as UTF-8.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uname {
    /// e.g. "Linux".
    pub sysname: String,
    /// The host name.
    pub nodename: String,
    /// e.g. "6.1.0-18-amd64".
    pub release: String,
    /// e.g. "x86_64".
    pub machine: String,
}

/// The kernel's name, release and machine, and the host name.
pub fn uname() -> io::Result<Uname> {
    // SAFETY: utsname is plain old data; all-zero is a valid value.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable utsname for the duration of the call.
    if unsafe { libc::uname(&mut u) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let s = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    Ok(Uname {
        sysname: s(&u.sysname),
        nodename: s(&u.nodename),
        release: s(&u.release),
        machine: s(&u.machine),
    })
}

// ------------------------------------------------------------------ memory

/// The soft RLIMIT_MEMLOCK in bytes, `None` when unlimited.
pub fn memlock_limit() -> io::Result<Option<u64>> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid, writable rlimit; getrlimit only writes into it.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur))
}

/// A new private anonymous read-write mapping of `len` bytes (zero-filled,
/// page-aligned), advised to use huge pages (best effort: they make pinning
/// it for DMA cheaper). Release it with [`unmap`]; until then it is leaked.
pub fn map_anonymous(len: usize) -> io::Result<NonNull<u8>> {
    // SAFETY: a fresh private anonymous mapping at an address the kernel
    // chooses; no existing memory is affected.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: advice on the range just mapped, which nothing else uses yet;
    // a failure is harmless, so it is ignored.
    let _ = unsafe { libc::madvise(p, len, libc::MADV_HUGEPAGE) };
    NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap → 0"))
}

/// Unmaps a mapping made by [`map_anonymous`].
///
/// # Safety
///
/// `ptr` and `len` must be exactly what one [`map_anonymous`] call returned
/// and was given, not unmapped before, and no reference or pointer into the
/// range may be used afterwards (the memory is gone; a later mapping may
/// reuse the addresses).
pub unsafe fn unmap(ptr: NonNull<u8>, len: usize) -> io::Result<()> {
    // SAFETY: the caller guarantees the range is one live mapping of ours that
    // nothing uses any more.
    if unsafe { libc::munmap(ptr.as_ptr().cast(), len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

// ----------------------------------------------------------- disk space

/// Reserves `len` bytes of disk blocks from `offset` without changing the
/// file size (`fallocate(FALLOC_FL_KEEP_SIZE)`): later writes into the range
/// cannot fail for lack of space. ENOSPC/EDQUOT when the space is not there;
/// EOPNOTSUPP where the filesystem cannot reserve.
pub fn reserve_blocks(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<()> {
    let (Ok(offset), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Err(io::Error::from_raw_os_error(libc::EFBIG));
    };
    loop {
        // SAFETY: the descriptor is borrowed, so open; fallocate touches only
        // the file's block map, no memory of ours.
        let rc = unsafe { libc::fallocate(fd.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, offset, len) };
        if rc == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Bytes available to an unprivileged writer on the filesystem holding `fd`
/// (`fstatvfs`: `f_bavail × f_frsize`).
pub fn available_bytes(fd: BorrowedFd<'_>) -> io::Result<u64> {
    // SAFETY: statvfs is plain data; all-zero is a valid value to overwrite.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: the descriptor is open and `st` is valid for writes.
    if unsafe { libc::fstatvfs(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}

// -------------------------------------------------------------- page cache

/// Writes out the dirty pages of the filesystem holding `fd` (`syncfs`).
pub fn syncfs(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: the descriptor is borrowed, so open; syncfs only reads it.
    if unsafe { libc::syncfs(fd.as_raw_fd()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Asks the kernel to drop the whole file's clean pages from the page cache
/// (`posix_fadvise(POSIX_FADV_DONTNEED)`).
pub fn fadvise_dontneed(fd: BorrowedFd<'_>) -> io::Result<()> {
    fadvise_dontneed_range(fd, 0, 0)
}

/// As [`fadvise_dontneed`] for the pages wholly inside `len` bytes at
/// `offset` (`len` 0: to the end of the file). Dirty pages stay.
pub fn fadvise_dontneed_range(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<()> {
    let (Ok(offset), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    };
    // SAFETY: the descriptor is borrowed, so open; fadvise only gives the
    // kernel a hint about its pages.
    let rc = unsafe { libc::posix_fadvise(fd.as_raw_fd(), offset, len, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Starts writeback of the file's dirty pages without waiting for it
/// (`sync_file_range(SYNC_FILE_RANGE_WRITE)` over the whole file).
pub fn start_writeback(fd: BorrowedFd<'_>) -> io::Result<()> {
    start_writeback_range(fd, 0, 0)
}

/// [`start_writeback`] of the `len` bytes at `offset` (0: to the end).
pub fn start_writeback_range(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<()> {
    let (Ok(offset), Ok(len)) = (
        libc::off64_t::try_from(offset),
        libc::off64_t::try_from(len),
    ) else {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    };
    // SAFETY: the descriptor is borrowed, so open; the call only schedules
    // I/O of the file's own pages.
    if unsafe { libc::sync_file_range(fd.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE) }
        != 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Pages of a file in the page cache, from `cachestat(2)` (Linux 6.5+).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct CacheStat {
    pub nr_cache: u64,
    pub nr_dirty: u64,
    pub nr_writeback: u64,
    pub nr_evicted: u64,
    pub nr_recently_evicted: u64,
}

/// `cachestat(2)` over the whole file: how many of its pages are cached. An
/// error of kind `Unsupported` (ENOSYS) on kernels before 6.5 and on
/// architectures whose syscall number is not known here.
pub fn cachestat(fd: BorrowedFd<'_>) -> io::Result<CacheStat> {
    // The same number in the x86_64 table and the generic one (aarch64, …).
    #[cfg(any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "riscv64"
    ))]
    const SYS_CACHESTAT: Option<libc::c_long> = Some(451);
    #[cfg(not(any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "riscv64"
    )))]
    const SYS_CACHESTAT: Option<libc::c_long> = None;
    let Some(nr) = SYS_CACHESTAT else {
        return Err(io::Error::from_raw_os_error(libc::ENOSYS));
    };
    // struct cachestat_range { __u64 off, len; }: len 0 is "to the end".
    let range = [0u64; 2];
    let mut out = CacheStat::default();
    let fd = libc::c_uint::try_from(fd.as_raw_fd())
        .map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: `range` and `out` are live, correctly laid out (two u64s;
    // `repr(C)` five u64s) for the duration of the call, which only reads
    // the first and writes the second.
    let rc = unsafe { libc::syscall(nr, fd, range.as_ptr(), &mut out as *mut CacheStat, 0u32) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(out)
}

/// Returns the allocator's free memory to the kernel (`malloc_trim(0)`, glibc),
/// so freed memory stops counting in the process's RSS. A no-op elsewhere.
pub fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free pages of the allocator's own
    // arenas; it touches no memory the program still holds.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Schedules every filesystem's dirty pages to be written (`sync`).
pub fn sync() {
    // SAFETY: sync has no preconditions and cannot fail.
    unsafe { libc::sync() };
}

// ---------------------------------------------------------- for tests only

/// The calling thread's CPU affinity mask, straight from the kernel
/// (`sched_getaffinity`), as sorted CPU ids.
#[cfg(test)]
pub fn thread_affinity() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain bit data; all-zero is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is the calling thread; the pointer and size describe
    // `set`, which lives across the call.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        .filter(|&c| {
            // SAFETY: c < CPU_SETSIZE, so the bit is inside `set`.
            unsafe { libc::CPU_ISSET(c, &set) }
        })
        .collect())
}

/// Sends `sig` to this process (`kill(getpid(), sig)`).
#[cfg(any(test, feature = "test-hooks"))]
pub fn kill_self(sig: i32) -> io::Result<()> {
    // SAFETY: getpid has no preconditions; kill touches no memory of ours
    // (what the signal then does is the caller's choice of signal).
    if unsafe { libc::kill(libc::getpid(), sig) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn poll_reports_which_descriptor_is_ready() {
        let (a, b) = UnixStream::pair().unwrap();
        let (c, _d) = UnixStream::pair().unwrap();
        let quick = Some(Duration::from_millis(10));
        assert_eq!(
            poll_readable([a.as_fd(), c.as_fd()], quick).unwrap(),
            [false, false]
        );
        std::io::Write::write_all(&mut &b, b"x").unwrap();
        assert_eq!(
            poll_readable([a.as_fd(), c.as_fd()], quick).unwrap(),
            [true, false]
        );
        drop(b);
        assert_eq!(poll_readable([a.as_fd()], None).unwrap(), [true]);
    }

    #[test]
    fn flock_is_exclusive_between_open_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let one = std::fs::File::create(&path).unwrap();
        let two = std::fs::File::open(&path).unwrap();
        assert!(try_lock_exclusive(one.as_fd()).unwrap());
        assert!(!try_lock_exclusive(two.as_fd()).unwrap());
        drop(one);
        assert!(try_lock_exclusive(two.as_fd()).unwrap());
    }

    #[test]
    fn peer_credentials_name_this_process() {
        let (a, _b) = UnixStream::pair().unwrap();
        let cred = peer_credentials(a.as_fd()).unwrap();
        assert_eq!(cred.pid as u32, std::process::id());
        assert_eq!(cred.uid, effective_uid());
    }

    #[test]
    fn groups_and_uname_answer() {
        assert_eq!(group_id(c"root").unwrap(), Some(0));
        assert_eq!(group_id(c"no-such-group-melforge").unwrap(), None);
        let u = uname().unwrap();
        assert_eq!(u.sysname, "Linux");
        assert!(!u.release.is_empty() && !u.machine.is_empty());
    }

    #[test]
    fn anonymous_mapping_is_zeroed_and_writable() {
        let len = 3 * 4096;
        let p = map_anonymous(len).unwrap();
        assert_eq!(p.as_ptr() as usize % 4096, 0);
        // SAFETY: the range was just mapped read-write, is zero-filled and used
        // by nothing else; the slice is gone before the unmap.
        let bytes = unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), len) };
        assert!(bytes.iter().all(|&b| b == 0));
        bytes[len - 1] = 7;
        // SAFETY: exactly the mapping made above, no longer referenced.
        unsafe { unmap(p, len) }.unwrap();
        assert!(map_anonymous(0).is_err(), "mmap refuses a zero length");
    }

    #[test]
    fn signal_numbers_are_checked() {
        assert!(sigset(&[libc::SIGHUP, libc::SIGTERM]).is_ok());
        assert!(sigset(&[100_000]).is_err());
    }
}
