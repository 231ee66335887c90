//! What `ledger-bench peers` prints: the settings both systems run with, each system's
//! figures, and the two compared against the targets.

use ra_ledger_cdc::config::RelayConfig;
use ra_ledger_testing::debezium;

use super::phases::{Drain, Figures};
use super::{Options, System};

/// The load and every setting of both systems, so that a figure can be read against what
/// produced it.
pub fn print_settings(options: &Options) {
    let relay = RelayConfig::default();
    outln!(
        "load: drain of {} rows ({} per transaction); steady {} events/s for {} s each; kill -9 at {} events/s, {} s, a third in; 120-byte payloads, 1,000 keys, 3 partitions per topic",
        options.rows,
        options.per_transaction,
        options
            .rates
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(" and "),
        options.seconds,
        options.kill_rate,
        options.kill_seconds
    );
    outln!(
        "relay settings: delivery {} (the default), max_in_flight {}, status_interval_ms {}, librdkafka {}",
        relay.delivery.as_str(),
        relay.max_in_flight,
        relay.status_interval_ms,
        relay
            .producer_settings()
            .iter()
            .filter(|(key, _)| *key != "bootstrap.servers")
            .map(|(key, value)| format!("{key}={value}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let listed = |settings: &[(&str, &str)]| {
        settings
            .iter()
            .map(|(key, value)| format!("{key}={value}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    outln!("debezium worker: {}", listed(debezium::WORKER_SETTINGS));
    outln!(
        "debezium connector: {}",
        listed(debezium::CONNECTOR_SETTINGS)
    );
}

/// One system's figures, one line per phase, each line prefixed with the system's name.
pub fn print_figures(system: System, figures: &Figures, options: &Options) {
    let name = system.name();
    let drain = &figures.drain;
    outln!(
        "{name} drain: {} rows, {:.0} rows/s first -> last row ({:.0} rows/s from the process's start); CPU {:.2} s per million rows while draining ({:.2} s with its start); {} malformed, {} duplicated",
        drain.rows,
        drain.rows as f64 / drain.first_to_last.as_secs_f64(),
        drain.rows as f64 / drain.from_start.as_secs_f64(),
        drain.cpu_drain * 1e6 / drain.rows as f64,
        drain.cpu_total * 1e6 / drain.rows as f64,
        drain.delivery.malformed,
        drain.delivery.duplicates,
    );
    for (rate, steady) in &figures.steady {
        let lost = steady
            .sent
            .saturating_sub(steady.delivery.unique().saturating_sub(1));
        outln!(
            "{name} steady {rate} events/s for {} s: {} sent, {} lost; commit -> consumer {}",
            options.seconds,
            steady.sent,
            lost,
            steady.latencies.map_or_else(
                || "nothing received".to_owned(),
                |latencies| latencies.to_string()
            )
        );
    }
    let kill = &figures.kill;
    let lost = kill
        .written
        .saturating_sub(kill.delivery.unique().saturating_sub(1));
    outln!(
        "{name} kill -9 at {} events/s: {} written, {} lost, {} duplicated, {} out of order per key, {} malformed; longest stall between new events {}",
        options.kill_rate,
        kill.written,
        lost,
        kill.delivery.duplicates,
        kill.delivery.out_of_order,
        kill.delivery.malformed,
        kill.stall.map_or_else(
            || "none (no kill)".to_owned(),
            |stall| format!("{:.2} s", stall.as_secs_f64())
        )
    );
}

/// The targets (issue 34's): the drain at least 5 times Debezium's, and at the first rate
/// the p99 at most a third of Debezium's and the relay's p50 at most 3 ms; and the CPU per
/// event at most a third (an earlier issue's).
pub fn print_comparison(results: &[(System, Figures)], options: &Options) {
    let of = |wanted| {
        results
            .iter()
            .find(|(system, _)| *system == wanted)
            .map(|(_, f)| f)
    };
    let (Some(relay), Some(debezium)) = (of(System::Relay), of(System::Debezium)) else {
        return;
    };
    let rate = |drain: &Drain| drain.rows as f64 / drain.first_to_last.as_secs_f64();
    let cpu = |drain: &Drain| drain.cpu_drain / drain.rows as f64;
    outln!(
        "relay / debezium drain rate = {:.2} (target >= 5); CPU per event = {:.2} (target <= 0.33)",
        rate(&relay.drain) / rate(&debezium.drain),
        cpu(&relay.drain) / cpu(&debezium.drain)
    );
    if let Some(first_rate) = options.rates.first() {
        let latencies = |figures: &Figures| {
            figures
                .steady
                .iter()
                .find(|(rate, _)| rate == first_rate)
                .and_then(|(_, steady)| steady.latencies)
        };
        if let (Some(ours), Some(theirs)) = (latencies(relay), latencies(debezium)) {
            outln!(
                "relay / debezium p99 at {first_rate} events/s = {:.2} (target <= 0.33); relay p50 {:.3} ms (target <= 3 ms)",
                ours.p99.as_secs_f64() / theirs.p99.as_secs_f64(),
                ours.p50.as_secs_f64() * 1e3
            );
        }
    }
}
