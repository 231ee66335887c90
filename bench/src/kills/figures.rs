//! What `ledger-bench kills` saw, turned into its figures: pure, no I/O.
//!
//! The consumer's receipt of an event stands in for Kafka's acknowledgement of it (the
//! consumer fetches every 5 ms at most, so an acknowledgement is a few milliseconds
//! earlier), and the sampler's readings of `confirmed_flush_lsn` for what PostgreSQL holds
//! (read every [`super::SAMPLE_EVERY`], so a confirmation is up to that much earlier).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::figures::Latencies;

/// One message as the consumer got it.
#[derive(Debug, Clone)]
pub struct Receipt {
    /// The `id` header.
    pub id: String,
    /// The `commit_lsn` header.
    pub commit_lsn: u64,
    /// The `commit_timestamp` header, microseconds since the Unix epoch.
    pub commit_micros: i64,
    /// When the consumer got it.
    pub at: Instant,
}

/// One reading of the slot.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// When it was read.
    pub at: Instant,
    /// `confirmed_flush_lsn`.
    pub confirmed: u64,
}

/// One kill -9 and the restart after it.
#[derive(Debug, Clone, Copy)]
pub struct Kill {
    /// The moment SIGKILL was sent.
    pub at: Instant,
    /// The moment the next process was started.
    pub restarted: Instant,
    /// The slot's confirmed position once the killed relay's walsender let it go.
    pub confirmed: u64,
}

/// One kill's figures.
#[derive(Debug, Clone, Copy)]
pub struct KillFigures {
    /// How long the killed process had run.
    pub life: Duration,
    /// Events the consumer had before the kill that lay past the slot's confirmed position:
    /// what the next relay sends again (less the few acknowledged but not yet read).
    pub past_confirmed: usize,
    /// The commit time from the newest event within the confirmed position to the newest
    /// event the consumer had: how far the slot trailed Kafka, in the writer's time.
    pub trailing: Option<Duration>,
    /// Copies of events already received, read between this restart and the next kill.
    pub duplicates: usize,
    /// From the restart to the first of those copies: the next relay's start, to the
    /// moment it sends again what the slot had not confirmed.
    pub resent: Option<Duration>,
    /// From the restart to the slot's first move past the position left by the kill.
    pub first_move: Option<Duration>,
}

/// Every figure of a run.
#[derive(Debug, Clone)]
pub struct Figures {
    /// Events written.
    pub written: usize,
    /// Messages received, copies included.
    pub received: usize,
    /// Written events never received.
    pub lost: usize,
    /// Messages whose event had been received before.
    pub duplicates: usize,
    /// Each kill's.
    pub kills: Vec<KillFigures>,
    /// Receipt of an event -> the first reading of the slot past it, for each event
    /// confirmed by the relay that sent it.
    pub receipt_to_confirmed: Option<Latencies>,
    /// Events a kill cut off before the relay that sent them confirmed them.
    pub cut_by_kills: usize,
    /// Between two moves of the slot within one process's life: the cadence of the status
    /// updates that reached PostgreSQL.
    pub moves: Option<Latencies>,
}

impl Figures {
    /// Duplicates per kill.
    pub fn per_kill(&self) -> f64 {
        self.duplicates as f64 / self.kills.len().max(1) as f64
    }
}

