//! The domain: jurisdictions, contacts, assignments and their validated inputs.
//!
//! Everything a client sends is checked here, before any database work, and a bad value
//! gets a [`ValidationError`] that names the field and what is wrong with it.

use chrono::{DateTime, Datelike, TimeZone, Timelike, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// US jurisdictions RA Ledger serves: the states, DC and the inhabited territories.
pub const JURISDICTIONS: [&str; 56] = [
    "AL", "AK", "AZ", "AR", "CA", "CO", "CT", "DE", "DC", "FL", "GA", "HI", "ID", "IL", "IN", "IA",
    "KS", "KY", "LA", "ME", "MD", "MA", "MI", "MN", "MS", "MO", "MT", "NE", "NV", "NH", "NJ", "NM",
    "NY", "NC", "ND", "OH", "OK", "OR", "PA", "RI", "SC", "SD", "TN", "TX", "UT", "VT", "VA", "WA",
    "WV", "WI", "WY", "PR", "GU", "VI", "AS", "MP",
];

/// A bad input value: which field, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct ValidationError {
    /// The field, as the client named it (`address.city`).
    pub field: String,
    /// What is wrong.
    pub reason: String,
}

impl ValidationError {
    /// A validation error for `field`.
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// A validated US jurisdiction code such as `TX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Jurisdiction(&'static str);

impl Jurisdiction {
    /// Parses a two-letter code (case-insensitive) into a known jurisdiction.
    pub fn parse(field: &str, code: &str) -> Result<Self, ValidationError> {
        let upper = code.trim().to_ascii_uppercase();
        JURISDICTIONS
            .iter()
            .find(|known| **known == upper)
            .map(|known| Self(known))
            .ok_or_else(|| {
                ValidationError::new(
                    field,
                    format!("unknown jurisdiction {code:?}; expected a US state or territory code such as \"TX\""),
                )
            })
    }

    /// The code.
    pub fn code(self) -> &'static str {
        self.0
    }

    /// A small number unique to the jurisdiction (its place in [`JURISDICTIONS`]).
    pub fn ordinal(self) -> i32 {
        JURISDICTIONS
            .iter()
            .position(|known| *known == self.0)
            .map_or(-1, |index| index as i32)
    }
}

impl std::fmt::Display for Jurisdiction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::str::FromStr for Jurisdiction {
    type Err = ValidationError;

    /// Parses a command-line value.
    fn from_str(code: &str) -> Result<Self, Self::Err> {
        Self::parse("jurisdiction", code)
    }
}

/// A postal address as printed on state filings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostalAddress {
    /// Street line.
    pub line1: String,
    /// Suite, floor; may be empty.
    #[serde(default)]
    pub line2: String,
    /// City.
    pub city: String,
    /// Two-letter state or territory code of the address.
    pub region: String,
    /// ZIP code: 5 digits, or ZIP+4.
    pub postal_code: String,
}

impl PostalAddress {
    /// Checks every field; trims whitespace.
    pub fn validated(mut self, field: &str) -> Result<Self, ValidationError> {
        self.line1 = required(&format!("{field}.line1"), &self.line1, 200)?;
        self.line2 = self.line2.trim().to_owned();
        plain_text(&format!("{field}.line2"), &self.line2)?;
        if self.line2.chars().count() > 200 {
            return Err(ValidationError::new(
                format!("{field}.line2"),
                "longer than 200 characters",
            ));
        }
        self.city = required(&format!("{field}.city"), &self.city, 100)?;
        self.region = Jurisdiction::parse(&format!("{field}.region"), &self.region)?
            .code()
            .to_owned();
        let zip = self.postal_code.trim();
        let digits = |part: &str, count: usize| {
            part.len() == count && part.bytes().all(|b| b.is_ascii_digit())
        };
        let valid = match zip.split_once('-') {
            None => digits(zip, 5),
            Some((five, four)) => digits(five, 5) && digits(four, 4),
        };
        if !valid {
            return Err(ValidationError::new(
                format!("{field}.postal_code"),
                format!("{zip:?} is not a ZIP code (12345 or 12345-6789)"),
            ));
        }
        self.postal_code = zip.to_owned();
        Ok(self)
    }
}

