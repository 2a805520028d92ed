//! Containers → samples. [`wav`]: RIFF/WAVE parsed and decoded from a byte
//! buffer, with a specific reason for every malformation.

pub mod wav;