/// The figures of a run that started its first process at `started`, killed and restarted
/// it as `kills` says (in order), wrote `written` and received `receipts` (in arrival
/// order) while the slot read as `samples` (in time order).
pub fn figures(
    started: Instant,
    written: &HashSet<String>,
    receipts: &[Receipt],
    samples: &[Sample],
    kills: &[Kill],
) -> Figures {
    let mut seen: HashSet<&str> = HashSet::with_capacity(receipts.len());
    // First copies, and the arrival of each copy that came again.
    let mut first: Vec<&Receipt> = Vec::with_capacity(receipts.len());
    let mut again: Vec<Instant> = Vec::new();
    for receipt in receipts {
        if seen.insert(&receipt.id) {
            first.push(receipt);
        } else {
            again.push(receipt.at);
        }
    }
    let lost = written
        .iter()
        .filter(|id| !seen.contains(id.as_str()))
        .count();
    let lives = Lives::new(started, kills);
    let per_kill = kills
        .iter()
        .enumerate()
        .map(|(index, kill)| {
            let next_kill = kills.get(index + 1).map(|next| next.at);
            kill_figures(
                kill,
                lives.starts[index],
                next_kill,
                &first,
                &again,
                samples,
            )
        })
        .collect();
    let (delays, cut_by_kills) = receipt_to_confirmed(&first, samples, &lives);
    Figures {
        written: written.len(),
        received: receipts.len(),
        lost,
        duplicates: again.len(),
        kills: per_kill,
        receipt_to_confirmed: Latencies::from_samples(delays),
        cut_by_kills,
        moves: Latencies::from_samples(cadence(samples, &lives)),
    }
}

/// Each life of the relay: from a start to the kill that ended it (the last one has none).
struct Lives {
    starts: Vec<Instant>,
    ends: Vec<Option<Instant>>,
}

impl Lives {
    fn new(started: Instant, kills: &[Kill]) -> Self {
        Self {
            starts: std::iter::once(started)
                .chain(kills.iter().map(|kill| kill.restarted))
                .collect(),
            ends: kills
                .iter()
                .map(|kill| Some(kill.at))
                .chain(std::iter::once(None))
                .collect(),
        }
    }

    /// The life `at` falls in, if it is after the first start.
    fn of(&self, at: Instant) -> Option<usize> {
        self.starts.iter().rposition(|start| *start <= at)
    }
}

/// One kill's figures: the life it ended (begun at `life_started`), what was received past
/// the slot's confirmed position before it, and the copies that arrived after the restart
/// and before the next kill (at `next_kill`).
fn kill_figures(
    kill: &Kill,
    life_started: Instant,
    next_kill: Option<Instant>,
    first: &[&Receipt],
    again: &[Instant],
    samples: &[Sample],
) -> KillFigures {
    let before: Vec<&&Receipt> = first.iter().filter(|r| r.at <= kill.at).collect();
    let past: Vec<&&Receipt> = before
        .iter()
        .filter(|r| r.commit_lsn >= kill.confirmed)
        .copied()
        .collect();
    let newest_within = before
        .iter()
        .filter(|r| r.commit_lsn < kill.confirmed)
        .map(|r| r.commit_micros)
        .max();
    let newest = past.iter().map(|r| r.commit_micros).max();
    let trailing = match (newest_within, newest) {
        (Some(within), Some(newest)) => Some(micros(newest - within)),
        (Some(_), None) => Some(Duration::ZERO),
        _ => None,
    };
    let copies: Vec<&Instant> = again
        .iter()
        .filter(|at| **at >= kill.restarted && next_kill.is_none_or(|next| **at < next))
        .collect();
    let resent = copies
        .iter()
        .min()
        .map(|at| at.saturating_duration_since(kill.restarted));
    let first_move = samples
        .iter()
        .find(|s| s.at >= kill.restarted && s.confirmed > kill.confirmed)
        .map(|s| s.at.saturating_duration_since(kill.restarted));
    KillFigures {
        life: kill.at.saturating_duration_since(life_started),
        past_confirmed: past.len(),
        trailing,
        duplicates: copies.len(),
        resent,
        first_move,
    }
}