/// The details of a new contact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContactDetails {
    /// Name of the registered-agent office.
    pub name: String,
    /// Its postal address.
    pub address: PostalAddress,
}

impl ContactDetails {
    /// Checks every field.
    pub fn validated(self) -> Result<Self, ValidationError> {
        Ok(Self {
            name: required("name", &self.name, 200)?,
            address: self.address.validated("address")?,
        })
    }
}

fn required(field: &str, value: &str, max: usize) -> Result<String, ValidationError> {
    let trimmed = value.trim();
    plain_text(field, trimmed)?;
    if trimmed.is_empty() {
        return Err(ValidationError::new(field, "must not be empty"));
    }
    if trimmed.chars().count() > max {
        return Err(ValidationError::new(
            field,
            format!("longer than {max} characters"),
        ));
    }
    Ok(trimmed.to_owned())
}

/// Refuses characters that have no place in a one-line name or address and that would let
/// stored history display as something else: control characters (NUL, escapes, line
/// breaks; PostgreSQL also refuses NUL in text) and the bidirectional overrides and
/// isolates that reorder what a reader sees.
pub fn plain_text(field: &str, value: &str) -> Result<(), ValidationError> {
    match value.chars().find(|c| is_hidden_control(*c)) {
        None => Ok(()),
        Some(c) => Err(ValidationError::new(
            field,
            format!(
                "contains the control character U+{:04X}; names and addresses are plain one-line text",
                u32::from(c)
            ),
        )),
    }
}

/// Whether `c` is a control character or a bidirectional formatting character.
pub fn is_hidden_control(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// First year of the instants the ledger accepts.
pub const FIRST_YEAR: i32 = 1;
/// Last year of the instants the ledger accepts.
pub const LAST_YEAR: i32 = 9999;

/// Checks that an instant lies in the years the ledger stores (PostgreSQL's `timestamptz`
/// ends before 4714 BC and after 294276 AD; the ledger keeps to the four-digit years of
/// RFC 3339), and keeps it to the microsecond the database stores, so an answer or an
/// event never carries a time the row does not.
pub fn instant(field: &str, value: DateTime<Utc>) -> Result<DateTime<Utc>, ValidationError> {
    if !(FIRST_YEAR..=LAST_YEAR).contains(&value.year()) {
        return Err(ValidationError::new(
            field,
            format!("{value} is outside the years {FIRST_YEAR:04}..={LAST_YEAR} the ledger keeps"),
        ));
    }
    Ok(Utc
        .timestamp_micros(value.timestamp_micros())
        .single()
        .unwrap_or(value))
}

/// Parses an RFC 3339 date-time as clients send them: `2026-03-01T09:30:00Z`, with `T` (or
/// `t`) between date and time and a `Z` or `+hh:mm` zone. chrono alone would also take a
/// space there and, through serde, a relaxed form (one-digit months, spaces between the
/// parts); the API documents, and so accepts, RFC 3339's own grammar only. A leap second
/// (`:60`) is refused too: PostgreSQL's `timestamptz` cannot hold one.
pub fn parse_rfc3339(text: &str) -> Result<DateTime<Utc>, String> {
    let refuse =
        || format!("{text:?} is not an RFC 3339 date-time such as \"2026-03-01T09:30:00Z\"");
    if text.as_bytes().get(10) == Some(&b' ') {
        return Err(refuse());
    }
    let time = match DateTime::parse_from_rfc3339(text) {
        Ok(time) => time,
        // A year RFC 3339 cannot write (signed, or of five digits or more) is read as chrono
        // reads it, so that [`instant`] refuses it for its year like any other out of range.
        Err(_) => match text.parse::<DateTime<chrono::FixedOffset>>() {
            Ok(time) if !(FIRST_YEAR..=LAST_YEAR).contains(&time.year()) => time,
            _ => return Err(refuse()),
        },
    };
    if time.nanosecond() >= 1_000_000_000 {
        return Err(format!(
            "{text:?} is a leap second, which the ledger cannot keep"
        ));
    }
    Ok(time.with_timezone(&Utc))
}

/// serde's `deserialize_with` for date-times: [`parse_rfc3339`], or absent and `null` as
/// `None` with [`rfc3339::option`].
pub mod rfc3339 {
    use chrono::{DateTime, Utc};
    use serde::{Deserialize, Deserializer};

    /// A required date-time.
    pub fn required<'de, D: Deserializer<'de>>(deserializer: D) -> Result<DateTime<Utc>, D::Error> {
        let text = String::deserialize(deserializer)?;
        super::parse_rfc3339(&text).map_err(serde::de::Error::custom)
    }

    /// An optional date-time (with `#[serde(default)]`).
    pub fn option<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<DateTime<Utc>>, D::Error> {
        Option::<String>::deserialize(deserializer)?
            .map(|text| super::parse_rfc3339(&text).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// Status of a contact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContactStatus {
    /// The jurisdiction's current contact; new assignments take it.
    Primary,
    /// Superseded; kept for history.
    OnFile,
}

impl ContactStatus {
    /// The database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Primary => "primary",
            Self::OnFile => "on_file",
        }
    }
}

/// Why an assignment ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// Ended and replaced by a new assignment at the same instant.
    Replaced,
    /// The subscription was cancelled.
    Cancelled,
}

