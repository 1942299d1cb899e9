//! A process's cgroup (v2) and what an operator searches by in its path: the systemd unit, the
//! container and its runtime, the Kubernetes pod. Pure: paths and runtime files in, names out.
//!
//! Path patterns (the last match wins, so a container nested in another is the inner one):
//! - systemd: the last component ending in `.service` or `.scope` is the unit
//!   (`/system.slice/nginx.service`, `/user.slice/user-1000.slice/session-3.scope`);
//! - Docker `docker-ID.scope` (systemd driver) or `/docker/ID` (cgroupfs); Podman `libpod-ID.scope`
//!   or `/libpod_parent/libpod-ID` (not `libpod-conmon-ID`, its monitor); containerd
//!   `cri-containerd-ID.scope`; CRI-O `crio-ID.scope` or `crio-ID` (not `crio-conmon-ID`); a bare
//!   64-hex component under a Kubernetes pod or `/docker` is a container too;
//! - Kubernetes: `kubepods-burstable-podUID.slice` (systemd driver, the UID's dashes written as
//!   underscores) or `podUID` under `kubepods` (cgroupfs).
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// The container runtimes whose cgroup names are recognised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Runtime {
    Docker,
    Podman,
    Containerd,
    CriO,
}

impl Runtime {
    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::Docker => "docker",
            Runtime::Podman => "podman",
            Runtime::Containerd => "containerd",
            Runtime::CriO => "cri-o",
        }
    }
}

/// What a cgroup path says, and the names the runtime's files add.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CgroupInfo {
    /// The cgroup v2 path from the hierarchy's root, as /proc/PID/cgroup shows it.
    pub path: String,
    /// The systemd unit (`nginx.service`, `docker-ID.scope`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// The container id (64 hex digits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<Runtime>,
    /// The container's name, where its runtime's files give it (see `crate::bpf::cgroup`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_name: Option<String>,
    /// The Kubernetes pod UID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// The pod's name and namespace (from the CRI annotations of the container's OCI config).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_namespace: Option<String>,
}

impl CgroupInfo {
    /// The container as a person names it: its name, else the first 12 digits of its id (as
    /// `docker ps` and `podman ps` print it).
    pub fn container_label(&self) -> Option<&str> {
        self.container_name.as_deref().or_else(|| self.container.as_deref().map(|c| &c[..c.len().min(12)]))
    }
}

/// A cgroup, shared: one allocation per cgroup however many processes and sockets are in it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cgroup(Arc<CgroupInfo>);

impl Cgroup {
    pub fn new(info: CgroupInfo) -> Self {
        Cgroup(Arc::new(info))
    }

    /// Holders of this cgroup besides the one asking (0: only the asker holds it).
    pub fn others(&self) -> usize {
        Arc::strong_count(&self.0) - 1
    }
}

impl Deref for Cgroup {
    type Target = CgroupInfo;
    fn deref(&self) -> &CgroupInfo {
        &self.0
    }
}

impl Serialize for Cgroup {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Cgroup {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        CgroupInfo::deserialize(d).map(Cgroup::new)
    }
}

impl fmt::Display for Cgroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for CgroupInfo {
    /// What `watch` shows: the container (and pod), else the unit, else the path.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.container_label(), &self.unit) {
            (Some(c), _) => {
                let rt = self.runtime.map(|r| format!("{} ", r.as_str())).unwrap_or_default();
                write!(f, "{rt}container {c}")?;
                match (&self.pod_namespace, &self.pod_name, &self.pod) {
                    (Some(ns), Some(n), _) => write!(f, " in pod {ns}/{n}"),
                    (_, _, Some(uid)) => write!(f, " in pod {uid}"),
                    _ => Ok(()),
                }
            }
            (None, Some(u)) => write!(f, "{u}"),
            (None, None) => write!(f, "cgroup {}", self.path),
        }
    }
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_digit() || (b'a'..=b'f').contains(&b),
        })
}

/// The container id and runtime a path component names, if any.
fn container_of(c: &str, parent: Option<&str>, in_pod: bool) -> Option<(String, Option<Runtime>)> {
    let base = c.strip_suffix(".scope").unwrap_or(c);
    let prefixed = [
        ("docker-", Runtime::Docker),
        ("libpod-", Runtime::Podman),
        ("cri-containerd-", Runtime::Containerd),
        ("crio-", Runtime::CriO),
    ];
    for (p, rt) in prefixed {
        if let Some(id) = base.strip_prefix(p).filter(|id| is_hex64(id)) {
            return Some((id.to_string(), Some(rt)));
        }
    }
    if is_hex64(c) && (in_pod || parent == Some("docker")) {
        let rt = (parent == Some("docker")).then_some(Runtime::Docker);
        return Some((c.to_string(), rt));
    }
    None
}

/// The pod UID a path component names, if any.
fn pod_of(c: &str, under_kubepods: bool) -> Option<String> {
    if let Some(s) = c.strip_suffix(".slice").filter(|s| s.starts_with("kubepods")) {
        let uid = s.rsplit_once("-pod")?.1.replace('_', "-");
        return is_uuid(&uid).then_some(uid);
    }
    c.strip_prefix("pod").filter(|u| under_kubepods && is_uuid(u)).map(str::to_string)
}

