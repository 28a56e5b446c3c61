//! The example systemd unit (dashboards/fdprof-daemon.service), verified by systemd itself.

use std::process::Command;

use super::workspace_file;
use crate::common;

#[test]
fn systemd_accepts_the_example_unit() {
    let unit = std::fs::read_to_string(workspace_file("dashboards/fdprof-daemon.service")).unwrap();
    let exec = "ExecStart=/usr/bin/fdprof daemon --comm nginx\n";
    assert!(unit.contains(exec) && unit.contains("Restart=on-failure\n"));
    // systemd-analyze also checks that the command exists: point it at the fdprof just built.
    let copy = common::tmp("fdprof-daemon.service");
    let built = format!(
        "ExecStart={} daemon --comm nginx\n",
        env!("CARGO_BIN_EXE_fdprof")
    );
    std::fs::write(&copy, unit.replace(exec, &built)).unwrap();
    let out = common::run(Command::new("systemd-analyze").arg("verify").arg(&copy));
    // It ignores unknown keys and bad values with a warning and still exits 0: no output at all.
    let said =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.is_empty(),
        "systemd-analyze verify ({}):\n{said}",
        out.status
    );
}
