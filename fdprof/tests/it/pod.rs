//! The DaemonSet's pod (deploy/kubernetes/daemonset.yaml), run by podman as a kubelet would run
//! it: the image `cargo xtask image` built (loaded from its OCI archive), the pod template's
//! hostPID, user, group and fsGroup (not root), capabilities (every other dropped), seccomp
//! profile (an allow-list), privilege escalation allowed (no no_new_privs: the image's fdprof
//! holds file capabilities), read-only root, host paths, emptyDirs (0777 directories of the
//! node, as kubelet makes them)
//! and the token Secret (a 0440 file of root and the fsGroup behind kubelet's symlinks),
//! translated into `podman run` flags. Beside it a redis-server container (from a root file system directory: no image
//! pulled) under `redis-benchmark -k 0` from the host: the daemon in the pod counts the
//! container's accepted sockets exactly as redis' own `total_connections_received`, labels its
//! series with the container's id, counts a host process's sockets exactly, and names the
//! redis binary's user frames at a path that exists only inside the redis container.
//!
//! Where the test departs from the template, and why: the pod shares the host's network (this
//! podman gives a pod no network of its own to reach) and listens on a loopback port instead of
//! 0.0.0.0:9464; `--tier full` (exact fd syscall counts need full tracing) and `--cpu` (on-CPU
//! samples give redis' user stacks) are added to its arguments.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::common::daemon::poll;
use crate::common::podman::{Detached, podman, rootfs_with};
use crate::common::prometheus::{free_loopback_addr, http_get_with};
use crate::common::*;

const TIMEOUT: Duration = Duration::from_secs(90);
/// Where redis' binary is inside its container: a path the host does not have.
const REDIS_AT: &str = "/opt/redis-in-a-container/redis-server";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The DaemonSet's pod template, as JSON.
pub(crate) fn pod_template() -> Value {
    yaml(&repo().join("deploy/kubernetes/daemonset.yaml"))["spec"]["template"]["spec"].clone()
}

/// A Secret volume as kubelet mounts it: the key's file (root's, of the group `gid`, mode `mode`)
/// in a timestamped directory, `..data` a symlink to that directory, and the key a symlink
/// through `..data`.
fn secret_volume(dir: &Path, key: &str, value: &str, mode: u32, gid: u32) -> PathBuf {
    use std::os::unix::fs::{PermissionsExt, symlink};
    let volume = dir.join("secret");
    let stamped = volume.join("..2026_12_06_00_00_00.000000001");
    std::fs::create_dir_all(&stamped).unwrap();
    let file = stamped.join(key);
    std::fs::write(&file, value).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
    std::os::unix::fs::chown(&file, Some(0), Some(gid)).unwrap();
    symlink(stamped.file_name().unwrap(), volume.join("..data")).unwrap();
    symlink(Path::new("..data").join(key), volume.join(key)).unwrap();
    volume
}

/// The token Secret of the `template`'s pod as kubelet would mount it, in `dir`: mode
/// defaultMode, group fsGroup (root without one).
pub(crate) fn token_volume(template: &Value, dir: &Path, token: &str) -> PathBuf {
    let volumes = template["volumes"].as_array().unwrap();
    let secret = volumes.iter().find(|v| v["secret"].is_object()).unwrap();
    let mode = secret["secret"]["defaultMode"].as_u64().unwrap() as u32;
    let gid = template["securityContext"]["fsGroup"].as_u64().unwrap_or(0) as u32;
    secret_volume(dir, "token", &format!("{token}\n"), mode, gid)
}

