//! What a drain cost the machine, read from `/proc`: the walsender's time on a CPU and
//! waiting for one (`/proc/<pid>/schedstat`), and the machine's busy cores beside this
//! process's (`/proc/stat`, `/proc/self/stat`). Linux only; where `/proc` says nothing, the
//! figure is left out rather than guessed.

use std::time::{Duration, Instant};

use ra_ledger::db;

/// The walsender over a drain: its CPU, the time it was ready to run and waited for a CPU,
/// from `/proc/<pid>/schedstat` (the bench runs beside the stack's PostgreSQL), and how
/// often it waited for its client to read, from its wait event in `pg_stat_activity`.
///
/// Together they say which end a drain waits on. A walsender at one core is not proof that
/// the slot is at its ceiling: its CPU a row says how much of that core went into decoding
/// and how much into waking for its client ([`SlotCeiling`](super::ceilings::SlotCeiling)). Under the relay on 2 cores
/// (2026-12-03) the walsender ran half a core, waited 0.20-0.27 of the drain for a CPU the
/// other processes held, and 0.09-0.15 for the relay to read what it had sent: the
/// machine's CPU, not PostgreSQL's decoding, set the pace.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct WalsenderTime {
    /// CPU seconds per wall second; `None` when the walsender could not be read.
    pub(super) cores: Option<f64>,
    /// Seconds per wall second it was ready to run and waited for a CPU.
    pub(super) waiting_for_cpu: Option<f64>,
    /// The share of samples in which it waited for its client to read
    /// (`WalSenderWriteData`); `None` without samples.
    pub(super) waiting_for_client: Option<f64>,
}

impl WalsenderTime {
    /// Its cores and its CPU a row at `rate` rows/s, and what it waited for.
    pub(super) fn describe(&self, rate: f64) -> String {
        let cpu = match self.cores {
            Some(cores) if rate > 0.0 => {
                format!("{cores:.2} cores, {:.1} µs CPU a row", cores / rate * 1e6)
            }
            Some(cores) => format!("{cores:.2} cores"),
            None => "CPU not read (is PostgreSQL on this machine?)".to_owned(),
        };
        let waits: Vec<String> = [
            self.waiting_for_cpu
                .map(|share| format!("{share:.2} for a CPU")),
            self.waiting_for_client
                .map(|share| format!("{share:.2} for its client to read")),
        ]
        .into_iter()
        .flatten()
        .collect();
        if waits.is_empty() {
            cpu
        } else {
            format!("{cpu}; of the drain, waited {}", waits.join(" and "))
        }
    }
}

/// Samples the walsender of a slot every 20 ms once a client holds it, from its first
/// sight to its last: a drain's walsender exits when its client is done, so the last sample
/// before that stands for the end.
pub(super) struct WalsenderSampler {
    stop: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<Option<WalsenderSamples>>,
}

/// What [`WalsenderSampler`] saw.
struct WalsenderSamples {
    /// Its scheduler times at the first and the last sample, and when they were read.
    first: Option<(SchedTimes, Instant)>,
    last: Option<(SchedTimes, Instant)>,
    /// Samples of its wait event, and those waiting for its client.
    events: u32,
    writing: u32,
}

impl WalsenderSampler {
    pub(super) async fn start(url: &str, slot: &str) -> anyhow::Result<Self> {
        let client = db::connect(url, "ledger-bench-walsender").await?;
        let slot = slot.to_owned();
        let stop = tokio_util::sync::CancellationToken::new();
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            let pid = loop {
                let pid: Option<i32> = client
                    .query_opt(
                        "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1",
                        &[&slot],
                    )
                    .await
                    .ok()
                    .flatten()
                    .and_then(|row| row.get(0));
                if let Some(pid) = pid {
                    break pid;
                }
                if Instant::now() > deadline || stopped.is_cancelled() {
                    return None;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            };
            // A PostgreSQL on another machine has its own pids: read only a local walsender.
            let local = u32::try_from(pid).ok().filter(|pid| is_walsender(*pid));
            let times = || Some((local.and_then(sched_times)?, Instant::now()));
            let mut samples = WalsenderSamples {
                first: times(),
                last: None,
                events: 0,
                writing: 0,
            };
            loop {
                // One statement, one snapshot: each reads the wait event afresh.
                let event = client
                    .query_opt(
                        "SELECT coalesce(wait_event, '') FROM pg_stat_activity WHERE pid = $1",
                        &[&pid],
                    )
                    .await
                    .ok()
                    .flatten();
                let Some(event) = event else { break };
                let event: String = event.get(0);
                samples.events += 1;
                samples.writing += u32::from(event == "WalSenderWriteData");
                samples.last = times().or(samples.last);
                tokio::select! {
                    () = stopped.cancelled() => break,
                    () = tokio::time::sleep(Duration::from_millis(20)) => {}
                }
            }
            Some(samples)
        });
        Ok(Self { stop, task })
    }

    /// The walsender from its first sample to its last.
    pub(super) async fn finish(self) -> WalsenderTime {
        self.stop.cancel();
        let Ok(Some(samples)) = self.task.await else {
            return WalsenderTime::default();
        };
        let waiting_for_client =
            (samples.events > 0).then(|| f64::from(samples.writing) / f64::from(samples.events));
        let (Some((first, from)), Some((last, to))) = (samples.first, samples.last) else {
            return WalsenderTime {
                waiting_for_client,
                ..WalsenderTime::default()
            };
        };
        let seconds = to.duration_since(from).as_secs_f64();
        let share = |nanos: u64| (seconds > 0.0).then(|| nanos as f64 / 1e9 / seconds);
        WalsenderTime {
            cores: share(last.running.saturating_sub(first.running)),
            waiting_for_cpu: share(last.waiting.saturating_sub(first.waiting)),
            waiting_for_client,
        }
    }
}