/// Unit, container and pod from a cgroup v2 path (names come later, from the runtime's files).
pub fn parse(path: &str) -> CgroupInfo {
    let mut info = CgroupInfo { path: path.to_string(), ..Default::default() };
    let mut parent: Option<&str> = None;
    let mut under_kubepods = false;
    // A cgroup namespace shows the path of a cgroup outside it as `/../..`: only names count.
    for c in path.split('/').filter(|c| !c.is_empty() && *c != "." && *c != "..") {
        under_kubepods |= c.starts_with("kubepods");
        if let Some(uid) = pod_of(c, under_kubepods) {
            info.pod = Some(uid);
        } else if let Some((id, rt)) = container_of(c, parent, info.pod.is_some()) {
            info.container = Some(id);
            info.runtime = rt;
        }
        if c.ends_with(".service") || c.ends_with(".scope") {
            info.unit = Some(c.to_string());
        }
        parent = Some(c);
    }
    info
}

/// The cgroup v2 path of a /proc/PID/cgroup text (its `0::PATH` line).
pub fn v2_path(proc_cgroup: &str) -> Option<&str> {
    proc_cgroup.lines().find_map(|l| l.strip_prefix("0::")).map(str::trim_end).filter(|p| p.starts_with('/'))
}

/// Names from the Kubernetes CRI annotations of a container's OCI runtime config (its bundle's
/// config.json), as containerd (`io.kubernetes.cri.*`) and CRI-O (`io.kubernetes.*`) write them.
pub fn names_from_oci_config(info: &mut CgroupInfo, config_json: &str) {
    let Ok(v) = serde_json::from_str::<Value>(config_json) else { return };
    let a = &v["annotations"];
    let get = |keys: &[&str]| keys.iter().find_map(|k| a[*k].as_str()).filter(|s| !s.is_empty()).map(str::to_string);
    if let Some(n) = get(&["io.kubernetes.cri.container-name", "io.kubernetes.container.name"]) {
        info.container_name = Some(n);
    }
    info.pod_name = get(&["io.kubernetes.cri.sandbox-name", "io.kubernetes.pod.name"]).or(info.pod_name.take());
    info.pod_namespace =
        get(&["io.kubernetes.cri.sandbox-namespace", "io.kubernetes.pod.namespace"]).or(info.pod_namespace.take());
}

/// The name of container `id` in a containers/storage `containers.json` (Podman's, Buildah's and
/// CRI-O's store): its first name.
pub fn name_from_storage(containers_json: &str, id: &str) -> Option<String> {
    let v: Value = serde_json::from_str(containers_json).ok()?;
    let c = v.as_array()?.iter().find(|c| c["id"].as_str() == Some(id))?;
    c["names"].as_array()?.first()?.as_str().filter(|s| !s.is_empty()).map(str::to_string)
}

