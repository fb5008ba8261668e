//! What the kernel says a process holds, read from `/proc`: its open file descriptors, its TCP
//! sockets by state (the socket inodes its `/proc/PID/fd` links name, joined to the entries of
//! `/proc/PID/net/tcp` and `tcp6`, which list every socket of its network namespace), its
//! threads and its resident memory (now, and at its peak). The churn tests read a server child
//! process with it, and `benches/churn/run.sh` prints what it reads.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;

/// One reading of a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holdings {
    /// Open file descriptors.
    pub fds: usize,
    /// Its TCP sockets, by state (`ESTABLISHED`, `LISTEN`, `CLOSE_WAIT`, …); its other sockets
    /// (Unix, UDP) are not counted here.
    pub tcp: BTreeMap<&'static str, usize>,
    /// `Threads:` of `/proc/PID/status`.
    pub threads: usize,
    /// `VmRSS:` of `/proc/PID/status`, in KiB.
    pub rss_kib: u64,
    /// `VmHWM:` of `/proc/PID/status`: the most it was ever resident, in KiB.
    pub peak_rss_kib: u64,
}

impl Holdings {
    /// Reads process `pid` now.
    pub fn of(pid: u32) -> Holdings {
        let inodes = socket_inodes(pid);
        let mut tcp = BTreeMap::new();
        for table in ["tcp", "tcp6"] {
            let Ok(text) = fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
                continue;
            };
            for (state, inode) in text.lines().skip(1).filter_map(tcp_entry) {
                if inodes.sockets.contains(&inode) {
                    *tcp.entry(state_name(state)).or_default() += 1;
                }
            }
        }
        let status = fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
        Holdings {
            fds: inodes.fds,
            tcp,
            threads: status_field(&status, "Threads:") as usize,
            rss_kib: status_field(&status, "VmRSS:"),
            peak_rss_kib: status_field(&status, "VmHWM:"),
        }
    }

    /// Its TCP sockets in `state`.
    pub fn in_state(&self, state: &str) -> usize {
        self.tcp.get(state).copied().unwrap_or(0)
    }
}

impl fmt::Display for Holdings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tcp: Vec<String> = self.tcp.iter().map(|(s, n)| format!("{s} {n}")).collect();
        write!(
            f,
            "fds {}, tcp [{}], threads {}, rss {} KiB (peak {} KiB)",
            self.fds,
            tcp.join(", "),
            self.threads,
            self.rss_kib,
            self.peak_rss_kib
        )
    }
}

/// A process's descriptors: how many, and the inodes of those that are sockets.
struct Descriptors {
    fds: usize,
    sockets: BTreeSet<u64>,
}

fn socket_inodes(pid: u32) -> Descriptors {
    let entries =
        fs::read_dir(format!("/proc/{pid}/fd")).unwrap_or_else(|e| panic!("/proc/{pid}/fd: {e}"));
    let mut fds = 0;
    let mut sockets = BTreeSet::new();
    for entry in entries.flatten() {
        fds += 1;
        // A descriptor closed between the listing and this read is simply not there.
        let Ok(target) = fs::read_link(entry.path()) else {
            continue;
        };
        if let Some(inode) = target
            .to_str()
            .and_then(|t| t.strip_prefix("socket:["))
            .and_then(|t| t.strip_suffix(']'))
            .and_then(|t| t.parse().ok())
        {
            sockets.insert(inode);
        }
    }
    Descriptors { fds, sockets }
}

/// The state (hex) and inode of one line of `/proc/net/tcp`:
/// `sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...`.
fn tcp_entry(line: &str) -> Option<(u8, u64)> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let state = u8::from_str_radix(fields.get(3)?, 16).ok()?;
    let inode = fields.get(9)?.parse().ok()?;
    Some((state, inode))
}

/// The kernel's names of the TCP states (`include/net/tcp_states.h`).
fn state_name(state: u8) -> &'static str {
    match state {
        0x01 => "ESTABLISHED",
        0x02 => "SYN_SENT",
        0x03 => "SYN_RECV",
        0x04 => "FIN_WAIT1",
        0x05 => "FIN_WAIT2",
        0x06 => "TIME_WAIT",
        0x07 => "CLOSE",
        0x08 => "CLOSE_WAIT",
        0x09 => "LAST_ACK",
        0x0A => "LISTEN",
        0x0B => "CLOSING",
        _ => "OTHER",
    }
}

/// A number field of `/proc/PID/status` (`Threads:`, `VmRSS:` in KiB).
fn status_field(status: &str, name: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /proc status"))
}

#[test]
fn this_process_is_read_and_its_sockets_counted_by_state() {
    let before = Holdings::of(std::process::id());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    drop(server);
    // The other test threads open and close sockets meanwhile: only what this test holds for
    // sure is checked.
    let now = Holdings::of(std::process::id());
    assert!(now.in_state("LISTEN") >= 1, "{now}");
    assert!(now.threads >= 1 && now.rss_kib > 0, "{now}");
    assert!(before.fds > 0);
    // The peer closed: the client's socket waits in CLOSE_WAIT until it is closed here (the
    // peer's end reaches it over loopback within moments).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while Holdings::of(std::process::id()).in_state("CLOSE_WAIT") == 0 {
        assert!(std::time::Instant::now() < deadline, "no CLOSE_WAIT socket");
        std::thread::yield_now();
    }
    drop(client);
}