/// From each first receipt to the first reading of the slot past it, within its life; and
/// how many lives' kills came first.
fn receipt_to_confirmed(
    first: &[&Receipt],
    samples: &[Sample],
    lives: &Lives,
) -> (Vec<Duration>, usize) {
    let mut delays = Vec::with_capacity(first.len());
    let mut cut_by_kills = 0;
    for receipt in first {
        let Some(life) = lives.of(receipt.at) else {
            continue;
        };
        // The first reading past the event: the slot only moves forward.
        let index = samples.partition_point(|s| s.confirmed <= receipt.commit_lsn);
        let confirmed_at = samples.get(index).map(|s| s.at);
        match (confirmed_at, lives.ends[life]) {
            (Some(at), end) if end.is_none_or(|end| at <= end) => {
                delays.push(at.saturating_duration_since(receipt.at));
            }
            (_, Some(_)) => cut_by_kills += 1,
            // Not confirmed by the end of the run: nothing to say.
            (None, None) => {}
            (Some(_), None) => unreachable!("the last life has no end"),
        }
    }
    (delays, cut_by_kills)
}

/// The time between two moves of the slot's confirmed position within one life.
fn cadence(samples: &[Sample], lives: &Lives) -> Vec<Duration> {
    let mut moves = Vec::new();
    for pair in samples.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if b.confirmed > a.confirmed && lives.of(a.at).is_some() && lives.of(a.at) == lives.of(b.at)
        {
            moves.push(b.at);
        }
    }
    moves
        .windows(2)
        .filter(|pair| lives.of(pair[0]) == lives.of(pair[1]))
        .map(|pair| pair[1].saturating_duration_since(pair[0]))
        .collect()
}

fn micros(micros: i64) -> Duration {
    Duration::from_micros(micros.max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    #[test]
    fn a_kill_costs_what_kafka_had_past_the_confirmed_position() {
        let start = Instant::now();
        // Events 1..=4 at LSNs 10..=40, committed 100 ms apart, each read 10 ms later.
        let event = |n: u64, at: u64| Receipt {
            id: format!("e{n}"),
            commit_lsn: n * 10,
            commit_micros: (n * 100_000) as i64,
            at: ms(start, at),
        };
        let receipts = vec![
            event(1, 110),
            event(2, 210),
            event(3, 310),
            // The kill at 350 ms, the restart at 400: 2 and 3 come again, then 4.
            event(2, 500),
            event(3, 510),
            event(4, 520),
        ];
        let samples = [
            Sample {
                at: ms(start, 150),
                confirmed: 15,
            },
            Sample {
                at: ms(start, 600),
                confirmed: 45,
            },
        ];
        let kills = [Kill {
            at: ms(start, 350),
            restarted: ms(start, 400),
            confirmed: 15,
        }];
        let written: HashSet<String> = (1..=5).map(|n| format!("e{n}")).collect();
        let figures = figures(start, &written, &receipts, &samples, &kills);
        assert_eq!(figures.written, 5);
        assert_eq!(figures.received, 6);
        assert_eq!(figures.lost, 1, "e5 never came");
        assert_eq!(figures.duplicates, 2);
        assert_eq!(figures.per_kill(), 2.0);
        let kill = figures.kills[0];
        assert_eq!(kill.life, Duration::from_millis(350));
        assert_eq!(kill.past_confirmed, 2, "e2 and e3 lay past LSN 15");
        assert_eq!(
            kill.trailing,
            Some(Duration::from_millis(200)),
            "e1 confirmed, e3 on Kafka"
        );
        assert_eq!(kill.duplicates, 2);
        assert_eq!(kill.resent, Some(Duration::from_millis(100)));
        assert_eq!(kill.first_move, Some(Duration::from_millis(200)));
        // e1 confirmed 40 ms after its receipt; e2 and e3 cut by the kill; e4 confirmed
        // by the next process 80 ms after its receipt.
        assert_eq!(figures.cut_by_kills, 2);
        let delays = figures.receipt_to_confirmed.unwrap();
        assert_eq!(delays.count, 2);
        assert_eq!(delays.max, Duration::from_millis(80));
        assert!(figures.moves.is_none(), "one move per life: no cadence");
    }
}