/// The template's container as `podman run` flags (after `run -d --name`) and its image, its
/// Secret volume at `secret`.
pub(crate) fn podman_flags(pod: &Value, secret: &Path) -> Vec<String> {
    let c = &pod["containers"][0];
    let sc = &c["securityContext"];
    let mut args: Vec<String> = vec!["--network".into(), "host".into()];
    if pod["hostPID"] == true {
        args.push("--pid=host".into());
    }
    assert_eq!(sc["privileged"], false, "the pod is not privileged");
    args.push("--cap-drop=all".into());
    for cap in sc["capabilities"]["add"].as_array().unwrap() {
        args.push(format!("--cap-add={}", cap.as_str().unwrap()));
    }
    if sc["readOnlyRootFilesystem"] == true {
        // As kubelet has it: no tmpfs on /run and /tmp but the pod's own volumes.
        args.extend(["--read-only".into(), "--read-only-tmpfs=false".into()]);
    }
    // false would be no_new_privs, under which the kernel ignores file capabilities.
    if sc["allowPrivilegeEscalation"] == false {
        args.extend(["--security-opt".into(), "no-new-privileges".into()]);
    }
    if sc["runAsNonRoot"] == true {
        assert_ne!(sc["runAsUser"], 0, "runAsNonRoot with runAsUser 0");
    }
    if let Some(group) = pod["securityContext"]["fsGroup"].as_u64() {
        args.push(format!("--group-add={group}"));
    }
    match sc["seccompProfile"]["type"].as_str() {
        Some("Localhost") => {
            let profile = repo()
                .join("deploy/kubernetes/seccomp")
                .join(sc["seccompProfile"]["localhostProfile"].as_str().unwrap());
            args.extend([
                "--security-opt".into(),
                format!("seccomp={}", profile.display()),
            ]);
        }
        // podman's own default profile is the runtime's default.
        Some("RuntimeDefault") => {}
        other => panic!("seccomp profile {other:?}: translate it"),
    }
    args.push(format!(
        "--user={}:{}",
        sc["runAsUser"].as_u64().unwrap(),
        sc["runAsGroup"].as_u64().unwrap()
    ));
    let volumes = pod["volumes"].as_array().unwrap();
    for m in c["volumeMounts"].as_array().unwrap() {
        let v = volumes.iter().find(|v| v["name"] == m["name"]).unwrap();
        let at = m["mountPath"].as_str().unwrap();
        let ro = if m["readOnly"] == true { ":ro" } else { "" };
        if let Some(host) = v["hostPath"]["path"].as_str() {
            args.push(format!("--volume={host}:{at}{ro}"));
        } else if v["secret"].is_object() {
            args.push(format!("--volume={}:{at}{ro}", secret.display()));
        } else if v["emptyDir"].is_object() {
            // As kubelet makes one: a directory of the node, mode 0777, bind-mounted (runc
            // would give a tmpfs the mode of the image's directory beneath it).
            let name = m["name"].as_str().unwrap();
            let host = secret.parent().unwrap().join(format!("empty-dir-{name}"));
            std::fs::create_dir_all(&host).unwrap();
            std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o777)).unwrap();
            args.push(format!("--volume={}:{at}", host.display()));
        } else {
            panic!("volume {v}: translate it");
        }
    }
    args.push(c["image"].as_str().unwrap().to_string());
    args
}

/// The template's container as `podman run` arguments (after `run -d --name`), its Secret
/// volume at `secret`, listening on `listen`.
pub(crate) fn podman_args(pod: &Value, secret: &Path, listen: &str) -> Vec<String> {
    let mut args = podman_flags(pod, secret);
    let given: Vec<&str> = pod["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let mut i = 0;
    while i < given.len() {
        if given[i] == "--listen" {
            args.extend(["--listen".into(), listen.to_string()]);
            i += 2;
            continue;
        }
        args.push(given[i].to_string());
        i += 1;
    }
    args.extend(["--tier".into(), "full".into(), "--cpu".into()]);
    args
}

/// `redis-cli -p PORT ARGS`' output.
fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = run(Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A field of `INFO stats`.
fn info_stat(port: u16, field: &str) -> u64 {
    redis_cli(port, &["info", "stats"])
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in INFO stats"))
}

/// The functions redis-server defines (its dynamic symbols), less any name libc or a program's
/// entry also has.
fn redis_symbols() -> std::collections::BTreeSet<String> {
    let defined = |path: &str| -> std::collections::BTreeSet<String> {
        let out = run(Command::new("nm").args(["-D", "--defined-only", path]));
        assert!(out.status.success(), "nm {path}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let (_, kind, name) = (f.next()?, f.next()?, f.next()?);
                (kind == "T").then(|| name.to_string())
            })
            .collect()
    };
    let libc = defined("/usr/lib/x86_64-linux-gnu/libc.so.6");
    let mut own = defined("/usr/bin/redis-server");
    own.retain(|n| {
        !libc.contains(n) && !["main", "_start", "_init", "_fini"].contains(&n.as_str())
    });
    assert!(own.len() > 1000, "{} symbols", own.len());
    own
}

/// The fds `rows` (a report's `syscalls`) allocated through accept and accept4.
fn accepted(rows: &Value) -> u64 {
    rows.as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["name"] == "accept" || s["name"] == "accept4")
        .map(|s| s["allocs"].as_u64().unwrap_or(0))
        .sum()
}

