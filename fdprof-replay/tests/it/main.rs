//! fdprof-replay's integration tests, one module per subject, in one binary (one link instead
//! of four; `[profile.test.package.fdprof-replay]` optimises it as it did each of them).

mod replay;
mod robust;
mod seeds;
mod vectors;
