//! Integration tests, in one binary so the whole run shares one PostgreSQL and one broker.

mod migrations;
mod smoke;
