//! What every stage runs on: the rings between them ([`ring`]), thread
//! placement ([`pin`]) and typed counters ([`telemetry`]).

pub mod pin;
pub mod ring;
pub mod telemetry;