/// A process's time on a CPU and ready to run but waiting for one, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SchedTimes {
    running: u64,
    waiting: u64,
}

/// Whether `pid` is a walsender process on this machine.
fn is_walsender(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|title| walsender_title(&title))
}

/// Whether a process title (`/proc/<pid>/cmdline`) is a walsender's: PostgreSQL titles it
/// `postgres: [<cluster_name>: ]walsender <user> <client> <command>`.
fn walsender_title(title: &[u8]) -> bool {
    let Some(rest) = title.strip_prefix(b"postgres: ") else {
        return false;
    };
    let word = b"walsender ";
    rest.windows(word.len()).any(|window| window == word)
}

/// [`SchedTimes`] of `pid`, from `/proc/<pid>/schedstat`.
fn sched_times(pid: u32) -> Option<SchedTimes> {
    parse_schedstat(&std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?)
}

/// [`SchedTimes`] of the text of a `/proc/<pid>/schedstat`: time on a CPU, time waiting in
/// the run queue, time slices.
fn parse_schedstat(text: &str) -> Option<SchedTimes> {
    let mut fields = text.split_whitespace().map(str::parse::<u64>);
    Some(SchedTimes {
        running: fields.next()?.ok()?,
        waiting: fields.next()?.ok()?,
    })
}

/// The machine's busy cores and this process's over a stretch (the relay runs in this
/// process), from `/proc/stat` and `/proc/self/stat`. With every core busy, a drain is bound
/// by the CPU that PostgreSQL, the broker and the relay share, not by either end alone.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct CpuUse {
    /// Busy cores of the machine; `None` when `/proc/stat` could not be read.
    pub(super) machine: Option<f64>,
    /// The machine's cores.
    pub(super) cores: usize,
    /// This process's cores.
    pub(super) process: Option<f64>,
}

impl CpuUse {
    /// What it says; with `relay_rate` (rows/s, when this process ran the relay), the
    /// relay's cores and CPU a row too.
    pub(super) fn describe(&self, relay_rate: Option<f64>) -> String {
        let machine = match self.machine {
            Some(busy) => format!("machine {busy:.2} of {} cores busy", self.cores),
            None => "machine CPU not read".to_owned(),
        };
        match (self.process, relay_rate) {
            (Some(process), Some(rate)) if rate > 0.0 => format!(
                "{machine}; relay {process:.2} cores, {:.1} µs CPU a row",
                process / rate * 1e6
            ),
            _ => machine,
        }
    }
}

/// Where [`CpuUse`] starts counting.
pub(super) struct CpuClock {
    machine: Option<MachineTicks>,
    process: Option<u64>,
    at: Instant,
}

impl CpuClock {
    pub(super) fn start() -> Self {
        Self {
            machine: machine_ticks(),
            process: cpu_ticks(std::process::id()),
            at: Instant::now(),
        }
    }

    pub(super) fn finish(self) -> CpuUse {
        let seconds = self.at.elapsed().as_secs_f64();
        let end = machine_ticks();
        // /proc counts in USER_HZ, 100 a second on Linux.
        let cores = |ticks: u64| (seconds > 0.0).then(|| ticks as f64 / 100.0 / seconds);
        let machine = match (self.machine, end) {
            (Some(from), Some(to)) => cores(to.busy.saturating_sub(from.busy)),
            _ => None,
        };
        let process = match (self.process, cpu_ticks(std::process::id())) {
            (Some(from), Some(to)) => cores(to.saturating_sub(from)),
            _ => None,
        };
        CpuUse {
            machine,
            cores: end.map_or(0, |ticks| ticks.cores),
            process,
        }
    }
}

