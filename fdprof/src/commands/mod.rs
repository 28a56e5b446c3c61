//! One file per subcommand: the command line (clap lives only here) and the sequence of
//! library calls each subcommand makes.

pub mod doctor;
pub mod duration;
pub mod flamegraph;
pub mod record;
pub mod report;
pub mod workload;