/// The name in Docker's `config.v2.json` of a container (`"Name": "/web"`).
pub fn name_from_docker(config_json: &str) -> Option<String> {
    let v: Value = serde_json::from_str(config_json).ok()?;
    let n = v["Name"].as_str()?.trim_start_matches('/');
    (!n.is_empty()).then(|| n.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "7d186119302244ddad365b484cbd0c9e59d2718a87cea0497650871236bba78c";
    const UID: &str = "0f3b5a1e-2c4d-4e6f-8a9b-0c1d2e3f4a5b";

    fn p(path: &str) -> CgroupInfo {
        parse(path)
    }

    #[test]
    fn systemd_units_are_the_last_service_or_scope() {
        let i = p("/system.slice/nginx.service");
        assert_eq!((i.unit.as_deref(), i.container, i.pod), (Some("nginx.service"), None, None));
        assert_eq!(p("/user.slice/user-1000.slice/session-3.scope").unit.as_deref(), Some("session-3.scope"));
        let user = p("/user.slice/user-1000.slice/user@1000.service/app.slice/app-foo.service");
        assert_eq!(user.unit.as_deref(), Some("app-foo.service"));
        assert_eq!(p("/").unit, None);
        assert_eq!(p("/init.scope").unit.as_deref(), Some("init.scope"));
        assert_eq!(p("/system.slice").unit, None, "a slice holds units, it is not one");
    }

    #[test]
    fn container_ids_and_runtimes_from_every_driver() {
        let cases = [
            (format!("/system.slice/docker-{ID}.scope"), Some(Runtime::Docker)),
            (format!("/docker/{ID}"), Some(Runtime::Docker)),
            (format!("/machine.slice/libpod-{ID}.scope"), Some(Runtime::Podman)),
            (format!("/machine.slice/libpod-{ID}.scope/container"), Some(Runtime::Podman)),
            (format!("/libpod_parent/libpod-{ID}"), Some(Runtime::Podman)),
            (
                format!(
                    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{ID}.scope",
                    UID.replace('-', "_")
                ),
                Some(Runtime::Containerd),
            ),
            (
                format!("/kubepods.slice/kubepods-pod{}.slice/crio-{ID}.scope", UID.replace('-', "_")),
                Some(Runtime::CriO),
            ),
            (format!("/kubepods/besteffort/pod{UID}/crio-{ID}"), Some(Runtime::CriO)),
            (format!("/kubepods/besteffort/pod{UID}/{ID}"), None),
            (format!("/../../kubepods/pod{UID}/{ID}"), None),
        ];
        for (path, rt) in cases {
            let i = p(&path);
            assert_eq!(i.container.as_deref(), Some(ID), "{path}");
            assert_eq!(i.runtime, rt, "{path}");
            if path.contains("pod") && !path.contains("libpod") {
                assert_eq!(i.pod.as_deref(), Some(UID), "{path}");
            }
        }
        assert_eq!(p(&format!("/system.slice/docker-{ID}.scope")).unit, Some(format!("docker-{ID}.scope")));
    }

    #[test]
    fn monitors_short_ids_and_lookalikes_are_not_containers() {
        for path in [
            format!("/machine.slice/libpod-conmon-{ID}.scope"),
            format!("/system.slice/crio-conmon-{ID}.scope"),
            format!("/system.slice/docker-{}.scope", &ID[..12]),
            format!("/some/{ID}"),
            format!("/system.slice/docker-{}.scope", ID.to_uppercase()),
            "/kubepods.slice/kubepods-podnotauid.slice".to_string(),
            format!("/pod{UID}"),
        ] {
            let i = p(&path);
            assert_eq!((i.container.as_deref(), i.pod.as_deref()), (None, None), "{path}");
        }
    }

    #[test]
    fn the_v2_line_of_proc_pid_cgroup() {
        let hybrid = "9:name=systemd:/\n4:memory:/x\n0::/libpod_parent/libpod-abc\n";
        assert_eq!(v2_path(hybrid), Some("/libpod_parent/libpod-abc"));
        assert_eq!(v2_path("0::/\n"), Some("/"));
        assert_eq!(v2_path("4:memory:/x\n"), None, "cgroup v1 only");
    }

    #[test]
    fn names_from_cri_annotations_storage_and_docker() {
        let mut i = p(&format!("/kubepods/besteffort/pod{UID}/{ID}"));
        names_from_oci_config(
            &mut i,
            r#"{"ociVersion":"1.0.2","annotations":{"io.kubernetes.cri.container-name":"web",
            "io.kubernetes.cri.sandbox-name":"web-7f9c","io.kubernetes.cri.sandbox-namespace":"shop"}}"#,
        );
        assert_eq!(
            (i.container_name.as_deref(), i.pod_name.as_deref(), i.pod_namespace.as_deref()),
            (Some("web"), Some("web-7f9c"), Some("shop"))
        );
        assert_eq!(i.to_string(), "container web in pod shop/web-7f9c");
        let mut c = CgroupInfo::default();
        names_from_oci_config(
            &mut c,
            r#"{"annotations":{"io.kubernetes.container.name":"db","io.kubernetes.pod.name":"db-0","io.kubernetes.pod.namespace":"data"}}"#,
        );
        assert_eq!((c.container_name.as_deref(), c.pod_name.as_deref()), (Some("db"), Some("db-0")));
        let mut podman = CgroupInfo::default();
        names_from_oci_config(&mut podman, r#"{"annotations":{"io.container.manager":"libpod"}}"#);
        assert_eq!(podman.container_name, None, "Podman's OCI config names no container");
        names_from_oci_config(&mut podman, "not json");
        let store = format!(r#"[{{"id":"other","names":["x"]}},{{"id":"{ID}","names":["tv-box"],"image":""}}]"#);
        assert_eq!(name_from_storage(&store, ID).as_deref(), Some("tv-box"));
        assert_eq!(name_from_storage(&store, "nope"), None);
        assert_eq!(name_from_storage("{", ID), None);
        assert_eq!(name_from_docker(r#"{"ID":"x","Name":"/web-1"}"#).as_deref(), Some("web-1"));
        assert_eq!(name_from_docker(r#"{"Name":"/"}"#), None);
    }

    #[test]
    fn shown_as_container_else_unit_else_path_and_shared() {
        let mut i = p(&format!("/libpod_parent/libpod-{ID}"));
        assert_eq!(Cgroup::new(i.clone()).to_string(), format!("podman container {}", &ID[..12]));
        i.container_name = Some("box".into());
        assert_eq!(i.container_label(), Some("box"));
        assert_eq!(Cgroup::new(p("/system.slice/nginx.service")).to_string(), "nginx.service");
        assert_eq!(Cgroup::new(p("/system.slice")).to_string(), "cgroup /system.slice");
        let c = Cgroup::new(i);
        let d = c.clone();
        assert_eq!(c.others(), 1);
        drop(d);
        assert_eq!(c.others(), 0);
        let json = serde_json::to_string(&c).unwrap();
        assert!(json.contains(r#""runtime":"podman""#) && !json.contains("pod_name"), "{json}");
        assert_eq!(serde_json::from_str::<Cgroup>(&json).unwrap(), c);
    }
}