impl EndReason {
    /// The database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Replaced => "replaced",
            Self::Cancelled => "cancelled",
        }
    }
}

/// Aggregate type of contacts (topic `outbox.event.contact`).
pub const CONTACT_AGGREGATE: &str = "contact";
/// Aggregate type of assignments (topic `outbox.event.assignment`).
pub const ASSIGNMENT_AGGREGATE: &str = "assignment";
/// Aggregate type of reassignment runs (topic `outbox.event.reassignment`, key = run id).
pub const REASSIGNMENT_AGGREGATE: &str = "reassignment";

/// The stream of one contact.
pub fn contact_stream(contact_id: Uuid) -> String {
    format!("{CONTACT_AGGREGATE}-{contact_id}")
}

/// The aggregate id of a business's assignments in a jurisdiction.
pub fn registration_id(business_id: Uuid, jurisdiction: Jurisdiction) -> String {
    format!("{business_id}-{}", jurisdiction.code())
}

/// The stream of a business's assignments in a jurisdiction.
pub fn assignment_stream(business_id: Uuid, jurisdiction: Jurisdiction) -> String {
    format!(
        "{ASSIGNMENT_AGGREGATE}-{}",
        registration_id(business_id, jurisdiction)
    )
}

/// The stream of one reassignment run.
pub fn run_stream(run_id: Uuid) -> String {
    format!("{REASSIGNMENT_AGGREGATE}-{run_id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address() -> PostalAddress {
        PostalAddress {
            line1: " 211 E 7th St ".into(),
            line2: "Suite 620".into(),
            city: "Austin".into(),
            region: "tx".into(),
            postal_code: "78701-3218".into(),
        }
    }

    #[test]
    fn jurisdictions_are_validated_and_normalized() {
        assert_eq!(Jurisdiction::parse("j", "tx").unwrap().code(), "TX");
        assert_eq!(Jurisdiction::parse("j", "PR").unwrap().code(), "PR");
        let error = Jurisdiction::parse("jurisdiction", "XX").unwrap_err();
        assert_eq!(error.field, "jurisdiction");
        assert!(error.reason.contains("unknown jurisdiction \"XX\""));
    }

    #[test]
    fn addresses_are_trimmed_and_checked() {
        let valid = address().validated("address").unwrap();
        assert_eq!(valid.line1, "211 E 7th St");
        assert_eq!(valid.region, "TX");
        let mut bad = address();
        bad.postal_code = "787".into();
        assert_eq!(
            bad.validated("address").unwrap_err().field,
            "address.postal_code"
        );
        let mut empty = address();
        empty.city = "  ".into();
        assert_eq!(
            empty.validated("address").unwrap_err(),
            ValidationError::new("address.city", "must not be empty")
        );
    }

    #[test]
    fn control_characters_are_refused_with_their_field() {
        for bad in [
            "a\u{0}b",
            "\u{1b}[31mred",
            "two\nlines",
            "tab\there",
            "del\u{7f}",
            "\u{202E}evil",
        ] {
            let mut details = ContactDetails {
                name: bad.into(),
                address: address(),
            };
            let error = details.clone().validated().unwrap_err();
            assert_eq!(error.field, "name", "{bad:?}");
            assert!(error.reason.contains("control character"), "{error}");
            details.name = "Fine".into();
            details.address.city = bad.into();
            assert_eq!(details.validated().unwrap_err().field, "address.city");
        }
        let mut line2 = address();
        line2.line2 = "Suite\u{0}1".into();
        assert_eq!(
            line2.validated("address").unwrap_err().field,
            "address.line2"
        );
        // Accents, CJK and emoji are text, not control characters.
        assert!(plain_text("name", "Société Générale 東京 🏢").is_ok());
    }

    #[test]
    fn instants_are_kept_to_four_digit_years_and_microseconds() {
        let ok = Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap()
            + chrono::Duration::nanoseconds(1_234_567);
        assert_eq!(
            instant("at", ok).unwrap(),
            Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap()
                + chrono::Duration::microseconds(1_234)
        );
        for year in [-5000, 0, 10_000, 200_000] {
            let far = Utc.with_ymd_and_hms(year, 1, 1, 0, 0, 0).unwrap();
            let error = instant("known_at", far).unwrap_err();
            assert_eq!(error.field, "known_at");
        }
        assert!(instant("at", Utc.with_ymd_and_hms(1, 1, 1, 0, 0, 0).unwrap()).is_ok());
        assert!(
            instant(
                "at",
                Utc.with_ymd_and_hms(9999, 12, 31, 23, 59, 59).unwrap()
            )
            .is_ok()
        );
    }

    #[test]
    fn times_are_rfc_3339_and_nothing_looser() {
        let expected = Utc.with_ymd_and_hms(2026, 3, 1, 9, 30, 0).unwrap();
        for good in [
            "2026-03-01T09:30:00Z",
            "2026-03-01t09:30:00z",
            "2026-03-01T11:30:00+02:00",
            "2026-03-01T09:30:00.000000Z",
        ] {
            assert_eq!(parse_rfc3339(good), Ok(expected), "{good}");
        }
        for bad in [
            "2026-03-01 09:30:00Z",
            "2026-3-1T09:30:00Z",
            "2026-03-01T09:30:00",
            "2026-03-01T09:30:00+0200",
            "2026-03-01",
            "",
        ] {
            let error = parse_rfc3339(bad).unwrap_err();
            assert!(error.contains("RFC 3339"), "{bad}: {error}");
        }
        let leap = parse_rfc3339("2016-12-31T23:59:60Z").unwrap_err();
        assert!(leap.contains("leap second"), "{leap}");
    }

    #[test]
    fn streams_are_named_by_aggregate() {
        let business = Uuid::nil();
        let texas = Jurisdiction::parse("j", "TX").unwrap();
        assert_eq!(
            assignment_stream(business, texas),
            "assignment-00000000-0000-0000-0000-000000000000-TX"
        );
        assert_eq!(
            contact_stream(business),
            "contact-00000000-0000-0000-0000-000000000000"
        );
    }
}