#[test]
fn the_daemonsets_pod_counts_a_redis_containers_connections_and_a_host_process_exactly() {
    require_root();
    let _guard = kernel_lock();
    let archive = image_archive();
    let template = pod_template();
    let addr = free_loopback_addr();
    let token = "0123456789abcdef0123456789abcdef".repeat(2);
    let pod = Detached::run("fdprof-pod", |dir| {
        let loaded = run(podman(dir).args(["load", "-i"]).arg(&archive));
        assert!(
            loaded.status.success(),
            "{}",
            String::from_utf8_lossy(&loaded.stderr)
        );
        let secret = token_volume(&template, dir, &token);
        podman_args(&template, &secret, &addr.to_string())
    });
    let logs = poll(TIMEOUT, || {
        let logs = pod.logs();
        logs.contains("profiling every process")
            .then_some(())
            .ok_or(logs)
    });
    if let Err(logs) = logs {
        panic!("the pod's daemon never attached:\n{logs}");
    }
    crate::common::credentials::runs_as_the_templates_user_with_file_capabilities(&template, &pod);
    let auth = format!("Authorization: Bearer {token}");
    // 200 and the body (JSON where it is), else what came back (no interval ended yet: 503).
    let get = |path: &str| -> Result<Value, Value> {
        let (code, _, body) = http_get_with(addr, path, &[auth.as_str()]).unwrap();
        let body = serde_json::from_str(&body).unwrap_or(Value::String(body));
        if code == 200 { Ok(body) } else { Err(body) }
    };

    // A host process: its sockets, exactly, in its row of the whole report (kept while it
    // runs and for two intervals after its last figures).
    let k = 700;
    let host = start_workload(&["socket-close", "--ops", &k.to_string()]);
    let host_pid = host.pid;
    host.go();
    assert_eq!(host.finish()["expected"]["syscalls"]["socket"], k);
    let mut seen = false;
    let counted = poll(TIMEOUT, || {
        let whole = get("/report.json").map_err(Ok)?;
        let row = whole["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["pid"] == host_pid)
            .cloned();
        match row {
            Some(row) => {
                seen = true;
                let socket = row["syscalls"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|s| s["name"] == "socket")
                    .and_then(|s| s["calls"].as_u64());
                (socket == Some(k)).then_some(()).ok_or(Ok(row))
            }
            None if seen => Err(Err("its row went before it had every socket")),
            None => Err(Ok(Value::Null)),
        }
    });
    if let Err(why) = counted {
        panic!("the host process {host_pid}'s {k} sockets: {why:?}");
    }

    // redis in a container of its own, under redis-benchmark from the host.
    let port = free_loopback_addr().port();
    let redis = Detached::run("fdprof-redis", |dir| {
        let rootfs = dir.join("rootfs");
        rootfs_with(Path::new("/usr/bin/redis-server"), &rootfs, REDIS_AT);
        assert!(!Path::new(REDIS_AT).exists());
        ["--network", "host", "--rootfs"]
            .iter()
            .map(|s| s.to_string())
            .chain([rootfs.display().to_string(), REDIS_AT.into()])
            .chain(
                [
                    "--port",
                    &port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--daemonize",
                    "no",
                ]
                .iter()
                .map(|s| s.to_string()),
            )
            .collect()
    });
    let ready = poll(TIMEOUT, || {
        let pong = redis_cli(port, &["ping"]);
        pong.contains("PONG").then_some(()).ok_or(pong)
    });
    assert!(ready.is_ok(), "redis never answered:\n{}", redis.logs());
    let bench = run(Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-k", "0", "-c", "8", "-n", "3000", "-t", "ping", "-q"]));
    assert!(
        bench.status.success(),
        "{}",
        String::from_utf8_lossy(&bench.stderr)
    );
    // Counted by redis at accept: this connection included.
    let connections = info_stat(port, "total_connections_received");
    assert!(connections > 3000, "{connections}");

    // The daemon's figures for the container, once its intervals have all closed.
    let id = redis.id().to_string();
    let narrowed = poll(TIMEOUT, || {
        let r = get(&format!("/report.json?container={}", &id[..12]))?;
        (accepted(&r["syscalls"]) == connections)
            .then_some(r.clone())
            .ok_or(r)
    })
    .unwrap_or_else(|r| {
        panic!(
            "the pod counted {} accepted sockets of the redis container, redis {connections}:\n{}",
            accepted(&r["syscalls"]),
            &r.to_string()[..2000.min(r.to_string().len())]
        )
    });
    // /metrics: the container's series, by its id, with every allocation the report counts.
    // redis keeps opening files (its cron reads /proc/PID/stat), so the two are read back to
    // back until they come from the same interval.
    let series = |metrics: &str| -> Option<(String, f64)> {
        let line = metrics.lines().find(|l| {
            l.starts_with("fdprof_container_fd_allocations_total{")
                && l.contains(&format!("container=\"{id}\""))
        })?;
        Some((line.to_string(), line.rsplit(' ').next()?.parse().ok()?))
    };
    let agreed = poll(TIMEOUT, || {
        let report = get(&format!("/report.json?container={}", &id[..12]))?;
        let metrics = get("/metrics")?;
        let allocations: u64 = report["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["allocs"].as_u64().unwrap_or(0))
            .sum();
        let (line, value) = series(metrics.as_str().unwrap())
            .ok_or_else(|| Value::String(format!("no container series for {id}")))?;
        (value == allocations as f64)
            .then(|| line.clone())
            .ok_or_else(|| Value::String(format!("{line}, the report {allocations}")))
    });
    let line = agreed.unwrap_or_else(|why| panic!("/metrics never agreed with the report: {why}"));
    let value = series(&line).unwrap().1;
    assert!(value >= accepted(&narrowed["syscalls"]) as f64, "{line}");
    assert!(line.contains("runtime=\"podman\""), "{line}");

    // redis' user frames: on-CPU samples whose frames are named from the redis binary, which
    // is at a path that only its container has (Debian builds redis without frame pointers, so
    // its frames are the samples' own addresses, not those of its callers). Pipelined SETs and
    // GETs keep redis in its own code, a round at a time until a sample lands there (99 Hz).
    let own = redis_symbols();
    let (mut in_svg, mut in_report, mut stacks) = (0, 0, Value::Null);
    let mut seen = std::collections::BTreeMap::new();
    for _ in 0..5 {
        let round = std::time::Instant::now();
        let load = run(Command::new("redis-benchmark")
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(["-t", "set,get", "-P", "32", "-n", "200000", "-q"]));
        assert!(load.status.success());
        // The round's samples are in once the interval holding them has ended.
        std::thread::sleep(Duration::from_millis(2500));
        // The round's own window: what is looked for is what this round made.
        let seconds = round.elapsed().as_secs() + 2;
        let svg = get(&format!("/flamegraph.svg?cpu=1&seconds={seconds}"))
            .expect("/flamegraph.svg?cpu=1");
        in_svg = svg
            .as_str()
            .unwrap()
            .split("<title>")
            .skip(1)
            .filter_map(|t| t.split(" (").next())
            .filter(|f| own.contains(*f))
            .count();
        // The report: user frames of redis' own functions in its module, read through the
        // path inside its container (on-CPU samples are not narrowed to a container).
        let report = get(&format!("/report.json?top=1000&seconds={seconds}")).expect("report");
        stacks = report["cpu"]["stacks_total"].clone();
        let user_frames = || {
            report["cpu"]["top_stacks"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|s| s["user_stack"].as_array().into_iter().flatten())
        };
        // For the failure's message: the modules of redis-like frames and what they name.
        for f in user_frames() {
            let (module, function) = (f["module"].to_string(), f["function"].to_string());
            let named = f["function"].as_str().is_some_and(|n| own.contains(n));
            if named || module.contains("redis") {
                *seen.entry((module, function)).or_insert(0) += 1;
            }
        }
        in_report = user_frames()
            .filter(|f| {
                f["module"] == "redis-server"
                    && f["function"].as_str().is_some_and(|n| own.contains(n))
            })
            .count();
        eprintln!("redis' own frames: {in_svg} in the flamegraph, {in_report} in {stacks} stacks");
        if in_svg > 0 && in_report > 0 {
            break;
        }
    }
    assert!(
        in_svg > 0 && in_report > 0,
        "redis-server's own frames: {in_svg} in the on-CPU flamegraph, {in_report} in the \
         report's top 1000 of {stacks} stacks; (module, function) of the frames that look like \
         redis': {:?}; the pod's log:\n{}",
        seen.iter().take(40).collect::<Vec<_>>(),
        pod.logs()
    );
    drop(redis);
    memory_within_the_limit(&template, &pod);
    drop(pod);
    assert_no_programs_left();
}

/// The pod's daemon's peak resident memory, and its memory cgroup's peak (BPF maps included:
/// the kernel charges them to the cgroup that made them), are below the template's limit;
/// printed for the docs.
fn memory_within_the_limit(template: &Value, pod: &Detached) {
    let limit = template["containers"][0]["resources"]["limits"]["memory"]
        .as_str()
        .unwrap();
    let limit: u64 = limit.strip_suffix("Gi").unwrap().parse::<u64>().unwrap() << 30;
    let status = std::fs::read_to_string(format!("/proc/{}/status", pod.host_pid())).unwrap();
    let hwm_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap();
    let cgroup = Path::new("/sys/fs/cgroup/memory").join(pod.cgroup_path().trim_start_matches('/'));
    let peak: u64 = std::fs::read_to_string(cgroup.join("memory.max_usage_in_bytes"))
        .or_else(|_| {
            let unified =
                Path::new("/sys/fs/cgroup/unified").join(pod.cgroup_path().trim_start_matches('/'));
            std::fs::read_to_string(unified.join("memory.peak"))
        })
        .unwrap_or_else(|e| panic!("the pod's memory cgroup {}: {e}", cgroup.display()))
        .trim()
        .parse()
        .unwrap();
    eprintln!(
        "the pod's daemon: VmHWM {} MiB, its memory cgroup's peak {} MiB (maps included), limit {} MiB",
        hwm_kb >> 10,
        peak >> 20,
        limit >> 20
    );
    assert!(hwm_kb << 10 < limit && peak < limit);
}

/// The image's archive, which `cargo xtask image` builds (`cargo xtask test` does first).
pub(crate) fn image_archive() -> PathBuf {
    let version = env!("CARGO_PKG_VERSION");
    let archive = repo().join(format!("target/image/fdprof-{version}.oci.tar"));
    assert!(
        archive.exists(),
        "{} is missing: `cargo xtask image` builds it (`cargo xtask test` does first)",
        archive.display()
    );
    archive
}

/// `fdprof ARGS` in the pod `template` describes, run to its end: exit code and output.
fn run_in_pod(template: &Value, args: &[&str]) -> (i64, String) {
    let archive = image_archive();
    let token = "0123456789abcdef0123456789abcdef".repeat(2);
    let pod = Detached::run("fdprof-doctor", |dir| {
        let loaded = run(podman(dir).args(["load", "-i"]).arg(&archive));
        assert!(loaded.status.success());
        let secret = token_volume(template, dir, &token);
        let mut flags = podman_flags(template, &secret);
        flags.extend(args.iter().map(|a| a.to_string()));
        flags
    });
    (pod.wait(), pod.logs())
}

/// The template less what `strip` takes out of its pod spec.
fn template_without(strip: impl FnOnce(&mut Value)) -> Value {
    let mut template = pod_template();
    strip(&mut template);
    template
}

/// Takes `name` out of the container's capabilities.
fn drop_capability(pod: &mut Value, name: &str) {
    let add = pod["containers"][0]["securityContext"]["capabilities"]["add"]
        .as_array_mut()
        .unwrap();
    let before = add.len();
    add.retain(|c| c != name);
    assert_eq!(add.len() + 1, before, "{name} is not in the template");
}

/// Takes the volume mounted at `at` out of the container.
fn drop_mount(pod: &mut Value, at: &str) {
    let mounts = pod["containers"][0]["volumeMounts"].as_array_mut().unwrap();
    let before = mounts.len();
    mounts.retain(|m| m["mountPath"] != at);
    assert_eq!(mounts.len() + 1, before, "nothing is mounted at {at}");
}

#[test]
fn doctor_in_the_pod_says_what_its_spec_lacks_in_the_manifests_words() {
    require_root();
    let _guard = kernel_lock();
    // The template as it is: nothing lacking.
    let (code, out) = run_in_pod(&pod_template(), &["doctor"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("pod spec        in a container; it lacks nothing fdprof uses"),
        "{out}"
    );

    // Without hostPID, SYSLOG, SYS_PTRACE, the host's cgroups, a writable /run/fdprof and the
    // seccomp profile: one line each, in the manifest's words.
    let stripped = template_without(|pod| {
        pod["hostPID"] = Value::Bool(false);
        drop_capability(pod, "SYSLOG");
        drop_capability(pod, "SYS_PTRACE");
        drop_mount(pod, "/sys/fs/cgroup");
        drop_mount(pod, "/run/fdprof");
        pod["containers"][0]["securityContext"]["seccompProfile"] =
            serde_json::json!({"type": "RuntimeDefault"});
    });
    let (code, out) = run_in_pod(&stripped, &["doctor"]);
    assert_eq!(code, 0, "{out}");
    for line in [
        "  spec.hostPID: true (",
        "  securityContext.capabilities.add: [SYSLOG] (",
        "  securityContext.capabilities.add: [SYS_PTRACE] (",
        "  securityContext.seccompProfile: {type: Localhost, localhostProfile: fdprof.json}",
        "  volumes: [{hostPath: {path: /sys/fs/cgroup}}] with volumeMounts: [{mountPath: \
         /sys/fs/cgroup, readOnly: true}] (",
        "  volumeMounts: [{mountPath: /run/fdprof}] of an emptyDir volume, or args: \
         [--token-file, FILE] (",
    ] {
        assert!(out.contains(line), "no {line:?} in:\n{out}");
    }
    assert!(!out.contains("lacks nothing"), "{out}");

    // The daemon: without a capability it needs, one line naming it as the manifest does.
    let no_bpf = template_without(|pod| drop_capability(pod, "BPF"));
    let (code, out) = run_in_pod(&no_bpf, &["daemon", "-a"]);
    assert_eq!(code, 2, "{out}");
    assert_eq!(out.trim().lines().count(), 1, "{out}");
    assert!(
        out.contains("add securityContext.capabilities.add: [BPF] to its pod spec"),
        "{out}"
    );
    // Under the runtime's default seccomp profile, which refuses bpf(2).
    let default_seccomp = template_without(|pod| {
        pod["containers"][0]["securityContext"]["seccompProfile"] =
            serde_json::json!({"type": "RuntimeDefault"});
    });
    let (code, out) = run_in_pod(&default_seccomp, &["daemon", "-a"]);
    assert_ne!(code, 0, "{out}");
    assert_eq!(out.trim().lines().count(), 1, "{out}");
    assert!(
        out.contains("in a container: add securityContext.seccompProfile:"),
        "{out}"
    );
    // With no token file and nowhere to write the one it makes: the flag to use.
    let no_run = template_without(|pod| drop_mount(pod, "/run/fdprof"));
    let (code, out) = run_in_pod(&no_run, &["daemon", "-a"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("cannot save the daemon's token")
            && out.contains("give --token-file FILE, or a writable /run/fdprof"),
        "{out}"
    );
    assert_no_programs_left();
}
