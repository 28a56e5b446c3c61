//! The Kubernetes manifests (deploy/kubernetes/): valid objects for the Kubernetes versions
//! named here, by `kubernetes-validate --strict` (PyPI, offline schemas; installed once under the
//! target dir), and consistent with each other and with fdprof: the PodMonitor, a custom
//! resource the validator has no schema for, checked field by field here.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::{run, yaml};

/// The Kubernetes versions the manifests are checked against: the oldest still commonly run,
/// a middle one, and the newest the validator knows.
const VERSIONS: [&str; 3] = ["1.30.0", "1.33.0", "1.37.0"];
const KUBERNETES_VALIDATE: &str = "kubernetes-validate==1.37.0";

/// The core manifests: Kubernetes' own kinds.
const CORE: [&str; 4] = [
    "namespace.yaml",
    "priorityclass.yaml",
    "daemonset.yaml",
    "service.yaml",
];

fn manifests() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes")
}

/// `kubernetes-validate`, installed into a virtualenv of its own under the target dir once.
fn validator() -> PathBuf {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kubernetes-validate");
    let bin = venv.join("bin/kubernetes-validate");
    if !bin.exists() {
        let made = Command::new("/usr/bin/python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .unwrap_or_else(|e| panic!("cannot run python3 ({e}): cargo xtask bootstrap"));
        assert!(
            made.success(),
            "python3 -m venv failed: install python3-venv"
        );
        let installed = Command::new(venv.join("bin/pip"))
            .args([
                "install",
                "--disable-pip-version-check",
                KUBERNETES_VALIDATE,
            ])
            .status()
            .unwrap();
        assert!(
            installed.success(),
            "pip install {KUBERNETES_VALIDATE} failed"
        );
    }
    bin
}

/// `kubernetes-validate --strict` on `files` for `version`: `Ok` or what it printed.
fn validate(files: &[PathBuf], version: &str) -> Result<(), String> {
    let out = run(Command::new(validator())
        .args(["--strict", "--kubernetes-version", version])
        .args(files));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() && !text.contains("ERROR") {
        Ok(())
    } else {
        Err(text)
    }
}

#[test]
fn the_core_manifests_are_valid_for_each_kubernetes_version_and_a_broken_one_is_not() {
    let files: Vec<PathBuf> = CORE.iter().map(|f| manifests().join(f)).collect();
    for version in VERSIONS {
        if let Err(why) = validate(&files, version) {
            panic!("the manifests are not valid Kubernetes {version} objects:\n{why}");
        }
    }
    // The check can fail: a field the DaemonSet's schema does not have, and a wrong type.
    let daemonset = std::fs::read_to_string(manifests().join("daemonset.yaml")).unwrap();
    for (what, broken) in [
        (
            "an unknown field",
            daemonset.replace("hostPID: true", "hostPID: true\n      hostPIDs: true"),
        ),
        (
            "a string for a boolean",
            daemonset.replace("hostPID: true", "hostPID: \"yes\""),
        ),
    ] {
        assert_ne!(broken, daemonset, "{what}: nothing replaced");
        let path = crate::common::tmp("broken-daemonset.yaml");
        std::fs::write(&path, broken).unwrap();
        assert!(
            validate(&[path], VERSIONS[2]).is_err(),
            "kubernetes-validate passed a DaemonSet with {what}"
        );
    }
}

/// The DaemonSet's pod: what fdprof needs and nothing more, and what the docs say it has.
#[test]
fn the_daemonset_runs_fdprof_with_the_named_capabilities_only() {
    let ds = yaml(&manifests().join("daemonset.yaml"));
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostPID"], true);
    // Its priority class is the one shipped, below the system classes.
    let class = yaml(&manifests().join("priorityclass.yaml"));
    assert_eq!(pod["priorityClassName"], class["metadata"]["name"]);
    let value = class["value"].as_u64().unwrap();
    assert!(value > 0 && value < 2_000_000_000, "{value}");
    assert_eq!(class["globalDefault"], false);
    assert_eq!(pod["automountServiceAccountToken"], false);
    let c = &pod["containers"][0];
    assert_eq!(
        c["image"],
        format!("localhost/fdprof:{}", env!("CARGO_PKG_VERSION"))
    );
    let sc = &c["securityContext"];
    assert_eq!(sc["privileged"], false);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    // Not root: a fixed uid and gid (the image's USER), and the Secret's group. Privilege
    // escalation allowed: no_new_privs would void the image's file capabilities.
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(
        (&sc["runAsUser"], &sc["runAsGroup"]),
        (&65532.into(), &65532.into())
    );
    assert_eq!(pod["securityContext"]["fsGroup"], 65532);
    assert_eq!(sc["allowPrivilegeEscalation"], true);
    assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert_eq!(
        sc["capabilities"]["add"],
        serde_json::json!([
            "BPF",
            "PERFMON",
            "SYS_RESOURCE",
            "SYSLOG",
            "SYS_PTRACE",
            "DAC_READ_SEARCH"
        ])
    );
    // The seccomp profile named is the one kept here: JSON the runtime reads, an allow-list
    // that holds bpf(2) and perf_event_open(2) and none of the calls refused by decision.
    assert_eq!(sc["seccompProfile"]["type"], "Localhost");
    let profile: Value = serde_json::from_slice(
        &std::fs::read(
            manifests()
                .join("seccomp")
                .join(sc["seccompProfile"]["localhostProfile"].as_str().unwrap()),
        )
        .unwrap(),
    )
    .unwrap();
    let allowed: Vec<&str> = profile["syscalls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["action"] == "SCMP_ACT_ALLOW")
        .flat_map(|r| r["names"].as_array().unwrap())
        .map(|n| n.as_str().unwrap())
        .collect();
    assert_eq!(profile["defaultAction"], "SCMP_ACT_ERRNO");
    assert_eq!(profile["defaultErrnoRet"], 1);
    for needed in [
        "bpf",
        "perf_event_open",
        "openat",
        "mmap",
        "getrandom",
        "clone",
    ] {
        assert!(allowed.contains(&needed), "{needed} not allowed");
    }
    for refused in [
        "init_module",
        "kexec_load",
        "setns",
        "unshare",
        "ptrace",
        "process_vm_writev",
        "mount",
        "keyctl",
        "io_uring_setup",
        "open_by_handle_at",
    ] {
        assert!(!allowed.contains(&refused), "{refused} allowed");
    }
    // clone without namespace flags only; clone3 (flags out of the filter's sight): ENOSYS.
    let rule = |name: &str| {
        profile["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["names"].as_array().unwrap().iter().any(|n| n == name))
            .unwrap()
            .clone()
    };
    assert_eq!(rule("clone")["args"][0]["op"], "SCMP_CMP_MASKED_EQ");
    assert_eq!(rule("clone")["args"][0]["value"], 0x7E02_0000u64);
    assert_eq!(rule("clone3")["errnoRet"], 38);
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    // The token: the Secret, mounted 0440 with the fsGroup (fdprof refuses one others may
    // read), at the path the daemon is given.
    let volumes = pod["volumes"].as_array().unwrap();
    let token = volumes.iter().find(|v| v["name"] == "token").unwrap();
    assert_eq!(token["secret"]["defaultMode"], 0o440);
    // tracefs, not debugfs.
    assert!(
        volumes
            .iter()
            .all(|v| v["hostPath"]["path"] != "/sys/kernel/debug")
    );
    let mount = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "token")
        .unwrap();
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args[..2], ["daemon", "--all"]);
    let at = args.iter().position(|a| *a == "--token-file").unwrap();
    assert!(args[at + 1].starts_with(mount["mountPath"].as_str().unwrap()));
    assert!(args.contains(&"--allow-remote"));
    // Every host path mounted read-only.
    for v in volumes.iter().filter(|v| v["hostPath"].is_object()) {
        let m = c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == v["name"])
            .unwrap();
        assert_eq!(m["readOnly"], true, "{}", v["name"]);
    }
}

