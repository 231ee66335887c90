//! CPU seconds spent by processes, read from `/proc` (Linux only): one process, or a
//! process with its children (a PostgreSQL server: the postmaster forks a backend per
//! connection), or the process listening on a TCP port (a Kafka broker). A figure in CPU
//! seconds says what a piece of work cost whatever else the machine ran meanwhile, which a
//! throughput does not on a shared machine.

use std::collections::HashSet;

/// A set of processes whose CPU seconds are summed.
#[derive(Debug, Clone, Default)]
pub struct Meter {
    /// Processes counted alone.
    alone: Vec<u32>,
    /// Processes counted with their children, those alive and those reaped.
    trees: Vec<u32>,
}

impl Meter {
    /// Counts process `pid` alone.
    pub fn process(mut self, pid: u32) -> Self {
        self.alone.push(pid);
        self
    }

    /// Counts process `pid` and its children: those alive now, and through the parent's
    /// `cutime`/`cstime`, those it reaped. A child counted alive at one reading and reaped at
    /// the next is counted once, in either.
    pub fn tree(mut self, pid: u32) -> Self {
        self.trees.push(pid);
        self
    }

    /// The CPU seconds (user and system) these processes spent so far.
    pub fn seconds(&self) -> anyhow::Result<f64> {
        let mut ticks = 0;
        for pid in &self.alone {
            ticks += read(*pid)?.own;
        }
        if !self.trees.is_empty() {
            let parents: HashSet<u32> = self.trees.iter().copied().collect();
            for pid in &self.trees {
                let stat = read(*pid)?;
                ticks += stat.own + stat.children;
            }
            for (pid, _) in processes()? {
                // A process that exited since the listing is reaped: its parent counts it.
                if let Ok(stat) = read(pid)
                    && parents.contains(&stat.parent)
                {
                    ticks += stat.own;
                }
            }
        }
        Ok(ticks as f64 / clock_ticks_per_second())
    }
}

/// User plus system CPU seconds of process `pid`.
pub fn process_seconds(pid: u32) -> anyhow::Result<f64> {
    Ok(read(pid)?.own as f64 / clock_ticks_per_second())
}

/// The parent of process `pid`.
pub fn parent(pid: u32) -> anyhow::Result<u32> {
    Ok(read(pid)?.parent)
}

/// The process listening on TCP `port` (IPv4 or IPv6), from `/proc/net/tcp*` and each
/// process's open sockets; `None` when no process of this machine listens there (a remote
/// server) or its sockets cannot be read.
pub fn listening_on(port: u16) -> Option<u32> {
    let mut inodes = HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        if let Ok(text) = std::fs::read_to_string(table) {
            inodes.extend(listening_inodes(&text, port));
        }
    }
    if inodes.is_empty() {
        return None;
    }
    for (pid, dir) in processes().ok()? {
        let Ok(fds) = std::fs::read_dir(dir.join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let target = target.to_string_lossy();
            if let Some(inode) = target
                .strip_prefix("socket:[")
                .and_then(|rest| rest.strip_suffix(']'))
                .and_then(|inode| inode.parse::<u64>().ok())
                && inodes.contains(&inode)
            {
                return Some(pid);
            }
        }
    }
    None
}

/// Every process of this machine: its id and its folder in `/proc`.
fn processes() -> std::io::Result<impl Iterator<Item = (u32, std::path::PathBuf)>> {
    Ok(std::fs::read_dir("/proc")?.flatten().filter_map(|entry| {
        let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
        Some((pid, entry.path()))
    }))
}

/// The inodes of the sockets listening on `port` in a `/proc/net/tcp` table. Pure.
fn listening_inodes(table: &str, port: u16) -> Vec<u64> {
    const LISTEN: &str = "0A";
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local_port = fields.get(1)?.rsplit_once(':')?.1;
            let listening = *fields.get(3)? == LISTEN;
            (listening && u16::from_str_radix(local_port, 16).ok()? == port)
                .then(|| fields.get(9)?.parse().ok())
                .flatten()
        })
        .collect()
}

/// What `/proc/<pid>/stat` says of a process's CPU, in clock ticks.
struct Stat {
    parent: u32,
    /// utime + stime.
    own: u64,
    /// cutime + cstime: its reaped children's.
    children: u64,
}

fn read(pid: u32) -> anyhow::Result<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_stat(&text)
        .ok_or_else(|| anyhow::anyhow!("cannot read the CPU times in /proc/{pid}/stat"))
}

/// Fields 4 (the parent), 14-15 (utime, stime) and 16-17 (cutime, cstime) of a
/// `/proc/<pid>/stat` line. The command name (field 2) may hold spaces and parentheses, so
/// fields are counted after its last `)`. Pure.
fn parse_stat(stat: &str) -> Option<Stat> {
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    // fields[0] is field 3 (the state).
    let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    Some(Stat {
        parent: u32::try_from(field(4)?).ok()?,
        own: field(14)? + field(15)?,
        children: field(16)? + field(17)?,
    })
}

/// The kernel's USER_HZ, which /proc counts CPU time in: `getconf CLK_TCK`, 100 where
/// that cannot be run (what Linux uses on every architecture it supports).
fn clock_ticks_per_second() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|output| String::from_utf8(output.stdout).ok())
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_parent_and_the_cpu_times_after_the_command_name() {
        let stat =
            "4242 (java (x) y) S 17 4242 4242 0 -1 4194560 100 0 0 0 731 269 40 2 20 0 40 0 1";
        let parsed = parse_stat(stat).expect("parsed");
        assert_eq!(
            (parsed.parent, parsed.own, parsed.children),
            (17, 1_000, 42)
        );
        assert!(parse_stat("4242 (java").is_none());
    }

    #[test]
    fn finds_the_listening_socket_of_a_port_and_not_a_connection_to_it() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:2384 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1111 1 0000000000000000 100 0 0 10 0
   1: 0100007F:C350 0100007F:2384 01 00000000:00000000 00:00000000 00000000     0        0 2222 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:2385 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3333 1 0000000000000000 100 0 0 10 0";
        assert_eq!(listening_inodes(table, 0x2384), [1111]);
        assert!(listening_inodes(table, 0xC350).is_empty());
    }

    #[test]
    fn this_process_spends_cpu_and_the_meter_counts_it() {
        let meter = Meter::default().process(std::process::id());
        let before = meter.seconds().expect("read");
        // Spins until the kernel counted a tick more: at once on a quiet machine, later on
        // a loaded one; never for 30 s unless the meter reads nothing.
        let started = std::time::Instant::now();
        let mut x = 0u64;
        while meter.seconds().expect("read") <= before {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(30),
                "no CPU counted"
            );
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
        }
    }
}
