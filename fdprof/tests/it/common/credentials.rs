//! The credentials of a container's first process, against the pod template it was run from.

use serde_json::Value;

use super::podman::Detached;

/// The pod's daemon runs as the template's user and group, not root, with the template's
/// capabilities effective although none is ambient or inherited (they come from the image's
/// file capabilities), without no_new_privs and under the seccomp filter.
pub fn runs_as_the_templates_user_with_file_capabilities(template: &Value, pod: &Detached) {
    let sc = &template["containers"][0]["securityContext"];
    let status = std::fs::read_to_string(format!("/proc/{}/status", pod.host_pid())).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(|v| v.split_whitespace().collect::<Vec<_>>())
            .unwrap_or_else(|| panic!("no {name} in {status}"))
    };
    let (uid, gid) = (sc["runAsUser"].to_string(), sc["runAsGroup"].to_string());
    assert_ne!(uid, "0");
    assert_eq!(field("Uid"), [uid.as_str(); 4], "{status}");
    assert_eq!(field("Gid"), [gid.as_str(); 4], "{status}");
    let bits = |name: &str| u64::from_str_radix(field(name)[0], 16).unwrap();
    // As far as the bounding set the tests run in allows (it may lack SYS_RESOURCE).
    let ours = std::fs::read_to_string("/proc/self/status").unwrap();
    let bounding = ours
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
        .unwrap();
    let named: u64 = sc["capabilities"]["add"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| 1u64 << capability_number(c.as_str().unwrap()))
        .sum();
    let added = bounding & named;
    assert_eq!(bits("CapEff"), added, "{status}");
    assert_eq!(bits("CapPrm"), added, "{status}");
    assert_eq!(bits("CapBnd"), added, "{status}");
    assert_eq!(bits("CapAmb"), 0, "{status}");
    assert_eq!(field("NoNewPrivs"), ["0"], "{status}");
    assert_eq!(field("Seccomp"), ["2"], "{status}");
}

/// The number of a capability as the manifest names it (`SYS_PTRACE`).
fn capability_number(name: &str) -> u32 {
    match name {
        "DAC_READ_SEARCH" => 2,
        "SYS_PTRACE" => 19,
        "SYS_RESOURCE" => 24,
        "SYSLOG" => 34,
        "PERFMON" => 38,
        "BPF" => 39,
        other => panic!("capability {other}: add its number"),
    }
}