/// The PodMonitor (prometheus-operator's custom resource) by its required fields, and against
/// the DaemonSet: its selector picks the DaemonSet's pods, its port is theirs, its credential is
/// the token the daemon reads.
#[test]
fn the_podmonitor_scrapes_the_daemonsets_pods_with_its_token() {
    let pm = yaml(&manifests().join("monitoring/podmonitor.yaml"));
    let ds = yaml(&manifests().join("daemonset.yaml"));
    assert_eq!(pm["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(pm["kind"], "PodMonitor");
    assert!(pm["metadata"]["name"].is_string());
    assert_eq!(pm["metadata"]["namespace"], ds["metadata"]["namespace"]);
    let labels = &ds["spec"]["template"]["metadata"]["labels"];
    for (k, v) in pm["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(&labels[k], v, "{k}");
    }
    let endpoints = pm["spec"]["podMetricsEndpoints"].as_array().unwrap();
    assert!(!endpoints.is_empty());
    let e = &endpoints[0];
    let ports: Vec<&Value> = ds["spec"]["template"]["spec"]["containers"][0]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["name"])
        .collect();
    assert!(ports.contains(&&e["port"]), "{}", e["port"]);
    assert_eq!(e["path"], "/metrics");
    assert_eq!(e["authorization"]["type"], "Bearer");
    let token = ds["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "token")
        .unwrap();
    assert_eq!(
        e["authorization"]["credentials"]["name"],
        token["secret"]["secretName"]
    );
    assert_eq!(e["authorization"]["credentials"]["key"], "token");
}