/// The machine's busy ticks, all cores together, and how many cores it has.
#[derive(Debug, Clone, Copy)]
struct MachineTicks {
    busy: u64,
    cores: usize,
}

/// From `/proc/stat`: busy is every state but idle and iowait (and guest time, which user
/// time already counts).
fn machine_ticks() -> Option<MachineTicks> {
    parse_machine_ticks(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// [`machine_ticks`] of the text of `/proc/stat`.
fn parse_machine_ticks(stat: &str) -> Option<MachineTicks> {
    let total = stat.lines().next()?.strip_prefix("cpu ")?;
    let ticks: Vec<u64> = total
        .split_whitespace()
        .map(|field| field.parse().ok())
        .collect::<Option<_>>()?;
    let busy = ticks
        .iter()
        .take(8)
        .enumerate()
        .filter(|(state, _)| !matches!(state, 3 | 4))
        .map(|(_, ticks)| ticks)
        .sum();
    let cores = stat
        .lines()
        .filter(|line| {
            line.starts_with("cpu") && line.as_bytes().get(3).is_some_and(u8::is_ascii_digit)
        })
        .count();
    Some(MachineTicks { busy, cores })
}

/// utime + stime of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command may hold spaces: fields count from after its closing parenthesis.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walsender_is_described_by_its_cores_its_cpu_a_row_and_its_waits() {
        let cpu = WalsenderTime {
            cores: Some(0.5),
            ..WalsenderTime::default()
        };
        assert_eq!(cpu.describe(100_000.0), "0.50 cores, 5.0 µs CPU a row");
        assert_eq!(cpu.describe(0.0), "0.50 cores");
        assert!(WalsenderTime::default().describe(1.0).contains("not read"));
        let waiting = WalsenderTime {
            cores: Some(0.5),
            waiting_for_cpu: Some(0.2),
            waiting_for_client: Some(0.15),
        };
        assert_eq!(
            waiting.describe(100_000.0),
            "0.50 cores, 5.0 µs CPU a row; of the drain, waited 0.20 for a CPU and 0.15 for its client to read"
        );
        let remote = WalsenderTime {
            waiting_for_client: Some(0.05),
            ..WalsenderTime::default()
        };
        assert_eq!(
            remote.describe(1.0),
            "CPU not read (is PostgreSQL on this machine?); of the drain, waited 0.05 for its client to read"
        );
    }

    #[test]
    fn only_a_walsender_is_read_as_one() {
        assert!(walsender_title(
            b"postgres: walsender ledger 127.0.0.1(56344) START_REPLICATION\0\0"
        ));
        assert!(walsender_title(
            b"postgres: 15/main: walsender ledger [local] idle\0"
        ));
        assert!(!walsender_title(b"postgres: checkpointer \0"));
        assert!(!walsender_title(b"/usr/bin/walsender-lookalike\0"));
        assert!(
            !is_walsender(std::process::id()),
            "this test is no walsender"
        );
        assert!(!is_walsender(u32::MAX), "no such process");
    }

    #[test]
    fn schedstat_gives_the_time_on_a_cpu_and_the_time_waiting_for_one() {
        assert_eq!(
            parse_schedstat("1462879794 404313075 871\n"),
            Some(SchedTimes {
                running: 1_462_879_794,
                waiting: 404_313_075,
            })
        );
        assert_eq!(parse_schedstat("12\n"), None);
        assert_eq!(parse_schedstat("x 1 2\n"), None);
    }

    #[test]
    fn the_machine_is_busy_in_every_state_but_idle_and_iowait() {
        // user nice system idle iowait irq softirq steal guest guest_nice
        let stat = "cpu  100 20 30 4000 50 6 7 8 90 10\n\
                    cpu0 50 10 15 2000 25 3 3 4 45 5\n\
                    cpu1 50 10 15 2000 25 3 4 4 45 5\n\
                    intr 12345\n\
                    cpufreq 1\n";
        let ticks = parse_machine_ticks(stat).unwrap();
        assert_eq!(ticks.busy, 100 + 20 + 30 + 6 + 7 + 8);
        assert_eq!(ticks.cores, 2);
        assert!(parse_machine_ticks("intr 1\n").is_none());
        assert!(parse_machine_ticks("cpu  1 x 3\n").is_none());
    }
}
