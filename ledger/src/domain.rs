//! The domain: jurisdictions, contacts, assignments and their validated inputs.
//!
//! Everything a client sends is checked here, before any database work, and a bad value
//! gets a [`ValidationError`] that names the field and what is wrong with it.

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
        if self.line2.len() > 200 {
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
