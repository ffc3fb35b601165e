//! Thin safe wrappers over the few OS calls the runtime needs (host name, CPU affinity, pid liveness).
#![allow(unsafe_code)]

use std::io;

/// The host name exactly as `gethostname(2)` returns it: eCAL compares it byte for byte.
pub(crate) fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is a valid writable buffer of the length passed; gethostname writes at most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::from("localhost");
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Pin the calling thread to the given CPUs.
pub(crate) fn set_current_thread_affinity(cpus: &[usize]) -> io::Result<()> {
    if cpus.is_empty() {
        return Ok(());
    }
    // SAFETY: cpu_set_t is a plain bit array for which all-zero is a valid (empty) value.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("cpu {cpu} out of range")));
        }
        // SAFETY: `cpu` is below CPU_SETSIZE, so CPU_SET writes inside `set`.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: pid 0 means the calling thread; `set` is a valid cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// The full path of the running executable (eCAL's `process_name`).
pub(crate) fn current_exe_name() -> String {
    std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_else(|_| String::from("unknown"))
}

/// The process command line, arguments joined by spaces.
pub(crate) fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

/// True while a process with this pid exists (`kill(pid, 0)` does not fail with ESRCH).
pub(crate) fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 performs only the existence and permission checks; nothing is delivered.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}
