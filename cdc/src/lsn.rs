//! PostgreSQL's log sequence numbers as text (`X/Y`, the high and low 32 bits in hex), both
//! ways. Pure. The text does not sort as the numbers do (`F/FF000028` sorts above `10/0`):
//! compare numbers, never the text.

/// PostgreSQL's text form of an LSN.
pub fn format_lsn(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xffff_ffff)
}

/// Parses PostgreSQL's text form of an LSN (`X/Y`).
pub fn parse_lsn(text: &str) -> Option<u64> {
    let (high, low) = text.split_once('/')?;
    let high = u64::from_str_radix(high, 16).ok()?;
    let low = u64::from_str_radix(low, 16).ok()?;
    (high <= u64::from(u32::MAX) && low <= u64::from(u32::MAX)).then_some((high << 32) | low)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_lsn_reads_and_writes_as_postgresql_does() {
        assert_eq!(parse_lsn("16/B374D848"), Some(0x16_B374_D848));
        assert_eq!(format_lsn(0x16_B374_D848), "16/B374D848");
        assert_eq!(format_lsn(0x10_0000_0000), "10/0");
        assert_eq!(parse_lsn("1"), None);
        assert_eq!(parse_lsn("1/zz"), None);
        assert_eq!(parse_lsn("100000000/0"), None, "the high half is 32 bits");
    }
}
